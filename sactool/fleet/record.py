"""The fleet bench record: rank 0's plain bench record (its one-rank results, so ``load_bench``,
``gather_figure`` and ``tune --bench`` read it) plus the ``fleet`` block — ranks, hosts, the
activation order and the contention sweep (:mod:`sactool.fleet.sweep`) — and the warnings of all
ranks, each once."""

from __future__ import annotations

from sactool import records
from sactool.fleet.sweep import step_entry
from sactool.units import node_name


def activation_order(hosts: list[str]) -> list[int]:
    """Ranks in the order the sweep activates them: the first rank of every host, then the second…
    (``hosts[r]``: rank r's host), so k active ranks are on k hosts while there are that many."""
    seen: dict[str, int] = {}
    nth = []
    for h in hosts:
        nth.append(seen.get(h, 0))
        seen[h] = nth[-1] + 1
    return sorted(range(len(hosts)), key=lambda r: (nth[r], r))


def sweep_steps(ranks: list[dict], order: list[int], got: list) -> list[dict]:
    """Every step's ``fleet.sweep`` entries from all ranks' samples so far. ``got[r]``: rank r's
    ``{"samples": [[active ranks, config key, [samples]], …], "params", "tests"}``."""
    by: dict[tuple[int, str], dict[int, list]] = {}
    for r, g in enumerate(got):
        for k, key, samples in g["samples"]:
            by.setdefault((k, key), {})[r] = samples
    params, tests = got[0]["params"], got[0]["tests"]
    steps: list[dict] = []
    single: dict[str, float] = {}
    for k, key in sorted(by, key=lambda x: (x[0], list(params).index(x[1]))):
        per_rank = by[(k, key)]
        active = sorted(order[:k])
        if any(r not in per_rank for r in active):
            continue  # not every active rank has a sample of it yet
        n = min(len(per_rank[r]) for r in active)
        per = [{"rank": r, "host": ranks[r]["host"], "cpus": ranks[r]["cpus"], "samples": per_rank[r][:n]}
               for r in active]
        entry = step_entry(k, _test_of(tests[key]), key, params[key], per, single.get(key))
        if k == 1:
            single[key] = entry["aggregate_bytes_per_s"]
        steps.append(entry)
    return steps


def _test_of(measure_test: str) -> str:
    """Measures of the bandwidth test are named by their operation (read/write/copy)."""
    return "bandwidth" if measure_test in ("read", "write", "copy") else measure_test


def standard_result(m, samples: list[dict], info: dict) -> dict | None:
    """Rank 0's one-rank result in the plain ``sactool bench`` form (so the record also reads as a
    single-host bench record: ``load_bench``, ``gather_figure``, ``tune --bench``); None without samples."""
    from sactool.bench.runner import result_of

    saved = (m.cfg.samples, m.cpu, m.extra)
    try:
        m.cfg.samples = [(s["seconds"], s["work"]) for s in samples]
        m.cpu = [s["thread_cpu_seconds"] for s in samples] if all("thread_cpu_seconds" in s for s in samples) else []
        m.extra = [s.get("extra", 0.0) for s in samples]
        r = result_of(m)
    finally:
        m.cfg.samples, m.cpu, m.extra = saved
    if r is None:
        return None
    r["memory_node"], r["cpu_node"] = info["memory_node"], info["cpu_node"]
    return r


def _hosts(ranks: list[dict]) -> list[dict]:
    out: dict[str, dict] = {}
    for r in ranks:
        h = out.setdefault(r["host"], {"host": r["host"], "ranks": [], "machines": [], "memory_node": r["memory_node"],
                                       "pool_device": r["pool_device"], "stand_in": r["stand_in"]})
        h["ranks"].append(r["rank"])
        if r["machine"] not in h["machines"]:
            h["machines"].append(r["machine"])
    return list(out.values())


def _warnings(state: dict) -> list[dict]:
    seen, out = set(), []
    ranks = state["ranks"]
    extra = []
    if any(r["stand_in"] for r in ranks):
        nodes = sorted({f"{r['host']}:{node_name(r['memory_node'])}" for r in ranks if r["stand_in"]})
        extra.append(records.warning("stand_in", f"{', '.join(nodes)}: not CXL memory, standing in for it",
                                     "figures describe this memory, not a CXL device"))
    low: dict[int, list[tuple[int, float]]] = {}
    for st in state["steps"]:
        for pr in st["per_rank"]:
            oc = pr.get("on_cpu_fraction")
            if oc is not None and oc < 0.9:
                low.setdefault(st["active_ranks"], []).append((pr["rank"], oc))
    for k, lows in low.items():
        rs = sorted({r for r, _ in lows})
        fr = [f for _, f in lows]
        extra.append(records.warning("descheduled", f"at {k} active rank{'s' if k > 1 else ''}: the threads of "
                      f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))} ran {min(fr):.0%}–{max(fr):.0%} "
                      "of the sample time", "other processes (or ranks sharing CPUs) had the CPUs: those "
                      "figures include waiting; per-rank on_cpu_fraction is in the record"))
    for w in [w for r in ranks for w in r.get("warnings", [])] + extra:
        key = (w["code"], w["message"].split(": rank ")[0] if w["code"] == "cpus_shared" else w["message"])
        if key not in seen:
            seen.add(key)
            out.append(w)
    return out


def build_record(state: dict, opts, proto, complete: bool) -> dict:
    from sactool.bench import record as R
    from sactool.host.machine import machine_block

    ranks = state["ranks"]
    r0 = ranks[0]
    warnings = _warnings(state)
    if not complete:
        warnings.append(records.warning("interrupted", "the sweep stopped early: finished steps are kept",
                                         "rerun to complete it"))
    data = records.header(R.KIND, R.SCHEMA_VERSION)
    data.update({
        "machine": machine_block(), "command": opts.command, "tests": list(opts.tests), "protocol": proto.to_data(),
        "memory_node": r0["memory_node"], "cpu_node": r0["cpu_node"], "cpus": r0["cpus"], "stand_in": r0["stand_in"],
        "llc_bytes": r0["llc_bytes"], "buffer": r0.get("buffer") or {}, "results": state.get("results", []),
        "warnings": warnings, "complete": complete,
        # rank 0's machine's lock (each rank's own machine's: fleet.ranks[i].measurement_lock) and the job's
        # locked window on rank 0's clock (sactool.fleet.lock)
        "measurement_lock": r0.get("measurement_lock"), "measured": state.get("measured"),
        "fleet": {
            "world_size": len(ranks),
            "sync": "every sample starts at an MPI barrier of all ranks (MPI_Ibarrier polled with sleeps, then "
                    "an allgather); inactive ranks wait there",
            "activation_order": activation_order([r["host"] for r in ranks]),
            "order": "rounds interleave every (active ranks, configuration) unit in rotated order",
            "rounds_done": state.get("rounds_done", 0),
            "hosts": _hosts(ranks),
            "ranks": [{k: v for k, v in r.items() if k != "warnings"} for r in ranks],
            "sweep": state["steps"],
        },
    })
    return data


__all__ = ["build_record", "sweep_steps", "standard_result", "activation_order"]
