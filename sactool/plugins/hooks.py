"""Engine-neutral helpers for the plug-ins: resolving a dotted hook target the way the engines'
hook registries do, finding this process's rank, and handing a placed buffer back as the tensor
the engine's allocator would have returned.

Nothing here imports an engine at module level; torch is imported only when a torch dtype is
asked for.
"""

from __future__ import annotations

import math
from typing import Any, Callable


def missing(target: str) -> str:
    """Why dotted ``target`` cannot be hooked ("" when it can): resolved as SGLang's
    ``HookRegistry.apply_hooks`` resolves it (the owner, then the attribute), so a target that would
    fail there — and be swallowed there — fails here, where strict mode can act on it. A module on
    the way that exists but fails to import (a missing dependency of the engine's) is named with its
    own error, not hidden behind "has no attribute" (``pkgutil.resolve_name`` takes such a module
    for a missing one)."""
    found, why = resolve(target)
    return why


def resolve(target: str) -> tuple[Any, str]:
    """(the object dotted ``target`` names, "") or (None, why it cannot be resolved)."""
    import importlib
    import importlib.util

    owner, attr = target.rsplit(".", 1)
    parts = owner.split(".")
    obj, i = None, 0
    for j in range(1, len(parts) + 1):   # import package by package; the rest are attributes
        if obj is not None and not hasattr(obj, "__path__"):
            break                            # a plain module: what follows lives inside it
        name = ".".join(parts[:j])
        try:
            spec = importlib.util.find_spec(name)   # its parents are imported already: no import here
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            break
        try:
            obj = importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - any import-time failure (a missing dependency), named as it is
            return None, f"importing {name} failed: {type(e).__name__}: {e}"
        i = j
    if obj is None:
        return None, f"{owner}: no module {parts[0]}"
    for j, part in enumerate(parts[i:], start=i):
        if not hasattr(obj, part):
            return None, f"{'.'.join(parts[:j])} has no attribute {part}"
        obj = getattr(obj, part)
    if not hasattr(obj, attr):
        return None, f"{owner} has no attribute {attr}"
    return getattr(obj, attr), ""


def discover_rank(engine_rank: Callable[[], int] | None = None, how: str = "") -> tuple[int | None, str]:
    """This process's rank: the engine's own answer (``engine_rank()``, named ``how``) when it can
    give one, else the contract's variables (:data:`sactool.pool.contract.RANK_VARS`)."""
    from sactool.pool.contract import env_rank

    if engine_rank is not None:
        try:
            return int(engine_rank()), how
        except Exception:  # noqa: BLE001 - not importable (tests) or not initialised: the variables decide
            pass
    return env_rank()


def address(t: Any) -> int | None:
    """The first byte of a tensor (torch ``data_ptr()``) or numpy array; None for anything else."""
    if hasattr(t, "data_ptr"):
        return int(t.data_ptr())
    ctypes_ = getattr(t, "ctypes", None)
    return int(ctypes_.data) if ctypes_ is not None else None


def inside(addr: int | None, buffers: Any) -> bool:
    """Does ``addr`` lie in one of ``buffers`` (each with ``address`` and ``size_bytes``)?"""
    return addr is not None and any(b.address <= addr < b.address + b.size_bytes for b in buffers)


def _is_torch_dtype(dtype: Any) -> bool:
    return type(dtype).__module__.split(".")[0] == "torch"


def element_size(dtype: Any) -> int:
    """Bytes per element of a torch dtype (as the engines compute it) or of a numpy dtype."""
    if _is_torch_dtype(dtype):
        import torch

        return torch.empty((), dtype=dtype).element_size()
    import numpy as np

    return np.dtype(dtype).itemsize


def view(buf: Any, dims: tuple, dtype: Any) -> Any:
    """The placed buffer as an engine's allocator returns it: ``torch.frombuffer(mm, dtype,
    count).reshape(dims)`` (SGLang 0.5.23's ``mmap_allocator.alloc_mmap``); a numpy view for a
    numpy dtype (no torch needed to exercise a hook). The view keeps the mapping alive."""
    count = math.prod(dims)
    if _is_torch_dtype(dtype):
        import torch

        return torch.frombuffer(buf.mmap, dtype=dtype, count=count).reshape(dims)
    import numpy as np

    return np.frombuffer(buf.mmap, dtype=dtype, count=count).reshape(dims)
