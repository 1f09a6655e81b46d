"""Capacity: what fits in GPU memory and in the host (CXL) pool, per scheduler rank.

Facts used (docs/sources.md, SGLang, SGLang 0.5.23):

* every GPU rank runs its own scheduler with a *private* host pool (§2.5);
* MLA KV is replicated across the attention-TP ranks of one attention group: with plain TP every
  rank holds a full copy of its group's requests, DP-attention (``--attn-dp-size``) gives each
  rank its own requests (§2.5). So a rank holds ``ceil(concurrency / attn_dp)`` requests;
* the device pool has ``S`` token slots per rank; each request takes ``device_buffer_size`` slots
  plus one padding page (``padded_buffer_size``, §2.3 step 2);
* the host pool holds ``S × host_to_device_ratio`` tokens plus one padding page, layer-first,
  ``(S·R + page) × layers × record_bytes`` bytes per rank (§2.3 step 1, §2.5);
* the indexer keys of every *logical* token stay on the GPU: ``S·R × layers × 132`` bytes (§2.5);
* pages are 64 tokens (DSA on CUDA, §1.5); a request's host rows are allocated a page at a time.

The plan sizes ``S`` for the requests the deployment must hold (``--max-total-tokens``), then the
smallest integer ratio whose host pool holds every request at the longest context.
"""

from __future__ import annotations

from dataclasses import dataclass

from sactool.hisparse.engine import DSA_PAGE_SIZE_CUDA
from sactool.units import format_bytes

PAGE = DSA_PAGE_SIZE_CUDA


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def pages(tokens: int, page: int = PAGE) -> int:
    """Tokens rounded up to whole pages."""
    return ceil_div(tokens, page) * page


@dataclass(frozen=True)
class Deployment:
    """``tp`` GPU ranks in ``attn_dp`` attention groups (``attn_dp`` divides ``tp``)."""

    tp: int
    attn_dp: int

    @property
    def replication(self) -> int:
        """Copies of each request's KV (attention-TP ranks per group)."""
        return self.tp // self.attn_dp

    def requests_per_rank(self, concurrency: int) -> int:
        return ceil_div(concurrency, self.attn_dp)


@dataclass(frozen=True)
class RankSizing:
    """Sizing of one rank for a (buffer, ratio, requests) choice. All sizes in bytes/tokens.
    (Which target and slice a rank gets is :class:`sactool.pool.rankplan.RankPlan`.)"""

    requests_per_rank: int
    device_buffer_size: int
    host_to_device_ratio: int
    device_slots: int            # S: hot-buffer slots of the rank (requests × (buffer + page))
    host_tokens: int             # S × R
    hot_buffer_bytes: int        # S × layers × record_bytes
    index_key_bytes: int         # S × R × layers × indexer_bytes
    host_pool_bytes: int         # (S × R + page) × layers × record_bytes

    @property
    def gpu_bytes(self) -> int:
        return self.hot_buffer_bytes + self.index_key_bytes


def host_pool_bytes(device_slots: int, ratio: int, *, layers: int, record_bytes: int, page: int = PAGE) -> int:
    """Host pool bytes of one rank: ``(S × R + page) × layers × record_bytes`` (§2.3 step 1, §2.5)."""
    return (device_slots * ratio + page) * layers * record_bytes


def rank_sizing(requests: int, buffer: int, ratio: int, *, layers: int, record_bytes: int,
              indexer_bytes: int, page: int = PAGE) -> RankSizing:
    """The rank's pools for ``requests`` requests with ``buffer`` slots each and ratio ``ratio``."""
    s = requests * (buffer + page)
    h = s * ratio
    return RankSizing(requests, buffer, ratio, s, h, s * layers * record_bytes, h * layers * indexer_bytes,
                    host_pool_bytes(s, ratio, layers=layers, record_bytes=record_bytes, page=page))


def min_ratio(requests: int, buffer: int, context_tokens: int, page: int = PAGE) -> int:
    """Smallest integer ratio whose host pool holds ``requests`` requests of ``context_tokens``."""
    s = requests * (buffer + page)
    return max(1, ceil_div(requests * pages(context_tokens, page), s))


def fits(plan: RankSizing, *, gpu_budget_bytes: int, pool_bytes_per_rank: int) -> list[str]:
    """Reasons the plan does not fit (empty list when it fits)."""
    why = []
    if plan.gpu_bytes > gpu_budget_bytes:
        why.append(f"GPU: needs {format_bytes(plan.gpu_bytes)} per GPU (hot buffers "
                   f"{format_bytes(plan.hot_buffer_bytes)} + indexer keys {format_bytes(plan.index_key_bytes)}), "
                   f"budget {format_bytes(gpu_budget_bytes)}")
    if plan.host_pool_bytes > pool_bytes_per_rank:
        why.append(f"pool: needs {format_bytes(plan.host_pool_bytes)} per rank, "
                   f"partition holds {format_bytes(pool_bytes_per_rank)}")
    return why


def max_requests_per_rank(buffer: int, context_tokens: int, *, gpu_budget_bytes: int, pool_bytes_per_rank: int,
                          layers: int, record_bytes: int, indexer_bytes: int, page: int = PAGE,
                          ) -> int:
    """Most requests of ``context_tokens`` one rank can hold with ``buffer`` hot-buffer slots each.

    Each request needs ``buffer + page`` device slots, its context in host rows (whole pages),
    the matching indexer keys on the GPU; the ratio is the smallest that holds them. Exact
    (monotone in requests, so a binary search).
    """
    def ok(r: int) -> bool:
        if r == 0:
            return True
        ratio = min_ratio(r, buffer, context_tokens, page)
        p = rank_sizing(r, buffer, ratio, layers=layers, record_bytes=record_bytes,
                      indexer_bytes=indexer_bytes, page=page)
        return not fits(p, gpu_budget_bytes=gpu_budget_bytes, pool_bytes_per_rank=pool_bytes_per_rank)

    hi = 1
    while ok(hi):
        hi *= 2
        if hi > 1 << 24:
            return hi
    lo = hi // 2  # ok(lo) is true (lo may be 0 when hi == 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def pool_bytes_needed(concurrency: int, context_tokens: int, dep: Deployment, *, layers: int,
                      record_bytes: int, page: int = PAGE) -> int:
    """Host-pool bytes over all ranks to hold ``concurrency`` requests of ``context_tokens``
    (the least any configuration needs: KV replicated ``dep.replication`` times)."""
    return concurrency * dep.replication * pages(context_tokens, page) * layers * record_bytes
