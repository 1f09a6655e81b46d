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
  slice of its DAX device (offset and size from the rank plan, :mod:`sactool.hisparse.rankplan`;
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
import mmap
import os
from dataclasses import dataclass
from typing import Any, Callable

logger = logging.getLogger("sactool.sglang_plugin")

COORDINATOR_TARGET = "sglang.srt.managers.hisparse_coordinator.HiSparseCoordinator.__init__"
ALLOCATE_TARGET = "sglang.srt.mem_cache.pool_host.common.HostTensorAllocator.allocate"
BUDGET_TARGET = "sglang.srt.mem_cache.pool_host.base.host_memory_budget_bytes"
STANDIN_ENV = "SACTOOL_DEVDAX_STANDIN"
RANK_FUNCTION = "sglang.srt.distributed.parallel_state.get_tensor_model_parallel_rank"
VERIFY_ALL_PAGES_UP_TO = 1 << 20
"""Pages checked with move_pages: every page up to this many (4 GiB of 4 KiB pages), else an even
sample of this many — a bound on the time a 40 GB pool's verification takes, stated in the log."""

_ALLOCATING: contextvars.ContextVar[bool] = contextvars.ContextVar("sactool_hisparse_host_pool", default=False)
_KEEP: list[Any] = []          # PlacedBuffers stay alive as long as the process (SGLang owns the view)
_PLACED: list["PoolResult"] = []   # what was placed, in order (placed_pools())
_STATE: dict[str, Any] = {"profile": None, "strict": False, "plans": None, "budget_answer": None,
                          "placed_in_init": None}


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
        profile = with_env_gpu_nodes(profile)
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
    missing = [(t, why) for t in (COORDINATOR_TARGET, BUDGET_TARGET, ALLOCATE_TARGET)
               for why in [_missing(t)] if why]
    if missing:
        msg = f"hook target {missing[0][0]} does not exist in this SGLang ({missing[0][1]})"
        if _STATE["strict"]:
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
    from sactool.profile.hostpool import GPU_NODES_ENV, gpu_nodes_from_env, with_gpu_nodes

    value = os.environ.get(GPU_NODES_ENV)
    if not value:
        return profile
    nodes = gpu_nodes_from_env(value, profile.world_size)
    logger.info("sactool_cxl: rank GPU sockets from $%s: %s (profile: %s)", GPU_NODES_ENV, value,
                list(profile.pool.gpu_local_nodes))
    return with_gpu_nodes(profile, nodes)


def _missing(target: str) -> str:
    """Why ``target`` cannot be hooked ("" when it can): resolved as SGLang's ``apply_hooks``
    resolves it (the owner, then the attribute), so a target that would fail there — and be
    swallowed there — fails here, where strict mode can act on it. A module on the way that exists
    but fails to import (a missing dependency of SGLang's) is named with its own error, not hidden
    behind "has no attribute" (``pkgutil.resolve_name`` takes such a module for a missing one)."""
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
            return f"importing {name} failed: {type(e).__name__}: {e}"
        i = j
    if obj is None:
        return f"{owner}: no module {parts[0]}"
    for j, part in enumerate(parts[i:], start=i):
        if not hasattr(obj, part):
            return f"{'.'.join(parts[:j])} has no attribute {part}"
        obj = getattr(obj, part)
    if not hasattr(obj, attr):
        return f"{owner} has no attribute {attr}"
    return ""


# ------------------------------------------------------------------------------------------
# the hooks
# ------------------------------------------------------------------------------------------


def around_coordinator_init(original: Callable, self: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``HiSparseCoordinator.__init__``: host-pool allocations inside it are ours; after it,
    the pool SGLang kept must be the one placed (strict: stop; else WARNING "NOT on")."""
    token = _ALLOCATING.set(True)
    _STATE["placed_in_init"] = []
    try:
        out = original(self, *args, **kwargs)
    finally:
        _ALLOCATING.reset(token)
    if _STATE["profile"] is not None:
        check_placed(self)
    return out


def _address(t: Any) -> int | None:
    if hasattr(t, "data_ptr"):
        return int(t.data_ptr())
    ctypes_ = getattr(t, "ctypes", None)
    return int(ctypes_.data) if ctypes_ is not None else None


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
    placed = _STATE.get("placed_in_init") or []
    tensors = host_tensors(getattr(coordinator, "mem_pool_host", None))
    addrs = [_address(t) for t in tensors]
    outside = [a for a in addrs if a is None or not any(b.address <= a < b.address + b.size_bytes for b in placed)]
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
    if _STATE["strict"]:
        _stop(msg)
    logger.warning("sactool_cxl: %s (SGLang's allocator placed it where the rank's memory policy says)", msg)
    return False


def around_budget(original: Callable, *args: Any, **kwargs: Any) -> Any:
    """AROUND ``host_memory_budget_bytes(requested_bytes=0, *, auto_size=False)``: inside the
    coordinator, the budget of the memory the plug-in places the pool in; elsewhere SGLang's."""
    if not _ALLOCATING.get() or _STATE["profile"] is None:
        return original(*args, **kwargs)
    requested = args[0] if args else kwargs.get("requested_bytes", 0)
    rank, _ = current_rank()
    answer, source = None, ""
    try:
        if rank is not None:
            answer, source = pool_budget(plans_for(rank))
    except Exception as e:
        msg = f"rank {rank}: {getattr(e, 'message', e)}"
        if _STATE["strict"]:      # SGLang's own check would refuse (or accept) for the wrong memory
            _stop(msg)
        logger.warning("sactool_cxl: %s; no pool budget, SGLang's host-memory budget applies", msg)
    if answer is None:
        return original(*args, **kwargs)
    _STATE["budget_answer"] = answer
    what = (f"the {requested}-byte HiSparse pool" if requested else
            "the HiSparse pool (no size passed: the pool compares its total itself)")
    logger.warning("sactool_cxl: rank %s: SGLang's host-memory check of %s answered with %d bytes: %s",
                   rank, what, answer, source)
    return answer


def pool_budget(plan: Any, reader: Any = None) -> tuple[int | None, str]:
    """Bytes the pool of ``plan`` may take where it goes, and where that figure came from."""
    if plan.mode == "devdax":
        if plan.slot is None or plan.slot.size_bytes is None:
            return None, ""
        return plan.slot.size_bytes, (f"its slice of {plan.target} at offset {plan.offset_bytes} "
                                      f"(rank plan, align {plan.align_bytes})")
    if plan.policy == "weighted_interleave" or plan.node is None:
        return None, ""
    from sactool.host.sysfs import SysfsReader
    from sactool.memory import nodes as memnodes

    reader = reader or SysfsReader()
    f = memnodes.free_estimate(memnodes.topology(reader), reader, plan.node)
    if f.bytes is None:
        return None, ""
    from sactool.units import format_bytes

    margin, room = f.margin_bytes, f.room_bytes or 0   # known: f.bytes is not None
    share = _pinned_share(plan)
    if share is not None and share < room:   # pool.capacity_bytes pins what this rank's pool may take
        return share, (f"rank {plan.rank}'s share of {plan.target}'s pinned capacity: {format_bytes(share)} "
                       f"(pool.capacity_bytes over {len(plan.shared_with) + 1} rank(s))")
    return room, f"free memory of {plan.target}: {f.source}, minus {format_bytes(margin)} kept back"


def _pinned_share(plan: Any) -> int | None:
    """NUMA mode with ``pool.capacity_bytes``: this rank's share of the pinned capacity (the rank plan's
    slot); None when the capacity is not pinned (the node's free memory decides)."""
    profile = _STATE.get("profile")
    if plan.mode != "numa" or profile is None or profile.pool.capacity_bytes is None:
        return None
    return plan.slot.size_bytes if plan.slot is not None else None


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
    before = _STATE.get("placed_in_init") or []
    buf = place_pool(_STATE["profile"], rank, count * element_size(dtype), rank_source=how, strict=_STATE["strict"],
                     slice_used=sum(b.size_bytes for b in before))   # devdax: offset; numa: of the pinned share
    if buf is None:
        return original(self, *args, **kwargs)
    _STATE["placed_in_init"] = [*before, buf]
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
    """What was placed, for the log, for tests and for scripts/sglang-integration."""

    rank: int
    target: str
    size_bytes: int
    verified_fraction: float
    pages_checked: int
    node_pages: dict[int, int]
    hugepage_bytes: int
    line: str
    address: int = 0
    offset_bytes: int = 0           # devdax: the slice's offset in the device
    path: str | None = None         # devdax: the device (or the file standing in for it)
    budget_answer: int | None = None  # what the plug-in answered SGLang's host-memory check


def placed_pools() -> list[PoolResult]:
    """Every pool this process placed, in order."""
    return list(_PLACED)


def standin_devices() -> dict[str, dict]:
    """``$SACTOOL_DEVDAX_STANDIN``: DAX device name -> {"path", "align_bytes"} of a file standing in."""
    import json

    raw = os.environ.get(STANDIN_ENV, "")
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        return {str(k): {"path": str(v["path"]), "align_bytes": int(v["align_bytes"])} for k, v in data.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"${STANDIN_ENV} is not a JSON mapping name -> {{path, align_bytes}}: {e}") from None


def live_targets(profile: Any, reader: Any = None) -> list[Any]:
    """The profile's pool targets with the facts of this machine (sizes, align, CPU node), or of
    the files standing in for DAX devices (``$SACTOOL_DEVDAX_STANDIN``)."""
    from sactool.profile.hostpool import pool_targets as names_of
    from sactool.hisparse.rankplan import Target
    from sactool.hisparse.targets import pool_targets
    from sactool.host.sysfs import SysfsReader

    q = profile.pool
    names = names_of(profile)
    stand = standin_devices() if q.mode == "devdax" else {}
    out = {}
    for n in names:
        if n in stand:
            size = os.stat(stand[n]["path"]).st_size
            if q.capacity_bytes is not None:
                size = min(size, q.capacity_bytes)
            out[n] = Target(n, "devdax", size, f"{stand[n]['path']} standing in for /dev/{n} (${STANDIN_ENV})",
                            stand[n]["align_bytes"], None, "a file standing in: no socket")
    rest = [n for n in names if n not in out]
    if rest:
        from sactool.memory import nodes as memnodes

        reader = reader or SysfsReader()
        for t in pool_targets(memnodes.topology(reader), reader, rest, capacity_bytes=q.capacity_bytes):
            out[t.name] = t
    return [out[n] for n in names]


def plans_for(rank: int, reader: Any = None) -> Any:
    """This rank's PoolPlan (the rank plan over this machine's targets), computed once."""
    from sactool.profile.hostpool import plan_for_rank, rank_plan

    profile = _STATE["profile"]
    cached = _STATE.get("plans")
    if cached is None or cached[0] is not profile:
        targets = live_targets(profile, reader)
        cached = (profile, targets, rank_plan(profile, targets, check_pool=False))
        _STATE["plans"] = cached
    _, targets, plan = cached
    if not 0 <= rank < len(plan.slots):
        from sactool.errors import RecordError

        raise RecordError(f"rank {rank} is outside the profile's {len(plan.slots)} ranks (sglang.tp_size)",
                          "the profile's sglang.tp_size must match the --tp-size SGLang runs with")
    return plan_for_rank(profile, rank, targets, plan)


def place_pool(profile: Any, rank: int | None, n_bytes: int, *, rank_source: str = "", strict: bool = False,
               reader: Any = None, slice_used: int = 0) -> Any:
    """Allocate the pool of ``rank`` as the profile says; return the PlacedBuffer (kept alive) or
    None after logging why SGLang's allocator must be used (PlacementStop when ``strict``).
    ``slice_used``: bytes of the rank's devdax slice earlier allocations of the same pool took (the
    next one maps right after them)."""
    from sactool.errors import SactoolError

    fail = _stop if strict else _fallback
    if rank is None:
        fail("cannot tell this process's rank (no SGLang TP group, no $SACTOOL_RANK/$RANK)")
        return None
    if _STATE.get("profile") is not profile:
        _STATE.update(profile=profile, plans=None)
    try:
        plan = plans_for(rank, reader)
    except (SactoolError, OSError, ValueError) as e:
        fail(f"rank {rank}: {getattr(e, 'message', e)}")
        return None
    try:
        buf = _allocate(plan, n_bytes, reader, slice_used)
    except (SactoolError, OSError, ValueError) as e:
        from sactool.units import format_bytes

        fail(f"rank {rank}: placing {format_bytes(n_bytes)} on {plan.target} failed: {getattr(e, 'message', e)}")
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
    _PLACED.append(res)
    return buf


def _allocate(plan: Any, n_bytes: int, reader: Any, slice_used: int = 0) -> Any:
    from sactool.host.sysfs import SysfsReader
    from sactool.host.sysfs import parse_cpulist
    from sactool.memory import allocate, map_devdax, map_shared
    from sactool.memory.placed import zero_fill

    reader = reader or SysfsReader()
    sample = None if n_bytes // mmap.PAGESIZE <= VERIFY_ALL_PAGES_UP_TO else VERIFY_ALL_PAGES_UP_TO
    cpus = None if plan.prefault_cpus == "auto" else list(parse_cpulist(plan.prefault_cpus))
    if cpus is None and plan.cpu_node is not None and reader.live:
        from sactool.memory import nodes as memnodes

        allowed = os.sched_getaffinity(0)
        try:
            cpus = [c for c in memnodes.topology(reader).node(plan.cpu_node).cpus if c in allowed] or None
        except Exception:
            cpus = None
    if plan.mode == "devdax":
        slot = plan.slot
        if slot is None or slot.size_bytes is None:
            raise ValueError(f"no slice of {plan.target} is planned for rank {plan.rank} (device size unknown)")
        stand = standin_devices().get(plan.target)
        align = (stand["align_bytes"] if stand else plan.align_bytes) or 1
        need = -(-n_bytes // align) * align
        if slice_used + need > slot.size_bytes:
            raise ValueError(f"SGLang asks for {n_bytes} bytes" + (f" more ({slice_used} of the slice already hold "
                             "earlier allocations of this pool)" if slice_used else "")
                             + f", rank {plan.rank}'s slice of {plan.target} holds {slot.size_bytes} (rank plan)")
        offset = (slot.offset_bytes or 0) + slice_used
        if stand:
            buf = map_shared(stand["path"], os.stat(stand["path"]).st_size, stand["align_bytes"], n_bytes,
                             offset_bytes=offset, name=plan.target,
                             note=f"a file standing in for /dev/{plan.target} (${STANDIN_ENV})")
        else:
            buf = map_devdax(plan.target, n_bytes, offset_bytes=offset, reader=reader)
        _dontfork(buf)
        buf.prefault_seconds = zero_fill(buf.mmap, buf.size_bytes, plan.prefault_threads, cpus)
        buf.verify(sample)
        return buf
    share = _pinned_share(plan)
    if share is not None and slice_used + n_bytes > share:
        from sactool.units import format_bytes

        raise ValueError(f"SGLang asks for {format_bytes(n_bytes)}" + (f" more ({format_bytes(slice_used)} already "
                         "placed for this pool)" if slice_used else "") + f", rank {plan.rank}'s share of "
                         f"{plan.target}'s pinned capacity holds {format_bytes(share)} (pool.capacity_bytes over "
                         f"{len(plan.shared_with) + 1} rank(s))")
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
    stand = " (a DRAM node stood in for CXL: pool.stand_in)" if plan.stand_in and plan.mode == "numa" else ""
    if plan.mode == "devdax":
        expect = (f"{r.verified_fraction:.1%} of {checked} pages on "
                  f"{', '.join(f'node{n}' for n in r.expected_nodes)}" if r.expected_nodes
                  else f"{checked} pages asked for (no target node known)")
        line = (f"sactool_cxl: rank {plan.rank} ({rank_source or 'given'}) HiSparse host pool {buf.size_bytes} bytes "
                f"on {plan.target}, {buf.hugepages}: move_pages {expect} [{where}], zero-filled in "
                f"{buf.prefault_seconds:.2f} s by {plan.prefault_threads} threads")
    else:
        line = (f"sactool_cxl: rank {plan.rank} ({rank_source or 'given'}) HiSparse host pool {buf.size_bytes} bytes "
                f"on {plan.target}{stand}, policy {buf.policy}, hugepages {plan.hugepages}: verified "
                f"{r.verified_fraction:.1%} of {checked} pages on {', '.join(f'node{n}' for n in r.expected_nodes)} "
                f"[{where}], huge-page bytes {r.hugepage_bytes}, prefault {buf.prefault_seconds:.2f} s "
                f"by {plan.prefault_threads} threads")
    if plan.mode == "devdax":
        gpu = f" (GPU {plan.slot.gpu})" if plan.slot is not None else ""
        line += (f"; devdax slice{gpu} at offset {buf.offset_bytes} of {buf.path}"
                 + (" (a file standing in for the device)" if any("standing in" in n for n in buf.notes) else "")
                 + f", {len(plan.shared_with) + 1} rank(s) share {plan.target}; "
                 "move_pages may not report device-DAX pages (cudaHostRegister of such memory is unverified "
                 "here, docs/sources.md, SGLang §6.5)")
    return PoolResult(plan.rank, plan.target, buf.size_bytes, r.verified_fraction, r.pages_checked,
                      dict(r.node_pages), r.hugepage_bytes, line, address=buf.address,
                      offset_bytes=buf.offset_bytes, path=buf.path, budget_answer=_STATE.get("budget_answer"))
