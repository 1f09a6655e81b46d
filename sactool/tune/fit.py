"""What fits one rank at each context: the GPU budget, the pool partition, the placements, and
the design point tune searches at (``--concurrency``, or SAC's 64 where the longest context holds it).
"""

from __future__ import annotations

from typing import Any

from sactool.errors import CapacityError
from sactool.hisparse.capacity import (Deployment, max_requests_per_rank, min_ratio, pool_bytes_needed,
                                      rank_sizing)
from sactool.pool.rankplan import candidates as placement_candidates
from sactool.pool.rankplan import pool_bytes_per_rank, round_robin
from sactool.records import warning
from sactool.tune.options import SAC_CONCURRENCY
from sactool.units import format_bytes as _gib


class Fit:
    """What fits one rank at each context: GPU budget, pool partition, placements."""

    def __init__(self, job: Any, budget, pool):
        self.job, self.budget, self.pool = job, budget, pool
        o, spec = job.o, job.spec
        self.dep = Deployment(o.tp, job.attn_dp)
        self.names = [t.name for t in pool.targets]
        self.gpu_nodes = tuple(pool.gpu_nodes[:o.tp]) if len(pool.gpu_nodes) >= o.tp else ()
        self.placements = placement_candidates(o.tp, self.names, rank_nodes=self.gpu_nodes,
                                               target_nodes={t.name: t.cpu_node for t in pool.targets})
        self.part = pool_bytes_per_rank(round_robin(o.tp, self.names), pool.targets)
        self.cap_kw = dict(gpu_budget_bytes=budget.bytes_per_gpu, pool_bytes_per_rank=self.part,
                           layers=spec.num_layers, record_bytes=job.rec_bytes, indexer_bytes=spec.indexer_bytes)
        self.max_req: dict[int, int] = {}

    def requests(self, ctx: int) -> int:
        """Most requests of ``ctx`` tokens one rank holds with top_k-slot hot buffers."""
        if ctx not in self.max_req:
            self.max_req[ctx] = max_requests_per_rank(self.job.spec.index_topk, ctx, **self.cap_kw)
        return self.max_req[ctx]

    def no_fit(self, conc: int, ctx: int) -> CapacityError:
        job, dep, spec, top_k = self.job, self.dep, self.job.spec, self.job.spec.index_topk
        layers, rec = spec.num_layers, job.rec_bytes
        need = pool_bytes_needed(conc, ctx, dep, layers=layers, record_bytes=rec)
        req = dep.requests_per_rank(conc)
        gpu_need = rank_sizing(req, top_k, min_ratio(req, top_k, ctx), layers=layers, record_bytes=rec,
                             indexer_bytes=spec.indexer_bytes).gpu_bytes
        rep = f" x {dep.replication} TP copies" if dep.replication > 1 else ""
        total_cap = sum(t.capacity_bytes for t in self.pool.targets)
        if self.requests(ctx) == 0:   # not "at most 0 such requests fit": say what one request lacks
            from sactool.hisparse.capacity import fits

            one = rank_sizing(1, top_k, min_ratio(1, top_k, ctx), layers=layers, record_bytes=rec,
                            indexer_bytes=spec.indexer_bytes)
            why = fits(one, gpu_budget_bytes=self.budget.bytes_per_gpu, pool_bytes_per_rank=self.part)
            return CapacityError(f"not one request of {ctx} tokens fits per rank with top_k-slot hot buffers: "
                                 + "; ".join(why) + f" ({', '.join(self.names)})",
                                 "lower --context, add pool memory, or raise the GPU budget")
        return CapacityError(
            f"{conc} requests of {ctx} tokens need {_gib(need)} of pool memory ({spec.kv_bytes_per_token(job.kv)} B "
            f"per token{rep}; {_gib(need / job.o.tp)} per rank) and {_gib(gpu_need)} of GPU memory per rank; the "
            f"pool has {_gib(total_cap)} ({', '.join(self.names)}; {_gib(self.part)} per rank) and the GPU budget "
            f"is {_gib(self.budget.bytes_per_gpu)}; at most {job.attn_dp * self.requests(ctx)} such requests fit",
            "lower --concurrency or --context, add pool memory"
            + (", or use DP attention (--attn-dp = --tp): plain TP keeps a copy of each request's KV per rank"
               if job.attn_dp != job.o.tp else ", or raise the GPU budget"))

    def design_point(self, contexts, warnings: list) -> tuple[tuple[int, ...], int]:
        """(design contexts, concurrency): ``--concurrency`` must fit every context; auto takes the
        contexts that hold one request per rank and SAC's 64, or what the longest of them holds."""
        attn_dp = self.job.attn_dp
        for c in contexts:
            self.requests(c)
        if self.job.o.concurrency is not None:
            concurrency = self.job.o.concurrency
            for c in contexts:
                if self.requests(c) < self.dep.requests_per_rank(concurrency):
                    raise self.no_fit(concurrency, c)
            return contexts, concurrency
        design = tuple(c for c in contexts if self.requests(c) >= 1)
        if not design:
            raise self.no_fit(attn_dp, contexts[0])
        concurrency = min(SAC_CONCURRENCY, attn_dp * self.requests(max(design)))
        for c in contexts:
            if c not in design:
                warnings.append(warning("context_does_not_fit", str(self.no_fit(attn_dp, c).message),
                                        "the profile's context_length stops below it"))
        if concurrency < SAC_CONCURRENCY:
            warnings.append(warning("concurrency_lowered", f"design concurrency {concurrency}: "
                                    f"the pool holds no more at {max(design)} tokens (SAC's 64 would not fit)",
                                    "give --concurrency to choose another design point"))
        return design, concurrency


__all__ = ["Fit"]
