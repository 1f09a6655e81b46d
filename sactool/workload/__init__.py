"""Top-k workload: a calibrated model of DSA top-k selections, locality statistics, trace files.

``WorkloadParams`` and the real statistics import light; the numpy/numba parts
(``generate_topk``, ``locality_stats``, ``save_trace``/``load_trace``/``Trace``) load on first use,
so importing this package from the CLI costs nothing until a command needs them.
"""

from __future__ import annotations

from typing import Any

from sactool.workload.params import (DSV32_LAYER_SPREAD_128K, DSV32_LOCALITY, DSV32_STEPS,
                                     WorkloadParams)

_LAZY = {
    "generate_topk": "sactool.workload.generator",
    "layer_factors": "sactool.workload.generator",
    "locality_stats": "sactool.workload.stats",
    "LocalityStats": "sactool.workload.stats",
    "Trace": "sactool.workload.trace",
    "save_trace": "sactool.workload.trace",
    "load_trace": "sactool.workload.trace",
    "check_indices": "sactool.workload.trace",
    "TRACE_FORMAT_VERSION": "sactool.workload.trace",
}

__all__ = ["WorkloadParams", "DSV32_LOCALITY", "DSV32_LAYER_SPREAD_128K", "DSV32_STEPS", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sactool.workload' has no attribute {name!r}")
