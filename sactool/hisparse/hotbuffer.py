"""Exact simulation of SGLang HiSparse's per-request, per-layer GPU hot buffer over a top-k trace.

Semantics implemented (SGLang 0.5.23 wheel; ``K`` = ``python/sglang/kernels/jit/csrc/kvcacheio/
hisparse.cuh``, ``C`` = ``python/sglang/srt/managers/hisparse_coordinator.py``):

* **Layout.** Each request owns ``device_buffer_size`` (H) LRU-managed slots per layer plus one
  extra page whose first slot holds the *newest* token (C:644 ``padded_buffer_size``; K:328).
  ``lru_slots`` is an int16 order over the H slots, least recently used first (C:690-691), so H
  must stay ≤ 32767. Each step, ``seq_len`` = sequence length, newest token = ``seq_len - 1``.
* **Fast path.** If ``seq_len ≤ H`` every token is resident and nothing is loaded or reordered
  (K:418-419): zero misses.
* **Newest token.** If the top-k holds ``seq_len - 1`` it is served from the reserved slot and
  counted as a hit, outside the LRU (K:481, K:493). The reserved position is
  ``min(seq_len - 1, H)`` (C:1057), i.e. the same slot every long step: the token decoded at the
  previous step is only in host memory (eager backup, C:1168) and is a *miss* when selected again.
* **Hits.** A slot is a hit when its token is in this step's top-k (hash probe, K:520-538); every
  other slot, empty ones (token -1) included, is evictable (K:538).
* **Misses** are the top-k tokens not resident, taken in top-k order; the j-th miss takes the j-th
  evictable slot in LRU order, i.e. the least recently used ones (K:584-593, K:651).
* **LRU rewrite** (K:673-705): new order = [evictables not taken, in old order] + [slots just
  filled by misses, in miss order] + [hit slots, in old order] — hits become most recent.
* **First long step.** ``alloc_device_buffer`` marks slot i as holding token i for i < H
  (C:980) with LRU order 0..H-1 (C:690-697 init, C:1463 reset): after a colocated prefill
  (C:1085) the buffer holds the prompt's first H tokens (the allocator keeps the first
  ``need_size`` device slots of the prefill, ``mem_cache/allocator/hisparse.py:167-169``). In PD mode (``admit_request_direct``, C:878-910) a prompt
  longer than H starts with every slot empty ("every top-k lookup is a miss", C:901); a shorter one
  is preloaded in order (C:894), as in colocated mode.

Trace convention (as ``sactool.workload``): at step ``s`` the sequence holds
``context_tokens + s`` tokens, so ``seq_len = context_tokens + s``.

With ``reserve_newest=False`` the newest token gets no reserved slot and is looked up like any
other (a what-if; SGLang always reserves it).

**Kernel version** (``kernel``). ``"sglang-0.5.23"`` (default): the write-back above, filled slots
placed just before the hits. ``"sac-fork"``: the kernel the SAC authors' runs used (github
magicYang1573/sglang, branch ``hisparse-cxl-prefix-cache-opt-rdma`` at 4e25782d,
``python/sglang/jit_kernel/csrc/hisparse.cuh`` = ``F``, last changed in 9eb75211): it writes the LRU order
back *before* the miss pass (F:270-287: evictables in their old order at the front, hits at the
back), and the misses then fill the first evictables (F:329), so a slot just filled stays at the
LRU front: a token loaded at one step and not selected at the next is the first evicted. Hits,
miss slots, fast path and the newest-token slot are the same as 0.5.23's (F:122, F:172, F:339).

Hit rate = 1 − misses / (steps × layers × top_k): every top-k entry is one lookup; reserved-slot
and fast-path entries count as hits (no host fetch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import sactool.cachedir  # noqa: F401  (NUMBA_CACHE_DIR before numba loads)
from numba import njit

from sactool.errors import UsageError
from sactool.hisparse import KERNELS

#: ``lru_slots`` is int16 in SGLang 0.5.23 (C:690-691): slot numbers must fit.
MAX_BUFFER_SIZE = 32767
MODES = ("colocated", "pd")


@dataclass(frozen=True)
class HotBufferResult:
    """Misses of one ``device_buffer_size`` over a trace (one request, all layers)."""

    buffer_size: int                 # device_buffer_size, token slots per layer
    misses: np.ndarray               # int32 [steps, layers]: records fetched from host
    hit_rate: float                  # 1 - misses / (steps × layers × top_k)
    misses_per_step_mean: float      # mean over steps of Σ_layers misses (records per decode step)
    misses_per_step_steady: float    # the same over steps ≥ 1 (after the first long step's fill)
    misses_per_layer_step_mean: float  # mean misses per (step, layer)
    misses_per_step_p95: float       # 95th percentile of Σ_layers misses per step
    first_step_misses: int           # Σ_layers misses at step 0 (the buffer's initial fill)
    context_tokens: int
    top_k: int
    mode: str                        # colocated | pd (initial buffer contents)
    reserve_newest: bool
    kernel: str = "sglang-0.5.23"    # KERNELS: whose LRU write-back

    def to_data(self) -> dict:
        """Record form (``records.to_data``): the summary figures and each layer's mean misses per
        step over steps ≥ 1, not the full [steps, layers] array."""
        steady = self.misses[1:] if self.misses.shape[0] > 1 else self.misses
        return {
            "buffer_size": self.buffer_size, "hit_rate": self.hit_rate,
            "misses_per_step_mean": self.misses_per_step_mean,
            "misses_per_step_steady": self.misses_per_step_steady,
            "misses_per_layer_step_mean": self.misses_per_layer_step_mean,
            "misses_per_step_p95": self.misses_per_step_p95,
            "first_step_misses": self.first_step_misses,
            "steady_misses_per_layer": [round(float(v), 3) for v in steady.mean(axis=0)],
            "steps": int(self.misses.shape[0]), "layers": int(self.misses.shape[1]),
            "context_tokens": self.context_tokens, "top_k": self.top_k, "mode": self.mode,
            "reserve_newest": self.reserve_newest, "kernel": self.kernel,
        }


# A numba kernel stays one function (over the ~80-line limit): splitting it into helpers would put
# calls in the per-step inner loop that numba may not inline, and its steps map one to one onto
# the SGLang kernel lines cited in the module docstring (K:418-705), which a reader checks in order.
@njit(cache=True, nogil=True)
def _sim_layer(indices, layer, H, ctx, reserve, pd_empty, filled_front, out):
    """One layer, slot-level like the kernel: ``order`` is ``lru_slots`` (slot numbers, LRU
    first), ``slot_tok`` is ``device_buffer_tokens``; the H-long scan touches only H-sized arrays
    and each top-k id costs one random access into ``info``."""
    steps, _, k = indices.shape
    total = ctx + steps
    # per token one int32: bits 0-15 slot + 1 (0: not resident; H <= 32767), bits 16-30 the
    # step mark that catches an id repeated within a row (marks cycle every 32767 steps)
    info = np.zeros(total, dtype=np.int32)
    slot_tok = np.full(H, -1, dtype=np.int32)        # slot -> token, -1 when empty
    hitmark = np.zeros(H, dtype=np.int32)
    order = np.arange(H, dtype=np.int32)             # _lru_init (C:690)
    new_order = np.empty(H, dtype=np.int32)
    ev = np.empty(H, dtype=np.int32)
    hits = np.empty(H, dtype=np.int32)
    miss = np.empty(k, dtype=np.int32)
    started = False
    for s in range(steps):
        seq = ctx + s
        newest = seq - 1
        mark = s % 32767 + 1
        if mark == 1 and s > 0:
            for t in range(total):
                info[t] &= 0xFFFF
            hitmark[:] = 0
        fast = seq <= H  # K:418 fast path: everything resident, nothing moves
        if not fast and not started:  # alloc_device_buffer (C:980) or PD long prompt (C:901)
            started = True
            if not pd_empty:
                for i in range(H):
                    slot_tok[i] = i
                    info[i] = (info[i] & ~0xFFFF) | (i + 1)
        m = 0
        for i in range(k):
            t = indices[s, layer, i]
            if t < 0 or t >= seq:  # ids must lie in [0, seq)
                return s + 1
            v = info[t]
            if (v >> 16) == mark:  # the same id twice in one row
                return s + 1
            info[t] = (mark << 16) | (v & 0xFFFF)
            if fast or (reserve and t == newest):
                continue
            sl = (v & 0xFFFF) - 1
            if sl >= 0:
                hitmark[sl] = mark
            else:
                miss[m] = t
                m += 1
        if fast:
            out[s, layer] = 0
            continue
        nh = 0
        ne = 0
        for i in range(H):
            sl = order[i]
            if hitmark[sl] == mark:
                hits[nh] = sl
                nh += 1
            else:
                ev[ne] = sl
                ne += 1
        for j in range(m):  # the j-th miss takes the j-th least recent evictable slot (K:651)
            sl = ev[j]
            old = slot_tok[sl]
            if old >= 0:
                info[old] &= ~0xFFFF
            slot_tok[sl] = miss[j]
            info[miss[j]] = (info[miss[j]] & ~0xFFFF) | (sl + 1)
        p = 0
        if filled_front:  # SAC fork (F:270-287): evictables in old order, the filled ones first
            for j in range(ne):
                new_order[p] = ev[j]
                p += 1
        else:  # 0.5.23 write-back (K:683-689): stale evictables, then filled slots, then hits
            for j in range(m, ne):
                new_order[p] = ev[j]
                p += 1
            for j in range(m):
                new_order[p] = ev[j]
                p += 1
        for j in range(nh):
            new_order[p] = hits[j]
            p += 1
        order, new_order = new_order, order
        out[s, layer] = m
    return 0


def _result(misses: np.ndarray, H: int, ctx: int, top_k: int, mode: str, reserve: bool,
            kernel: str) -> HotBufferResult:
    steps, layers = misses.shape
    per_step = misses.sum(axis=1, dtype=np.int64)
    return HotBufferResult(
        buffer_size=H, misses=misses,
        hit_rate=float(1.0 - per_step.sum() / (steps * layers * float(top_k))),
        misses_per_step_mean=float(per_step.mean()),
        misses_per_step_steady=float(per_step[1:].mean()) if steps > 1 else float(per_step.mean()),
        misses_per_layer_step_mean=float(per_step.mean() / layers),
        misses_per_step_p95=float(np.percentile(per_step, 95)),
        first_step_misses=int(per_step[0]), context_tokens=ctx, top_k=top_k, mode=mode,
        reserve_newest=reserve, kernel=kernel)


def simulate_many(indices: np.ndarray, buffer_sizes: Sequence[int], *, context_tokens: int,
                  reserve_newest: bool = True, mode: str = "colocated",
                  kernel: str = "sglang-0.5.23") -> list[HotBufferResult]:
    """Simulate several ``device_buffer_size`` values over one trace (parallel over sizes × layers).

    ``indices``: int32 [steps, layers, top_k], row s holding distinct ids in
    ``[0, context_tokens + s)``; ``context_tokens``: sequence length at step 0.
    """
    if not isinstance(indices, np.ndarray) or indices.ndim != 3 or 0 in indices.shape:
        raise UsageError(f"indices must be a non-empty [steps, layers, top_k] array, got "
                         f"{getattr(indices, 'shape', None)}")
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}", "use colocated or pd")
    if kernel not in KERNELS:
        raise UsageError(f"unknown HiSparse kernel {kernel!r}", f"use {' or '.join(KERNELS)}")
    if isinstance(context_tokens, bool) or int(context_tokens) != context_tokens or context_tokens < 1:
        raise UsageError(f"context_tokens must be a positive integer, got {context_tokens!r}")
    steps, layers, top_k = indices.shape
    sizes = [int(b) for b in buffer_sizes]
    if not sizes:
        raise UsageError("no buffer sizes to simulate")
    for b in sizes:
        if not top_k <= b <= MAX_BUFFER_SIZE:
            raise UsageError(f"device_buffer_size {b} outside [top_k={top_k}, {MAX_BUFFER_SIZE}]",
                             "SGLang requires device_buffer_size ≥ top_k; its LRU slots are int16")
    idx = np.ascontiguousarray(indices, dtype=np.int32)
    out = np.zeros((len(sizes), steps, layers), dtype=np.int32)
    from sactool.workload.generator import run_layers

    ctx = int(context_tokens)

    def job(j: int) -> int:  # (size, layer) pairs on a thread pool; the kernel releases the GIL
        b, layer = divmod(j, layers)
        H = sizes[b]
        return _sim_layer(idx, layer, H, ctx, bool(reserve_newest), mode == "pd" and ctx > H,
                          kernel == "sac-fork", out[b])

    err = np.array(run_layers(job, len(sizes) * layers), dtype=np.int64)
    bad = err[err > 0]
    if bad.size:
        s = int(bad.min()) - 1
        raise UsageError(f"trace step {s} selects a token outside [0, {context_tokens + s}) or twice",
                         "rows must hold distinct ids below context_tokens + step")
    return [_result(out[i], b, int(context_tokens), top_k, mode, bool(reserve_newest), kernel)
            for i, b in enumerate(sizes)]


def simulate(indices: np.ndarray, buffer_size: int, *, context_tokens: int,
             reserve_newest: bool = True, mode: str = "colocated",
             kernel: str = "sglang-0.5.23") -> HotBufferResult:
    """Simulate one ``device_buffer_size`` over a trace → misses per step per layer."""
    return simulate_many(indices, [buffer_size], context_tokens=context_tokens,
                         reserve_newest=reserve_newest, mode=mode, kernel=kernel)[0]
