"""Tune's hot-buffer stage: misses and hit rates per design context, workload replicate and buffer
size, each simulated once (LRU replay, :mod:`sactool.hisparse.hotbuffer`), resumed from the points
file and shared across a fleet's hosts through :class:`sactool.tune.simcache.HotBufferCache`.
"""

from __future__ import annotations

from typing import Any

from sactool.tune.points import PointsStore

OUTPUT_TOKENS = 1024
"""Output length the cold first step is amortised over: SAC's Round-2 output, fixed at 1024
tokens (docs/sources.md, SAC §3 "Round-2 output fixed at 1024")."""


def misses_per_token(misses, output_tokens: int = OUTPUT_TOKENS) -> float:
    """Mean missed records per step per layer over a request's output.

    ``misses``: int [steps, layers] from the LRU simulation; step 0 fills the hot buffer from its
    initial contents (docs/sources.md, SGLang §2.3 step 3). The first step is paid once per request,
    the steady state (mean of the later steps) on every other generated token.
    """
    first = float(misses[0].mean())
    steady = float(misses[1:].mean()) if misses.shape[0] > 1 else first
    return (first + steady * (output_tokens - 1)) / output_tokens


class HotBufferRuns:
    """Misses and hit rates per context, replicate and buffer size, simulated once each."""

    def __init__(self, job: Any, design, replicates: int, trace, points: PointsStore, model_wl):
        self.job, self.design, self.replicates, self.trace, self.points = job, design, replicates, trace, points
        self.counts = {"run": 0, "reused": 0}   # simulation passes: run here, answered by a shared cache
        self.model_wl = model_wl                # workload.layers.ModelWorkload
        self.misses: dict[int, list[dict[int, float]]] = {c: [{} for _ in range(replicates)] for c in design}
        self.hits: dict[int, list[dict[int, float]]] = {c: [{} for _ in range(replicates)] for c in design}
        for p in points.of_kind("sim"):
            if p["context"] in self.misses and p["rep"] < replicates:
                for b, (m, h) in p["buffers"].items():
                    self.misses[p["context"]][p["rep"]][int(b)] = m
                    self.hits[p["context"]][p["rep"]][int(b)] = h

    def _indices(self, ctx: int, rep: int):
        if self.trace is not None:
            return self.trace.indices
        o = self.job.o
        return self.model_wl.generate(ctx, o.steps, seed=o.seed + rep)

    def _count(self, cache, run: list[int], got: dict) -> None:
        """Simulation passes run here and passes answered by the cache (another host's)."""
        self.counts["run" if run else "reused"] += 1
        if cache is not None:
            cache.runs += bool(run)
            cache.reused += not run
            cache.buffers_run += len(run)
            cache.buffers_reused += len(got)

    def simulate(self, buffers: list[int], label: str) -> None:
        import numpy as np

        from sactool.hisparse.hotbuffer import simulate_many

        top_k, progress = self.job.spec.index_topk, self.job.progress
        todo = [(c, r) for c in self.design for r in range(self.replicates)
                if any(b not in self.misses[c][r] for b in buffers)]
        cache = self.job.o.hotbuffer_cache   # tune --fleet: shared by its hosts (tune/simcache.py)
        for i, (c, r) in enumerate(todo):
            want = [b for b in buffers if b not in self.misses[c][r]]
            idx, kw = self._indices(c, r), {"context_tokens": c}   # the simulation's inputs besides the sizes
            key = cache.key(idx, kw) if cache is not None else None
            got = cache.get(key, want) if cache is not None else {}
            run = [b for b in want if b not in got]
            new = {}
            for b, hb in zip(run, simulate_many(idx, run, **kw) if run else ()):
                m = misses_per_token(np.asarray(hb.misses))
                new[b] = (m, 1.0 - m / top_k)
            self._count(cache, run, got)
            if cache is not None:
                cache.put(key, new)
            pt = {}
            for b, (m, h) in {**got, **new}.items():
                pt[str(b)] = [m, h]
                self.misses[c][r][b], self.hits[c][r][b] = m, h
            self.points.add({"kind": "sim", "context": c, "rep": r, "buffers": pt})
            if progress:
                progress(label, i + 1, len(todo))


__all__ = ["HotBufferRuns", "OUTPUT_TOKENS", "misses_per_token"]
