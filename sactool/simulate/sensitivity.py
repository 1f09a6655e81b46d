"""What drives each ratio: every input scaled by ½ and by 1½, the whole model rerun each time.

``sensitivity(opts)`` returns one row per input: the mean-over-contexts ratios (SAC/RDMA
throughput, RDMA/SAC TTFT, RDMA/SAC TBT, SAC/DRAM throughput) with that input at 50% and at 150%
of its value; ``top_inputs`` ranks the inputs per ratio by the larger of the two relative
changes. Hot-buffer misses are perturbed as model outputs (they rest on the workload model's
stated revisit assumptions, ``sactool.workload.params``), the rest as platform inputs. Miss
profiles are cached, so each rerun costs only the serving model (~0.3 s on the paper platform).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from sactool.simulate.platform import GatherCurve, GatherPoint, Platform, StepPoint

RATIOS = ("sac_vs_rdma_throughput", "rdma_vs_sac_ttft", "rdma_vs_sac_tbt", "sac_vs_dram_throughput")
LABELS = {"sac_vs_rdma_throughput": "throughput SAC/RDMA", "rdma_vs_sac_ttft": "TTFT RDMA/SAC",
          "rdma_vs_sac_tbt": "TBT RDMA/SAC", "sac_vs_dram_throughput": "throughput SAC/DRAM"}


def _curve(c: GatherCurve, k: float) -> GatherCurve:
    return dataclasses.replace(c, points=tuple(GatherPoint(q.records, q.latency_s * k) for q in c.points))


def _steps(points, k):
    return tuple(StepPoint(q.requests_per_rank, q.context_tokens, q.step_time_s * k) for q in points)


# name -> (what it is, applies k to a platform, or None for the miss profiles)
INPUTS: dict[str, tuple[str, Callable[[Platform, float], Platform] | None]] = {
    "rdma.layout_conversion_bytes_per_s": ("RDMA CPU passes rate", lambda p, k: dataclasses.replace(
        p, rdma_conversion_bytes_per_s=(p.rdma_conversion_bytes_per_s or 0) * k or None)),
    "nic.bandwidth_bytes_per_s": ("NIC bandwidth", lambda p, k: dataclasses.replace(p, nic_bytes_per_s=p.nic_bytes_per_s * k)),
    "frontend.s_per_prompt_token": ("front-end time per prompt token", lambda p, k: dataclasses.replace(
        p, frontend_s_per_prompt_token=p.frontend_s_per_prompt_token * k)),
    "first_token.extend": ("extend (first token) time", lambda p, k: dataclasses.replace(
        p, extend_points=tuple((c, s * k) for c, s in p.extend_points))),
    "gpu.hisparse_dram_step": ("DRAM-HiSparse decode step", lambda p, k: dataclasses.replace(
        p, gpu=dataclasses.replace(p.gpu, dram_step_points=_steps(p.gpu.dram_step_points, k)))),
    "gpu.decode_step": ("GPU compute per step", lambda p, k: dataclasses.replace(
        p, gpu=dataclasses.replace(p.gpu, step_points=_steps(p.gpu.step_points, k)))),
    "cxl.device_read_bytes_per_s": ("CXL device read bandwidth", lambda p, k: dataclasses.replace(
        p, cxl_device_read_bytes_per_s=p.cxl_device_read_bytes_per_s * k)),
    "cxl.gpu_path_read_bytes_per_s": ("GPU<->CXL path bandwidth", lambda p, k: dataclasses.replace(
        p, cxl_gpu_path_bytes_per_s=p.cxl_gpu_path_bytes_per_s * k)),
    "pcie.gpu_link_bytes_per_s": ("GPU PCIe link bandwidth", lambda p, k: dataclasses.replace(
        p, gpu_link_bytes_per_s=p.gpu_link_bytes_per_s * k)),
    "gather.cxl": ("CXL gather latencies", lambda p, k: dataclasses.replace(p, gather_cxl=_curve(p.gather_cxl, k))),
    "gather.dram": ("DRAM gather latencies", lambda p, k: dataclasses.replace(p, gather_dram=_curve(p.gather_dram, k))),
    "workload.requests_per_concurrency": ("SAC/DRAM run-set size", lambda p, k: dataclasses.replace(
        p, requests_per_concurrency=p.requests_per_concurrency * k)),
    "rdma.requests_per_concurrency": ("RDMA run-set size", lambda p, k: dataclasses.replace(
        p, rdma_requests_per_concurrency=(p.rdma_requests_per_concurrency or p.requests_per_concurrency) * k)),
    "calibration.per_missed_record_s": ("per-missed-record cost (fitted)", lambda p, k: dataclasses.replace(
        p, calibration=dataclasses.replace(p.calibration, per_missed_record_s=p.calibration.per_missed_record_s * k))),
    "hot-buffer misses": ("misses per step (workload model output)", None),
}


@dataclass(frozen=True)
class SensitivityRow:
    name: str
    what: str
    low: dict[str, float | None]      # ratios with the input at (1 - delta) x
    high: dict[str, float | None]     # ... at (1 + delta) x


@dataclass(frozen=True)
class Sensitivity:
    delta: float
    concurrency: int
    base: dict[str, float | None]
    rows: tuple[SensitivityRow, ...]

    def top_inputs(self, ratio: str, n: int = 3) -> list[tuple[SensitivityRow, float]]:
        """The ``n`` inputs that move ``ratio`` most (largest relative change of either side)."""
        b = self.base.get(ratio)
        if not b:
            return []
        scored = []
        for r in self.rows:
            ch = [abs(v / b - 1) for v in (r.low.get(ratio), r.high.get(ratio)) if v]
            if ch:
                scored.append((r, max(ch)))
        return sorted(scored, key=lambda x: -x[1])[:n]


def _mean_ratios(res, conc: int) -> dict[str, float | None]:
    row = next((x for x in res.ratios if x.context_tokens is None and x.concurrency == conc), None)
    if row is None:   # one context: its own row
        row = next(x for x in res.ratios if x.concurrency == conc)
    return {k: getattr(row, k) for k in RATIOS}


def sensitivity(opts, *, delta: float = 0.5, progress=None) -> Sensitivity:
    """Rerun ``opts`` with each input at (1 ∓ delta) × its value; ratios at the first concurrency."""
    from sactool.simulate.api import _default_miss_fn, simulate
    from sactool.simulate.misses import MissProfile

    base_opts = dataclasses.replace(opts, progress=None)
    res = simulate(base_opts)
    conc = res.ratios[0].concurrency
    base = _mean_ratios(res, conc)
    p = opts.platform
    rows = []
    names = [n for n, (_, fn) in INPUTS.items()
             if not (n == "first_token.extend" and not p.extend_points)
             and not (n == "gpu.hisparse_dram_step" and not p.gpu.dram_step_points)
             and not (n == "calibration.per_missed_record_s" and p.calibration is None)
             and not (n == "gpu.decode_step" and not p.gpu.step_points)
             and not (n == "rdma.layout_conversion_bytes_per_s" and not p.rdma_conversion_bytes_per_s)]
    for j, name in enumerate(names):
        what, fn = INPUTS[name]
        if progress:
            progress(f"sensitivity: {name}", j, len(names))
        out = []
        for k in (1 - delta, 1 + delta):
            if fn is None:
                inner = opts.miss_fn

                def scaled(ctx, buf, k=k, inner=inner):
                    m: MissProfile = (inner or _default_miss_fn(opts))(ctx, buf)
                    return dataclasses.replace(m, per_step=tuple(min(m.top_k or 1e18, x * k) for x in m.per_step),
                                               steady=min(m.top_k or 1e18, m.steady * k),
                                               source=m.source + f", x{k:g}")
                o = dataclasses.replace(base_opts, miss_fn=scaled)
            else:
                o = dataclasses.replace(base_opts, platform=fn(p, k))
            out.append(_mean_ratios(simulate(o), conc))
        rows.append(SensitivityRow(name, what, out[0], out[1]))
    if progress:
        progress("sensitivity", len(names), len(names))
    return Sensitivity(delta, conc, base, tuple(rows))
