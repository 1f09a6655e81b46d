"""Seeded numba generator of per-layer DSA top-k index sequences (the model in ``params.py``).

Conventions: ``context_tokens`` is the sequence length at the first decode step (prompt tokens);
at step ``s`` the sequence holds ``context_tokens + s`` tokens, valid ids are
``[0, context_tokens + s)`` and the newest, ``context_tokens + s - 1``, is always selected.

Each layer runs its own splitmix64 stream seeded from ``(seed, layer)``, so the output does not
depend on the number of threads numba uses.
"""

from __future__ import annotations

import numpy as np
import sactool.cachedir  # noqa: F401  (NUMBA_CACHE_DIR before numba loads)
from numba import njit

from sactool.errors import UsageError
from sactool.workload.params import WorkloadParams

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0  # 2**-53

@njit(cache=True)
def _next(state):
    """splitmix64 (Steele et al., 2014) on a one-element uint64 array → uint64."""
    state[0] = state[0] + _GOLDEN
    z = state[0]
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)

@njit(cache=True)
def _uniform(state):
    return float(_next(state) >> _S11) * _INV53

@njit(cache=True)
def _below(state, n):
    return int(_uniform(state) * n)

@njit(cache=True)
def _draw_important(state, cdf, lo, hi):
    """A token in [lo, hi) drawn with probability ∝ importance (cdf over all prompt tokens)."""
    base = cdf[lo - 1] if lo > 0 else 0.0
    u = base + _uniform(state) * (cdf[hi - 1] - base)
    t = np.searchsorted(cdf, u, side="right")
    if t < lo:
        t = lo
    if t >= hi:
        t = hi - 1
    return t

@njit(cache=True, inline="always")
def _release(t, cnt, ring, ring_pos, ring_fill):
    """Drop one selection count of token ``t``; a token no longer selected by any part enters the
    revisit ring. Returns (1 if ``t`` was freed else 0, ring_pos, ring_fill)."""
    cnt[t] -= 1
    if cnt[t] == 0:
        ring[ring_pos] = t
        return 1, (ring_pos + 1) % ring.shape[0], min(ring_fill + 1, ring.shape[0])
    return 0, ring_pos, ring_fill


@njit(cache=True, inline="always")
def _pop_scattered(state, sc, n_sc):
    """Remove a uniformly chosen scattered token (swap-remove); returns (token, new n_sc)."""
    i = _below(state, n_sc)
    t = sc[i]
    n_sc -= 1
    sc[i] = sc[n_sc]
    return t, n_sc


# A numba kernel stays one function (over the ~80-line limit): its per-token loop keeps every
# mechanism's state in registers, and helpers called from it would cost a call per token.
@njit(cache=True, nogil=True)
def _gen_layer(out, layer, ctx, steps, top_k, seed, cdf, factor, sinks, window, n_regions,
               region_tokens, drift, jump, churn, revisit, revisit_window):
    state = np.empty(1, dtype=np.uint64)
    state[0] = np.uint64(seed) * np.uint64(1000003) + np.uint64(layer) * _GOLDEN + np.uint64(1)
    total = ctx + steps
    cnt = np.zeros(total, dtype=np.int16)      # how many parts hold each token
    stamp = np.zeros(total, dtype=np.int32)    # emission de-duplication
    sc = np.empty(top_k, dtype=np.int64)       # scattered tokens
    n_sc = 0
    ring = np.empty(max(revisit_window, 1), dtype=np.int64)  # recently dropped tokens
    ring_pos = 0
    ring_fill = 0
    starts = np.empty(n_regions, dtype=np.int64)
    lens = np.empty(n_regions, dtype=np.int64)
    distinct = 0
    lo_fresh = min(sinks, ctx - 1)

    # initial parts at step 0: sinks, window, regions
    for t in range(min(sinks, ctx)):
        if cnt[t] == 0:
            distinct += 1
        cnt[t] += 1
    for t in range(max(ctx - window, 0), ctx):
        if cnt[t] == 0:
            distinct += 1
        cnt[t] += 1
    for r in range(n_regions):
        ln = region_tokens // 2 + _below(state, region_tokens + 1)
        ln = max(1, min(ln, ctx - lo_fresh))
        st = _draw_important(state, cdf, lo_fresh, ctx - ln + 1)
        starts[r] = st
        lens[r] = ln
        for t in range(st, st + ln):
            if cnt[t] == 0:
                distinct += 1
            cnt[t] += 1

    rate = churn * factor
    jump_p = min(1.0, jump * factor)
    for s in range(steps):
        seq = ctx + s
        if s > 0:
            # 1. the window slides: the newest token enters, the oldest window token leaves
            new = seq - 1
            if cnt[new] == 0:
                distinct += 1
            cnt[new] += 1
            old = seq - 1 - window
            if old >= 0:
                freed, ring_pos, ring_fill = _release(old, cnt, ring, ring_pos, ring_fill)
                distinct -= freed
            # 2. regions drift or relocate (within the prompt)
            for r in range(n_regions):
                st = starts[r]
                ln = lens[r]
                u = _uniform(state)
                if u < jump_p:
                    for t in range(st, st + ln):
                        freed, ring_pos, ring_fill = _release(t, cnt, ring, ring_pos, ring_fill)
                        distinct -= freed
                    st = _draw_important(state, cdf, lo_fresh, ctx - ln + 1)
                    for t in range(st, st + ln):
                        if cnt[t] == 0:
                            distinct += 1
                        cnt[t] += 1
                    starts[r] = st
                elif u < jump_p + drift:
                    if _uniform(state) < 0.5:
                        leave, enter, nst = st, st + ln, st + 1
                    else:
                        leave, enter, nst = st + ln - 1, st - 1, st - 1
                    if enter >= lo_fresh and enter < ctx:
                        freed, ring_pos, ring_fill = _release(leave, cnt, ring, ring_pos, ring_fill)
                        distinct -= freed
                        if cnt[enter] == 0:
                            distinct += 1
                        cnt[enter] += 1
                        starts[r] = nst
            # 3. scattered churn: drop a few scattered tokens
            n_drop = int(rate)
            if _uniform(state) < rate - n_drop:
                n_drop += 1
            n_drop = min(n_drop, n_sc)
            for _ in range(n_drop):
                t, n_sc = _pop_scattered(state, sc, n_sc)
                freed, ring_pos, ring_fill = _release(t, cnt, ring, ring_pos, ring_fill)
                distinct -= freed
        # 4. rebalance to exactly top_k distinct tokens with scattered tokens
        while distinct > top_k and n_sc > 0:
            t, n_sc = _pop_scattered(state, sc, n_sc)
            cnt[t] -= 1  # trimming to top_k: the token does not enter the revisit ring
            if cnt[t] == 0:
                distinct -= 1
        while distinct < top_k:
            t = -1
            if ring_fill > 0 and _uniform(state) < revisit:
                for _ in range(8):
                    c = ring[_below(state, ring_fill)]
                    if cnt[c] == 0:
                        t = c
                        break
            if t < 0:
                for _ in range(64):
                    c = _draw_important(state, cdf, lo_fresh, ctx)
                    if cnt[c] == 0:
                        t = c
                        break
            if t < 0:  # dense corner: take the next free token after a uniform start
                c = lo_fresh + _below(state, seq - lo_fresh)
                while cnt[c] != 0:
                    c += 1
                    if c >= seq:
                        c = 0
                t = c
            cnt[t] += 1
            distinct += 1
            sc[n_sc] = t
            n_sc += 1
        # 5. emit the distinct tokens of all parts
        mark = s + 1
        k = 0
        for t in range(min(sinks, seq)):
            if stamp[t] != mark:
                stamp[t] = mark
                out[s, layer, k] = t
                k += 1
        for t in range(max(seq - window, 0), seq):
            if stamp[t] != mark:
                stamp[t] = mark
                out[s, layer, k] = t
                k += 1
        for r in range(n_regions):
            for t in range(starts[r], starts[r] + lens[r]):
                if stamp[t] != mark:
                    stamp[t] = mark
                    out[s, layer, k] = t
                    k += 1
        for i in range(n_sc):
            t = sc[i]
            if stamp[t] != mark:
                stamp[t] = mark
                out[s, layer, k] = t
                k += 1
        if k != top_k:
            return -1
    return 0

def run_layers(fn, jobs: int) -> list:
    """``fn(j)`` for j < jobs on a thread pool (the numba kernels release the GIL); results in order.

    Threads instead of ``prange``: the same parallelism without numba's parfor compile cost
    (~9 s of CPU per kernel on a cold cache). ``numba.get_num_threads()`` sets the pool size.
    """
    import numba
    from concurrent.futures import ThreadPoolExecutor

    workers = max(1, min(jobs, numba.get_num_threads()))
    if workers == 1:
        return [fn(j) for j in range(jobs)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, range(jobs)))


def layer_factors(layers: int, spread: float, seed: int) -> np.ndarray:
    """Per-layer rate factors exp(spread × z), z = normal quantiles shuffled by ``seed``."""
    from statistics import NormalDist

    nd = NormalDist()
    z = np.array([nd.inv_cdf((i + 0.5) / layers) for i in range(layers)])
    np.random.default_rng([seed, 1]).shuffle(z)
    return np.exp(spread * z)

def importance_field(context_tokens: int, shape: float, seed: int) -> np.ndarray:
    """Cumulative token importance (Gamma(shape), mean 1) over the prompt, shared by all layers."""
    w = np.random.default_rng([seed, 2]).gamma(shape, 1.0 / shape, size=context_tokens)
    return np.cumsum(w)

def generate_topk(context_tokens: int, steps: int, layers: int, top_k: int, *, seed: int = 0,
                  params: WorkloadParams | None = None) -> np.ndarray:
    """Top-k token ids per decode step and layer: int32 ``[steps, layers, top_k]``.

    Row ``[s, l]`` holds ``top_k`` distinct ids in ``[0, context_tokens + s)`` and always the
    newest id ``context_tokens + s - 1``. Deterministic for a given ``seed`` and ``params``.
    """
    p = params or WorkloadParams()
    for name, v in (("context_tokens", context_tokens), ("steps", steps), ("layers", layers),
                    ("top_k", top_k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise UsageError(f"{name} must be a positive integer, got {v!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UsageError(f"seed must be a non-negative integer, got {seed!r}")
    if top_k > context_tokens:
        raise UsageError(f"top_k={top_k} exceeds the context ({context_tokens} tokens)",
                         "DSA selects top_k of the context; use a context of at least top_k tokens")
    p.validate(top_k)
    sinks, window, regions, region_tokens, churn = p.scaled(top_k)
    scale = (context_tokens / 16384.0) ** p.churn_context_exponent
    out = np.empty((steps, layers, top_k), dtype=np.int32)
    cdf = importance_field(context_tokens, p.importance_shape, seed)
    if p.layer_targets:
        from sactool.workload.layerfit import factors_for, layer_targets
        from sactool.workload.params import DSV32_STEPS

        factors = np.array(factors_for(layer_targets(context_tokens, layers, p.layer_targets),
                                       context_tokens=context_tokens, top_k=top_k, steps=DSV32_STEPS,
                                       params=p)) * scale
    else:
        factors = layer_factors(layers, p.layer_spread, seed) * scale
    factors = factors * p.rate_scale
    seed = int(seed) & 0x7FFFFFFFFFFFFFFF

    def one(layer: int) -> int:
        return _gen_layer(out, layer, int(context_tokens), int(steps), int(top_k), seed, cdf,
                          float(factors[layer]), sinks, window, regions, region_tokens,
                          float(p.region_drift), float(p.region_jump), float(churn),
                          float(p.revisit), int(p.revisit_window))

    rc = min(run_layers(one, layers))
    if rc != 0:  # pragma: no cover - an internal invariant
        raise RuntimeError("workload generator lost track of its top-k set")
    return out


__all__ = ["generate_topk", "layer_factors", "importance_field", "run_layers"]
