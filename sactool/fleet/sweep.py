"""Turn the per-rank samples of one contention step into the record's ``fleet.sweep`` entries.

Pure arithmetic on what the ranks measured (no MPI), so it is tested on its own.

Per sample index j (every active rank started sample j at the same MPI barrier):

* aggregate bytes/s = Σ_ranks bytes_ij / max_ranks seconds_ij — what the memory delivered to all
  active ranks together over the window from the common start until the last rank finished (the
  honest figure for "N hosts load the pool at once"; a rank that finishes early leaves the others
  less contended for the rest of the window, which this counts against the aggregate);
* ``aggregate_sum_of_rates_bytes_per_s`` = Σ_ranks bytes_ij / seconds_ij, the optimistic bound;
* ``aggregate_on_cpu_bytes_per_s`` = Σ_ranks bytes_ij / (on-CPU seconds of rank i's threads): with
  the time other processes (or ranks sharing a CPU) held the CPUs taken out, what the memory
  itself delivered — on a shared or oversubscribed machine the wall-clock figures mix the two.

The step's ``aggregate_bytes_per_s`` is the median over samples. Per rank: its own median and
p95 (bandwidth, and latency: ns per load for chases, µs per top-k step for gathers), on-CPU share.
Fairness = min / max over ranks of the per-rank median (bandwidth, or latency for latency tests).
"""

from __future__ import annotations

from typing import Any, Sequence

from sactool.bench.stats import stats_dict, summarize

LINE = 64


def sample_bytes(test: str, params: dict, seconds: float, work: float, extra: float | None) -> float:
    """Bytes one sample moved: gathers count records × record size; chases one 64 B line per load;
    sequential kernels already count bytes; loaded latency counts its readers' bytes (``extra`` is
    their summed rate in B/s) plus the chaser's lines."""
    if test == "gather":
        return work * params["record_bytes"]
    if test in ("latency", "mlp"):
        return work * LINE
    if test == "loaded":
        return (extra or 0.0) * seconds + work * LINE
    return work


def latency_of(test: str, params: dict, seconds: float, work: float) -> tuple[str, float] | None:
    """(metric, value) of one sample: ns per load for chases, µs per top-k step for gathers."""
    if test in ("latency", "loaded"):
        return "latency_ns", seconds * 1e9 / work
    if test == "gather":
        return "topk_step_us", seconds * 1e6 * params["topk"] * params["threads"] / work
    return None


def rank_figures(test: str, params: dict, samples: Sequence[dict]) -> dict[str, Any]:
    """Per-rank figures of one configuration at one step from its raw samples
    ``[{seconds, work, extra?, thread_cpu_seconds?}]``."""
    bw = [sample_bytes(test, params, s["seconds"], s["work"], s.get("extra")) / s["seconds"] for s in samples]
    out: dict[str, Any] = {"bandwidth_bytes_per_s": summarize(bw).median, "bandwidth_stats": stats_dict(summarize(bw)),
                           "samples": len(samples)}
    # a test has a latency figure for every sample or for none
    lat = [m for s in samples if (m := latency_of(test, params, s["seconds"], s["work"])) is not None]
    if lat:
        st = summarize([v for _, v in lat])
        out[lat[0][0]] = {"median": st.median, "p95": st.p95, "min": st.min, "max": st.max, "n": st.n}
    timed = [s for s in samples if s.get("thread_cpu_seconds")]
    if timed:
        out["on_cpu_fraction"] = summarize([sum(s["thread_cpu_seconds"]) / (len(s["thread_cpu_seconds"]) * s["seconds"])
                                            for s in timed]).median
        out["on_cpu_bandwidth_bytes_per_s"] = summarize([on_cpu_rate(test, params, s) for s in timed]).median
    return out


def on_cpu_rate(test: str, params: dict, s: dict) -> float:
    """A sample's bytes/s over its threads' on-CPU time (each thread did an equal share of the
    work): what the memory gave while the rank actually ran — time other processes or ranks held
    its CPUs is left out."""
    cpu = s["thread_cpu_seconds"]
    b = sample_bytes(test, params, s["seconds"], s["work"], s.get("extra"))
    return sum(b / len(cpu) / c for c in cpu if c > 0)


def step_entry(active: int, test: str, key: str, params: dict, per_rank: Sequence[dict],
               single: float | None) -> dict[str, Any]:
    """One ``fleet.sweep`` entry. ``per_rank``: ``[{rank, host, cpus, samples: [...]}]`` of the active
    ranks; ``single``: the aggregate of the one-rank step of this configuration (for the speed-up)."""
    n = min(len(r["samples"]) for r in per_rank)
    agg, rates, on_cpu = [], [], []
    for j in range(n):
        parts = [(sample_bytes(test, params, r["samples"][j]["seconds"], r["samples"][j]["work"],
                               r["samples"][j].get("extra")), r["samples"][j]["seconds"]) for r in per_rank]
        agg.append(sum(b for b, _ in parts) / max(s for _, s in parts))
        rates.append(sum(b / s for b, s in parts))
        if all(r["samples"][j].get("thread_cpu_seconds") for r in per_rank):
            on_cpu.append(sum(on_cpu_rate(test, params, r["samples"][j]) for r in per_rank))
    ranks = []
    for r in per_rank:
        fig = rank_figures(test, params, r["samples"])
        ranks.append({"rank": r["rank"], "host": r["host"], "cpus": list(r.get("cpus") or ()), **fig,
                      "raw": list(r["samples"])})
    st = summarize(agg)
    entry: dict[str, Any] = {
        "active_ranks": active, "config": key, "test": test, "params": params,
        "aggregate_bytes_per_s": st.median, "aggregate_stats": stats_dict(st),
        "aggregate_samples_bytes_per_s": agg,
        "aggregate_sum_of_rates_bytes_per_s": summarize(rates).median,
        "aggregate_on_cpu_bytes_per_s": summarize(on_cpu).median if on_cpu else None,
        "speedup_vs_one_rank": (st.median / single) if single else None,
        "per_rank": ranks,
    }
    metric = "latency_ns" if test in ("latency", "loaded") else "bandwidth_bytes_per_s"
    vals = [(r[metric]["median"] if isinstance(r.get(metric), dict) else r[metric]) for r in ranks]
    lo, hi = min(vals), max(vals)
    entry["fairness"] = {"metric": metric, "min": lo, "max": hi, "min_over_max": lo / hi if hi else None}
    lat_key = next((k for k in ("topk_step_us", "latency_ns") if k in ranks[0]), None)
    if lat_key:
        entry[lat_key] = {"median_of_ranks": summarize([r[lat_key]["median"] for r in ranks]).median,
                          "worst_p95": max(r[lat_key]["p95"] for r in ranks)}
    return entry


def sweep_sizes(n: int) -> list[int]:
    """Active-rank counts of the contention sweep: 1, 2, 4, … and ``n`` itself."""
    out, k = [], 1
    while k < n:
        out.append(k)
        k *= 2
    return out + [n]


__all__ = ["step_entry", "rank_figures", "on_cpu_rate", "sample_bytes", "latency_of", "sweep_sizes"]
