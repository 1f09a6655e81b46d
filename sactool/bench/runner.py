"""Build each test's configurations on the placed buffer, run the protocol, turn samples into results."""

from __future__ import annotations

import numpy as np

from sactool.bench import suite
from sactool.bench.catalog import TESTS
from sactool.bench.protocol import Protocol, run_protocol
from sactool.bench.stats import stats_dict, summarize
from sactool.errors import settle, unsettle


def result_of(m: suite.Measure, cpus_online: int | None = None) -> dict | None:
    """The record entry of one measured configuration (None when it has no sample yet); ``cpus_online``:
    the machine's CPUs, for the share of ``other_cpu_busy`` when the samples were observed."""
    if not m.cfg.samples:
        return None
    values = [m.value(s, w) for s, w in m.cfg.samples]
    st = summarize(values)
    n = len(m.cfg.samples)
    cpu = m.cpu[-n:] if len(m.cpu) >= n else []
    raw = [{"seconds": s, "work": w} for s, w in m.cfg.samples]
    out = {
        "test": m.test, "key": m.cfg.key, "params": m.params, "kernel": m.spec, "unit": m.unit,
        "stats": stats_dict(st), "samples": values, "raw": raw,
        "reps_per_sample": m.cfg.reps, "first_call_seconds": m.cfg.first_call_seconds,
        "derived": m.derive(st, m),
    }
    if m.cfg.others:
        from sactool.bench.disturb import summary

        for r, o in zip(raw, m.cfg.others[-n:]):
            r["other_cpu"] = o
        out["other_cpu_busy"] = summary(m.cfg.others[-n:], cpus_online, m.threads)
    if cpu:
        for r, c in zip(raw, cpu):
            r["thread_cpu_seconds"] = list(c)
        out["on_cpu_fraction"] = summarize([sum(c) / (len(c) * s) for (s, _), c in zip(m.cfg.samples, cpu)]).median
        out["on_cpu_samples"] = [cpu_value(m, w, c) for (_, w), c in zip(m.cfg.samples, cpu)]
    return out


def cpu_value(m: suite.Measure, work: float, cpu: list) -> float:
    """A sample's figure with each thread's on-CPU time in place of wall time (excludes the time
    other processes held the CPU): latency from the one thread; rates summed over threads, each
    doing ``work / threads``."""
    if m.unit == "ns":
        return m.value(max(cpu), work)
    return sum(m.value(c, work / len(cpu)) for c in cpu if c > 0)


def _run(measures: list[suite.Measure], proto: Protocol, results: list, progress, clock, label: str,
         observe=None) -> bool:
    kw = {"clock": clock} if clock else {}
    if observe is not None:
        kw["observe"] = observe

    def prog(desc: str, done: int, total: int) -> None:
        if progress:
            progress(f"{label}: {desc}", done, total)

    ok = run_protocol([m.cfg for m in measures], proto, progress=prog, **kw)
    for m in measures:
        r = result_of(m, getattr(observe, "cpus_online", None))
        if r is not None:
            results.append(r)
    return ok


def walker_slots() -> tuple[int, dict[int, int], int]:
    """Start slots on the random chain: latency 0, MLP with N chains ``first[N] … first[N]+N-1``,
    loaded-latency chasers from ``loaded_first``; returns (slots, first, loaded_first)."""
    first, k = {}, 1
    for n in suite.MLP_CHAINS:
        first[n] = k
        k += n
    return k + len(suite.LOADED_DELAYS), first, k


def measure_all(buf, opts, proto: Protocol, cpus, threads, llc: int, gather_idx, results: list, warnings: list,
                *, progress=None, clock=None, reader=None) -> bool:
    """Run the requested tests in :data:`sactool.bench.catalog.TESTS` order; False when interrupted.
    ``reader`` (the live machine's): every sample also records what else ran (:mod:`sactool.bench.disturb`).
    Returns settled (:func:`sactool.errors.settle`): a signal from then on finds the results finished
    and is only recorded; a caller that goes on with other work calls :func:`sactool.errors.unsettle`."""
    observe = None
    if reader is not None and reader.live:
        from sactool.bench.disturb import Observer

        observe = Observer(reader)
    words = buf.array("uint64")
    half_lines = words.size // suite.WPL // 2
    chains: dict[str, np.ndarray] = {}
    ms: list[suite.Measure] = []
    src: np.ndarray | None = None
    try:
        unsettle()   # a measurement after an earlier one (bench --node all's next pair): a signal that came between stops it here
        if any(t in opts.tests for t in ("latency", "mlp", "loaded")):
            if progress:
                progress("building pointer-chase chains", 0, 1)
            chains["page_local"] = suite.build_chain(words, 0, half_lines, page_local=True, seed=opts.seed)
            chains["random"] = suite.build_chain(words, half_lines, half_lines, page_local=False, seed=opts.seed + 1)
        cpu = cpus[0]
        # every walker of the random chain gets its own start slot (latency, each MLP chain, each
        # loaded-latency chaser), so no walker re-reads lines another one just brought into the LLC
        slots, mlp_first, loaded_first = walker_slots()

        for test in [t for t in TESTS if t in opts.tests]:
            if test == "latency":
                ms = [suite.latency(words, chains["page_local"], cpu, "page_local"),
                      suite.latency(words, chains["random"], cpu, "random", slot=0, slots=slots)]
            elif test == "mlp":
                ms = [suite.mlp(words, chains["random"], cpu, n, mlp_first[n], slots) for n in suite.MLP_CHAINS]
            elif test == "loaded":
                if len(cpus) < 2:
                    warnings.append({"code": "loaded_needs_cpus", "message": "loaded latency needs >= 2 CPUs "
                                     "(one chaser, the rest readers); only the idle point was measured",
                                     "hint": "pass --cpus with at least two CPUs"})
                delays = suite.LOADED_DELAYS if len(cpus) > 1 else (None,)
                ms = [suite.loaded(words, chains["random"], list(cpus), d, loaded_first + i, slots)
                      for i, d in enumerate(delays)]
            elif test == "gather":
                src = buf.array("uint8")
                ms = []
                for rb, idx in gather_idx:
                    for d in (opts.prefetch or (suite.default_prefetch(rb),)):
                        for t in threads if opts.threads or len(threads) <= 2 else (1, threads[-1]):
                            ms.append(suite.gather(src, list(cpus), t, rb, opts.topk, d, idx, opts.pattern, seed=opts.seed))
            elif test == "convert":
                from sactool.models import get_model

                layers = get_model("deepseek-v3.2").num_layers
                src = buf.array("uint8")
                rbs = opts.record_bytes or (get_model("deepseek-v3.2").record_bytes("bfloat16"),)
                ms = [suite.convert(src, list(cpus), t, layers, rb, opts.seed) for rb in rbs
                      for t in (threads if opts.threads or len(threads) <= 2 else (1, threads[-1]))]
                ms += [suite.convert(src, list(cpus), 1, layers, rb, opts.seed, impl="numpy") for rb in rbs]
            else:
                ms = [suite.sequential(words, list(cpus), t, op) for op in ("read", "write", "copy") for t in threads]
            if not _run(ms, proto, results, progress, clock, test, observe):
                return False
        settle()   # the last statement the interrupt can stop: a signal from here on finds the record finished
        return True
    except KeyboardInterrupt:
        return False
    finally:   # every view of the buffer goes with this frame, even one a traceback keeps: close() unmaps
        del words
        src, ms, chains = None, [], {}   # noqa: F841
