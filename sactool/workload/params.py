"""The knobs of the top-k workload model and the real statistics they were fitted to.

The model (implemented in :mod:`sactool.workload.generator`) builds each layer's top-k set at
every decode step out of four parts, the structure real DSA traces show:

1. **attention sinks**: the first ``sink_tokens`` positions, selected at every step;
2. **a recent window**: the last ``window_tokens`` positions, the newest token always included
   (as DSA's causal top-k includes the token being decoded);
3. **hot regions**: ``regions`` contiguous spans that persist across steps, drift by one token
   now and then, and occasionally relocate;
4. **scattered tokens**: the rest of the ``top_k`` budget, of which a few are replaced every
   step ("churn"); a replacement is either a token this layer dropped recently (a *revisit*) or a
   *fresh* token drawn from a token-importance field shared by all layers.

Token-count knobs are set for top_k = 2048; the window, the number of regions and the churn scale in
proportion to ``top_k``, so small test traces keep the same shape.

Layers differ: each layer's churn and relocation rates are scaled by its own factor
``exp(layer_spread × z)``, with ``z`` spread over standard-normal quantiles; rates also grow with
the context as ``(context / 16384) ** churn_context_exponent``.

The per-layer union over decode steps is governed by the fresh-token rate; the published statistics
below pin that rate down (churn, its context exponent, the layer spread), the importance field's
shape (all-layers union) and the window (per-step touch). The revisit knobs and the
region geometry are *not* constrained by any published statistic (a union counts first touches
only); their values are stated as structural choices, and the hot-buffer hit rates that depend on
them should be read as model outputs, not measurements.

Fit (reproduce with ``python -m sactool.workload.calibrate --fit``): 61 layers, top_k 2048, 1000
steps, seed 0; coordinate search over ``churn``, ``churn_context_exponent``, ``layer_spread`` and
``importance_shape`` minimising the squared log error of the four per-layer unions, plus half that
weight for the 128K layer range and a small weight for the all-layers unions. Result (seed 0;
seed 1 within 0.4 points): per-layer union 69.1/51.4/35.3/22.3% (−9/−1/+7/+3%), 128K layers
3.7–71%, per-step touch 10.5/5.3/2.63/1.31%, all-layers 100/99.5/96.8/89.7%.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Real DeepSeek-V3.2 top-k locality, ~1000 decode steps, 16 requests per length
#: (SAC authors' profiling, docs/sources.md, design facts; docs/sources.md, SAC §2.1, branch
#: ``dsv32-profile-topk`` ``summary_by_length_layer.csv``). Fractions of the prompt.
DSV32_LOCALITY = {
    # context tokens: (per-layer union, per-step touch, all-layers union)
    16384: (0.760, 0.105, 1.000),
    32768: (0.521, 0.052, 0.996),
    65536: (0.329, 0.0265, 0.952),
    131072: (0.217, 0.0132, 0.906),
}
#: Per-layer union spread at 128K in the same data: "from about 4% to 70%" (docs/sources.md, design facts).
DSV32_LAYER_SPREAD_128K = (0.04, 0.70)
#: Decode steps the statistics cover.
DSV32_STEPS = 1000
#: top_k the token-count knobs are set for (DeepSeek-V3.2 / GLM-5 index_topk).
REFERENCE_TOP_K = 2048


@dataclass(frozen=True)
class WorkloadParams:
    """Structure knobs of the generator, with their calibrated defaults (see module docstring)."""

    sink_tokens: int = 4
    """Attention sinks: the first positions every layer selects at every step. Structural, not
    fitted: StreamingLLM (Xiao et al., ICLR 2024) found 4 initial tokens suffice as sinks."""

    window_tokens: int = 400
    """Recent window: the newest positions every layer selects (the newest token is the window's
    last). Fitted to the per-step touch (10.5/5.2/2.65/1.32% of the prompt at 16K..128K, i.e.
    ~1720 of the 2048 selections fall in the prompt and ~320 on generated tokens, averaged over
    1000 steps): mean over s < 1000 of min(s, W) = 320 gives W = 400."""

    regions: int = 16
    """Hot regions per layer: contiguous spans that persist across steps. Structural, not fitted."""

    region_tokens: int = 32
    """Mean length of a hot region in tokens (lengths are uniform in [½, 1½] × this).
    Structural, not fitted: regions ~ a sentence or a code block."""

    region_drift: float = 0.05
    """Probability per step that a region shifts by one token (one token leaves, one enters).
    Structural, not fitted ("hot regions drift")."""

    region_jump: float = 0.002
    """Probability per step (before the layer and context scaling) that a region relocates to a
    new place drawn from the importance field. Structural, not fitted (held fixed while the rates
    below were fitted); it makes churn bursty."""

    churn: float = 24.15
    """*Fresh* scattered tokens per step per layer at 16K context, before the layer factor: the
    rate at which a layer touches tokens it has not selected before, hence what sets the union.
    Each step replaces ``churn / (1 - revisit)`` scattered tokens, ``revisit`` of them revisits, so
    the revisit knobs can be varied without moving the calibrated union. Fitted to the per-layer
    union over 1000 steps (76.0/52.1/32.9/21.7% at 16K..128K)."""

    churn_context_exponent: float = 0.02
    """Churn and relocation grow as ``(context / 16384) ** this``. Fitted to the same four
    per-layer unions (how fast the union fraction falls with context)."""

    layer_spread: float = 0.95
    """Log-normal spread of the per-layer rate factor. Fitted to the per-layer union range at 128K
    (about 4% to 70%) with the mean held by ``churn``."""

    revisit: float = 0.3
    """Fraction of scattered replacements that re-select a token this layer dropped recently
    (replacements per step = ``churn / (1 - revisit)``). Not constrained by published statistics
    (a union counts first touches only); a structural choice: top-k scores near the cut-off flicker
    in and out. It moves the hot-buffer hit rate, not the union. At most 0.95.

    No published LRU hit or miss rate on real DSA top-k traces could pin it (searched: ESS arXiv
    2512.10576, the HiSparse paper arXiv 2608.07009 via a secondary note, the LMSYS HiSparse blog,
    SGLang's HiSparse PRs, the SAC fork's design docs and logs; docs/sources.md, "Hot-buffer hit
    rates"). ``sactool simulate --explain`` shows the miss volume it gives next to the volume the
    authors' SAC − DRAM step gaps imply (a validation view, ``simulate.misscheck``; never fitted:
    those runs are what the model predicts, and they decoded a synthetic filler prompt, not the
    ShareGPT prompts the unions were profiled on)."""

    revisit_window: int = 4096
    """How many of a layer's most recently dropped tokens a revisit chooses from (uniformly).
    Not constrained by published statistics; it sets the reuse distance of revisits, so it is the
    knob the hot-buffer hit rate between top_k and 4 × top_k slots is most sensitive to. Fixed in
    tokens (it does not grow with the context); see ``revisit`` for what was searched."""

    layer_targets: str | None = None
    """Name of a per-layer locality profile (``sactool.workload.layers``, e.g. ``"deepseek-v3.2"``):
    each layer's rate factor is then derived from its published union at the context, so layers
    keep their identity; None: the random log-normal spread of ``layer_spread``."""

    rate_scale: float = 1.0
    """Multiplies every layer's rate factor after it is set (from its published union with
    ``layer_targets``, else from ``layer_spread``): the fresh-token and relocation rates, hence the
    hot-buffer misses at any buffer larger than top_k. 1 is the calibrated model; ``sactool tune
    --observed`` refits it so the simulation reproduces a running engine's miss rate at its buffer
    size (the unions then follow the observation, no longer the published statistics, and the
    profile's ``workload.refit`` says so)."""

    importance_shape: float = 1.18
    """Gamma shape of the token-importance field shared by all layers (mean 1): smaller → more
    tokens no layer selects. Fitted to the all-layers union (100/99.6/95.2/90.6%)."""

    def scaled(self, top_k: int) -> tuple[int, int, int, int, float]:
        """(sinks, window, regions, region_tokens, replacements per step) for ``top_k``: the
        token-count knobs are set for DSA's top_k = ``REFERENCE_TOP_K``; the window, the number of
        regions and the churn scale with ``top_k`` (sinks are capped at a quarter of it)."""
        q = top_k / REFERENCE_TOP_K
        return (min(self.sink_tokens, top_k // 4), max(1, round(self.window_tokens * q)),
                round(self.regions * q), self.region_tokens, self.churn * q / (1.0 - self.revisit))

    def validate(self, top_k: int) -> None:
        """Refuse knob values the generator cannot honour for this ``top_k``."""
        from sactool.errors import UsageError

        if min(self.sink_tokens, self.window_tokens, self.regions, self.region_tokens,
               self.revisit_window) < 0 or self.window_tokens < 1:
            raise UsageError("workload knobs must be non-negative (window_tokens ≥ 1)")
        sinks, window, regions, region_tokens, _ = self.scaled(top_k)
        fixed = sinks + window + regions * (region_tokens * 3 // 2 + 1)
        if fixed > max(1, top_k * 3 // 4):
            raise UsageError(f"sinks + window + regions ({fixed} tokens) exceed 3/4 of top_k={top_k}",
                             "use fewer or shorter regions, or a smaller window")
        for name, hi in (("region_drift", 1.0), ("region_jump", 1.0), ("revisit", 0.95)):
            v = getattr(self, name)
            if not 0.0 <= v <= hi:
                raise UsageError(f"workload knob {name}={v} must be within [0, {hi}]")
        if not 0 < self.rate_scale <= 1000:
            raise UsageError(f"workload knob rate_scale={self.rate_scale} must be within (0, 1000]")
        if self.churn < 0 or self.layer_spread < 0 or self.importance_shape <= 0:
            raise UsageError("churn and layer_spread must be ≥ 0 and importance_shape > 0")
