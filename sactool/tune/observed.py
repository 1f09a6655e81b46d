"""``sactool tune --observed``: close the loop from the running engine back to the profile.

**Refit.** The engine's hot-buffer miss rate at the buffer size it ran (``device_buffer_size``) is
the one figure of the workload only the engine can give. The refit scales the workload model's rate
factors (``WorkloadParams.rate_scale``: every layer's fresh-token and relocation rate) until the
hot-buffer simulation — the same LRU replay and the same design contexts and seeds tune then runs —
reproduces that miss rate at that buffer, by bisection on the log of the scale (the simulated miss
rate grows with it at every buffer above top_k). The knob is fitted on this one observation; no
held-out observation checks it, and the record says so. With it the per-layer unions follow the
observation, no longer the published ShareGPT statistics.

**Sensitivity.** Whether or not an observation exists, tune's choice is re-made with every simulated
miss count multiplied by 2, 5 and 10 (the published gap between model and measurement is of that
order), the design's requests weighed against fewer with larger buffers as the choice itself is
(:mod:`sactool.tune.requests`): the rows say which buffer and how many requests per rank would be
chosen then, what its fetch time per token would be, and why.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

FACTORS = (2.0, 5.0, 10.0)
"""The miss multipliers of the sensitivity row."""
SCALE_RANGE = (1 / 64, 256.0)
TOLERANCE = 0.02
"""The refit stops when the simulated miss rate is within 2 % (relative) of the observed one."""
MAX_STEPS = 14


def simulated_miss_rate(model_wl: Any, buffer: int, contexts: Sequence[int], steps: int, seeds: Sequence[int],
                        top_k: int) -> float:
    """Mean over ``contexts`` and ``seeds`` of the missed records per step per layer over top_k, at ``buffer``
    (:func:`sactool.tune.hotbuffer.misses_per_token`, the figure tune's hit rate is 1 minus)."""
    import numpy as np

    from sactool.hisparse.hotbuffer import simulate_many
    from sactool.tune.hotbuffer import misses_per_token

    vals = []
    for c in contexts:
        for s in seeds:
            hb = simulate_many(model_wl.generate(c, steps, seed=s), [buffer], context_tokens=c)
            vals.append(misses_per_token(np.asarray(hb[0].misses)) / top_k)
    return sum(vals) / len(vals)


def refit(model_wl: Any, observation: Any, buffer: int, contexts: Sequence[int], steps: int, seeds: Sequence[int],
          top_k: int, progress: Callable | None = None) -> tuple[Any, dict[str, Any]]:
    """(the refit workload, its record). UsageError for a workload the refit cannot scale."""
    from sactool.errors import UsageError

    if not hasattr(model_wl, "rate_scale"):
        raise UsageError("--observed refits the workload model (--workload sharegpt-dsv32); a filler workload "
                         "replays one synthetic prompt and has no rate to refit",
                         "drop --workload, or drop --observed")
    target = observation.miss_rate
    if not 0.0 < target < 1.0:
        raise UsageError(f"--observed miss rate {target:g} is outside (0, 1)", "is this a HiSparse engine's metrics?")
    n = [0]

    def rate(scale: float) -> float:
        n[0] += 1
        if progress:
            progress("refit to the observation", n[0], MAX_STEPS + 2)
        return simulated_miss_rate(dataclasses.replace(model_wl, rate_scale=scale), buffer, contexts, steps, seeds, top_k)

    base = rate(model_wl.rate_scale)
    lo, hi = math.log(SCALE_RANGE[0]), math.log(SCALE_RANGE[1])
    x0 = math.log(model_wl.rate_scale)
    x, fx, note = x0, base, ""
    if abs(base - target) > TOLERANCE * target:
        # bracket the target from the calibrated point (the rate grows with the scale), then bisect
        up = base < target
        a, fa = x0, base
        step = abs(math.log(target / base)) + 0.1 if base > 0 else 1.0
        while True:
            b = min(hi, a + step) if up else max(lo, a - step)
            fb = rate(math.exp(b))
            if (fb >= target) == up or b in (lo, hi):
                break
            a, fa, step = b, fb, step * 2
        if (fb >= target) != up:
            x, fx = b, fb
            note = (f"the observed miss rate is {'above' if up else 'below'} what the model gives at its "
                    f"{'largest' if up else 'smallest'} rate scale ({math.exp(b):g}): the refit stops there")
        else:
            lo_x, hi_x = (a, b) if up else (b, a)
            for _ in range(MAX_STEPS):
                x = (lo_x + hi_x) / 2
                fx = rate(math.exp(x))
                if abs(fx - target) <= TOLERANCE * target:
                    break
                lo_x, hi_x = (x, hi_x) if fx < target else (lo_x, x)
    scale = math.exp(x)
    rec = {"knob": "workload rate_scale (every layer's fresh-token and relocation rate factor)",
           "rate_scale": scale, "observation": observation.to_data(), "device_buffer_size": buffer,
           "design_contexts": list(contexts), "steps": steps, "seeds": list(seeds),
           "model_miss_rate": base, "refit_miss_rate": fx, "observed_miss_rate": target,
           "observed_over_model": target / base if base else None, "simulations": n[0] * len(contexts) * len(seeds),
           "agreement": "fit on this observation alone: no held-out observation checks the refit model",
           "note": note or "the per-layer unions now follow the observation, not the published ShareGPT statistics"}
    return dataclasses.replace(model_wl, rate_scale=scale, refit=rec), rec


def sensitivity(evaluate_choice: Callable[[float], tuple[Any, int, str]], chosen: Any, requests: int,
                why: str) -> list[dict[str, Any]]:
    """Rows: tune's choice with every miss count × 1 (as chosen: ``requests`` per rank, ``why``), × 2, × 5,
    × 10. ``evaluate_choice(k)`` re-makes the choice on the scaled misses and returns (chosen evaluation,
    requests per rank, why)."""
    rows = [_row(1.0, chosen, requests, why)]
    for k in FACTORS:
        e, req, w = evaluate_choice(k)
        rows.append(_row(k, e, req, w))
    return rows


def _row(k: float, e: Any, requests: int, why: str) -> dict[str, Any]:
    c = e.candidate
    ctx = list(e.per_context.values())
    hit = sum(v["hit_rate"] for v in ctx) / len(ctx) if ctx else None
    return {"miss_factor": k, "device_buffer_size": c.device_buffer_size, "host_to_device_ratio": c.host_to_device_ratio,
            "requests_per_rank": requests, "placement": c.placement.label, "fetch_time_per_token_s": e.mean_s,
            "hit_rate": hit, "gpu_bytes_per_rank": e.gpu_bytes_per_rank, "why": why}


__all__ = ["FACTORS", "refit", "sensitivity", "simulated_miss_rate"]
