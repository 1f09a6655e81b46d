"""Per-layer locality targets from the authors' DeepSeek-V3.2 profiling, and the per-layer rates
that make the workload model reproduce them (each layer keeps its identity).

Data: ``sactool/data/topk/deepseek-v3.2-summary_by_length_layer.csv``, copied unchanged from
github magicYang1573/sglang, branch ``dsv32-profile-topk`` (commit
883d880b43e35d90bf6b506dc2ddc615c50cb7be),
``exp-topk/deepseek_v32_20260427_140841/analysis/summary_by_length_layer.csv``: 4 prompt lengths
(16K/32K/64K/128K) × 61 layers, 16 requests each, 1000 decode steps; column
``mean_kv_union_used_to_total_prompt`` is the layer's union of selected KV over the decode,
as a fraction of the prompt (published measurement data; see the SOURCE.md beside it).

From a layer's target union ``u`` to its rate factor (``generator._gen_layer``'s ``factor``),
by the model's own structure, not by search: at step 0 a layer holds the sinks, the window and
the regions (``fixed`` prompt tokens) and ``top_k − fixed`` scattered tokens drawn from the
importance field (Gamma(shape), mean 1); afterwards it draws ``rate × factor`` fresh tokens per
step from the same field. ``M`` draws from that field touch, in expectation, a fraction
``1 − (1 + M / (shape × context)) ** −shape`` of the prompt (the Gamma-mixed Poisson miss
probability), so ``M = shape × context × ((1 − g) ** (−1 / shape) − 1)`` with
``g = u − fixed / context`` and ``factor = (M − (top_k − fixed)) / (rate × steps)``. Contexts
between the profiled ones interpolate the union linearly in log2(context) (the end values hold
outside). The revisit knobs and region geometry stay stated assumptions (``params.py``).

Which workload a model gets (these targets, or the random layer spread) is decided in
:mod:`sactool.workload.layers`; the generator reads the fit from here, so neither imports the other.
"""

from __future__ import annotations

import csv
import math
from functools import lru_cache
from importlib import resources

SOURCE = ("github magicYang1573/sglang, branch dsv32-profile-topk (883d880b43e35d90bf6b506dc2ddc615c50cb7be), "
          "exp-topk/deepseek_v32_20260427_140841/analysis/summary_by_length_layer.csv")
DATASETS = {"deepseek-v3.2": "deepseek-v3.2-summary_by_length_layer.csv"}


@lru_cache(maxsize=None)
def layer_unions(model: str = "deepseek-v3.2") -> dict[int, tuple[float, ...]]:
    """{prompt tokens: per-layer union fraction (layer 0 first)} of the profiled model."""
    name = DATASETS.get(model)
    if name is None:
        from sactool.errors import UsageError

        raise UsageError(f"no per-layer top-k profile for {model}", f"profiled: {', '.join(DATASETS)}")
    text = resources.files("sactool").joinpath("data").joinpath("topk").joinpath(name).read_text()
    by: dict[int, dict[int, float]] = {}
    for row in csv.DictReader(text.splitlines()):
        by.setdefault(int(row["target_prompt_len"]), {})[int(row["layer_id"])] = \
            float(row["mean_kv_union_used_to_total_prompt"])
    return {ctx: tuple(v[layer] for layer in sorted(v)) for ctx, v in sorted(by.items())}


def layer_targets(context_tokens: int, layers: int, model: str = "deepseek-v3.2") -> tuple[float, ...]:
    """Per-layer union targets at ``context_tokens`` (log2-linear between profiled lengths)."""
    data = layer_unions(model)
    ctxs = sorted(data)
    if any(len(data[c]) != layers for c in ctxs):
        from sactool.errors import UsageError

        raise UsageError(f"the {model} per-layer profile has {len(data[ctxs[0]])} layers, not {layers}")
    if context_tokens <= ctxs[0]:
        return data[ctxs[0]]
    if context_tokens >= ctxs[-1]:
        return data[ctxs[-1]]
    hi = next(c for c in ctxs if c >= context_tokens)
    lo = ctxs[ctxs.index(hi) - 1]
    w = (math.log2(context_tokens) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
    return tuple(a + w * (b - a) for a, b in zip(data[lo], data[hi]))


def factors_for(targets, *, context_tokens: int, top_k: int, steps: int, params) -> list[float]:
    """Per-layer rate factors (relative to ``params``' scaled churn) that reproduce ``targets``
    (union fractions over ``steps`` decode steps) — see the module docstring."""
    sinks, window, regions, region_tokens, repl = params.scaled(top_k)
    fresh = repl * (1.0 - params.revisit)                 # fresh draws per step at factor 1
    scale = (context_tokens / 16384.0) ** params.churn_context_exponent
    fixed = min(context_tokens, sinks + window + regions * region_tokens)
    m0 = max(0, top_k - fixed)
    k = params.importance_shape
    out = []
    for u in targets:
        g = min(max(u - fixed / context_tokens, 1e-6), 0.999)
        m = k * context_tokens * ((1.0 - g) ** (-1.0 / k) - 1.0)
        out.append(max(0.0, (m - m0) / (fresh * scale * steps)))
    return out


def first_touch_misses(context_tokens: int, top_k: int, *, steps: int | None = None,
                       model: str = "deepseek-v3.2") -> float:
    """Misses per layer per decode step that no cache can avoid, from the published per-layer union.

    A layer that selects ``u × context`` distinct tokens over ``steps`` decode steps (``u`` its
    union fraction, ``layer_targets``) and starts with ``top_k`` of them loaded must fetch the other
    ``u × context − top_k`` at least once: ``max(0, u × context − top_k) / steps`` per step, averaged
    over layers. A lower bound on any LRU hot buffer's steady misses (the profile's prompts:
    ShareGPT conversations, ``SOURCE``); what the buffer adds on top comes from re-selections after
    eviction, which no published statistic measures (``params.WorkloadParams.revisit``).
    """
    from sactool.workload.params import DSV32_STEPS

    n = steps or DSV32_STEPS
    targets = layer_targets(context_tokens, len(layer_unions(model)[min(layer_unions(model))]), model)
    return sum(max(0.0, u * context_tokens - top_k) for u in targets) / (len(targets) * n)
