"""The serving model: a step-level simulation of decode under one KV placement.

What is simulated (each mechanism is a named input, none is fitted to a result):

* **Ranks in lockstep.** ``attn_dp_size`` ranks each decode their own requests (SGLang
  DP-attention) but meet in the MoE collectives of every layer, so a global decode step lasts as
  long as the slowest rank's step (paper-sac.md §2.6: ``--tp 8 --dp-size 8 --enable-dp-attention``).
* **A rank's step** = GPU compute (``ComputeModel``) + the HiSparse path's per-step overhead +
  per layer the swap-in of its requests' hot-buffer misses; swap-in and attention are serialized
  (no prefetch, paper-sac.md §2.5), or overlapped layer-ahead with ``prefetch``.
* **Swap-in of one layer** = ``fixed + max(largest request's misses × s_per_record,
  rank bytes / rank bandwidth)``: one CTA per request gathers at the measured single-request rate
  (``GatherCurve``), and all CTAs of a rank share the bottleneck bandwidth of its path:
  its PCIe link, its share of the PCIe switch uplink (minus NIC traffic crossing the same uplink),
  and for CXL its share of the CXL device it is mapped to (``rank % devices``) and the measured
  GPU↔CXL path limit.
* **RDMA pool**: on admission a request's whole prefix KV is read over its NIC (``rank % nics``),
  FIFO behind earlier fetches on that NIC, in ``chunk`` messages each costing the measured
  per-message time, then optionally converted (page-first → layer-first) at a given rate; decode
  then reads local DRAM. With ``fetch_blocks_decode`` the fetch runs synchronously in the
  scheduler, so the whole lockstep decode waits for it.
* **Admission**: at most ``limit`` requests are resident (the concurrency, or less when local
  memory caps it); more wait FIFO. Closed loop: each completion issues the next request; the
  first ``concurrency`` requests start spread over one request lifetime (steady state, not a
  synchronized burst). Or Poisson arrivals at a rate.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

from sactool.hisparse.cost import fetch_bytes_per_token, rdma_full_prefix_bytes

PLACEMENTS = ("sac", "rdma", "dram")


@dataclass(frozen=True)
class PathModel:
    """How one rank reaches the memory its swap-ins read."""

    fixed_s: float                 # per-layer kernel latency (measured gather line intercept)
    s_per_record: float            # one request's (one CTA's) time per record at the model's record size
    link_bytes_per_s: float        # min(GPU PCIe link, path limit, measured aggregate) for one GPU
    device_bytes_per_s: float | None   # per pool device, shared by the ranks mapped to it (CXL)
    devices: int


@dataclass(frozen=True)
class Scenario:
    placement: str
    ranks: int
    layers: int
    record_bytes: int
    context: int
    output_tokens: int
    concurrency: int
    limit: int                     # resident requests allowed (<= concurrency)
    requests: int
    arrival_rate_per_s: float | None
    case: str
    compute: object                # ComputeModel
    hisparse_overhead_s: float
    prefetch: bool
    path: PathModel
    misses: object                 # MissProfile
    gpus_per_switch: int
    switch_uplink_bytes_per_s: float
    nics: int
    nic_bytes_per_s: float
    nic_chunk_bytes: int
    nic_per_message_s: float
    fetch_blocks_decode: bool
    conversion_bytes_per_s: float | None
    prefill_s: float               # cache_populate: prefill seconds of one request
    pool_write_bytes_per_s: float  # cache_populate: write of the prefix KV to the pool / host
    seed: int = 0
    overhead_fn: object = None     # requests per rank -> HiSparse per-step cost (else hisparse_overhead_s)


@dataclass
class Breakdown:
    """Per-token means of the step components and per-request means of TTFT components (s)."""

    compute_s: float = 0.0
    overhead_s: float = 0.0
    swapin_s: float = 0.0
    stall_s: float = 0.0
    ttft_admission_wait_s: float = 0.0
    ttft_fetch_queue_s: float = 0.0
    ttft_fetch_s: float = 0.0
    ttft_prefill_s: float = 0.0
    ttft_first_step_s: float = 0.0
    # the benchmark harness (``harness.run_harness``)
    extend_stall_s: float = 0.0
    ttft_frontend_s: float = 0.0
    ttft_lockstep_wait_s: float = 0.0
    ttft_extend_s: float = 0.0
    ttft_delivery_s: float = 0.0
    fetch_after_first_token_s: float = 0.0
    pool_bytes_per_token: float = 0.0
    nic_bytes_per_request: float = 0.0


@dataclass
class RunResult:
    ttft_s: list[float]
    tbt_s: list[float]
    throughput_tokens_per_s: float
    makespan_s: float
    steps: int
    breakdown: Breakdown = field(default_factory=Breakdown)


def _step_time(sc: Scenario, counts: list[int], rec: list[float], mx: list[float], nic_active: list[bool],
               comp_cache: dict[int, float]):
    """Global step time and its (compute, overhead, swapin) parts for the slowest rank.

    ``counts[r]``, ``rec[r]``, ``mx[r]``: running requests, summed and largest misses per layer of rank r.
    """
    R = sc.ranks
    p = sc.path
    gps = sc.gpus_per_switch
    active_on_switch: dict[int, int] = {}
    dev_active: dict[int, int] = {}
    for r in range(R):
        if counts[r]:
            active_on_switch[r // gps] = active_on_switch.get(r // gps, 0) + 1
            dev_active[r % p.devices] = dev_active.get(r % p.devices, 0) + 1
    best = (0.0, 0.0, 0.0, 0.0)
    for r in range(R):
        b = counts[r]
        if not b:
            continue
        sw = r // gps
        up = sc.switch_uplink_bytes_per_s
        n_gpu = active_on_switch[sw]
        if sw < len(nic_active) and nic_active[sw]:
            # max-min fair share of the uplink between the NIC flow (capped at its line rate)
            # and the swap-in flows of the GPUs on this switch
            up -= min(sc.nic_bytes_per_s, up / (n_gpu + 1))
        bw = min(p.link_bytes_per_s, up / n_gpu)
        if p.device_bytes_per_s:
            bw = min(bw, p.device_bytes_per_s / dev_active[r % p.devices])
        layer = p.fixed_s + max(mx[r] * p.s_per_record, rec[r] * sc.record_bytes / bw)
        comp = comp_cache.get(b)
        if comp is None:
            comp = comp_cache[b] = sc.compute.step_s(b, sc.context)
        if sc.prefetch:
            per = comp / sc.layers
            total = sc.layers * max(per, layer) + min(per, layer)
            swap = total - comp
        else:
            swap = sc.layers * layer
            total = comp + swap
        ovh = sc.overhead_fn(b) if sc.overhead_fn is not None else sc.hisparse_overhead_s
        total += ovh
        if total > best[0]:
            best = (total, comp, ovh, swap)
    return best


def run(sc: Scenario) -> RunResult:
    """Simulate ``sc.requests`` requests; return per-request TTFT/TBT and the saturated throughput."""
    rng = random.Random(sc.seed)
    N, R, c = sc.requests, sc.ranks, sc.concurrency
    kv_bytes = rdma_full_prefix_bytes(sc.context, sc.record_bytes, sc.layers)
    # per-step miss table: index min(step, W) -> misses per layer
    prof = sc.misses
    W = len(prof.per_step)
    table = list(prof.per_step)
    steady = prof.steady
    comp_cache: dict[int, float] = {}
    life = sc.output_tokens * (sc.compute.step_s(max(1, c // R), sc.context) + sc.hisparse_overhead_s)
    if sc.arrival_rate_per_s:
        t_arr, arrivals = 0.0, []
        for _ in range(N):
            t_arr += rng.expovariate(sc.arrival_rate_per_s)
            arrivals.append(t_arr)
    else:
        arrivals = [i * life / c for i in range(min(c, N))]
    issued = len(arrivals)
    arr_heap = [(a, i) for i, a in enumerate(arrivals)]
    heapq.heapify(arr_heap)
    arrival_t = dict((i, a) for i, a in enumerate(arrivals))
    waiting: list[int] = []
    admit_t: dict[int, float] = {}
    fetch_start: dict[int, float] = {}
    ready_t: dict[int, float] = {}
    prefill_part: dict[int, float] = {}
    pending: list[int] = []                 # admitted, not yet decoding
    nic_free = [0.0] * max(1, sc.nics)
    rank_free = [0.0] * R                   # prefill / synchronous fetch occupancy per rank
    warm: dict[int, int] = {}              # running request -> join step, while its step < W
    rank_of: dict[int, int] = {}
    steady_cnt = [0] * R                    # running requests per rank past the simulated steps
    fin_heap: list[tuple[int, int]] = []    # (global step at which it finishes, request)
    just_joined: list[int] = []
    n_run = 0
    g = 0                                   # global decode steps executed
    first_tok: dict[int, float] = {}
    finish: dict[int, float] = {}
    resident = 0
    t = 0.0
    bd = Breakdown()
    tok_total = 0
    full_time = full_tokens = 0.0
    sums = [0.0, 0.0, 0.0, 0.0]            # compute, overhead, swapin, stall (token-weighted)
    pool_bytes = 0.0
    nic_bytes = 0.0

    def admit(i: int) -> None:
        nonlocal nic_bytes
        r = i % R
        admit_t[i] = t
        if sc.case == "cache_populate":
            start = max(t, rank_free[r])
            done = start + sc.prefill_s + kv_bytes / sc.pool_write_bytes_per_s
            rank_free[r] = done
            prefill_part[i] = done - t
            if sc.placement == "rdma":      # push to the pool: uses the NIC, off the critical path
                n = r % sc.nics
                nic_free[n] = max(nic_free[n], done) + _nic_time(sc, kv_bytes)
                nic_bytes += kv_bytes
            ready_t[i] = done
        elif sc.placement == "rdma":
            n = r % sc.nics
            start = max(t, nic_free[n], rank_free[r] if sc.fetch_blocks_decode else 0.0)
            fetch_start[i] = start
            end = start + _nic_time(sc, kv_bytes)
            nic_free[n] = end
            if sc.conversion_bytes_per_s:
                end += kv_bytes / sc.conversion_bytes_per_s
            if sc.fetch_blocks_decode:
                rank_free[r] = end
            nic_bytes += kv_bytes
            ready_t[i] = end
        else:
            ready_t[i] = t
        pending.append(i)

    blocking = sc.case == "cache_populate" or (sc.placement == "rdma" and sc.fetch_blocks_decode)
    while len(finish) < N:
        while arr_heap and arr_heap[0][0] <= t + 1e-12:
            _, i = heapq.heappop(arr_heap)
            waiting.append(i)
        while waiting and resident < sc.limit:
            admit(waiting.pop(0))
            resident += 1
        if blocking and pending:
            # synchronous work in the scheduler: the lockstep decode waits for all of it. Requests
            # arriving meanwhile are taken by their own rank's scheduler and start their own
            # synchronous work in parallel (chunked prefill / their NIC's FIFO), extending the stall.
            end = max(ready_t[i] for i in pending)
            while end > t:
                until = min(end, arr_heap[0][0]) if (arr_heap and resident < sc.limit) else end
                stall = until - t
                sums[3] += stall * n_run
                if resident >= sc.limit:
                    full_time += stall
                t = until
                while arr_heap and arr_heap[0][0] <= t + 1e-12:
                    waiting.append(heapq.heappop(arr_heap)[1])
                while waiting and resident < sc.limit:
                    admit(waiting.pop(0))
                    resident += 1
                end = max(ready_t[i] for i in pending)
        if pending:
            joined = [i for i in pending if ready_t[i] <= t + 1e-12]
            for i in joined:
                pending.remove(i)
                warm[i] = g
                rank_of[i] = i % R
                heapq.heappush(fin_heap, (g + sc.output_tokens, i))
                just_joined.append(i)
                n_run += 1
        if not n_run:
            nxt = [ready_t[i] for i in pending] + ([arr_heap[0][0]] if arr_heap else [])
            if not nxt:
                break  # pragma: no cover - nothing left
            t = max(t, min(nxt))
            continue
        counts = steady_cnt[:]
        rec = [n * steady for n in steady_cnt]
        mx = [steady if n else 0.0 for n in steady_cnt]
        for i, j in list(warm.items()):
            st = g - j
            r = rank_of[i]
            if st >= W:
                del warm[i]
                steady_cnt[r] += 1
                m = steady
            else:
                m = table[st]
            counts[r] += 1
            rec[r] += m
            if m > mx[r]:
                mx[r] = m
        nic_active = [nf > t for nf in nic_free] if (sc.placement == "rdma" and not blocking) else []
        dt, comp, ovh, swap = _step_time(sc, counts, rec, mx, nic_active, comp_cache)
        # identical steps until the next completion or timed event can be taken at once
        k = 1
        if not warm and not just_joined:
            k = fin_heap[0][0] - g
            nxt = [x for x in ([arr_heap[0][0]] if arr_heap else []) + [ready_t[i] for i in pending]
                   + [nf for nf in nic_free if nf > t and nic_active] if x > t]
            if nxt:
                k = min(k, max(1, math.ceil((min(nxt) - t) / dt)))
        sums[0] += comp * n_run * k
        sums[1] += ovh * n_run * k
        sums[2] += swap * n_run * k
        pool_bytes += fetch_bytes_per_token(sum(rec), sc.record_bytes, sc.layers) * k
        if resident >= sc.limit:
            full_time += dt * k
            full_tokens += n_run * k
        t += dt * k
        g += k
        tok_total += n_run * k
        for i in just_joined:
            first_tok[i] = t - dt * (k - 1)
        just_joined = []
        while fin_heap and fin_heap[0][0] <= g:
            _, i = heapq.heappop(fin_heap)
            finish[i] = t
            resident -= 1
            n_run -= 1
            if i in warm:
                del warm[i]
            else:
                steady_cnt[rank_of[i]] -= 1
            if not sc.arrival_rate_per_s and issued < N:
                arrival_t[issued] = t
                heapq.heappush(arr_heap, (t, issued))
                issued += 1

    ids = sorted(finish)
    ttft = [first_tok[i] - arrival_t[i] for i in ids]
    tbt = [(finish[i] - first_tok[i]) / max(1, sc.output_tokens - 1) for i in ids]
    makespan = max(finish.values()) - min(arrival_t.values())
    thr = full_tokens / full_time if full_time > 0 else tok_total / makespan
    n = len(ids)
    bd.compute_s, bd.overhead_s, bd.swapin_s, bd.stall_s = (s / max(1, tok_total) for s in sums)
    bd.ttft_admission_wait_s = sum(admit_t[i] - arrival_t[i] for i in ids) / n
    bd.ttft_prefill_s = sum(prefill_part.get(i, 0.0) for i in ids) / n
    if fetch_start:
        bd.ttft_fetch_queue_s = sum(fetch_start[i] - admit_t[i] for i in ids if i in fetch_start) / n
        bd.ttft_fetch_s = sum(ready_t[i] - fetch_start[i] for i in ids if i in fetch_start) / n
    bd.ttft_first_step_s = max(0.0, sum(ttft) / n - bd.ttft_admission_wait_s - bd.ttft_prefill_s
                               - bd.ttft_fetch_queue_s - bd.ttft_fetch_s)
    bd.pool_bytes_per_token = pool_bytes / max(1, tok_total)
    bd.nic_bytes_per_request = nic_bytes / max(1, n)
    return RunResult(ttft, tbt, thr, makespan, g, bd)


def _nic_time(sc: Scenario, nbytes: float) -> float:
    """One request's transfer on one NIC: line rate plus the per-message cost of its chunks."""
    msgs = math.ceil(nbytes / sc.nic_chunk_bytes)
    return nbytes / sc.nic_bytes_per_s + msgs * sc.nic_per_message_s
