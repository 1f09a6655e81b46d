"""The filler workload fitted to the calibration's misses, and its hot-buffer misses (LRU replay).

``fit(calibration)`` chooses per calibrated context the ``flicker_tokens`` and ``pool_tokens`` of
``workload.filler.FillerParams`` (the structural dwell and window stated there) so that the exact
LRU replay of the generator over a whole request (``REPLAY_STEPS`` decode steps, ``REPLAY_LAYERS``
layers, the platform's HiSparse kernel, an empty buffer at admission as for a cache hit) gives the
calibrated misses at both calibrated buffers. Rule: start from the closed form of LRU under
uniform re-draws, ``m(B) = r × (1 − (B − top_k) / G)`` with ``r`` re-draws per step and ``G`` pool
tokens not held, solved from the two targets; then ``ITERATIONS`` corrections, each rescaling
``r`` and ``G`` by target / replayed (after the same closed-form inversion). The fit is stored in
the packaged workload file (``sactool/data/workloads/filler-sac-runs.yaml``, which the platform's
``workload.filler`` names); ``python -m sactool.simulate.heldout --fit-filler`` redoes it and
prints the block. Between fitted contexts ``r`` and ``G`` are linear in context; outside, the
nearest context's.

``profile(...)``: the misses per layer per request over a request's life from that replay: the first
``TABLE_STEPS`` steps one by one (``MissProfile.per_step``: step 0 the cold fill, then the warm-up
while the near-tie pool is first touched), and for every later step the mean of the replay over
the rest of the output (``steady``) — the whole output is replayed, nothing is extrapolated past it;
steps past the table share one value so the serving model can take them in batches.
"""

from __future__ import annotations

from typing import Any

REPLAY_STEPS = 1024
"""Decode steps replayed: the runs' whole Round-2 output (1024 tokens, ``workload.output_tokens``)."""
from sactool.workload.filler import REPLAY_LAYERS  # noqa: E402,F401  (layers replayed and averaged)
ITERATIONS = 3
TABLE_STEPS = 256
"""Replayed steps handed to the serving model one by one (the warm-up ends within ~240 steps at 6144 slots)."""
DWELL_STEPS = 4.0
"""Mean steps a flicker slot keeps its token: structural, not fitted (the runs' logs do not resolve it)."""


def _closed_form(m_small: float, m_large: float, b_small: int, b_large: int, top_k: int) -> tuple[float, float]:
    """(re-draws per step r, pool tokens not held G) from the misses at two buffers: with
    ``m(B) = r (1 − (B − top_k) / G)``, ``m_s − m_l = r (b_l − b_s) / G`` and ``m_s = r − r (b_s − top_k) / G``."""
    r_over_g = max(1e-9, m_small - m_large) / (b_large - b_small)
    r = m_small + r_over_g * (b_small - top_k)
    return r, r / r_over_g


def fit(cal, *, top_k: int, kernel: str, seed: int = 0) -> dict[int, Any]:
    """``{context: FillerParams}`` at the calibration's contexts (its two buffers)."""
    from sactool.hisparse.hotbuffer import simulate_many
    from sactool.workload.filler import FillerParams, generate_filler

    bufs = sorted({b for _, b in cal.misses})
    if len(bufs) < 2:
        raise ValueError("the filler fit needs calibrated misses at two buffer sizes")
    bs, bl = bufs[0], bufs[-1]
    out = {}
    for ctx in sorted({c for c, _ in cal.misses}):
        ms, ml = cal.misses[(ctx, bs)], cal.misses[(ctx, bl)]
        rt, gt = _closed_form(ms, ml, bs, bl, top_k)
        r, g = rt, gt
        for _ in range(ITERATIONS):
            f = max(1, int(round(r * DWELL_STEPS)))
            prm = FillerParams(f, int(round(g + f)), DWELL_STEPS)
            idx = generate_filler(ctx, REPLAY_STEPS, REPLAY_LAYERS, top_k, prm, seed=seed)
            a, b = simulate_many(idx, [bs, bl], context_tokens=ctx, mode="pd", kernel=kernel)
            ri, gi = _closed_form(float(a.misses[1:].mean()), float(b.misses[1:].mean()), bs, bl, top_k)
            r, g = r * rt / ri, g * gt / gi
        f = max(1, int(round(r * DWELL_STEPS)))
        out[ctx] = FillerParams(f, int(round(g + f)), DWELL_STEPS)
    return out


from sactool.workload.filler import params_at  # noqa: E402  (the rule lives with the generator)


_CACHE: dict[tuple, Any] = {}


def profile(per: dict[int, Any], ctx: int, buffer: int, top_k: int, *, kernel: str, steps: int = REPLAY_STEPS,
            seed: int = 0):
    """The filler workload's ``MissProfile`` at a context and buffer (cached per input)."""
    from sactool.hisparse.hotbuffer import simulate
    from sactool.simulate.misses import MissProfile
    from sactool.workload.filler import generate_filler

    prm = params_at(per, ctx)
    key = (prm, ctx, buffer, top_k, kernel, steps, seed)
    if key not in _CACHE:
        idx = generate_filler(ctx, steps, REPLAY_LAYERS, top_k, prm, seed=seed)
        res = simulate(idx, buffer, context_tokens=ctx, mode="pd", kernel=kernel)
        per_step = res.misses.mean(axis=1)
        n = min(TABLE_STEPS, len(per_step))
        rest = per_step[n:] if len(per_step) > n else per_step[1:] if len(per_step) > 1 else per_step
        steady = float(rest.mean())
        _CACHE[key] = MissProfile(ctx, buffer, top_k, tuple(float(x) for x in per_step[:n]), steady,
                                  1.0 - float(per_step[1:].mean() if len(per_step) > 1 else steady) / top_k,
                                  f"filler workload (workload.filler: {prm.flicker_tokens} flicker tokens of a "
                                  f"{prm.pool_tokens}-token near-tie pool, dwell {prm.dwell_steps:g} steps), LRU "
                                  f"replay of {steps} steps x {REPLAY_LAYERS} layers ({kernel} kernel, empty buffer)")
    return _CACHE[key]
