"""The authors' benchmark and server loop, step by step: what ``e2e_bench`` measures on SGLang.

Where each mechanism comes from (github magicYang1573/sglang, branch
``hisparse-cxl-prefix-cache-opt-rdma``; shared/reference/field-notes-2026-12.md §3):

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

from sactool.simulate.engine import Breakdown, RunResult, Scenario, _nic_time, _step_time
from sactool.hisparse.cost import fetch_bytes_per_token, rdma_full_prefix_bytes


FIRST, FINISH = 0, 1


@dataclass(frozen=True)
class HarnessInputs:
    frontend_s: float          # tokenization time of one request (per-prompt-token time × context)
    extend_s: float            # one extend forward (first token of the requests it takes)


def run_harness(sc: Scenario, hx: HarnessInputs) -> RunResult:
    """Simulate one run set of ``sc.requests`` requests under the benchmark's client semantics."""
    R, c, N, out = sc.ranks, sc.concurrency, sc.requests, sc.output_tokens
    kv_bytes = rdma_full_prefix_bytes(sc.context, sc.record_bytes, sc.layers)
    prof = sc.misses
    table = list(prof.per_step)
    W = len(table)
    steady = prof.steady
    rdma = sc.placement == "rdma"
    conv = kv_bytes / sc.conversion_bytes_per_s if (rdma and sc.conversion_bytes_per_s) else 0.0

    post_t: dict[int, float] = {}
    tok_t: dict[int, float] = {}
    ext_start: dict[int, float] = {}
    ext_end: dict[int, float] = {}
    first_t: dict[int, float] = {}
    fin_ready: dict[int, float] = {}
    fin_t: dict[int, float] = {}
    fetch_wait: dict[int, float] = {}
    admit_wait: dict[int, float] = {}
    capped: set[int] = set()
    issued = 0
    fe_free = 0.0
    tokenized: list[tuple[float, int]] = []        # heap (done, request)
    n_tokenized = 0
    rank_of: dict[int, int] = {}
    inbox: list[list[int]] = [[] for _ in range(R)]
    unfetched: list[list[int]] = [[] for _ in range(R)]
    running: list[list[int]] = [[] for _ in range(R)]
    age: dict[int, int] = {}                        # decode steps done (for the cold-buffer misses)
    made: dict[int, int] = {}                       # tokens produced
    pending: list[tuple[float, int, int]] = []      # heap (ready, FIRST|FINISH, request): firsts go out first
    nic_free = [0.0] * max(1, sc.nics)
    bd = Breakdown()
    sums = [0.0] * 5                                # compute, overhead, swapin, fetch stall, extend stall
    tok_total = 0
    dec_total = 0                                   # decode-step tokens (what TBT is made of)
    pool_bytes = 0.0
    comp_cache: dict[int, float] = {}

    def post(t: float) -> None:
        nonlocal issued, fe_free
        i = issued
        issued += 1
        post_t[i] = t
        fe_free = max(t, fe_free) + hx.frontend_s
        heapq.heappush(tokenized, (fe_free, i))

    def deliver(batch, t: float) -> None:
        """Chunks that go out together at ``t``; the POSTs they release come after all of them."""
        done = 0
        for _, kind, i in batch:
            if kind == FIRST:
                first_t[i] = t
            else:
                fin_t[i] = t
                done += 1
        for _ in range(done):
            if issued < N:
                post(t)

    def frontend(T: float) -> None:
        """Deliver ready chunks up to time T: at once when the loop is idle, else when it goes idle."""
        while pending and pending[0][0] <= T + 1e-12:
            x = pending[0][0]
            if x >= fe_free - 1e-12:
                d = x               # idle loop: out now, with everything ready at the same moment
            elif fe_free > T + 1e-12:
                return              # the loop is still busy at T: the backlog may still grow
            else:
                d = fe_free         # out when the loop goes idle, all waiting chunks at once
            batch = []
            while pending and pending[0][0] <= d + 1e-12:
                batch.append(heapq.heappop(pending))
            deliver(batch, d)

    def next_event_after(T: float) -> float:
        cand = []
        if tokenized:
            cand.append(tokenized[0][0])
        if pending:
            cand.append(max(pending[0][0], fe_free))
        cand = [x for x in cand if x > T + 1e-12]
        return min(cand) if cand else math.inf

    for _ in range(min(c, N)):
        post(0.0)
    T = 0.0
    while len(fin_t) < N:
        frontend(T)
        while tokenized and tokenized[0][0] <= T + 1e-12:
            d, i = heapq.heappop(tokenized)
            tok_t[i] = d
            r = n_tokenized % R
            n_tokenized += 1
            rank_of[i] = r
            inbox[r].append(i)
        # 1. fetch phase (RDMA): every rank fetches all its extended requests, one after the other
        ready = [T] * R
        n_run_before = sum(len(x) for x in running)
        # each rank's fetches run one after the other; a NIC serves the ranks mapped to it
        # (rank % nics) in the order their reads are posted
        asks = [(T, r, 0) for r in range(R) if unfetched[r]]
        fetched = [i for r in range(R) for i in unfetched[r]]
        heapq.heapify(asks)
        while asks:
            at, r, j = heapq.heappop(asks)
            n = r % max(1, sc.nics)
            i = unfetched[r][j]
            start = max(at, nic_free[n])
            end = start + _nic_time(sc, kv_bytes)
            nic_free[n] = end
            ready[r] = end + conv
            fetch_wait[i] = ready[r] - ext_end[i]
            running[r].append(i)
            age[i] = 0
            if j + 1 < len(unfetched[r]):
                heapq.heappush(asks, (ready[r], r, j + 1))
        for r in range(R):
            unfetched[r] = []
        F = max(ready)
        sums[3] += (F - T) * n_run_before
        for i in fetched:     # from its first token (the extend) to its first decode step
            sums[3] += F - ext_end[i]
        # 2. batches: requests received at T extend (while the KV capacity admits them); the others decode
        ext = {}
        resident = sum(len(x) for x in running) + sum(len(x) for x in unfetched)
        for r in range(R):
            take = []
            while inbox[r] and resident < sc.limit:
                i = inbox[r].pop(0)
                take.append(i)
                resident += 1
            for i in inbox[r]:
                capped.add(i)
            if take:
                ext[r] = take
                for i in take:
                    if i in capped:
                        admit_wait[i] = T - tok_t[i]
        dec = [r for r in range(R) if running[r] and r not in ext]
        if not ext and not dec:
            nxt = next_event_after(F)
            if F > T:
                T = F
                continue
            if math.isinf(nxt):     # pragma: no cover - nothing can happen any more
                break
            T = nxt
            continue
        counts = [0] * R
        rec = [0.0] * R
        mx = [0.0] * R
        warm = False
        for r in dec:
            for i in running[r]:
                a = age[i]
                m = table[a] if a < W else steady
                warm = warm or a < W
                counts[r] += 1
                rec[r] += m
                if m > mx[r]:
                    mx[r] = m
        dt = comp = ovh = swap = 0.0
        if dec:
            dt, comp, ovh, swap = _step_time(sc, counts, rec, mx, [], comp_cache)
        D = max(dt, hx.extend_s if ext else 0.0)
        # identical decode steps can be taken at once until the next event
        k = 1
        if not ext and not warm and F == T and not any(unfetched) and not any(inbox):
            left = min(out - made[i] for r in dec for i in running[r])
            k = max(1, left)
            nxt = next_event_after(T)
            if not math.isinf(nxt):
                k = max(1, min(k, math.ceil((nxt - T) / dt)))
        E = F + D * k
        n_dec = sum(counts)
        if dec:
            sums[0] += comp * n_dec * k
            sums[1] += ovh * n_dec * k
            sums[2] += swap * n_dec * k
            sums[4] += (D - dt) * n_dec
            pool_bytes += fetch_bytes_per_token(sum(rec), sc.record_bytes, sc.layers) * k
            tok_total += n_dec * k
            dec_total += n_dec * k
        for r in ext:   # running requests of an extending rank do not decode this iteration
            sums[4] += D * len(running[r])
        for r, reqs in ext.items():
            for i in reqs:
                ext_start[i], ext_end[i] = F, E
                made[i] = 1
                tok_total += 1
                heapq.heappush(pending, (E, FIRST, i))
                if out == 1:
                    fin_ready[i] = E
                    heapq.heappush(pending, (E, FINISH, i))
                elif rdma:
                    unfetched[r].append(i)
                else:
                    running[r].append(i)
                    age[i] = 0
        for r in dec:
            keep = []
            for i in running[r]:
                made[i] += k
                age[i] += k
                if made[i] >= out:
                    t_done = F + D * (k - (made[i] - out))
                    fin_ready[i] = t_done
                    heapq.heappush(pending, (t_done, FINISH, i))
                else:
                    keep.append(i)
            running[r] = keep
        T = E
        # deliveries that fall inside a fast-forwarded stretch go out at their own time
    ids = sorted(fin_t)
    ttft = [first_t[i] - post_t[i] for i in ids]
    tbt = [(fin_t[i] - first_t[i]) / max(1, out - 1) for i in ids]
    makespan = max(fin_t.values())
    thr = N * out / makespan if makespan > 0 else 0.0
    n = len(ids)
    tt = max(1, dec_total)
    bd.compute_s, bd.overhead_s, bd.swapin_s, bd.stall_s = (s / tt for s in sums[:4])
    bd.extend_stall_s = sums[4] / tt
    bd.ttft_frontend_s = sum(tok_t[i] - post_t[i] for i in ids) / n
    bd.ttft_admission_wait_s = sum(admit_wait.values()) / n
    bd.ttft_lockstep_wait_s = sum(ext_start[i] - tok_t[i] - admit_wait.get(i, 0.0) for i in ids) / n
    bd.ttft_extend_s = sum(ext_end[i] - ext_start[i] for i in ids) / n
    bd.ttft_delivery_s = sum(first_t[i] - ext_end[i] for i in ids) / n
    bd.fetch_after_first_token_s = sum(fetch_wait.values()) / n if fetch_wait else 0.0
    bd.pool_bytes_per_token = pool_bytes / max(1, tok_total)
    bd.nic_bytes_per_request = kv_bytes if rdma else 0.0
    return RunResult(ttft, tbt, thr, makespan, 0, bd)
