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

from dataclasses import dataclass, field, replace
from typing import Any

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


def params_at(per: dict[int, FillerParams], ctx: int) -> FillerParams:
    """A context's parameters: the fitted ones, else flicker slots and free pool (pool − flicker)
    linear in context between the fitted contexts, the nearest one's outside."""
    if ctx in per:
        return per[ctx]
    cs = sorted(per)
    if ctx <= cs[0]:
        return per[cs[0]]
    if ctx >= cs[-1]:
        return per[cs[-1]]
    for c0, c1 in zip(cs, cs[1:]):
        if ctx <= c1:
            a, b = per[c0], per[c1]
            w = (ctx - c0) / (c1 - c0)
            f = round(a.flicker_tokens + w * (b.flicker_tokens - a.flicker_tokens))
            ga, gb = a.pool_tokens - a.flicker_tokens, b.pool_tokens - b.flicker_tokens
            return replace(a, flicker_tokens=int(f), pool_tokens=int(round(ga + w * (gb - ga) + f)))
    return per[cs[-1]]  # pragma: no cover


REPLAY_LAYERS = 4
"""Layers generated for a replay: the filler model's layers are statistically alike (one seeded stream each)."""


@dataclass(frozen=True)
class FillerWorkload:
    """A named filler workload (``sactool/data/workloads/<name>.yaml``): what ``tune --workload`` and
    a platform's ``workload.filler`` take; ``generate`` has the interface of
    ``workload.layers.ModelWorkload``."""

    name: str
    per_context: dict = field(default_factory=dict)    # context -> FillerParams
    statistics: str = ""
    fitted_with_kernel: str = ""
    path: str = ""
    top_k: int = 2048
    layer_targets: None = None

    def generate(self, context_tokens: int, steps: int, *, seed: int = 0) -> np.ndarray:
        return generate_filler(context_tokens, steps, REPLAY_LAYERS, self.top_k,
                               params_at(self.per_context, context_tokens), seed=seed)

    def to_data(self) -> dict[str, Any]:
        return {"source": "model", "name": self.name, "generator": "sactool.workload.filler.generate_filler",
                "statistics": self.statistics, "targets": self.path,
                "detail": (f"the SAC runs' filler prompt: near-tie pool and flicker rate per context fitted to "
                           f"their calibrated misses (with the {self.fitted_with_kernel} kernel), "
                           f"{REPLAY_LAYERS} layers replayed"),
                "assumptions": "dwell_steps and window_tokens are structural, not fitted; misses at buffer sizes "
                               "other than 4096 and 6144 are the model's"}


def read_params(blk: dict, where: str) -> dict[int, FillerParams]:
    """``{context: FillerParams}`` from a workload file's or a platform's block."""
    def num(key, kind):
        v = blk.get(key)
        if isinstance(v, bool) or not isinstance(v, kind) or v <= 0:
            raise UsageError(f"{where}: {key} must be a positive number, got {v!r}", "see sactool/data/workloads/")
        return v
    dwell, window = float(num("dwell_steps", (int, float))), int(num("window_tokens", int))
    per = blk.get("per_context")
    if not isinstance(per, dict) or not per:
        raise UsageError(f"{where}: per_context must be a non-empty mapping", "see sactool/data/workloads/")
    out = {}
    for c, v in per.items():
        if not isinstance(v, dict) or not all(isinstance(v.get(k), int) and not isinstance(v.get(k), bool)
                                              and (v.get(k) or 0) > 0 for k in ("flicker_tokens", "pool_tokens")):
            raise UsageError(f"{where}: per_context.{c} needs positive integer flicker_tokens and pool_tokens",
                             "see sactool/data/workloads/")
        out[int(c)] = FillerParams(v["flicker_tokens"], v["pool_tokens"], dwell, window)
    return out


def workload_names() -> list[str]:
    from sactool.data import data_path

    return sorted(p.name[:-5] for p in data_path("workloads").iterdir() if p.name.endswith(".yaml"))


def load_filler_workload(name: str, *, top_k: int = 2048) -> FillerWorkload:
    """The packaged filler workload ``name`` (``sactool/data/workloads/<name>.yaml``)."""
    from sactool.data import data_path
    from sactool.records import load_structured

    if name not in workload_names():
        raise UsageError(f"no packaged top-k workload {name!r}", f"use one of {', '.join(workload_names())}")
    path = data_path("workloads", f"{name}.yaml")
    d = load_structured(path, what="workload file")
    return FillerWorkload(name, read_params(d, f"workload {name}"), str(d.get("statistics") or ""),
                          str(d.get("fitted_with_kernel") or ""), f"sactool/data/workloads/{name}.yaml", top_k)
