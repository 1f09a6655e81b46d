"""The hot-buffer miss volume next to what the authors' logs imply: a validation view, never an input.

SAC/DRAM throughput is decided by one product: the records each request misses per layer and
step (workload model + LRU replay, ``simulate.misses``) times the bytes per record, over the CXL
device share of a rank (``cxl.device_read_bytes_per_s`` / ranks mapped to the device). Neither
factor of that product is measured for the runs behind the paper's 91%; this module shows how far
the model's product is from the one the logs need, per context:

* ``model_misses_per_layer``: the steady misses of the SAC hot buffer the model uses;
* ``first_touch_misses_per_layer``: the misses no cache avoids, from the published per-layer union
  (``workload.layers.first_touch_misses``), a lower bound;
* ``model_gap_s`` / ``logs_gap_s``: the steady SAC − DRAM decode step with every rank at the logs'
  batch, from the model's paths and misses / from the logs (platform ``validation.step_gap``);
* ``implied_misses_per_layer``: the misses per layer per request that would make the model's gap
  equal the logs' gap at the model's bandwidths (bisection on the same step function);
* the same at 128K by requests per rank, and the effect of one CXL device instead of two.

The step difference uses ``engine._step_time`` with the same paths the simulation uses, identical
compute and HiSparse cost on both sides (they cancel), all ranks at the same batch. The logs'
figures enter only here, for printing; nothing is fitted to them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from sactool.simulate import engine

WHAT = ("validation (not an input): the model's hot-buffer misses and SAC-DRAM decode-step gap next to the "
        "authors' logs (platform validation.step_gap) and the misses the logs' gap implies at the model's "
        "bandwidths")


class _NoCompute:
    """Compute cancels in a SAC − DRAM difference without prefetch; keep the real one when it does not."""

    def step_s(self, requests: int, context: int) -> float:
        return 0.0


def _scenario(p, placement: str, path: engine.PathModel, layers: int, record_bytes: int, ctx: int,
              compute) -> engine.Scenario:
    """The fields ``engine._step_time`` reads, from the platform; the rest are unused here."""
    return engine.Scenario(
        placement=placement, ranks=p.attn_dp_size, layers=layers, record_bytes=record_bytes, context=ctx,
        output_tokens=1, concurrency=1, limit=1, requests=1, arrival_rate_per_s=None, case="cache_hit",
        compute=compute if p.prefetch else _NoCompute(), hisparse_overhead_s=0.0, prefetch=p.prefetch,
        path=path, misses=None, gpus_per_switch=p.gpus_per_switch,
        switch_uplink_bytes_per_s=p.switch_uplink_bytes_per_s, nics=p.nics, nic_bytes_per_s=p.nic_bytes_per_s,
        nic_chunk_bytes=p.nic_chunk_bytes, nic_per_message_s=p.nic_per_message_s, fetch_blocks_decode=False,
        conversion_bytes_per_s=None, prefill_s=0.0, pool_write_bytes_per_s=1.0)


def step_s(sc: engine.Scenario, b: int, misses: float) -> float:
    """Steady decode step with ``b`` requests on every rank, each missing ``misses`` records per layer."""
    R = sc.ranks
    return engine._step_time(sc, [b] * R, [b * misses] * R, [misses] * R, [], {})[0]


def gap_s(sac: engine.Scenario, dram: engine.Scenario, b: int, misses: float) -> float:
    """SAC − DRAM steady decode step at ``b`` requests per rank and ``misses`` per layer per request."""
    return step_s(sac, b, misses) - step_s(dram, b, misses)


def implied_misses(sac: engine.Scenario, dram: engine.Scenario, b: int, target_s: float,
                   top_k: int) -> float | None:
    """Misses per layer per request at which :func:`gap_s` equals ``target_s`` (bisection; the gap
    does not fall as misses grow). 0 when even no miss gives that gap; None when ``top_k`` misses
    (every selection) give less."""
    if gap_s(sac, dram, b, 0.0) >= target_s:
        return 0.0
    hi = float(top_k)
    if gap_s(sac, dram, b, hi) < target_s:
        return None
    lo = 0.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if gap_s(sac, dram, b, mid) < target_s:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _keyed(d: dict | None) -> dict[int, float]:
    return {int(k): float(v) for k, v in (d or {}).items()}


def miss_check(p, *, contexts, layers: int, record_bytes: int, paths: dict[str, engine.PathModel],
               compute, miss_fn: Callable[[int, int], Any], layer_profile: str | None) -> dict[str, Any]:
    """The validation block (see the module docstring); {} when the platform has no logs' gaps.
    ``layer_profile``: the per-layer locality profile the workload model uses (first touches from
    its published union), or None."""
    from sactool.workload.layers import first_touch_misses

    logs = (p.validation or {}).get("step_gap")
    if not logs:
        return {}
    b = int(logs.get("requests_per_rank") or 1)
    per_logs = _keyed(logs.get("per_context_s"))
    dev_logs = _keyed(logs.get("one_minus_two_devices_s"))
    buf = p.device_buffer_size
    per: dict[int, dict[str, Any]] = {}
    for ctx in contexts:
        sac = _scenario(p, "sac", paths["sac"], layers, record_bytes, ctx, compute)
        dram = _scenario(p, "dram", paths["dram"], layers, record_bytes, ctx, compute)
        one = dataclasses.replace(sac, path=dataclasses.replace(sac.path, devices=1, rank_devices=()))
        m = miss_fn(ctx, buf).steady
        row: dict[str, Any] = {
            "buffer_slots": buf, "model_misses_per_layer": m,
            "first_touch_misses_per_layer": (first_touch_misses(ctx, p.top_k, model=layer_profile)
                                             if layer_profile else None),
            "model_gap_s": gap_s(sac, dram, b, m), "logs_gap_s": per_logs.get(ctx),
            "implied_misses_per_layer": (implied_misses(sac, dram, b, per_logs[ctx], p.top_k)
                                         if ctx in per_logs else None),
            "model_one_minus_two_devices_s": step_s(one, b, m) - step_s(sac, b, m) if p.cxl_devices == 2 else None,
            "logs_one_minus_two_devices_s": dev_logs.get(ctx),
        }
        per[ctx] = row
    out: dict[str, Any] = {"what": WHAT, "requests_per_rank": b, "prompt": logs.get("prompt"), "per_context": per,
                           "misses_from": p.topk_workload}
    sweep = _keyed(logs.get("by_requests_per_rank_128k_s"))
    if sweep and 131072 in per:
        ctx = 131072
        sac = _scenario(p, "sac", paths["sac"], layers, record_bytes, ctx, compute)
        dram = _scenario(p, "dram", paths["dram"], layers, record_bytes, ctx, compute)
        m = per[ctx]["model_misses_per_layer"]
        out["by_requests_per_rank"] = {"context_tokens": ctx, "rows": {
            n: {"logs_gap_s": g, "model_gap_s": gap_s(sac, dram, n, m),
                "implied_misses_per_layer": implied_misses(sac, dram, n, g, p.top_k)}
            for n, g in sorted(sweep.items())}}
    return out
