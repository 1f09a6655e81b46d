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
  returns. Every allocation gets its own placement — several in one constructor (DeepSeek-V4's
  one per layer) as well as a second coordinator's pool in the same process: on the node, or the
  next free aligned stretch of the rank's slice, never over a pool placed before
  (:mod:`sactool.pool.placer`). A VMA policy beats the rank's task policy, so this composes with
  SGLang's GPU-local binding.

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

from sactool.plugins.hooks import SGLANG_TABLES  # noqa: E402 (the symbols this plug-in patches, per version)

_TESTED = SGLANG_TABLES[0]   # 0.5.23's row: the names tests and scripts read
CALLER_TARGET = _TESTED.target("caller")
COORDINATOR_TARGET = _TESTED.target("coordinator")
ALLOCATE_TARGET = _TESTED.target("allocate")
BUDGET_TARGET = _TESTED.target("budget")
RANK_FUNCTION = _TESTED.target("rank")
HOOKS = {"caller": "around_caller", "coordinator": "around_coordinator_init", "budget": "around_budget",
         "allocate": "around_allocate"}
"""Which function of this module wraps each ``around`` role of the hook table."""

_ALLOCATING: contextvars.ContextVar[bool] = contextvars.ContextVar("sactool_hisparse_host_pool", default=False)
_DECLINED: contextvars.ContextVar[str] = contextvars.ContextVar("sactool_hisparse_declined", default="")


class _Hooks:
    """This process's plug-in: the profile read, the engine-neutral placer (None until a profile
    is read) and the buffers placed inside the coordinator's constructor now running."""

    def __init__(self) -> None:
        self.profile: Any = None
        self.placer: HostPoolPlacer | None = None
        self.placed_in_init: list[Any] = []
        self.hooks: Any = None            # the HookCheck of this process's SGLang (the table used)
        self.checked: set[int] = set()    # ids of the coordinators whose pool was checked


_HOOKS = _Hooks()


def placer() -> HostPoolPlacer | None:
    """The process's :class:`~sactool.pool.placer.HostPoolPlacer` (None before a profile was read)."""
    return _HOOKS.placer


def reset() -> None:
    """Forget the profile and unmap what was placed (tests)."""
    if _HOOKS.placer is not None:
        _HOOKS.placer.close()
    _HOOKS.profile, _HOOKS.placer, _HOOKS.placed_in_init, _HOOKS.hooks = None, None, [], None
    _HOOKS.checked = set()


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
               reader: Any = None) -> Any:
    """Place the pool of ``rank`` as ``profile`` says (:meth:`HostPoolPlacer.place`: beside every pool
    this process placed before, never over one)."""
    p = _placer_for(profile, reader)
    p.strict = strict
    return p.place(rank, n_bytes, rank_source=rank_source)


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
    if getattr(profile, "engine", "sglang") != "sglang":
        msg = f"{path} is a profile for {profile.engine}, not SGLang"
        if profile.pool.strict or strict_env:
            raise SystemExit(f"sactool_cxl: {msg} (pool.strict: stopping)")
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
    check = check_engine()
    if not check.ok:
        msg = check.message() + ": the plug-in cannot place the pool"
        if _HOOKS.placer.strict:
            raise SystemExit(f"sactool_cxl: {msg} (pool.strict: stopping)")
        logger.warning("sactool_cxl: WARNING: %s; the HiSparse host pool will be in DRAM where SGLang puts it, "
                       "not on %s", msg, _targets(profile))
        _fallback(msg)
        return False
    if check.note:
        logger.warning("sactool_cxl: %s", check.note)
    assert check.table is not None   # check.ok
    _HOOKS.hooks = check
    for h in check.table.hooks:
        if h.use == "around":
            registry.register(h.target, globals()[HOOKS[h.role]], hook_type)
    logger.info("sactool_cxl: hooks registered for profile %s (%s), SGLang %s", path, profile.model.name,
                check.version)
    return True


def check_engine(version: str | None = None) -> Any:
    """The hook table checked against the installed SGLang (:func:`sactool.plugins.hooks.check_hooks`):
    every symbol resolved, signatures where the plug-in relies on them."""
    from sactool.plugins.hooks import check_hooks

    return check_hooks(SGLANG_TABLES, version)


def _targets(profile: Any) -> str:
    from sactool.pool.targets import target_names

    return ", ".join(target_names(profile.pool)) or "the profile's pool targets"


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


def around_caller(original: Callable, self: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``ModelRunner.maybe_init_hisparse_coordinator``: the scope in which SGLang builds the
    HiSparse host pool, whichever coordinator class builds it. Host-pool allocations inside are
    ours; afterwards the coordinator it kept (``self.hisparse_coordinator``) is checked, unless the
    coordinator hook already checked it — a second coordinator class, building the pool while every
    hook target still exists, is caught here (strict: stop; else WARNING "NOT on")."""
    outer = not _ALLOCATING.get()
    token = _ALLOCATING.set(True)
    if outer:
        _HOOKS.placed_in_init = []
    declined = _DECLINED.set("")
    try:
        out = original(self, *args, **kwargs)
        coord = getattr(self, "hisparse_coordinator", None)
        if _HOOKS.placer is not None and coord is not None and id(coord) not in _HOOKS.checked:
            check_placed(coord, via=f"{type(coord).__name__} (built by maybe_init_hisparse_coordinator, not through "
                                    "the HiSparseCoordinator hook)", declined=_DECLINED.get())
    finally:
        _DECLINED.reset(declined)
        _ALLOCATING.reset(token)
    return out


def around_coordinator_init(original: Callable, self: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``HiSparseCoordinator.__init__``: host-pool allocations inside it are ours; after it,
    the pool SGLang kept must be the one placed (strict: stop; else WARNING "NOT on"). A refusal
    of SGLang's host-memory check that the plug-in's answer caused becomes the plug-in's own stop
    in strict mode."""
    token = _ALLOCATING.set(True)
    declined = _DECLINED.set("")
    _HOOKS.placed_in_init = []
    p = _HOOKS.placer
    if p is not None:
        p.budget_answer = None
    try:
        out = original(self, *args, **kwargs)
    except ValueError as e:
        if p is not None and p.strict and p.budget_answer is not None and "Not enough host memory" in str(e):
            rank, _ = current_rank()
            _stop(f"rank {rank}: SGLang's host pool does not fit the {p.budget_answer} bytes the plug-in can place "
                  f"it in ({e})")
        raise
    finally:
        stepped_aside = _DECLINED.get()
        _DECLINED.reset(declined)
        _ALLOCATING.reset(token)
    _HOOKS.checked.add(id(self))
    if _HOOKS.placer is not None:
        check_placed(self, declined=stepped_aside)
    return out


def host_tensors(pool: Any) -> list[Any]:
    """The tensors of a host pool's ``kv_buffer``: one tensor, or a list/tuple of them
    (``DeepSeekV4PagedHostPool`` with layout ``layer_first``: one per layer); [] when absent."""
    kv = getattr(pool, "kv_buffer", None)
    if kv is None:
        return []
    return list(kv) if isinstance(kv, (list, tuple)) else [kv]


def check_placed(coordinator: Any, via: str = "", declined: str = "") -> bool:
    """Does every tensor of ``coordinator.mem_pool_host.kv_buffer`` lie in a buffer placed during
    its constructor (``via``: how the coordinator was built, when not through the hooked one;
    ``declined``: why the plug-in stepped aside, non-strict)?"""
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
    if not placed and declined:
        why = f"the plug-in stepped aside: {declined}"
    elif not placed:
        why = "the allocation hook did not run or did not place it" + (f"; the coordinator is {via}" if via else "")
    elif not tensors:
        why = "the coordinator has no mem_pool_host.kv_buffer to check"
    else:
        first = next((a for a in outside if a is not None), None)
        why = (f"{len(outside)} of SGLang's {len(tensors)} kv_buffer tensor(s) are not in the placed buffers"
               + (f" (one at {first:#x})" if first is not None else "") + (f"; the coordinator is {via}" if via else ""))
    msg = f"rank {rank}: host pool NOT on {target}: {why}"
    if _HOOKS.placer is not None and _HOOKS.placer.strict and not declined:
        _stop(msg)
    logger.warning("sactool_cxl: %s (SGLang's allocator placed it where the rank's memory policy says)", msg)
    return False


def around_budget(original: Callable, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``host_memory_budget_bytes(requested_bytes=0, *, auto_size=False)``: inside the
    coordinator, the budget of the memory the plug-in places the pool in; elsewhere SGLang's."""
    p = _HOOKS.placer
    if not _ALLOCATING.get() or p is None or _DECLINED.get():
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
    if requested and requested > answer:    # it cannot go where the plug-in places it (a pinned share, a full node)
        msg = f"rank {rank}: the {requested}-byte HiSparse pool does not fit {source} ({answer} bytes)"
        if p.strict:
            _stop(msg)
        _fallback(msg)
        _DECLINED.set(msg)                  # the allocation hook steps aside too: SGLang's own budget and allocator
        return original(*args, **kwargs)
    if not requested and not p.strict:      # the pool compares its total itself: a refusal must not come from us
        own = original(*args, **kwargs)
        if own > answer:
            answer, source = own, f"SGLang's own budget, larger than {source} ({answer} bytes; non-strict)"
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
    if not _ALLOCATING.get() or p is None or _DECLINED.get():
        return original(self, *args, **kwargs)
    dims, dtype, device = _bind_allocate_args(args, kwargs)
    if device != "cpu":
        return original(self, *args, **kwargs)
    count = math.prod(dims)
    rank, how = current_rank()
    before = _HOOKS.placed_in_init
    buf = p.place(rank, count * element_size(dtype), rank_source=how)   # beside what this process placed before
    if buf is None:
        return original(self, *args, **kwargs)
    _HOOKS.placed_in_init = [*before, buf]
    self.dtype, self.dims = dtype, dims      # what SGLang's allocate records
    return view(buf, dims, dtype)


def _sglang_tp_rank() -> int:
    from sactool.plugins.hooks import resolve

    table = _HOOKS.hooks.table if _HOOKS.hooks is not None else _TESTED
    fn, why = resolve(table.target("rank"))
    if why:
        raise LookupError(why)
    return int(fn())


def current_rank() -> tuple[int | None, str]:
    """This scheduler's TP rank (0..tp_size-1, the GPU index the profile's rank tables use):
    SGLang's own answer, else the contract's variables (:func:`sactool.plugins.hooks.discover_rank`)."""
    from sactool.plugins.hooks import discover_rank

    return discover_rank(_sglang_tp_rank, "get_tensor_model_parallel_rank()")
