"""The paper runs' workload: one synthetic filler prompt, whose near-tied repeats the top-k flickers over.

The SAC authors' logged runs decoded one prompt (github magicYang1573/sglang,
``test/cxl_utils/e2e_bench.py load_synthetic_long_prompts``: three filler sentences repeated to
the target length; ``num_unique_prompts 1``, temperature 0). Its top-k was never published. What
the runs do show (``simulate.calibration``, fitted on the ``dc_0502`` / ``dc_0417`` p2 sweeps) is
the misses per layer per request per step at two hot-buffer sizes for each context, growing with
the context. This generator is the smallest top-k process that has both: per layer and step the
top-k holds

* the ``sink_tokens`` first positions and the last ``window_tokens`` positions (the newest token
  included), as in the ShareGPT-profiled model (``workload.params``);
* ``stable`` prompt positions selected at every step (what the budget leaves);
* ``flicker_tokens`` slots, each holding one token of a **near-tie pool** of ``pool_tokens``
  prompt positions (the repeats the indexer scores alike) for a geometric number of steps of mean
  ``dwell_steps``, then replaced by a pool token drawn uniformly among those not held.

A re-drawn token is a hot-buffer hit only while the LRU still holds it, so the misses fall with the
buffer as ``(buffer − top_k) / (pool − flicker)`` of the re-draws find their token, and grow with
the context through the pool and the flicker rate fitted per context. ``dwell_steps`` and the
window are structural (stated, not fitted); ``flicker_tokens`` and ``pool_tokens`` per context are
fitted (``simulate.fillerfit``) so that the exact LRU replay (``hisparse.hotbuffer``) of this
generator gives the calibrated misses at both buffers. Layers are statistically alike in this
model; each runs its own seeded stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sactool.cachedir  # noqa: F401  (NUMBA_CACHE_DIR before numba loads)
from numba import njit

from sactool.errors import UsageError
from sactool.workload.generator import _below, _uniform, run_layers


@dataclass(frozen=True)
class FillerParams:
    """One context's filler top-k process (module docstring)."""

    flicker_tokens: int
    pool_tokens: int
    dwell_steps: float = 4.0
    window_tokens: int = 400
    sink_tokens: int = 4

    def stable_tokens(self, top_k: int) -> int:
        return top_k - self.sink_tokens - self.window_tokens - self.flicker_tokens


@njit(cache=True, nogil=True)
def _filler_layer(out, layer, ctx, top_k, seed, sinks, window, stable, flicker, pool, dwell):
    steps = out.shape[0]
    state = np.empty(1, dtype=np.uint64)
    state[0] = np.uint64(seed) * np.uint64(1000003) + np.uint64(layer) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(7)
    lo, hi = sinks, ctx - window
    n = hi - lo
    perm = np.arange(lo, hi, dtype=np.int64)
    for i in range(stable + pool):          # partial Fisher-Yates: stable positions, then the pool
        j = i + _below(state, n - i)
        t = perm[i]
        perm[i] = perm[j]
        perm[j] = t
    held = np.zeros(pool, dtype=np.uint8)
    slot = np.empty(flicker, dtype=np.int64)
    for f in range(flicker):
        while True:
            q = _below(state, pool)
            if held[q] == 0:
                break
        held[q] = 1
        slot[f] = q
    p_leave = 1.0 / dwell
    for s in range(steps):
        if s > 0:
            for f in range(flicker):
                if _uniform(state) < p_leave:
                    while True:
                        q = _below(state, pool)
                        if held[q] == 0:
                            break
                    held[slot[f]] = 0
                    held[q] = 1
                    slot[f] = q
        k = 0
        for t in range(sinks):
            out[s, layer, k] = t
            k += 1
        for i in range(stable):
            out[s, layer, k] = perm[i]
            k += 1
        for f in range(flicker):
            out[s, layer, k] = perm[stable + slot[f]]
            k += 1
        for t in range(ctx + s - window, ctx + s):
            out[s, layer, k] = t
            k += 1
    return 0


def generate_filler(context_tokens: int, steps: int, layers: int, top_k: int, params: FillerParams, *,
                    seed: int = 0) -> np.ndarray:
    """int32 [steps, layers, top_k]: row s holds distinct ids below ``context_tokens + s``."""
    p = params
    stable = p.stable_tokens(top_k)
    if stable < 0 or p.flicker_tokens < 0 or p.pool_tokens <= p.flicker_tokens:
        raise UsageError(f"filler workload: {p.flicker_tokens} flicker tokens of a {p.pool_tokens}-token pool do not "
                         f"fit top_k {top_k} with {p.sink_tokens} sinks and a {p.window_tokens}-token window",
                         "fewer flicker tokens, or a pool larger than them")
    if stable + p.pool_tokens > context_tokens - p.window_tokens - p.sink_tokens:
        raise UsageError(f"filler workload: {stable} stable + {p.pool_tokens} pool tokens exceed the "
                         f"{context_tokens}-token prompt", "a smaller pool for this context")
    if p.dwell_steps < 1:
        raise UsageError(f"filler workload: dwell_steps {p.dwell_steps} must be >= 1")
    out = np.empty((steps, layers, top_k), dtype=np.int32)
    run_layers(lambda layer: _filler_layer(out, layer, context_tokens, top_k, seed, p.sink_tokens,
                                           p.window_tokens, stable, p.flicker_tokens, p.pool_tokens,
                                           float(p.dwell_steps)), layers)
    return out
