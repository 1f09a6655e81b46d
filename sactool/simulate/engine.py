"""The serving model: a step-level simulation of decode under one KV placement.

What is simulated (each mechanism is a named input, none is fitted to a result):

* **Ranks in lockstep.** ``attn_dp_size`` ranks each decode their own requests (SGLang
  DP-attention) but meet in the MoE collectives of every layer, so a global decode step lasts as
  long as the slowest rank's step (docs/sources.md, SAC §2.6: ``--tp 8 --dp-size 8 --enable-dp-attention``).
* **A rank's step** = GPU compute (``ComputeModel``) + the HiSparse path's per-step overhead +
  per layer the swap-in of its requests' hot-buffer misses; swap-in and attention are serialized
  (no prefetch, docs/sources.md, SAC §2.5), or overlapped layer-ahead with ``prefetch``.
* **Swap-in of one layer** = ``fixed + max(largest request's misses × s_per_record,
  rank bytes / rank bandwidth) + rank misses × common``: one CTA per request gathers at the measured single-request rate
  (``GatherCurve``), and all CTAs of a rank share the bottleneck bandwidth of its path:
  its PCIe link, its share of the PCIe switch uplink (minus NIC traffic crossing the same uplink),
  and for CXL its share of the CXL device it is mapped to (the profile's ``pool.rank_targets``, else
  ``rank % devices``) and the measured
  GPU↔CXL path limit; ``common`` is a cost per missed record that every placement pays
  (fitted on the platform's calibration runs, ``simulate.calibration``).
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
from typing import Any, Callable, Protocol

from sactool.bench.record import lines_touched
from sactool.hisparse.cost import common_miss_time_per_token, fetch_bytes_per_token, rdma_full_prefix_bytes
from sactool.simulate.misses import MissProfile

PLACEMENTS = ("sac", "rdma", "dram")


class StepCompute(Protocol):
    """GPU seconds of one decode step of a rank (:class:`sactool.simulate.gpu.ComputeModel`)."""

    def step_s(self, requests: int, context: int) -> float: ...


def misses_of(sc: Scenario) -> MissProfile:
    """The scenario's miss profile, which every run needs."""
    if sc.misses is None:
        raise ValueError("this Scenario has no miss profile (a step-time-only scenario): it cannot be run")
    return sc.misses


@dataclass(frozen=True)
class PathModel:
    """How one rank reaches the memory its swap-ins read."""

    fixed_s: float                 # per-layer kernel latency (measured gather line intercept)
    s_per_record: float            # one request's (one CTA's) time per record at the model's record size
    link_bytes_per_s: float        # min(GPU PCIe link, path limit, measured aggregate) for one GPU
    device_bytes_per_s: float | None   # per pool device, shared by the ranks mapped to it (CXL)
    devices: int
    # a cost per missed record every placement pays on top of its bandwidth share, serial per rank
    # (the platform's calibration: ``simulate.calibration``; 0 without one)
    common_s_per_record: float = 0.0
    # the device each rank's pool is on (index < devices), from the profile's pool.rank_targets;
    # () = rank % devices, the paper platform's round robin (:meth:`device_of`)
    rank_devices: tuple[int, ...] = ()

    def device_of(self, rank: int) -> int:
        """The pool device rank ``rank`` reads (shared with the other ranks mapped to it)."""
        return self.rank_devices[rank] if rank < len(self.rank_devices) else rank % self.devices


def path_model(p: Any, placement: str, record_bytes: int, common_s: float = 0.0) -> PathModel:
    """A rank's path to the memory it gathers from. A curve's measured all-threads bandwidth
    (``aggregate_bytes_per_s``, from a bench record) is what one memory node/device delivers, shared
    by the ranks mapped to it. ``common_s``: the calibrated cost per missed record every placement
    pays (``calibration``). ``p``: a :class:`sactool.simulate.platform.Platform` (its gather curves,
    link and device figures); the simulation and the calibration fit both build their paths here."""
    curve = p.gather_cxl if placement == "sac" else p.gather_dram
    fixed, slope = curve.line()
    # one record = one warp's dependent 8-byte loads over the cache lines it touches: scale the
    # measured per-record time by lines touched (656 B -> 11 lines, 1152 B -> 18), as bench does
    s_rec = slope * lines_touched(record_bytes) / lines_touched(curve.record_bytes)
    agg = curve.aggregate_bytes_per_s
    if placement == "sac":
        dev = min(p.cxl_device_read_bytes_per_s, agg) if agg else p.cxl_device_read_bytes_per_s
        return PathModel(fixed, s_rec, min(p.gpu_link_bytes_per_s, p.cxl_gpu_path_bytes_per_s),
                                dev, p.cxl_devices, common_s, tuple(p.cxl_rank_devices))
    if agg:
        return PathModel(fixed, s_rec, p.gpu_link_bytes_per_s, agg, p.dram_nodes, common_s)
    return PathModel(fixed, s_rec, p.gpu_link_bytes_per_s, None, 1, common_s)


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
    compute: StepCompute           # a ComputeModel (simulate.gpu)
    hisparse_overhead_s: float
    prefetch: bool
    path: PathModel
    misses: MissProfile | None     # None only where no run is made: simulate.misscheck's step times
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
    # requests per rank -> HiSparse per-step cost (else hisparse_overhead_s)
    overhead_fn: Callable[[int], float] | None = None
    fetch_fixed_s: float = 0.0     # RDMA: fixed cost of one fetch, on top of wire and CPU passes


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
    # TTFT means over the first burst (the first ``concurrency`` requests, dispatch order) and the rest
    first_wave_ttft_s: float = 0.0
    later_ttft_s: float = 0.0


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
            dev_active[p.device_of(r)] = dev_active.get(p.device_of(r), 0) + 1
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
            bw = min(bw, p.device_bytes_per_s / dev_active[p.device_of(r)])
        layer = (p.fixed_s + max(mx[r] * p.s_per_record, rec[r] * sc.record_bytes / bw)
                 + common_miss_time_per_token(rec[r], 1, 1, p.common_s_per_record))   # one layer, the rank's misses
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
    return _Run(sc).simulate()


class _Run:
    """The event loop of :func:`run`, one stage per method: arrivals and admission (with the
    synchronous prefill / fetch work that stalls the lockstep decode), joining, one batch of
    identical decode steps, completions, and the result with its breakdown."""

    def __init__(self, sc: Scenario):
        self.sc = sc
        R, c, N = sc.ranks, sc.concurrency, sc.requests
        self.kv_bytes = rdma_full_prefix_bytes(sc.context, sc.record_bytes, sc.layers)
        # per-step miss table: index min(step, W) -> misses per layer
        misses = misses_of(sc)
        self.table = list(misses.per_step)
        self.W = len(self.table)
        self.steady = misses.steady
        self.comp_cache: dict[int, float] = {}
        arrivals = self._first_arrivals(random.Random(sc.seed), N, R, c)
        self.issued = len(arrivals)
        self.arr_heap = [(a, i) for i, a in enumerate(arrivals)]
        heapq.heapify(self.arr_heap)
        self.arrival_t = dict((i, a) for i, a in enumerate(arrivals))
        self.waiting: list[int] = []
        self.admit_t: dict[int, float] = {}
        self.fetch_start: dict[int, float] = {}
        self.ready_t: dict[int, float] = {}
        self.prefill_part: dict[int, float] = {}
        self.pending: list[int] = []                 # admitted, not yet decoding
        self.nic_free = [0.0] * max(1, sc.nics)
        self.rank_free = [0.0] * R                   # prefill / synchronous fetch occupancy per rank
        self.warm: dict[int, int] = {}              # running request -> join step, while its step < W
        self.rank_of: dict[int, int] = {}
        self.steady_cnt = [0] * R                    # running requests per rank past the simulated steps
        self.fin_heap: list[tuple[int, int]] = []    # (global step at which it finishes, request)
        self.just_joined: list[int] = []
        self.n_run = 0
        self.g = 0                                   # global decode steps executed
        self.first_tok: dict[int, float] = {}
        self.finish: dict[int, float] = {}
        self.resident = 0
        self.t = 0.0
        self.tok_total = 0
        self.full_time = self.full_tokens = 0.0
        self.sums = [0.0, 0.0, 0.0, 0.0]            # compute, overhead, swapin, stall (token-weighted)
        self.pool_bytes = 0.0
        self.nic_bytes = 0.0
        self.blocking = sc.case == "cache_populate" or (sc.placement == "rdma" and sc.fetch_blocks_decode)

    def _first_arrivals(self, rng: random.Random, N: int, R: int, c: int) -> list[float]:
        """Poisson arrivals at the rate, or (closed loop) the first ``concurrency`` requests spread
        over one request lifetime."""
        sc = self.sc
        if sc.arrival_rate_per_s:
            t_arr, arrivals = 0.0, []
            for _ in range(N):
                t_arr += rng.expovariate(sc.arrival_rate_per_s)
                arrivals.append(t_arr)
            return arrivals
        life = sc.output_tokens * (sc.compute.step_s(max(1, c // R), sc.context) + sc.hisparse_overhead_s)
        return [i * life / c for i in range(min(c, N))]

    def simulate(self) -> RunResult:
        while len(self.finish) < self.sc.requests:
            self._arrive_and_admit()
            if self.blocking and self.pending:
                self._stall_for_synchronous_work()
            if self.pending:
                self._join_ready()
            if not self.n_run:
                if not self._advance_idle():
                    break  # pragma: no cover - nothing left
                continue
            self._decode_steps()
            self._complete()
        return self._result()

    # ---- admission ------------------------------------------------------------------------
    def _admit(self, i: int) -> None:
        sc, t, r = self.sc, self.t, i % self.sc.ranks
        self.admit_t[i] = t
        if sc.case == "cache_populate":
            start = max(t, self.rank_free[r])
            done = start + sc.prefill_s + self.kv_bytes / sc.pool_write_bytes_per_s
            self.rank_free[r] = done
            self.prefill_part[i] = done - t
            if sc.placement == "rdma":      # push to the pool: uses the NIC, off the critical path
                n = r % sc.nics
                self.nic_free[n] = max(self.nic_free[n], done) + _nic_time(sc, self.kv_bytes)
                self.nic_bytes += self.kv_bytes
            self.ready_t[i] = done
        elif sc.placement == "rdma":
            n = r % sc.nics
            start = max(t, self.nic_free[n], self.rank_free[r] if sc.fetch_blocks_decode else 0.0)
            self.fetch_start[i] = start
            end = start + _nic_time(sc, self.kv_bytes)
            self.nic_free[n] = end
            end += sc.fetch_fixed_s
            if sc.conversion_bytes_per_s:
                end += self.kv_bytes / sc.conversion_bytes_per_s
            if sc.fetch_blocks_decode:
                self.rank_free[r] = end
            self.nic_bytes += self.kv_bytes
            self.ready_t[i] = end
        else:
            self.ready_t[i] = t
        self.pending.append(i)

    def _arrive_and_admit(self) -> None:
        """Arrivals due by now join the FIFO; the FIFO is admitted up to the resident limit."""
        while self.arr_heap and self.arr_heap[0][0] <= self.t + 1e-12:
            _, i = heapq.heappop(self.arr_heap)
            self.waiting.append(i)
        while self.waiting and self.resident < self.sc.limit:
            self._admit(self.waiting.pop(0))
            self.resident += 1

    def _stall_for_synchronous_work(self) -> None:
        """Synchronous work in the scheduler: the lockstep decode waits for all of it. Requests
        arriving meanwhile are taken by their own rank's scheduler and start their own synchronous
        work in parallel (chunked prefill / their NIC's FIFO), extending the stall."""
        limit = self.sc.limit
        end = max(self.ready_t[i] for i in self.pending)
        while end > self.t:
            until = min(end, self.arr_heap[0][0]) if (self.arr_heap and self.resident < limit) else end
            stall = until - self.t
            self.sums[3] += stall * self.n_run
            if self.resident >= limit:
                self.full_time += stall
            self.t = until
            self._arrive_and_admit()
            end = max(self.ready_t[i] for i in self.pending)

    def _join_ready(self) -> None:
        """Admitted requests whose KV is ready start decoding at this global step."""
        joined = [i for i in self.pending if self.ready_t[i] <= self.t + 1e-12]
        for i in joined:
            self.pending.remove(i)
            self.warm[i] = self.g
            self.rank_of[i] = i % self.sc.ranks
            heapq.heappush(self.fin_heap, (self.g + self.sc.output_tokens, i))
            self.just_joined.append(i)
            self.n_run += 1

    def _advance_idle(self) -> bool:
        """Nothing decodes: jump to the next readiness or arrival (False when there is none)."""
        nxt = [self.ready_t[i] for i in self.pending] + ([self.arr_heap[0][0]] if self.arr_heap else [])
        if not nxt:
            return False
        self.t = max(self.t, min(nxt))
        return True

    # ---- decode ---------------------------------------------------------------------------
    def _rank_loads(self) -> tuple[list[int], list[float], list[float]]:
        """Per rank: running requests, summed and largest misses per layer at this step."""
        steady, table, W, g = self.steady, self.table, self.W, self.g
        counts = self.steady_cnt[:]
        rec = [n * steady for n in self.steady_cnt]
        mx = [steady if n else 0.0 for n in self.steady_cnt]
        for i, j in list(self.warm.items()):
            st = g - j
            r = self.rank_of[i]
            if st >= W:
                del self.warm[i]
                self.steady_cnt[r] += 1
                m = steady
            else:
                m = table[st]
            counts[r] += 1
            rec[r] += m
            if m > mx[r]:
                mx[r] = m
        return counts, rec, mx

    def _decode_steps(self) -> None:
        """One global step, or as many identical steps as pass before the next completion or
        timed event (taken at once)."""
        sc, t = self.sc, self.t
        counts, rec, mx = self._rank_loads()
        nic_active = [nf > t for nf in self.nic_free] if (sc.placement == "rdma" and not self.blocking) else []
        dt, comp, ovh, swap = _step_time(sc, counts, rec, mx, nic_active, self.comp_cache)
        k = 1
        if not self.warm and not self.just_joined:
            k = self.fin_heap[0][0] - self.g
            nxt = [x for x in ([self.arr_heap[0][0]] if self.arr_heap else []) + [self.ready_t[i] for i in self.pending]
                   + [nf for nf in self.nic_free if nf > t and nic_active] if x > t]
            if nxt:
                k = min(k, max(1, math.ceil((min(nxt) - t) / dt)))
        n_run = self.n_run
        self.sums[0] += comp * n_run * k
        self.sums[1] += ovh * n_run * k
        self.sums[2] += swap * n_run * k
        self.pool_bytes += fetch_bytes_per_token(sum(rec), sc.record_bytes, sc.layers) * k
        if self.resident >= sc.limit:
            self.full_time += dt * k
            self.full_tokens += n_run * k
        self.t += dt * k
        self.g += k
        self.tok_total += n_run * k
        for i in self.just_joined:
            self.first_tok[i] = self.t - dt * (k - 1)
        self.just_joined = []

    def _complete(self) -> None:
        """Requests done by this step leave; in a closed loop each completion issues the next."""
        sc = self.sc
        while self.fin_heap and self.fin_heap[0][0] <= self.g:
            _, i = heapq.heappop(self.fin_heap)
            self.finish[i] = self.t
            self.resident -= 1
            self.n_run -= 1
            if i in self.warm:
                del self.warm[i]
            else:
                self.steady_cnt[self.rank_of[i]] -= 1
            if not sc.arrival_rate_per_s and self.issued < sc.requests:
                self.arrival_t[self.issued] = self.t
                heapq.heappush(self.arr_heap, (self.t, self.issued))
                self.issued += 1

    # ---- result ---------------------------------------------------------------------------
    def _result(self) -> RunResult:
        sc, finish, arrival_t, first_tok = self.sc, self.finish, self.arrival_t, self.first_tok
        ids = sorted(finish)
        ttft = [first_tok[i] - arrival_t[i] for i in ids]
        tbt = [(finish[i] - first_tok[i]) / max(1, sc.output_tokens - 1) for i in ids]
        makespan = max(finish.values()) - min(arrival_t.values())
        thr = self.full_tokens / self.full_time if self.full_time > 0 else self.tok_total / makespan
        n = len(ids)
        bd = Breakdown()
        bd.compute_s, bd.overhead_s, bd.swapin_s, bd.stall_s = (s / max(1, self.tok_total) for s in self.sums)
        bd.ttft_admission_wait_s = sum(self.admit_t[i] - arrival_t[i] for i in ids) / n
        bd.ttft_prefill_s = sum(self.prefill_part.get(i, 0.0) for i in ids) / n
        if self.fetch_start:
            fs = self.fetch_start
            bd.ttft_fetch_queue_s = sum(fs[i] - self.admit_t[i] for i in ids if i in fs) / n
            bd.ttft_fetch_s = sum(self.ready_t[i] - fs[i] for i in ids if i in fs) / n
        bd.ttft_first_step_s = max(0.0, sum(ttft) / n - bd.ttft_admission_wait_s - bd.ttft_prefill_s
                                   - bd.ttft_fetch_queue_s - bd.ttft_fetch_s)
        bd.pool_bytes_per_token = self.pool_bytes / max(1, self.tok_total)
        bd.nic_bytes_per_request = self.nic_bytes / max(1, n)
        return RunResult(ttft, tbt, thr, makespan, self.g, bd)


def _nic_time(sc: Scenario, nbytes: float) -> float:
    """One request's transfer on one NIC: line rate plus the per-message cost of its chunks."""
    msgs = math.ceil(nbytes / sc.nic_chunk_bytes)
    return nbytes / sc.nic_bytes_per_s + msgs * sc.nic_per_message_s
