"""The model beside the authors' logs on runs the calibration never saw (``python -m sactool.simulate.heldout``).

Each figure is the same ratio computed twice: from the logs' Round-2 throughputs in the
platform's ``validation.held_out`` (run files named there) and from ``simulate`` on the same
configuration, changed only where the runs differ (hot-buffer size and run-set size of the
``dc_0417`` family, one CXL device in the ``p4`` ablation, the concurrency sweep). None of these
runs is in ``calibration.runs`` (``simulate.calibration``); the ratios of the paper's headline come
from the plain run (``validation`` in the platform). Prints a Markdown table per figure;
``--fit-filler`` instead refits the filler workload (``simulate.fillerfit``) and prints the
fields of ``sactool/data/workloads/filler-sac-runs.yaml``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

CONTEXTS = (16384, 32768, 65536, 131072)
SWEEP = (8, 16, 32, 48, 64, 80, 96)


def _run(p, *, contexts, concurrency, placements=("sac", "rdma", "dram")):
    from sactool.simulate.api import SimulationOptions, simulate

    return simulate(SimulationOptions(p, contexts=tuple(contexts), concurrency=tuple(concurrency),
                                      placements=tuple(placements)))


def _thr(res, pl, ctx, c):
    q = res.point(pl, ctx, c)
    return q.throughput_tokens_per_s if q.fits else None


def _gain(a, b):
    return (a / b - 1.0) if (a and b) else None


def report(p) -> dict[str, Any]:
    """Model and logs per figure and context: ``{figure: {context: (model, logs)}}``."""
    v = (p.validation or {}).get("held_out") or {}
    logs = {k: {int(c): tuple(x) for c, x in (v.get(k) or {}).items()} for k in
            ("buffer_sac", "buffer_dram", "devices", "best_concurrency")}
    base = _run(p, contexts=CONTEXTS, concurrency=(64,))
    # the dc_0417 family: 4096 slots, N = 512 at c = 64 (8 x c)
    small = dataclasses.replace(p, device_buffer_size=4096, requests_per_concurrency=8.0)
    b4 = _run(small, contexts=CONTEXTS, concurrency=(64,), placements=("sac", "dram"))
    one = _run(dataclasses.replace(p, cxl_devices=1), contexts=CONTEXTS, concurrency=(64,), placements=("sac",))
    sweep = _run(p, contexts=CONTEXTS[1:], concurrency=SWEEP, placements=("sac", "rdma"))
    out: dict[str, dict[int, tuple]] = {k: {} for k in
                                        ("buffer_sac", "buffer_dram", "devices", "sac_vs_dram", "best_concurrency",
                                         "ttft_rdma_vs_sac", "sac_vs_rdma", "tbt_rdma_vs_sac")}
    per = (p.validation or {}).get("per_context") or {}
    for ctx in CONTEXTS:
        lg = logs["buffer_sac"].get(ctx)
        out["buffer_sac"][ctx] = (_gain(_thr(base, "sac", ctx, 64), _thr(b4, "sac", ctx, 64)),
                                  _gain(*lg) if lg else None)
        lg = logs["buffer_dram"].get(ctx)
        out["buffer_dram"][ctx] = (_gain(_thr(base, "dram", ctx, 64), _thr(b4, "dram", ctx, 64)),
                                   _gain(*lg) if lg else None)
        lg = logs["devices"].get(ctx)
        out["devices"][ctx] = (_gain(_thr(base, "sac", ctx, 64), _thr(one, "sac", ctx, 64)), _gain(*lg) if lg else None)
        r = next(x for x in base.ratios if x.context_tokens == ctx)
        pc = per.get(ctx) or per.get(str(ctx)) or {}
        out["sac_vs_dram"][ctx] = (r.sac_vs_dram_throughput, pc.get("sac_vs_dram_throughput"))
        out["ttft_rdma_vs_sac"][ctx] = (r.rdma_vs_sac_ttft, pc.get("rdma_vs_sac_ttft"))
        out["sac_vs_rdma"][ctx] = (r.sac_vs_rdma_throughput, pc.get("sac_vs_rdma_throughput"))
        out["tbt_rdma_vs_sac"][ctx] = (r.rdma_vs_sac_tbt, pc.get("rdma_vs_sac_tbt"))
        if ctx in CONTEXTS[1:]:
            best = {pl: max((_thr(sweep, pl, ctx, c) or 0.0) for c in SWEEP) for pl in ("sac", "rdma")}
            lg = logs["best_concurrency"].get(ctx)
            out["best_concurrency"][ctx] = (best["sac"] / best["rdma"] if best["rdma"] else None,
                                            lg[0] / lg[1] if lg else None)
    return out


TITLES = {
    "buffer_sac": ("hot buffer 6144 vs 4096, SAC (2 devices), throughput", "pct"),
    "buffer_dram": ("hot buffer 6144 vs 4096, DRAM, throughput", "pct"),
    "devices": ("two CXL devices vs one, throughput", "pct"),
    "sac_vs_dram": ("SAC / DRAM throughput, c = 64", "share"),
    "best_concurrency": ("best-concurrency SAC / RDMA throughput, c <= 96", "x"),
    "ttft_rdma_vs_sac": ("TTFT RDMA / SAC, c = 64", "x"),
    "sac_vs_rdma": ("throughput SAC / RDMA, c = 64", "x"),
    "tbt_rdma_vs_sac": ("TBT RDMA / SAC, c = 64", "x"),
}


def _fmt(v, kind):
    if v is None:
        return "–"
    if kind == "pct":
        return f"{100 * v:+.1f}%"
    if kind == "share":
        return f"{100 * v:.1f}%"
    return f"{v:.2f}"


def markdown(rep: dict[str, Any]) -> str:
    lines = ["| figure | " + " | ".join(f"{c // 1024}K" for c in CONTEXTS) + " | mean |", "|---" * 6 + "|"]
    for key, (title, kind) in TITLES.items():
        cells, ms, ls = [], [], []
        for c in CONTEXTS:
            m, lg = rep[key].get(c, (None, None))
            cells.append(f"{_fmt(m, kind)} / {_fmt(lg, kind)}" if (m is not None or lg is not None) else "")
            if m is not None and lg is not None:
                ms.append(m)
                ls.append(lg)
        mean = (f"{_fmt(sum(ms) / len(ms), kind)} / {_fmt(sum(ls) / len(ls), kind)}" if ms else "–")
        lines.append(f"| {title} | " + " | ".join(cells) + f" | {mean} |")
    return "\n".join(lines) + "\n\n(model / logs; the mean over the contexts where both exist)"


def fit_filler_block(p) -> str:
    """The filler workload file's fields, refitted (``simulate.fillerfit.fit``)."""
    from sactool.simulate.fillerfit import DWELL_STEPS, fit

    per = fit(p.calibration, top_k=p.top_k, kernel=p.hisparse_kernel)
    window = next(iter(per.values())).window_tokens
    lines = [f"dwell_steps: {DWELL_STEPS:g}", f"window_tokens: {window}", "per_context:"]
    lines += [f"  {c}: {{flicker_tokens: {q.flicker_tokens}, pool_tokens: {q.pool_tokens}}}"
              for c, q in sorted(per.items())]
    return "\n".join(lines)


def main(argv=None) -> None:  # pragma: no cover - exercised through tests/test_simulate_calibration.py
    import sys

    from sactool.data import paper_platform
    from sactool.simulate.platform import load_platform

    p = load_platform(paper_platform())
    args = sys.argv[1:] if argv is None else argv
    print(fit_filler_block(p) if "--fit-filler" in args else markdown(report(p)))


if __name__ == "__main__":  # pragma: no cover
    main()
