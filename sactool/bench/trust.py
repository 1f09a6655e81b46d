"""One cache-and-noise rule for every figure that enters tune (bench records, fleet records, traces,
GPU records): was it measured inside the last-level cache, or while its threads were descheduled —
and which way does that move the figure?

- **Inside the cache**: a gather whose working set (the distinct records its index stream touches,
  or the buffer where that is smaller) is not well beyond the measuring CPUs' last-level cache finds
  about C / W of its reads in a C-byte cache: its bandwidth is *overstated* (a latency understated).
  Flagged when W < :data:`sactool.bench.sizing.CACHE_MULTIPLE` × C.
- **Descheduled**: threads that ran less than :data:`ON_CPU_MIN` of a sample's wall time were waiting
  for a CPU, so a wall-clock bandwidth is *understated* (a latency overstated); the record's
  ``on_cpu_samples`` hold the figure on-CPU time gives.
- **Shared**: other work kept the CPUs the bench did not use busy (``other_cpu_busy``, from
  ``/proc/stat``, :mod:`sactool.bench.disturb`): memory bandwidth and caches were shared, so a
  bandwidth is likely *understated* whatever clock computed it.

GPU gathers (``bench gpu-gather``) read host memory over PCIe, and a coherent read of a line the CPUs
left in their last-level cache is served from it: the same working-set rule applies to their host
buffer. Their timing is the GPU's own (events), so only results that carry an ``on_cpu_fraction``
can be flagged descheduled. :func:`flags` applies the rule to one result dict of any bench, fleet or
GPU record.
"""

from __future__ import annotations

from sactool.bench.sizing import CACHE_MULTIPLE
from sactool.units import format_bytes

ON_CPU_MIN = 0.9
"""Median share of a sample its threads were on a CPU below which the result is flagged (policy)."""


def descheduled_effect(result: dict) -> str:
    """Which way descheduling moved this result's wall-clock figure, in words."""
    if result.get("unit") == "ns":
        return "its wall-clock latency is overstated"
    return "its wall-clock bandwidth is understated"


def effect_shared(result: dict) -> str:
    from sactool.bench.disturb import effect

    return effect(result)


def cache_effect(result: dict) -> str:
    if result.get("unit") == "ns":
        return "the latency may be understated"
    return "the bandwidth may be overstated"


def working_set_bytes(result: dict, buffer_bytes: int | None) -> int | None:
    """Bytes a result's reads cycle over: a gather's ``params.footprint_bytes`` (schema 3: the buffer's
    records for the generated stream; a schema-2 record's stored stream, upgraded: its distinct records,
    or their expected number where it was not recorded), capped by the buffer; other CPU tests walk the
    buffer (chains: half of it each)."""
    p = result.get("params") or {}
    test = result.get("test")
    if test == "gather":
        fp = p.get("footprint_bytes")
        if fp is None and p.get("index_shift") != "per pass" and p.get("indices") and p.get("record_bytes") \
                and buffer_bytes:   # a stored stream measured before footprints were recorded (a fleet sweep step)
            from sactool.bench.record import expected_footprint

            fp = expected_footprint(int(p["indices"]), max(1, buffer_bytes // int(p["record_bytes"])),
                                    int(p["record_bytes"]))
        if not isinstance(fp, (int, float)) or fp <= 0:
            return buffer_bytes
        return min(int(fp), buffer_bytes) if buffer_bytes else int(fp)
    if test in ("latency", "mlp", "loaded"):
        return buffer_bytes // 2 if buffer_bytes else None
    return buffer_bytes


def flags(result: dict, *, llc_bytes: int | None, buffer_bytes: int | None, where: str = "") -> list[dict]:
    """``[{code, message, hint}]`` for one result: ``in_cache`` and ``descheduled`` (see the module)."""
    from sactool.records import warning

    key = result.get("key") or result.get("test") or "result"
    src = f"{where}: " if where else ""
    out = []
    ws = working_set_bytes(result, buffer_bytes)
    if llc_bytes and ws and ws < CACHE_MULTIPLE * llc_bytes:
        share = min(1.0, llc_bytes / ws)
        out.append(warning("in_cache", f"{src}{key}: read a {format_bytes(ws)} working set, under {CACHE_MULTIPLE}x the "
                           f"{format_bytes(llc_bytes)} last-level cache of the CPUs that measured it: up to "
                           f"{share:.0%} of its reads may come from the cache, so {cache_effect(result)}",
                           "measure over a larger buffer (the default 'sactool bench' size is 8x the cache)"))
    oc = result.get("on_cpu_fraction")
    if oc is not None and oc < ON_CPU_MIN:
        out.append(warning("descheduled", f"{src}{key}: its threads ran {oc:.0%} of the sample time (other processes "
                           f"had the CPUs): {descheduled_effect(result)}",
                           "on_cpu_samples show the figures on-CPU time gives; rerun when idle"))
    from sactool.bench.disturb import shared_warning

    shared = shared_warning(result, src)
    if shared:
        out.append(shared)
    return out


def record_llc(data: dict) -> int | None:
    """The last-level cache a record's results were measured with: its ``buffer_rule`` (None when the
    CPUs reported none), a GPU record's ``llc``, else an older record's ``llc_bytes`` as recorded."""
    rule = data.get("buffer_rule")
    if isinstance(rule, dict):
        return (rule.get("llc") or {}).get("bytes")
    if isinstance(data.get("llc"), dict):
        return data["llc"].get("bytes")
    v = data.get("llc_bytes")
    return int(v) if isinstance(v, (int, float)) and v > 0 else None


def record_flags(data: dict, *, where: str, tests: tuple[str, ...] = ("gather", "gpu_gather")) -> list[dict]:
    """One warning per kind (``bench_in_cache``, ``bench_descheduled``, ``bench_cpus_shared``) for the results of ``tests`` in a
    bench or GPU record that feeds tune: how many of them, which way the figure is off, by how much."""
    from sactool.records import warning

    llc = record_llc(data)
    buf = (data.get("buffer") or {}).get("size_bytes")
    rs = [r for r in data.get("results") or [] if r.get("test") in tests]
    per: dict[str, list[tuple[dict, dict]]] = {}
    for r in rs:
        for w in flags(r, llc_bytes=llc, buffer_bytes=buf):
            per.setdefault(w["code"], []).append((r, w))
    out = []
    for code, hits in per.items():
        keys = ", ".join(r.get("key", "?") for r, _ in hits[:2]) + (", …" if len(hits) > 2 else "")
        head = f"{where}: {len(hits)} of {len(rs)} results ({keys})"
        if code == "in_cache":
            ws = [n for r, _ in hits if (n := working_set_bytes(r, buf))]
            assert llc and len(ws) == len(hits), "flags() says in_cache only with a cache size and a working set"
            share = min(1.0, llc / max(1, min(ws)))
            msg = (f"{head} read {format_bytes(min(ws))}{'' if min(ws) == max(ws) else f'–{format_bytes(max(ws))}'} "
                   f"working sets, under {CACHE_MULTIPLE}x the {format_bytes(llc)} last-level cache of the CPUs that "
                   f"measured them: up to {share:.0%} of the reads may come from the cache, so {cache_effect(hits[0][0])}")
            hint = "measure with 'sactool bench gather' at its default size (8x the cache) and pass that record"
        elif code == "cpus_shared":
            obs = sorted(r["other_cpu_busy"]["cpus"] for r, _ in hits)
            msg = (f"{head} were measured while other work kept {obs[0]:.2f}"
                   f"{'' if obs[0] == obs[-1] else f'–{obs[-1]:.2f}'} CPUs busy beside them: memory bandwidth and "
                   f"caches were shared, so {effect_shared(hits[0][0])}")
            hint = "rerun the bench when the machine is idle"
        else:
            ocs = sorted(r["on_cpu_fraction"] for r, _ in hits)
            msg = (f"{head} were descheduled (threads on a CPU {ocs[0]:.0%}"
                   f"{'' if ocs[0] == ocs[-1] else f'–{ocs[-1]:.0%}'} of the sample time): "
                   f"{descheduled_effect(hits[0][0])}")
            hint = "rerun the bench when the machine is idle"
        out.append(warning(f"bench_{code}", msg, hint))
    return out


def fleet_step_flags(step: dict, ranks: dict, *, where: str) -> dict[str, list[dict]]:
    """Host → warnings for the fleet sweep step tune takes its figures from: ``bench_in_cache`` when the
    buffers of a host's active ranks (one node, one cache) read less than 8x the cache all together,
    ``bench_descheduled`` for ranks whose threads ran < 90% of the sample time. ``ranks``: rank → the
    record's ``fleet.ranks`` entry (``size_bytes``, ``buffer_rule``/``llc_bytes``)."""
    from sactool.records import warning

    out: dict[str, list[dict]] = {}
    by_host: dict[str, list[dict]] = {}
    for pr in step.get("per_rank") or []:
        by_host.setdefault(pr.get("host"), []).append(pr)
    probe = {"test": step.get("test"), "params": step.get("params") or {}, "unit": "bytes_per_s"}
    for host, prs in by_host.items():
        infos = [ranks.get(pr.get("rank"), {}) for pr in prs]
        llc = next((record_llc(i) for i in infos if record_llc(i)), None)
        ws = sum(working_set_bytes(probe, i.get("size_bytes")) or 0 for i in infos)
        w = []
        if llc and ws and ws < CACHE_MULTIPLE * llc:
            w.append(warning("bench_in_cache", f"{where}: host {host}'s {len(prs)} active rank(s) read "
                             f"{format_bytes(ws)} in all in {step.get('config')}, under {CACHE_MULTIPLE}x the "
                             f"{format_bytes(llc)} last-level cache they share: up to {min(1.0, llc / ws):.0%} of the "
                             "reads may come from the cache, so the bandwidth may be overstated",
                             "rerun the fleet bench at its default --size (8x the cache)"))
        low = sorted((pr["on_cpu_fraction"], pr.get("rank")) for pr in prs
                     if isinstance(pr.get("on_cpu_fraction"), (int, float)) and pr["on_cpu_fraction"] < ON_CPU_MIN)
        if low:
            w.append(warning("bench_descheduled", f"{where}: on host {host} the threads of rank(s) "
                             f"{', '.join(str(r) for _, r in low)} ran {low[0][0]:.0%}"
                             f"{'' if low[0][0] == low[-1][0] else f'–{low[-1][0]:.0%}'} of the sample time in "
                             f"{step.get('config')}: the wall-clock bandwidth is understated",
                             "rerun the fleet bench when the machines are idle, one rank per CPU"))
        if w:
            out[host] = w
    return out
