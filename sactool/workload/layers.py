"""Which top-k workload a model gets (:func:`model_workload`), built on the per-layer locality
targets from the authors' DeepSeek-V3.2 profiling and the per-layer rates that make the workload
model reproduce them (each layer keeps its identity) — that fit is :mod:`sactool.workload.layerfit`,
re-exported here.

Which workload a model gets is decided here, once (:func:`model_workload`): the per-layer targets
where a shipped profile fits the model (DeepSeek-V3.2: 61 layers, top_k 2048), else the random
log-normal layer spread (GLM-5/5.1: no per-layer profile is published). ``sactool tune`` and
``sactool simulate`` both take their hot-buffer traces from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sactool.workload.layerfit import (  # noqa: F401 (the data fit, re-exported: workload.layers.layer_targets …)
    DATASETS, SOURCE, factors_for, first_touch_misses, layer_targets, layer_unions,
)


# ---- which workload a model gets: the one rule tune and simulate share --------------------------

#: top_k the shipped profiles were measured with (DSA's index_topk of the profiled runs).
PROFILED_TOP_K = {"deepseek-v3.2": 2048}


def profile_for(model: str, layers: int, top_k: int) -> str | None:
    """The per-layer locality profile the workload model uses for ``model`` (its
    ``WorkloadParams.layer_targets``), or None when there is none that fits: the model has no
    shipped profile (GLM-5/5.1: none published), or its layer count or top_k is not the profiled
    one. None means the random log-normal spread of ``WorkloadParams.layer_spread``, fitted to the
    DeepSeek-V3.2 summary statistics (``params.py``): each layer's locality is drawn, not its own."""
    if model not in DATASETS or PROFILED_TOP_K.get(model) != top_k:
        return None
    return model if all(len(v) == layers for v in layer_unions(model).values()) else None


@dataclass(frozen=True)
class ModelWorkload:
    """The top-k workload model for one model: its generator knobs and where its layers' locality
    comes from. Built by :func:`model_workload`; ``tune`` and ``simulate`` both take it from there."""

    model: str
    layers: int
    top_k: int
    layer_targets: str | None           # the per-layer profile used, or None (random spread)
    rate_scale: float = 1.0             # refit by tune --observed (WorkloadParams.rate_scale); 1: as calibrated
    refit: Any = field(default=None, compare=False, hash=False)   # what the refit was made on (its record)

    @property
    def params(self):
        """The generator knobs: the calibrated defaults with this model's per-layer targets (and the
        rate scale a ``tune --observed`` refit set)."""
        from sactool.workload.params import WorkloadParams

        return WorkloadParams(layer_targets=self.layer_targets, rate_scale=self.rate_scale)

    def generate(self, context_tokens: int, steps: int, *, seed: int = 0):
        """int32 ``[steps, layers, top_k]`` top-k trace of this model's workload."""
        from sactool.workload.generator import generate_topk

        return generate_topk(context_tokens, steps, self.layers, self.top_k, seed=seed, params=self.params)

    def to_data(self) -> dict[str, Any]:
        """Record form (a profile's ``workload`` block, simulate's inputs)."""
        t = self.layer_targets
        return {"source": "model", "name": "sharegpt-dsv32",
                "statistics": "per-layer top-k unions of DeepSeek-V3.2 on ShareGPT prompts (dsv32-profile-topk)",
                "generator": "sactool.workload.generate_topk", "model": self.model,
                "layer_locality": "per-layer targets" if t else "random log-normal spread",
                "model_profile": t,
                "targets": f"sactool/data/topk/{DATASETS[t]}" if t else None,
                "targets_source": SOURCE if t else None,
                "detail": (f"each of the {self.layers} layers' rate from its published union at the context "
                           "(log2-linear between 16K/32K/64K/128K)" if t else
                           f"no per-layer profile fits {self.model} ({self.layers} layers, top_k {self.top_k}; "
                           f"profiled: {', '.join(DATASETS)}): each layer's rate is drawn from the log-normal "
                           "spread layer_spread, fitted to DeepSeek-V3.2's summary statistics"),
                "assumptions": "revisit, revisit_window and the region geometry are stated structural choices, "
                               "not fitted (sactool.workload.params): hit rates are model outputs",
                **({"refit": self.refit} if self.refit is not None else {})}


def model_workload(model: str, layers: int, top_k: int) -> ModelWorkload:
    """The workload model ``tune`` and ``simulate`` use for ``model`` (per-layer targets where a
    profile fits, :func:`profile_for`)."""
    return ModelWorkload(model, layers, top_k, profile_for(model, layers, top_k))
