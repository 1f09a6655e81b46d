"""``sactool_cxl``: the SGLang plug-in that puts the HiSparse host pool on the CXL node or DAX device
the profile names (entry point group ``sglang.srt.plugins``; enabled by ``SGLANG_PLUGINS``).

SGLang 0.5.23 allocates the HiSparse host pool with ``HostTensorAllocator.allocate(dims, dtype,
device)`` — an anonymous mmap returned as ``torch.frombuffer(mm, dtype, count).reshape(dims)`` —
inside ``HiSparseCoordinator.__init__``, then pins it with cudaHostRegister. It has no way to
place it on a NUMA node, and it re-execs each rank under ``numactl --membind=<GPU node>``
(shared/reference/sglang-integration.md §3.4, §4). This plug-in registers two AROUND hooks:

* ``HiSparseCoordinator.__init__``: marks "allocating the HiSparse host pool" (a context variable)
  while the constructor runs;
* ``HostTensorAllocator.allocate``: while marked, allocates the buffer itself with
  :mod:`sactool.memory` (mbind to the rank's pool node with the profile's policy, huge pages,
  pre-faulted by threads pinned near that node, verified with move_pages) or maps the profile's
  DAX device, and returns the same tensor view SGLang's allocator returns. A VMA policy beats
  the rank's task policy, so this composes with SGLang's GPU-local binding.

It does nothing unless ``SACTOOL_PROFILE`` names a readable profile. If a hook target is missing
(another SGLang) or placement fails it logs why and SGLang's own allocator is used, unless the
profile says ``pool.strict`` (or ``SACTOOL_STRICT=1`` when the profile cannot be read): then it
stops the rank. Log lines start with ``sactool_cxl:``.
"""

from __future__ import annotations

import contextvars
import logging
import math
import mmap
import os
from dataclasses import dataclass
from typing import Any, Callable

logger = logging.getLogger("sactool.sglang_plugin")

COORDINATOR_TARGET = "sglang.srt.managers.hisparse_coordinator.HiSparseCoordinator.__init__"
ALLOCATE_TARGET = "sglang.srt.mem_cache.pool_host.common.HostTensorAllocator.allocate"
RANK_FUNCTION = "sglang.srt.distributed.parallel_state.get_tensor_model_parallel_rank"
VERIFY_ALL_PAGES_UP_TO = 1 << 20
"""Pages checked with move_pages: every page up to this many (4 GiB of 4 KiB pages), else an even
sample of this many — a bound on the time a 40 GB pool's verification takes, stated in the log."""

_ALLOCATING: contextvars.ContextVar[bool] = contextvars.ContextVar("sactool_hisparse_host_pool", default=False)
_KEEP: list[Any] = []          # PlacedBuffers stay alive as long as the process (SGLang owns the view)
_DAX_IN_USE: set[str] = set()
_STATE: dict[str, Any] = {"profile": None, "strict": False}


class PlacementStop(RuntimeError):
    """Raised in strict mode: the rank must not start with the pool in the wrong memory."""


def _stop(msg: str) -> None:
    logger.error("sactool_cxl: %s (pool.strict: stopping)", msg)
    raise PlacementStop(f"sactool_cxl: {msg}")


def _fallback(msg: str) -> None:
    logger.warning("sactool_cxl: %s; SGLang's own allocator is used", msg)


# ------------------------------------------------------------------------------------------
# registration
# ------------------------------------------------------------------------------------------


def register(registry: Any = None, hook_type: Any = None) -> bool:
    """Entry point called by SGLang's ``load_plugins()``. Returns True when hooks were registered.

    ``registry``/``hook_type`` default to SGLang's ``HookRegistry``/``HookType.AROUND`` (tests pass
    the real classes loaded from the SGLang 0.5.23 source, or a stand-in)."""
    path = os.environ.get("SACTOOL_PROFILE")
    if not path:
        logger.debug("sactool_cxl: SACTOOL_PROFILE not set; plug-in inactive")
        return False
    strict_env = os.environ.get("SACTOOL_STRICT", "") == "1"
    from sactool.errors import SactoolError
    from sactool.profile import load_profile

    try:
        profile = load_profile(path)
    except SactoolError as e:
        msg = f"SACTOOL_PROFILE {path} unreadable: {e.message}"
        if strict_env:
            raise SystemExit(f"sactool_cxl: {msg} (SACTOOL_STRICT=1: stopping)")
        _fallback(msg)
        return False
    _STATE.update(profile=profile, strict=profile.pool.strict or strict_env)
    if profile.pool.placement != "plugin" or profile.sglang.role == "prefill":
        logger.info("sactool_cxl: profile %s has placement %s, role %s: nothing to place", path,
                    profile.pool.placement, profile.sglang.role)
        return False
    if registry is None:
        try:
            from sglang.srt.plugins.hook_registry import HookRegistry, HookType
        except ImportError as e:
            msg = f"SGLang's HookRegistry cannot be imported ({e})"
            if _STATE["strict"]:
                raise SystemExit(f"sactool_cxl: {msg} (pool.strict: stopping)")
            _fallback(msg)
            return False
        registry, hook_type = HookRegistry, HookType.AROUND
    missing = [t for t in (COORDINATOR_TARGET, ALLOCATE_TARGET) if not _module_exists(t)]
    if missing:
        msg = f"hook target {missing[0]} does not exist in this SGLang"
        if _STATE["strict"]:
            raise SystemExit(f"sactool_cxl: {msg} (pool.strict: stopping)")
        _fallback(msg)
        return False
    registry.register(COORDINATOR_TARGET, around_coordinator_init, hook_type)
    registry.register(ALLOCATE_TARGET, around_allocate, hook_type)
    logger.info("sactool_cxl: hooks registered for profile %s (%s)", path, profile.model.name)
    return True


def _module_exists(target: str) -> bool:
    import importlib.util

    module = target.rsplit(".", 2)[0]
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# ------------------------------------------------------------------------------------------
# the hooks
# ------------------------------------------------------------------------------------------


def around_coordinator_init(original: Callable, self: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``HiSparseCoordinator.__init__``: host-pool allocations inside it are ours."""
    token = _ALLOCATING.set(True)
    try:
        return original(self, *args, **kwargs)
    finally:
        _ALLOCATING.reset(token)


def _bind_allocate_args(args: tuple, kwargs: dict) -> tuple[tuple, Any, str]:
    """``allocate(self, dims: tuple, dtype: torch.dtype, device: str)`` (0.5.23 signature)."""
    names = ("dims", "dtype", "device")
    vals = dict(zip(names, args))
    vals.update({k: v for k, v in kwargs.items() if k in names})
    return tuple(vals["dims"]), vals.get("dtype"), vals.get("device", "cpu")


def around_allocate(original: Callable, self: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``HostTensorAllocator.allocate``: place the HiSparse pool, else call the original."""
    if not _ALLOCATING.get() or _STATE["profile"] is None:
        return original(self, *args, **kwargs)
    dims, dtype, device = _bind_allocate_args(args, kwargs)
    if device != "cpu":
        return original(self, *args, **kwargs)
    count = math.prod(dims)
    rank, how = current_rank()
    buf = place_pool(_STATE["profile"], rank, count * element_size(dtype), rank_source=how, strict=_STATE["strict"])
    if buf is None:
        return original(self, *args, **kwargs)
    self.dtype, self.dims = dtype, dims      # what SGLang's allocate records
    return view(buf, dims, dtype)


def _is_torch_dtype(dtype: Any) -> bool:
    return type(dtype).__module__.split(".")[0] == "torch"


def element_size(dtype: Any) -> int:
    """Bytes per element of a torch dtype (as SGLang computes it) or of a numpy dtype."""
    if _is_torch_dtype(dtype):
        import torch

        return torch.empty((), dtype=dtype).element_size()
    import numpy as np

    return np.dtype(dtype).itemsize


def view(buf: Any, dims: tuple, dtype: Any) -> Any:
    """The placed buffer as SGLang's allocate returns it: ``torch.frombuffer(mm, dtype, count)
    .reshape(dims)`` (mmap_allocator.alloc_mmap, 0.5.23); a numpy view for a numpy dtype (no
    torch needed to exercise the hook). The view keeps the mapping alive."""
    count = math.prod(dims)
    if _is_torch_dtype(dtype):
        import torch

        return torch.frombuffer(buf.mmap, dtype=dtype, count=count).reshape(dims)
    import numpy as np

    return np.frombuffer(buf.mmap, dtype=dtype, count=count).reshape(dims)


def current_rank() -> tuple[int | None, str]:
    """This scheduler's TP rank (0..tp_size-1, the GPU index the profile's rank tables use)."""
    try:
        from sglang.srt.distributed.parallel_state import get_tensor_model_parallel_rank

        return int(get_tensor_model_parallel_rank()), "get_tensor_model_parallel_rank()"
    except Exception:  # not importable (tests) or not initialised
        pass
    for var in ("SACTOOL_RANK", "RANK", "LOCAL_RANK"):
        v = os.environ.get(var, "")
        if v.isdigit():
            return int(v), f"${var}"
    return None, "unknown"


# ------------------------------------------------------------------------------------------
# placement (no torch): testable on node 0
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolResult:
    """What was placed, for the log and for tests."""

    rank: int
    target: str
    size_bytes: int
    verified_fraction: float
    pages_checked: int
    node_pages: dict[int, int]
    hugepage_bytes: int
    line: str


def place_pool(profile: Any, rank: int | None, n_bytes: int, *, rank_source: str = "", strict: bool = False,
               reader: Any = None) -> Any:
    """Allocate the pool of ``rank`` as the profile says; return the PlacedBuffer (kept alive) or
    None after logging why SGLang's allocator must be used (PlacementStop when ``strict``)."""
    from sactool.errors import SactoolError
    from sactool.hisparse.hostpool import plan_for_rank

    fail = _stop if strict else _fallback
    if rank is None:
        fail("cannot tell this process's rank (no SGLang TP group, no $SACTOOL_RANK/$RANK)")
        return None
    try:
        plan = plan_for_rank(profile, rank)
    except SactoolError as e:
        fail(f"rank {rank}: {e.message}")
        return None
    try:
        buf = _allocate(plan, n_bytes, reader)
    except (SactoolError, OSError, ValueError) as e:
        fail(f"rank {rank}: placing {n_bytes} bytes on {plan.target} failed: {getattr(e, 'message', e)}")
        return None
    res = describe(plan, buf, rank_source)
    logger.warning(res.line)      # WARNING so it shows at SGLang's default log level
    if plan.mode == "numa" and res.verified_fraction < 1.0 and plan.policy == "bind":
        msg = f"rank {rank}: only {res.verified_fraction:.1%} of the checked pages are on {plan.target}"
        if strict:
            buf.close()
            _stop(msg)
        logger.warning("sactool_cxl: %s", msg)
    _KEEP.append(buf)
    return buf


def _allocate(plan: Any, n_bytes: int, reader: Any) -> Any:
    from sactool.host.sysfs import SysfsReader
    from sactool.host.sysfs import parse_cpulist
    from sactool.memory import allocate, map_devdax

    reader = reader or SysfsReader()
    sample = None if n_bytes // mmap.PAGESIZE <= VERIFY_ALL_PAGES_UP_TO else VERIFY_ALL_PAGES_UP_TO
    if plan.mode == "devdax":
        if plan.shared_with or plan.target in _DAX_IN_USE:
            raise ValueError(f"{plan.target} is already mapped by another pool (ranks {plan.shared_with}); "
                             "each rank needs its own DAX device")
        buf = map_devdax(plan.target, n_bytes, reader=reader)
        _DAX_IN_USE.add(plan.target)
        _dontfork(buf)
        buf.verify(sample)
        return buf
    cpus = None if plan.prefault_cpus == "auto" else list(parse_cpulist(plan.prefault_cpus))
    kw: dict[str, Any] = dict(node=plan.node, policy="bind" if plan.policy == "weighted_interleave" else plan.policy,
                              hugepages=plan.hugepages, prefault_threads=plan.prefault_threads,
                              prefault_cpus=cpus, check_free=True, verify_sample=sample, reader=reader)
    if plan.policy == "weighted_interleave":
        kw["weights"] = dict(plan.interleave_weights)
    buf = allocate(n_bytes, **kw)
    _dontfork(buf)
    return buf


def _dontfork(buf: Any) -> None:
    """MADV_DONTFORK, as SGLang does for its private pinned mappings (no COW after fork)."""
    try:
        buf.mmap.madvise(mmap.MADV_DONTFORK)
    except (AttributeError, OSError) as e:
        logger.info("sactool_cxl: madvise(MADV_DONTFORK) failed: %s", e)


def describe(plan: Any, buf: Any, rank_source: str = "") -> PoolResult:
    r = buf.report or buf.verify(VERIFY_ALL_PAGES_UP_TO)
    where = ", ".join(f"node{k}: {v}" if k >= 0 else f"errno{-k}: {v}" for k, v in sorted(r.node_pages.items()))
    checked = "all" if r.pages_checked >= r.pages_total else f"a sample of {r.pages_checked} of {r.pages_total}"
    stand = " (a DRAM node stood in for CXL: pool.stand_in)" if plan.stand_in else ""
    line = (f"sactool_cxl: rank {plan.rank} ({rank_source or 'given'}) HiSparse host pool {buf.size_bytes} bytes on "
            f"{plan.target}{stand}, policy {buf.policy}, hugepages {plan.hugepages}: verified "
            f"{r.verified_fraction:.1%} of {checked} pages on {', '.join(f'node{n}' for n in r.expected_nodes)} "
            f"[{where}], huge-page bytes {r.hugepage_bytes}, prefault {buf.prefault_seconds:.2f} s "
            f"by {plan.prefault_threads} threads")
    if plan.mode == "devdax":
        line += ("; devdax: not pre-faulted by sactool, and move_pages may not report device-DAX pages "
                 "(cudaHostRegister of such memory is unverified here, integration notes §6.5)")
    return PoolResult(plan.rank, plan.target, buf.size_bytes, r.verified_fraction, r.pages_checked,
                      dict(r.node_pages), r.hugepage_bytes, line)
