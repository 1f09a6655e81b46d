"""Locality statistics of a top-k trace, defined as in the SAC authors' DeepSeek-V3.2 profiling.

All fractions are of the *prompt* (``context_tokens``); generated tokens are not counted in the
unions (so "all layers" can reach 100%, as the real 16K figure does).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sactool.cachedir  # noqa: F401  (NUMBA_CACHE_DIR before numba loads)
from numba import njit


@dataclass(frozen=True)
class LocalityStats:
    """What fraction of the prompt a trace touches (fractions in [0, 1])."""

    context_tokens: int
    steps: int
    layers: int
    top_k: int
    layer_union: np.ndarray        # per layer: |∪_steps top-k ∩ prompt| / prompt, float64 [layers]
    union_mean: float              # mean of layer_union (real: 76.0/52.1/32.9/21.7% at 16K..128K)
    union_min: float
    union_max: float
    step_touch: float              # mean |top-k ∩ prompt| / prompt per step and layer (≈ top_k/context)
    all_layers_union: float        # |∪_layers ∪_steps top-k ∩ prompt| / prompt (real: 100..90.6%)
    consecutive_overlap: float     # mean |top-k(s) ∩ top-k(s+1)| / top_k over steps and layers


@njit(cache=True, nogil=True)
def _layer_unions(indices, layer, ctx, touched):
    """(distinct prompt tokens, prompt selections, ids shared with the previous step) of a layer;
    marks the layer's prompt tokens in ``touched``."""
    steps, _, k = indices.shape
    mark = np.zeros(ctx + steps, dtype=np.int32)
    distinct = 0
    in_prompt = 0
    overlap = 0
    for s in range(steps):
        for i in range(k):
            t = indices[s, layer, i]
            if t < ctx:
                in_prompt += 1
                if not touched[t]:
                    touched[t] = True
                    distinct += 1
            if s > 0 and mark[t] == s:
                overlap += 1
            mark[t] = s + 1
    return distinct, in_prompt, overlap


def locality_stats(indices: np.ndarray, context_tokens: int) -> LocalityStats:
    """Per-layer union, per-step touch, all-layers union and step-to-step overlap of a trace."""
    from sactool.workload.generator import run_layers

    steps, layers, k = indices.shape
    idx = np.ascontiguousarray(indices, dtype=np.int32)
    touched = np.zeros((layers, int(context_tokens)), dtype=np.bool_)
    res = np.array(run_layers(lambda layer: _layer_unions(idx, layer, int(context_tokens), touched[layer]),
                              layers), dtype=np.int64).reshape(layers, 3)
    per_layer, in_prompt, overlap = res[:, 0], res[:, 1], res[:, 2]
    all_touched = int(touched.any(axis=0).sum())
    lu = per_layer / float(context_tokens)
    return LocalityStats(
        context_tokens=int(context_tokens), steps=steps, layers=layers, top_k=k, layer_union=lu,
        union_mean=float(lu.mean()), union_min=float(lu.min()), union_max=float(lu.max()),
        step_touch=float(in_prompt.sum() / (steps * layers * float(context_tokens))),
        all_layers_union=float(all_touched / float(context_tokens)),
        consecutive_overlap=float(overlap.sum() / (max(steps - 1, 1) * layers * float(k))),
    )
