"""``sactool_cxl``: the SGLang plug-in that puts the HiSparse host pool on the CXL node or DAX device
the profile names (entry point group ``sglang.srt.plugins``; enabled by ``SGLANG_PLUGINS``).

SGLang 0.5.23 allocates the HiSparse host pool with ``HostTensorAllocator.allocate(dims, dtype,
device)`` — an anonymous mmap returned as ``torch.frombuffer(mm, dtype, count).reshape(dims)`` —
inside ``HiSparseCoordinator.__init__``, then pins it with cudaHostRegister. It has no way to
place it on a NUMA node, and it re-execs each rank under ``numactl --membind=<GPU node>``
(docs/sources.md, SGLang §3.4, §4). This plug-in registers three AROUND hooks:

* ``HiSparseCoordinator.__init__``: marks "allocating the HiSparse host pool" (a context variable)
  while the constructor runs; afterwards checks that the host pool SGLang kept
  (``self.mem_pool_host.kv_buffer``) lies in the buffers the plug-in placed — if not, it stops the
  rank (``pool.strict``) or logs at WARNING "host pool NOT on <target>". The host pools 0.5.23's
  coordinator builds (``hisparse_coordinator.py``): ``MLATokenToKVPoolHost`` (DSA models: one
  layer-first tensor), ``HiSparseMHATokenToKVPoolHost`` (MiniMax M3: one ``[2, layers, …]``
  tensor) and ``DeepSeekV4PagedHostPool`` (DeepSeek-V4, layout ``layer_first``: ``kv_buffer`` is a
  list of one tensor per layer, one ``allocate`` each) — every tensor of the list is checked;
* ``pool_host.base.host_memory_budget_bytes``: while marked, answers SGLang's host-memory check
  (``HostKVCache._allocate_host_buffer`` raises "Not enough host memory available" when the pool
  exceeds (MemAvailable − reserve) / ranks per host) for the memory the pool really goes to: the
  target node's free memory, or the rank's slice of its DAX device, which MemAvailable does not
  count at all (pools larger than DRAM);
* ``HostTensorAllocator.allocate``: while marked, allocates the buffer itself with
  :mod:`sactool.memory` (mbind to the rank's pool node with the profile's policy, huge pages,
  pre-faulted by threads pinned near that node, verified with move_pages) or maps the rank's own
  slice of its DAX device (offset and size from the rank plan, :mod:`sactool.pool.rankplan`;
  zero-filled, as the authors' fork does), and returns the same tensor view SGLang's allocator
  returns. Several allocations in one constructor (DeepSeek-V4's one per layer) each get their
  own placement: on the node, or the next aligned stretch of the rank's slice, never overlapping. A VMA policy beats the rank's task policy, so this composes with SGLang's GPU-local
  binding.

It does nothing unless ``SACTOOL_PROFILE`` names a readable profile. If a hook target is missing
(another SGLang) or placement fails it logs why and SGLang's own allocator is used, unless the
profile says ``pool.strict`` (or ``SACTOOL_STRICT=1`` when the profile cannot be read): then it
stops the rank. ``SGLang's apply_hooks`` swallows a failure to patch, so the check after the
coordinator's constructor is what makes strict strict. Log lines start with ``sactool_cxl:``.

``SACTOOL_GPU_LOCAL_NODES`` (set by ``sactool serve`` when the GPUs visible to SGLang sit on other
sockets than the profile's ``pool.gpu_local_nodes``) replaces them, so the plan is the dry run's.

``SACTOOL_DEVDAX_STANDIN`` (JSON ``{"dax0.0": {"path": FILE, "align_bytes": N}}``) lets a file
stand in for a DAX device that is not there (scripts/sglang-integration: the same
``mmap(MAP_SHARED)`` at the same offsets, on tmpfs); every line logged about it says so.
"""

from __future__ import annotations

import contextvars
import logging
import math
import os
from typing import Any, Callable

from sactool.plugins.hooks import address as _address, element_size, inside, missing as _missing, view  # noqa: F401
from sactool.pool.contract import STANDIN_ENV, standin_devices  # noqa: F401 (re-exported for the plug-in's users)
from sactool.pool.placer import (  # noqa: F401 (the placement half; re-exported for the plug-in's users)
    VERIFY_ALL_PAGES_UP_TO, HostPoolPlacer, PlacementStop, PoolResult, fallback, stop as _stop,
)

logger = logging.getLogger("sactool.plugins.sglang")
ENGINE = "SGLang"


def _fallback(msg: str) -> None:
    fallback(msg, ENGINE)

COORDINATOR_TARGET = "sglang.srt.managers.hisparse_coordinator.HiSparseCoordinator.__init__"
ALLOCATE_TARGET = "sglang.srt.mem_cache.pool_host.common.HostTensorAllocator.allocate"
BUDGET_TARGET = "sglang.srt.mem_cache.pool_host.base.host_memory_budget_bytes"
RANK_FUNCTION = "sglang.srt.distributed.parallel_state.get_tensor_model_parallel_rank"

_ALLOCATING: contextvars.ContextVar[bool] = contextvars.ContextVar("sactool_hisparse_host_pool", default=False)


class _Hooks:
    """This process's plug-in: the profile read, the engine-neutral placer (None until a profile
    is read) and the buffers placed inside the coordinator's constructor now running."""

    def __init__(self) -> None:
        self.profile: Any = None
        self.placer: HostPoolPlacer | None = None
        self.placed_in_init: list[Any] = []


_HOOKS = _Hooks()


def placer() -> HostPoolPlacer | None:
    """The process's :class:`~sactool.pool.placer.HostPoolPlacer` (None before a profile was read)."""
    return _HOOKS.placer


def reset() -> None:
    """Forget the profile and unmap what was placed (tests)."""
    if _HOOKS.placer is not None:
        _HOOKS.placer.close()
    _HOOKS.profile, _HOOKS.placer, _HOOKS.placed_in_init = None, None, []


def new_placer(profile: Any, *, strict: bool = False, reader: Any = None) -> HostPoolPlacer:
    """A placer for the pool ``profile`` asks of SGLang (:meth:`sactool.pool.plan.PoolSpec.of`)."""
    from sactool.pool.plan import PoolSpec

    return HostPoolPlacer(PoolSpec.of(profile), strict=strict, reader=reader, engine=ENGINE)


def _placer_for(profile: Any, reader: Any = None) -> HostPoolPlacer:
    p = _HOOKS.placer
    if p is None or _HOOKS.profile is not profile or (reader is not None and p.reader is not reader):
        fresh = new_placer(profile, strict=p.strict if p is not None else False, reader=reader)
        if p is not None:   # the same process: what it placed stays placed (and listed)
            fresh.placed, fresh._keep = p.placed, p._keep
        _HOOKS.profile, _HOOKS.placer = profile, fresh
        p = fresh
    return p


def place_pool(profile: Any, rank: int | None, n_bytes: int, *, rank_source: str = "", strict: bool = False,
               reader: Any = None, slice_used: int = 0) -> Any:
    """Place the pool of ``rank`` as ``profile`` says (:meth:`HostPoolPlacer.place`)."""
    p = _placer_for(profile, reader)
    p.strict = strict
    return p.place(rank, n_bytes, rank_source=rank_source, slice_used=slice_used)


def plans_for(rank: int, reader: Any = None) -> Any:
    """This rank's PoolPlan under the process's profile (:meth:`HostPoolPlacer.plan_for`)."""
    if _HOOKS.placer is None:
        raise RuntimeError("sactool_cxl: no profile read in this process")
    return _placer_for(_HOOKS.profile, reader).plan_for(rank)


def pool_budget(plan: Any, reader: Any = None) -> tuple[int | None, str]:
    """Bytes the pool of ``plan`` may take where it goes (:meth:`HostPoolPlacer.pool_budget`)."""
    if _HOOKS.placer is None:
        raise RuntimeError("sactool_cxl: no profile read in this process")
    return _placer_for(_HOOKS.profile, reader).pool_budget(plan)


def placed_pools() -> list[PoolResult]:
    """Every pool this process placed, in order."""
    return list(_HOOKS.placer.placed) if _HOOKS.placer is not None else []


# ------------------------------------------------------------------------------------------
# registration
# ------------------------------------------------------------------------------------------


def register(registry: Any = None, hook_type: Any = None) -> bool:
    """Entry point called by SGLang's ``load_plugins()``. Returns True when hooks were registered.

    ``registry``/``hook_type`` default to SGLang's ``HookRegistry``/``HookType.AROUND`` (tests pass
    the real classes loaded from the SGLang 0.5.23 source, or a stand-in)."""
    from sactool.pool.contract import PROFILE_ENV, STRICT_ENV

    path = os.environ.get(PROFILE_ENV)
    if not path:
        logger.debug("sactool_cxl: %s not set; plug-in inactive", PROFILE_ENV)
        return False
    strict_env = os.environ.get(STRICT_ENV, "") == "1"
    from sactool.errors import SactoolError
    from sactool.profile import load_profile

    try:
        profile = load_profile(path)
        profile = with_env_gpu_nodes(profile)
    except SactoolError as e:
        msg = f"{PROFILE_ENV} {path} unreadable: {e.message}"
        if strict_env:
            raise SystemExit(f"sactool_cxl: {msg} ({STRICT_ENV}=1: stopping)")
        _fallback(msg)
        return False
    reset()
    _HOOKS.profile = profile
    _HOOKS.placer = new_placer(profile, strict=profile.pool.strict or strict_env)
    if profile.pool.placement != "plugin" or profile.sglang.role == "prefill":
        logger.info("sactool_cxl: profile %s has placement %s, role %s: nothing to place", path,
                    profile.pool.placement, profile.sglang.role)
        return False
    if registry is None:
        try:
            from sglang.srt.plugins.hook_registry import HookRegistry, HookType
        except ImportError as e:
            msg = f"SGLang's HookRegistry cannot be imported ({e})"
            if _HOOKS.placer.strict:
                raise SystemExit(f"sactool_cxl: {msg} (pool.strict: stopping)")
            _fallback(msg)
            return False
        registry, hook_type = HookRegistry, HookType.AROUND
    missing = [(t, why) for t in (COORDINATOR_TARGET, BUDGET_TARGET, ALLOCATE_TARGET)
               for why in [_missing(t)] if why]
    if missing:
        msg = f"hook target {missing[0][0]} does not exist in this SGLang ({missing[0][1]})"
        if _HOOKS.placer.strict:
            raise SystemExit(f"sactool_cxl: {msg} (pool.strict: stopping)")
        _fallback(msg)
        return False
    registry.register(COORDINATOR_TARGET, around_coordinator_init, hook_type)
    registry.register(BUDGET_TARGET, around_budget, hook_type)
    registry.register(ALLOCATE_TARGET, around_allocate, hook_type)
    logger.info("sactool_cxl: hooks registered for profile %s (%s)", path, profile.model.name)
    return True


def with_env_gpu_nodes(profile: Any) -> Any:
    """The profile with ``$SACTOOL_GPU_LOCAL_NODES`` (set by ``sactool serve`` when the GPUs visible
    to SGLang sit on other sockets than the profile says) as each rank's GPU socket."""
    from sactool.pool.contract import GPU_NODES_ENV, with_env_gpu_nodes as from_env

    value = os.environ.get(GPU_NODES_ENV)
    if value:
        logger.info("sactool_cxl: rank GPU sockets from $%s: %s (profile: %s)", GPU_NODES_ENV, value,
                    list(profile.pool.gpu_local_nodes))
    return from_env(profile)


# ------------------------------------------------------------------------------------------
# the hooks
# ------------------------------------------------------------------------------------------


def around_coordinator_init(original: Callable, self: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``HiSparseCoordinator.__init__``: host-pool allocations inside it are ours; after it,
    the pool SGLang kept must be the one placed (strict: stop; else WARNING "NOT on")."""
    token = _ALLOCATING.set(True)
    _HOOKS.placed_in_init = []
    try:
        out = original(self, *args, **kwargs)
    finally:
        _ALLOCATING.reset(token)
    if _HOOKS.placer is not None:
        check_placed(self)
    return out


def host_tensors(pool: Any) -> list[Any]:
    """The tensors of a host pool's ``kv_buffer``: one tensor, or a list/tuple of them
    (``DeepSeekV4PagedHostPool`` with layout ``layer_first``: one per layer); [] when absent."""
    kv = getattr(pool, "kv_buffer", None)
    if kv is None:
        return []
    return list(kv) if isinstance(kv, (list, tuple)) else [kv]


def check_placed(coordinator: Any) -> bool:
    """Does every tensor of ``coordinator.mem_pool_host.kv_buffer`` lie in a buffer placed during
    its constructor?"""
    rank, _ = current_rank()
    try:
        target = plans_for(rank).target if rank is not None else "the profile's pool target"
    except Exception:  # the plan itself failed: already reported by the allocation hook
        target = "the profile's pool target"
    placed = _HOOKS.placed_in_init
    tensors = host_tensors(getattr(coordinator, "mem_pool_host", None))
    addrs = [_address(t) for t in tensors]
    outside = [a for a in addrs if not inside(a, placed)]
    if placed and tensors and not outside:
        return True
    if not placed:
        why = "the allocation hook did not run or did not place it"
    elif not tensors:
        why = "the coordinator has no mem_pool_host.kv_buffer to check"
    else:
        first = next((a for a in outside if a is not None), None)
        why = (f"{len(outside)} of SGLang's {len(tensors)} kv_buffer tensor(s) are not in the placed buffers"
               + (f" (one at {first:#x})" if first is not None else ""))
    msg = f"rank {rank}: host pool NOT on {target}: {why}"
    if _HOOKS.placer is not None and _HOOKS.placer.strict:
        _stop(msg)
    logger.warning("sactool_cxl: %s (SGLang's allocator placed it where the rank's memory policy says)", msg)
    return False


def around_budget(original: Callable, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``host_memory_budget_bytes(requested_bytes=0, *, auto_size=False)``: inside the
    coordinator, the budget of the memory the plug-in places the pool in; elsewhere SGLang's."""
    p = _HOOKS.placer
    if not _ALLOCATING.get() or p is None:
        return original(*args, **kwargs)
    requested = args[0] if args else kwargs.get("requested_bytes", 0)
    rank, _ = current_rank()
    answer, source = None, ""
    try:
        if rank is not None:
            answer, source = p.pool_budget(p.plan_for(rank))
    except Exception as e:
        msg = f"rank {rank}: {getattr(e, 'message', e)}"
        if p.strict:      # SGLang's own check would refuse (or accept) for the wrong memory
            _stop(msg)
        logger.warning("sactool_cxl: %s; no pool budget, SGLang's host-memory budget applies", msg)
    if answer is None:
        return original(*args, **kwargs)
    p.budget_answer = answer
    what = (f"the {requested}-byte HiSparse pool" if requested else
            "the HiSparse pool (no size passed: the pool compares its total itself)")
    logger.warning("sactool_cxl: rank %s: SGLang's host-memory check of %s answered with %d bytes: %s",
                   rank, what, answer, source)
    return answer


def _bind_allocate_args(args: tuple, kwargs: dict) -> tuple[tuple, Any, str]:
    """``allocate(self, dims: tuple, dtype: torch.dtype, device: str)`` (0.5.23 signature)."""
    names = ("dims", "dtype", "device")
    vals = dict(zip(names, args))
    vals.update({k: v for k, v in kwargs.items() if k in names})
    return tuple(vals["dims"]), vals.get("dtype"), vals.get("device", "cpu")


def around_allocate(original: Callable, self: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``HostTensorAllocator.allocate``: place the HiSparse pool, else call the original."""
    p = _HOOKS.placer
    if not _ALLOCATING.get() or p is None:
        return original(self, *args, **kwargs)
    dims, dtype, device = _bind_allocate_args(args, kwargs)
    if device != "cpu":
        return original(self, *args, **kwargs)
    count = math.prod(dims)
    rank, how = current_rank()
    before = _HOOKS.placed_in_init
    buf = p.place(rank, count * element_size(dtype), rank_source=how,
                  slice_used=sum(b.size_bytes for b in before))   # devdax: offset; numa: of the pinned share
    if buf is None:
        return original(self, *args, **kwargs)
    _HOOKS.placed_in_init = [*before, buf]
    self.dtype, self.dims = dtype, dims      # what SGLang's allocate records
    return view(buf, dims, dtype)


def _sglang_tp_rank() -> int:
    from sglang.srt.distributed.parallel_state import get_tensor_model_parallel_rank

    return int(get_tensor_model_parallel_rank())


def current_rank() -> tuple[int | None, str]:
    """This scheduler's TP rank (0..tp_size-1, the GPU index the profile's rank tables use):
    SGLang's own answer, else the contract's variables (:func:`sactool.plugins.hooks.discover_rank`)."""
    from sactool.plugins.hooks import discover_rank

    return discover_rank(_sglang_tp_rank, "get_tensor_model_parallel_rank()")
