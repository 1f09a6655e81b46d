"""The authors' benchmark and server loop, step by step: what ``e2e_bench`` measures on SGLang.

Where each mechanism comes from (github magicYang1573/sglang, branch
``hisparse-cxl-prefix-cache-opt-rdma``; docs/sources.md, field notes §3):

* **Client** (``test/cxl_utils/e2e_bench.py`` ``run_round``, driven by ``e2e_bench_fast.py``):
  request rate 0 and a semaphore of ``concurrency``: the first ``concurrency`` POSTs leave in one
  burst at t = 0, each completion releases the next; a run set sends ``requests`` requests.
  Throughput = output tokens / the round's duration (first POST to last completion); TTFT = first
  non-empty streamed chunk after the POST; TBT = mean inter-chunk gap (``tbt_mean_ms`` over all
  gaps), i.e. (last chunk − first chunk) / (tokens − 1) per request.
* **Front-end** (``managers/tokenizer_manager.py``): each POST is tokenized synchronously inside
  the server's asyncio loop (``self.tokenizer(...)`` in ``_tokenize_texts``), one at a time, at a
  per-prompt-token cost. While the loop is busy with that backlog it does not forward outputs:
  a chunk that is ready waits until the loop goes idle (the end of the busy period) and all waiting
  chunks then go out at once. Tokenized requests go to the DP ranks round robin.
* **Scheduler loop per rank, ranks in lockstep** (``--dp-size 8 --enable-dp-attention``): each
  iteration a rank takes the requests it has received, then (RDMA pool only) runs
  ``HiSparseCoordinator.collect_ready_reqs``, which fetches the full prefix of *every* request
  whose staging finished, one after the other, synchronously
  (``rdma_memory_pool.py`` ``_prefetch_for_decode_single``: NIC read + three CPU passes), then
  joins the forward of all ranks (the MoE collectives): the forward starts when the slowest rank
  arrives. A rank with new requests runs an extend (prefill of the uncached tail) — its first
  token comes out of that extend, *before* the prefetch — else a decode step of its running
  requests. Requests received during a stall wait for the next iteration.
* **Decode step** of a rank: the engine's step model (``engine._step_time``: GPU compute, the
  HiSparse path's per-step cost at the rank's batch, swap-in of hot-buffer misses over the
  shared links); the global step lasts as long as the slowest decoding rank or the extend.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from sactool.simulate.engine import Breakdown, RunResult, Scenario, _nic_time, _step_time, misses_of
from sactool.hisparse.cost import fetch_bytes_per_token, rdma_full_prefix_bytes


FIRST, FINISH = 0, 1


@dataclass
class _Launched:
    """A forward on the GPU whose results the scheduler processes one iteration later."""
    ext: dict[int, list[int]]            # rank -> requests it extends (first tokens)
    end: float                           # when the GPU finishes it
    done: list[tuple[int, float | None]]  # finishing requests: (request, own step end inside a block)


@dataclass(frozen=True)
class HarnessInputs:
    frontend_s: float          # tokenization time of one request (per-prompt-token time × context)
    extend_s: float            # one extend forward (first token of the requests it takes)


def run_harness(sc: Scenario, hx: HarnessInputs) -> RunResult:
    """Simulate one run set of ``sc.requests`` requests under the benchmark's client semantics."""
    return _Harness(sc, hx).run()


class _Harness:
    """State of one run set; each scheduler iteration runs the stages in order: front-end
    deliveries, receive, fetch phase (RDMA), batches, one forward (or several identical decode
    steps at once), its tokens."""

    def __init__(self, sc: Scenario, hx: HarnessInputs) -> None:
        self.sc, self.hx = sc, hx
        R = sc.ranks
        self.kv_bytes = rdma_full_prefix_bytes(sc.context, sc.record_bytes, sc.layers)
        self.misses = misses_of(sc)
        self.table = list(self.misses.per_step)
        self.rdma = sc.placement == "rdma"
        self.conv = ((self.kv_bytes / sc.conversion_bytes_per_s if sc.conversion_bytes_per_s else 0.0)
                     + sc.fetch_fixed_s) if self.rdma else 0.0
        # per request: POST, tokenized, extend start/end, first and last chunk out, waits
        self.post_t: dict[int, float] = {}
        self.tok_t: dict[int, float] = {}
        self.ext_start: dict[int, float] = {}
        self.ext_end: dict[int, float] = {}
        self.first_t: dict[int, float] = {}
        self.fin_t: dict[int, float] = {}
        self.fetch_wait: dict[int, float] = {}
        self.done_t: dict[int, float] = {}              # its extend processed: first token out of the scheduler
        self.admit_wait: dict[int, float] = {}
        self.capped: set[int] = set()
        self.issued = 0
        self.fe_free = 0.0                              # the front-end loop is busy until then
        self.tokenized: list[tuple[float, int]] = []    # heap (done, request)
        self.n_tokenized = 0
        self.inbox: list[list[int]] = [[] for _ in range(R)]
        self.unfetched: list[list[int]] = [[] for _ in range(R)]
        self.running: list[list[int]] = [[] for _ in range(R)]
        self.age: dict[int, int] = {}                   # decode steps done (cold-buffer misses)
        self.made: dict[int, int] = {}                  # tokens produced
        self.pending: list[tuple[float, int, int]] = []  # heap (ready, FIRST|FINISH, request)
        self.nic_free = [0.0] * max(1, sc.nics)
        self.sums = [0.0] * 5                           # compute, overhead, swapin, fetch stall, extend stall
        self.tok_total = 0
        self.dec_total = 0                              # decode-step tokens (what TBT is made of)
        self.pool_bytes = 0.0
        self.comp_cache: dict[int, float] = {}
        self.pend: _Launched | None = None              # launched, its results not processed yet

    # ---- client and front-end ------------------------------------------------------------
    def post(self, t: float) -> None:
        i = self.issued
        self.issued += 1
        self.post_t[i] = t
        self.fe_free = max(t, self.fe_free) + self.hx.frontend_s
        heapq.heappush(self.tokenized, (self.fe_free, i))

    def deliver(self, batch, t: float) -> None:
        """Chunks that go out together at ``t``; the POSTs they release come after all of them."""
        done = 0
        for _, kind, i in batch:
            if kind == FIRST:
                self.first_t[i] = t
            else:
                self.fin_t[i] = t
                done += 1
        for _ in range(done):
            if self.issued < self.sc.requests:
                self.post(t)

    def frontend(self, T: float) -> None:
        """Deliver ready chunks up to time T: at once when the loop is idle, else when it goes idle."""
        pending = self.pending
        while pending and pending[0][0] <= T + 1e-12:
            x = pending[0][0]
            if x >= self.fe_free - 1e-12:
                d = x               # idle loop: out now, with everything ready at the same moment
            elif self.fe_free > T + 1e-12:
                return              # the loop is still busy at T: the backlog may still grow
            else:
                d = self.fe_free    # out when the loop goes idle, all waiting chunks at once
            batch = []
            while pending and pending[0][0] <= d + 1e-12:
                batch.append(heapq.heappop(pending))
            self.deliver(batch, d)

    def next_event_after(self, T: float) -> float:
        cand = []
        if self.tokenized:
            cand.append(self.tokenized[0][0])
        if self.pending:
            cand.append(max(self.pending[0][0], self.fe_free))
        cand = [x for x in cand if x > T + 1e-12]
        return min(cand) if cand else math.inf

    def receive(self, T: float) -> None:
        """Tokenized requests reach the DP ranks round robin."""
        while self.tokenized and self.tokenized[0][0] <= T + 1e-12:
            d, i = heapq.heappop(self.tokenized)
            self.tok_t[i] = d
            self.inbox[self.n_tokenized % self.sc.ranks].append(i)
            self.n_tokenized += 1

    # ---- scheduler -----------------------------------------------------------------------
    def fetch_phase(self, T: float) -> float:
        """Every rank fetches all its extended requests, one after the other; a NIC serves the
        ranks mapped to it (rank % nics) in the order their reads are posted. Returns when the
        slowest rank joins the forward."""
        sc, R = self.sc, self.sc.ranks
        ready = [T] * R
        n_run_before = sum(len(x) for x in self.running)
        asks = [(T, r, 0) for r in range(R) if self.unfetched[r]]
        fetched = [i for r in range(R) for i in self.unfetched[r]]
        heapq.heapify(asks)
        while asks:
            at, r, j = heapq.heappop(asks)
            n = r % max(1, sc.nics)
            i = self.unfetched[r][j]
            end = max(at, self.nic_free[n]) + _nic_time(sc, self.kv_bytes)
            self.nic_free[n] = end
            ready[r] = end + self.conv
            self.fetch_wait[i] = ready[r] - self.done_t[i]
            self.running[r].append(i)
            self.age[i] = 0
            if j + 1 < len(self.unfetched[r]):
                heapq.heappush(asks, (ready[r], r, j + 1))
        self.unfetched = [[] for _ in range(R)]
        F = max(ready)
        self.sums[3] += (F - T) * n_run_before
        for i in fetched:     # from its first token (the extend processed) to its first decode step
            self.sums[3] += F - self.done_t[i]
        return F

    def batches(self, T: float) -> tuple[dict[int, list[int]], list[int]]:
        """Requests received at T extend (while the KV capacity admits them); the others decode."""
        ext: dict[int, list[int]] = {}
        resident = (sum(len(x) for x in self.running) + sum(len(x) for x in self.unfetched)
                    + (sum(len(x) for x in self.pend.ext.values()) if self.pend else 0))
        for r in range(self.sc.ranks):
            take = []
            while self.inbox[r] and resident < self.sc.limit:
                take.append(self.inbox[r].pop(0))
                resident += 1
            self.capped.update(self.inbox[r])
            if take:
                ext[r] = take
                for i in take:
                    if i in self.capped:
                        self.admit_wait[i] = T - self.tok_t[i]
        return ext, [r for r in range(self.sc.ranks) if self.running[r] and r not in ext]

    def decode_step(self, dec: list[int]):
        """(step, compute, overhead, swap-in, per-rank counts, summed misses, any cold request)."""
        R, W, steady = self.sc.ranks, len(self.table), self.misses.steady
        counts, rec, mx = [0] * R, [0.0] * R, [0.0] * R
        warm = False
        for r in dec:
            for i in self.running[r]:
                a = self.age[i]
                m = self.table[a] if a < W else steady
                warm = warm or a < W
                counts[r] += 1
                rec[r] += m
                mx[r] = max(mx[r], m)
        dt = comp = ovh = swap = 0.0
        if dec:
            dt, comp, ovh, swap = _step_time(self.sc, counts, rec, mx, [], self.comp_cache)
        return dt, comp, ovh, swap, counts, rec, warm

    def launch(self, ext, dec, G: float, D: float, k: int) -> _Launched:
        """Put a forward on the GPU from ``G``: ``k`` decode steps of the decoding ranks, or one
        extend. The tokens exist now (the next batch is built on them); they come out when the
        scheduler processes this batch, one iteration later (``complete``)."""
        E, out = G + D * k, self.sc.output_tokens
        for reqs in ext.values():
            for i in reqs:
                self.ext_start[i], self.ext_end[i] = G, E
                self.made[i] = 1
                self.tok_total += 1
        done: list[tuple[int, float | None]] = []
        for r in dec:
            keep = []
            for i in self.running[r]:
                self.made[i] += k
                self.age[i] += k
                if self.made[i] >= out:
                    over = self.made[i] - out
                    done.append((i, G + D * (k - over) if over else None))
                else:
                    keep.append(i)
            self.running[r] = keep
        return _Launched(ext, E, done)

    def complete(self, b: _Launched, t: float) -> None:
        """The scheduler processes a launched batch at ``t`` (not before the GPU finished it): its
        tokens go to the front-end; its extended requests enter staging, so an RDMA rank fetches
        them in its next iteration and a SAC/DRAM rank decodes them from its next batch."""
        out = self.sc.output_tokens
        for r, reqs in b.ext.items():
            for i in reqs:
                self.done_t[i] = t
                heapq.heappush(self.pending, (t, FIRST, i))
                if out == 1:
                    heapq.heappush(self.pending, (t, FINISH, i))
                elif self.rdma:
                    self.unfetched[r].append(i)
                else:
                    self.running[r].append(i)
                    self.age[i] = 0
        for i, own in b.done:
            heapq.heappush(self.pending, (own if own is not None else t, FINISH, i))

    def iteration(self, T: float) -> float:
        """One iteration of SGLang's overlap scheduler (``event_loop_overlap``; the authors' runs
        leave ``disable_overlap_schedule=False``) from T: receive, fetch (RDMA), build and launch
        the next batch, then process the previous one. Returns when the next iteration starts:
        right after processing the previous batch, i.e. while the one just launched still runs."""
        self.frontend(T)
        self.receive(T)
        F = self.fetch_phase(T)
        ext, dec = self.batches(T)
        pend = self.pend
        if not ext and not dec:
            if pend is not None:           # nothing new to launch: wait for the GPU, process it
                t = max(F, pend.end)
                self.complete(pend, t)
                self.pend = None
                return t
            nxt = self.next_event_after(F)
            return F if F > T else nxt
        dt, comp, ovh, swap, counts, rec, warm = self.decode_step(dec)
        D = max(dt, self.hx.extend_s if ext else 0.0)
        k = 1      # identical decode steps can be taken at once until the next event
        if (not ext and not warm and F == T and not any(self.inbox)
                and (pend is None or not pend.ext)):
            k = max(1, min(self.sc.output_tokens - self.made[i] for r in dec for i in self.running[r]))
            nxt = self.next_event_after(T)
            if not math.isinf(nxt):
                k = max(1, min(k, math.ceil((nxt - T) / dt)))
        n_dec = sum(counts)
        if dec:
            s = self.sums
            s[0] += comp * n_dec * k
            s[1] += ovh * n_dec * k
            s[2] += swap * n_dec * k
            s[4] += (D - dt) * n_dec
            self.pool_bytes += fetch_bytes_per_token(sum(rec), self.sc.record_bytes, self.sc.layers) * k
            self.tok_total += n_dec * k
            self.dec_total += n_dec * k
        for r in ext:   # running requests of an extending rank do not decode this iteration
            self.sums[4] += D * len(self.running[r])
        G = max(F, pend.end) if pend is not None else F     # the GPU takes it when it is free
        launched = self.launch(ext, dec, G, D, k)
        t = G if pend is not None else F                   # process the previous batch
        if pend is not None:
            self.complete(pend, t)
        self.pend = launched
        return t

    def run(self) -> RunResult:
        for _ in range(min(self.sc.concurrency, self.sc.requests)):
            self.post(0.0)
        T = 0.0
        while len(self.fin_t) < self.sc.requests:
            T = self.iteration(T)
            if math.isinf(T):     # pragma: no cover - nothing can happen any more
                break
        return self.result()

    def result(self) -> RunResult:
        out, N = self.sc.output_tokens, self.sc.requests
        ids = sorted(self.fin_t)
        ttft = [self.first_t[i] - self.post_t[i] for i in ids]
        tbt = [(self.fin_t[i] - self.first_t[i]) / max(1, out - 1) for i in ids]
        makespan = max(self.fin_t.values())
        n, tt = len(ids), max(1, self.dec_total)
        bd = Breakdown()
        bd.compute_s, bd.overhead_s, bd.swapin_s, bd.stall_s = (s / tt for s in self.sums[:4])
        bd.extend_stall_s = self.sums[4] / tt
        bd.ttft_frontend_s = sum(self.tok_t[i] - self.post_t[i] for i in ids) / n
        bd.ttft_admission_wait_s = sum(self.admit_wait.values()) / n
        bd.ttft_lockstep_wait_s = sum(self.ext_start[i] - self.tok_t[i] - self.admit_wait.get(i, 0.0)
                                      for i in ids) / n
        bd.ttft_extend_s = sum(self.ext_end[i] - self.ext_start[i] for i in ids) / n
        bd.ttft_delivery_s = sum(self.first_t[i] - self.ext_end[i] for i in ids) / n
        bd.fetch_after_first_token_s = sum(self.fetch_wait.values()) / n if self.fetch_wait else 0.0
        bd.pool_bytes_per_token = self.pool_bytes / max(1, self.tok_total)
        bd.nic_bytes_per_request = self.kv_bytes if self.rdma else 0.0
        c = min(self.sc.concurrency, n)
        bd.first_wave_ttft_s = sum(ttft[:c]) / c
        bd.later_ttft_s = sum(ttft[c:]) / (n - c) if n > c else 0.0
        return RunResult(ttft, tbt, N * out / makespan if makespan > 0 else 0.0, makespan, 0, bd)
