"""``sactool_cxl`` for vLLM: the ``vllm.general_plugins`` entry point that puts vLLM's own HiSparse
host pool on the CXL node or DAX device the profile's rank plan names.

vLLM 0.34 allocates the pool in each worker (:mod:`sactool.hisparse.vllm` has the facts and
their lines): ``allocate_hisparse_kv_caches`` (``v1/hisparse/binding.py``) asks
``HiSparseHostPool.allocate`` (``v1/hisparse/runtime.py``) for it, which either

* (private pool, one per rank) calls ``check_hisparse_host_memory(size)`` — 95 % of
  ``MemAvailable`` — then ``allocate_pinned_host_pool(size)`` (``torch.empty`` + ``pin_tensor``), or
* (shared pool, one per DP replica read by its TP ranks) calls ``allocate_hisparse_host_pools``,
  which builds a ``SharedOffloadRegion`` (``/dev/shm`` files created by TP rank 0 after
  ``check_hisparse_host_memory``, mapped by every TP rank, each pre-faulting its shard through
  ``_get_populate_write_fn``) and pins it.

Those names are module globals looked up at call time, so the plug-in replaces them in their
modules (vLLM's rows of the one hook table, :data:`sactool.plugins.hooks.VLLM_TABLES`, per vLLM
version range, as SGLang's are; each is resolved and its parameters checked when the plug-in loads
— a missing or changed one stops the worker in strict mode and is a loud warning otherwise, naming
the symbol and the vLLM version):

* ``allocate_hisparse_kv_caches`` (wrapped): marks "allocating the HiSparse host pool" with the
  pool's ``vllm_config`` while it runs, and afterwards proves the pool vLLM kept is the plug-in's:
  every host-resident KV view must lie in a buffer the plug-in placed (or, shared, in a region it
  bound and verified). A pool that came another way — a second pool class, a changed allocator —
  is reported "host pool NOT on <target>" (strict: the worker stops);
* ``allocate_pinned_host_pool`` (replaced while marked): the private pool from
  :class:`sactool.pool.placer.HostPoolPlacer` (mbind before the first touch, huge pages, pre-faulted near
  the node, verified with move_pages; or the rank's devdax slice), pinned with vLLM's own
  ``pin_tensor``;
* ``check_hisparse_host_memory`` (replaced while marked): answers vLLM's preflight for the memory
  the pool goes to — the target node's free memory, the rank's devdax slice, the node's free huge
  pages — so a pool larger than DRAM passes only through the plug-in, and one that does not fit its
  target is still refused;
* ``allocate_hisparse_host_pools`` (wrapped) marks the shared pool; inside it
  ``_get_populate_write_fn`` (``v1/kv_offload/cpu/shared_offload_region.py``, wrapped) binds the
  whole region to the replica's node with mbind *before* vLLM's first touch (the tmpfs object keeps
  the policy for every TP rank), then lets vLLM pre-fault, then verifies the rank's shard with
  move_pages; in devdax mode ``SharedOffloadRegion`` (as ``runtime`` names it) maps the replica's
  slice of its DAX device instead of ``/dev/shm`` files, each TP rank zeroing its shard between
  vLLM's two barriers.

It does nothing unless ``SACTOOL_PROFILE`` names a readable vLLM profile. Log lines start with
``sactool_cxl:``; the logger is ``sactool.plugins.vllm``.
"""

from __future__ import annotations

import contextvars
import importlib
import inspect
import logging
import mmap
import os
from typing import Any, Callable

logger = logging.getLogger("sactool.plugins.vllm")


from sactool.plugins.hooks import VLLM_TABLES  # noqa: E402 (the symbols this plug-in patches, per version)

WRAPPERS = {"kv_caches": "_wrap_kv_caches", "private": "_wrap_private", "preflight": "_wrap_preflight",
            "shared": "_wrap_shared", "populate": "_wrap_populate", "region": "_wrap_region"}
"""Which function of this module wraps (or replaces) each ``around`` role of vLLM's hook table."""


from sactool.pool.placer import PlacementStop  # noqa: E402  (one type for every engine's strict stop)


_CONTEXT: contextvars.ContextVar[Any] = contextvars.ContextVar("sactool_vllm_hisparse_pool", default=None)
"""While vLLM allocates the HiSparse pool: (vllm_config, "private" | "shared")."""


class _State:
    def __init__(self) -> None:
        self.placer: Any = None           # sactool.pool.placer.HostPoolPlacer
        self.settings: Any = None         # the profile's pool settings
        self.strict = False
        self.version = ""
        self.table: Any = None            # the HookTable register() checked (sactool.plugins.hooks)
        self.originals: dict[str, Any] = {}
        self.regions: list[dict] = []     # shared regions bound/mapped: {address, size, target, pages, ...}
        self.proofs: list[dict] = []      # one per allocate_hisparse_kv_caches: what the check found


_STATE = _State()


def state() -> _State:
    return _STATE


def _stop_or_warn(msg: str) -> None:
    if _STATE.strict:
        logger.error("sactool_cxl: %s (pool.strict: stopping)", msg)
        raise PlacementStop(f"sactool_cxl: {msg}")
    logger.warning("sactool_cxl: %s", msg)


def installed_vllm() -> str:
    from importlib import metadata

    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return ""


def check_engine(version: str | None = None) -> Any:
    """vLLM's hook table (:data:`sactool.plugins.hooks.VLLM_TABLES`) checked against the installed
    vLLM (or ``version``) by :func:`sactool.plugins.hooks.check_hooks`: every symbol resolved, its
    parameters where the plug-in relies on them. The same check ``serve`` runs in vLLM's Python."""
    from sactool.plugins.hooks import check_hooks

    return check_hooks(VLLM_TABLES, version if version is not None else (installed_vllm() or None))


# ------------------------------------------------------------------------------------------
# registration
# ------------------------------------------------------------------------------------------


def register() -> bool:
    """Entry point called by vLLM's ``load_general_plugins()`` in every vLLM process. True when
    the hooks are in place."""
    from sactool.errors import SactoolError
    from sactool.pool.contract import PROFILE_ENV, STRICT_ENV, with_env_gpu_nodes
    from sactool.pool.placer import HostPoolPlacer
    from sactool.pool.plan import PoolSpec
    from sactool.profile import load_profile

    path = os.environ.get(PROFILE_ENV)
    if not path:
        logger.debug("sactool_cxl: %s not set; plug-in inactive", PROFILE_ENV)
        return False
    strict_env = os.environ.get(STRICT_ENV, "") == "1"
    _STATE.strict = strict_env
    try:
        profile = with_env_gpu_nodes(load_profile(path))     # the GPUs' sockets as serve saw them
    except SactoolError as e:
        _stop_or_warn(f"{PROFILE_ENV} {path} unreadable: {e.message}; vLLM's own allocator is used")
        return False
    _STATE.strict = profile.pool.strict or strict_env
    if profile.engine != "vllm":
        _stop_or_warn(f"{path} is a profile for {profile.engine}, not vLLM; vLLM's own allocator is used")
        return False
    if profile.pool.placement != "plugin":
        logger.info("sactool_cxl: profile %s has placement %s: nothing to place", path, profile.pool.placement)
        return False
    version = installed_vllm()
    _STATE.version = version
    check = check_engine(version or None)
    if not check.ok:
        _stop_or_warn(f"{check.message()}; the HiSparse host pool would NOT be placed: vLLM's own allocator puts "
                      "it in DRAM")
        return False
    if check.note:
        logger.warning("sactool_cxl: %s", check.note)
    _STATE.table = check.table
    _STATE.placer = HostPoolPlacer(PoolSpec.of(profile), strict=_STATE.strict, engine="vLLM")
    _STATE.settings = profile.pool
    install()
    logger.info("sactool_cxl: vLLM %s hooks in place for profile %s (%s, %d pool(s))", version, path,
                profile.model.name, profile.world_size)
    return True


def install(table: Any = None) -> None:
    """Replace the ``around`` symbols of ``table`` (default: the one :func:`register` checked) in
    their modules with this module's wrappers (:data:`WRAPPERS`)."""
    from sactool.plugins.hooks import table_for

    table = table or _STATE.table or table_for(VLLM_TABLES, _STATE.version or installed_vllm())[0]
    for h in table.hooks:
        if h.use != "around":
            continue
        module, attr = h.target.rsplit(".", 1)
        owner = importlib.import_module(module)
        obj = getattr(owner, attr)
        if getattr(obj, "__sactool__", False):
            continue                      # loaded twice in one process: vLLM warns plug-ins may be
        new = globals()[WRAPPERS[h.role]](obj)
        setattr(new, "__sactool__", True)
        _STATE.originals[h.target] = obj
        setattr(owner, attr, new)


def uninstall() -> None:
    """Put vLLM's own symbols back (tests)."""
    for dotted, obj in _STATE.originals.items():
        module, _, name = dotted.rpartition(".")
        setattr(importlib.import_module(module), name, obj)
    _STATE.originals.clear()
    if _STATE.placer is not None:
        _STATE.placer.close()
    _STATE.placer, _STATE.settings, _STATE.regions, _STATE.proofs, _STATE.table = None, None, [], [], None


# ------------------------------------------------------------------------------------------
# who this worker is
# ------------------------------------------------------------------------------------------


def _tp() -> tuple[int, int, str]:
    """(TP rank, TP size, how it was told)."""
    try:
        from vllm.distributed.parallel_state import get_tp_group

        g = get_tp_group()
        return int(g.rank_in_group), int(g.world_size), "vLLM's TP group"
    except Exception:  # not initialised (a single process, tests)
        pass
    from sactool.pool.contract import RANK_ENV

    v = os.environ.get(RANK_ENV, "")
    if v.isdigit():
        return int(v), 1, f"${RANK_ENV}"
    return 0, 1, "no TP group: rank 0"


def owner_of(vllm_config: Any, shared: bool) -> tuple[int | None, str]:
    """The pool owner this worker allocates for: its DP replica (shared pool) or its rank
    (private pool: replica x TP size + TP rank). ``$SACTOOL_RANK`` names it where vLLM cannot."""
    from sactool.pool.contract import RANK_ENV

    env = os.environ.get(RANK_ENV, "")
    pc = getattr(vllm_config, "parallel_config", None)
    dp = getattr(pc, "data_parallel_index", None)
    if dp is None:
        dp = getattr(pc, "data_parallel_rank", None)
    if shared:
        if dp is not None:
            return int(dp), f"DP replica {dp} (parallel_config.data_parallel_index)"
        return (int(env), f"${RANK_ENV}") if env.isdigit() else (None, "unknown DP replica")
    rank, size, how = _tp()
    if env.isdigit() and how != "vLLM's TP group":
        return int(env), f"${RANK_ENV}"
    return int(dp or 0) * size + rank, f"DP replica {dp or 0} x TP {size} + TP rank {rank} ({how})"


# ------------------------------------------------------------------------------------------
# the hooks
# ------------------------------------------------------------------------------------------


def _placed_ranges() -> list[tuple[int, int, str]]:
    out = []
    p = _STATE.placer
    if p is not None:
        out += [(b.address, b.size_bytes, b.target) for b in p.placed]
    out += [(r["address"], r["size"], r["target"]) for r in _STATE.regions]
    return out


def _wrap_kv_caches(original: Callable) -> Callable:
    sig = inspect.signature(original)

    def allocate_hisparse_kv_caches(*args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)
        cfg = bound.arguments["kv_cache_config"]
        host_pool = bound.arguments["host_pool"]
        shared = bool(getattr(cfg, "hisparse_shared_host_pool", False))
        token = _CONTEXT.set((getattr(host_pool, "vllm_config", None), "shared" if shared else "private"))
        try:
            caches = original(*args, **kwargs)
        finally:
            _CONTEXT.reset(token)
        prove(cfg, caches, getattr(host_pool, "vllm_config", None), shared)
        return caches

    return allocate_hisparse_kv_caches


def prove(kv_cache_config: Any, caches: Any, vllm_config: Any, shared: bool) -> bool:
    """Every host-resident KV view vLLM kept lies in a buffer the plug-in placed (strict: stop;
    else WARNING "host pool NOT on <target>")."""
    owner, _ = owner_of(vllm_config, shared)
    p = _STATE.placer
    try:
        target = p.plan_for(owner).target if p is not None and owner is not None else "the planned target"
    except Exception:  # the plan failed: reported where it failed
        target = "the planned target"
    views = [caches[name] for t in getattr(kv_cache_config, "kv_cache_tensors", ()) if getattr(t, "host_resident", False)
             for name in t.layers if name in caches]
    ranges = _placed_ranges()
    outside = [v for v in views if not any(a <= int(v.data_ptr()) < a + s for a, s, _ in ranges)]
    ok = bool(views) and not outside
    _STATE.proofs.append({"owner": owner, "target": target, "views": len(views), "outside": len(outside), "ok": ok})
    if ok:
        logger.warning("sactool_cxl: pool %s: all %d host-resident KV views lie in the pool placed on %s "
                       "(the plug-in's allocator ran)", owner, len(views), target)
        return True
    if not views:
        why = "vLLM kept no host-resident KV view to check"
    elif not ranges:
        why = "the plug-in's allocator was not called (another allocation path built the pool)"
    else:
        why = f"{len(outside)} of {len(views)} host-resident KV views lie outside the buffers the plug-in placed"
    _stop_or_warn(f"pool {owner}: host pool NOT on {target}: {why}")
    return False


def _wrap_private(original: Callable) -> Callable:
    def allocate_pinned_host_pool(size: int) -> Any:
        ctx = _CONTEXT.get()
        p = _STATE.placer
        if ctx is None or p is None:
            return original(size)
        import torch

        from vllm.v1.hisparse import runtime

        vllm_config, _ = ctx
        owner, how = owner_of(vllm_config, False)
        page = mmap.PAGESIZE
        padded = -(-size // page) * page
        buf = p.place(owner, padded, rank_source=how)
        if buf is None:                   # logged (strict raised): vLLM's allocator
            return original(size)
        registered = torch.frombuffer(buf.mmap, dtype=torch.int8, count=padded)
        runtime.pin_tensor(registered)    # vLLM's own pinning (cudaHostRegister)
        return registered[:size], registered

    return allocate_pinned_host_pool


def _budget(owner: int | None) -> tuple[int | None, str]:
    p = _STATE.placer
    if p is None or owner is None:
        return None, ""
    plan = p.plan_for(owner)
    q = _STATE.settings
    if plan.mode == "numa" and q.hugepages in ("2MB", "1GB") and plan.node is not None:
        from sactool.pool.readings import hugepage_room

        room = hugepage_room(p.reader, plan.node, {"2MB": 2 << 20, "1GB": 1 << 30}[q.hugepages])  # now: after
        return room.bytes or 0, room.source                      # the pools this process placed already
    return p.pool_budget(plan)


def _wrap_preflight(original: Callable) -> Callable:
    def check_hisparse_host_memory(pool_bytes: int) -> None:
        ctx = _CONTEXT.get()
        if ctx is None or _STATE.placer is None:
            return original(pool_bytes)
        vllm_config, kind = ctx
        owner, _ = owner_of(vllm_config, kind == "shared")
        try:
            answer, source = _budget(owner)
        except Exception as e:
            _stop_or_warn(f"pool {owner}: no budget for vLLM's preflight ({getattr(e, 'message', e)})"
                          + ("" if _STATE.strict else "; vLLM's own check applies"))
            return original(pool_bytes)
        if answer is None:
            return original(pool_bytes)
        if pool_bytes > answer:
            raise ValueError(f"HiSparse host pool needs {pool_bytes} bytes but {source} holds {answer} bytes "
                             "(sactool_cxl answered vLLM's preflight for the pool's target). Lower the "
                             "HiSparseConnector host_pool_gib (vllm.host_pool_gib) or free memory there.")
        logger.warning("sactool_cxl: pool %s: vLLM's host-memory preflight for %d bytes answered with %d bytes: %s",
                       owner, pool_bytes, answer, source)
        return None

    return check_hisparse_host_memory


def _wrap_shared(original: Callable) -> Callable:
    def allocate_hisparse_host_pools(vllm_config: Any, *args: Any, **kwargs: Any) -> Any:
        token = _CONTEXT.set((vllm_config, "shared"))
        try:
            return original(vllm_config, *args, **kwargs)
        finally:
            _CONTEXT.reset(token)

    return allocate_hisparse_host_pools


def _wrap_populate(original: Callable) -> Callable:
    def _get_populate_write_fn(mmap_obj: mmap.mmap) -> Any:
        ctx = _CONTEXT.get()
        p = _STATE.placer
        if ctx is None or p is None or _STATE.settings.mode != "numa":
            return original(mmap_obj)
        vllm_config, _ = ctx
        owner, how = owner_of(vllm_config, True)
        try:
            plan = p.plan_for(owner)
            _bind(mmap_obj, plan)
            p.hold(plan, mmap_obj)        # counts against the owner's pinned share while vLLM maps it
        except Exception as e:
            _stop_or_warn(f"pool {owner}: binding the shared region to its target failed: {getattr(e, 'message', e)}; "
                          "vLLM pre-faults it where its memory policy says")
            return original(mmap_obj)
        fn = original(mmap_obj)           # its probe touches the first page: bound already

        def populate(mm: mmap.mmap, offset: int, length: int) -> None:
            fn(mm, offset, length)
            _verify_shard(mm, offset, length, plan, owner, how)

        return populate

    return _get_populate_write_fn


def _bind(mm: mmap.mmap, plan: Any) -> None:
    """mbind the whole shared mapping to the plan's node(s) with its policy (:func:`sactool.pool.region.bind`:
    tmpfs keeps the policy on the shared object, so every TP rank's first touch obeys it)."""
    from sactool.pool import region

    nodes = region.bind(mm, plan, _STATE.settings)
    logger.info("sactool_cxl: shared region %#x (%d bytes) bound to %s (%s) before its first touch",
                region.address(mm), len(mm), ", ".join(f"node{n}" for n in nodes), plan.policy)


def _verify_shard(mm: mmap.mmap, offset: int, length: int, plan: Any, owner: int | None, how: str) -> None:
    from sactool.pool import region

    _, want = region.policy_nodes(plan, _STATE.settings)
    r = region.verify(mm, offset, length, want)
    tp_rank, _, _ = _tp()
    rec = {"owner": owner, "tp_rank": tp_rank, "target": plan.target, "address": r.address, "size": len(mm),
           "shard_offset": offset, "shard_bytes": length, "pages_checked": r.pages_checked,
           "node_pages": dict(r.node_pages), "verified_fraction": r.fraction, "mode": "numa"}
    _STATE.regions.append(rec)
    stand = " (a DRAM node stood in for CXL: pool.stand_in)" if plan.stand_in else ""
    logger.warning("sactool_cxl: pool %s (%s) shared HiSparse region %d bytes on %s%s: TP rank %d pre-faulted its "
                   "shard [%d, %d) and verified %.1f%% of %d pages on %s [%s]", owner, how, len(mm), plan.target, stand,
                   tp_rank, offset, offset + length, 100 * r.fraction, r.pages_checked, plan.target, r.describe())
    if r.fraction < 1.0 and plan.policy == "bind":
        _stop_or_warn(f"pool {owner}: only {r.fraction:.1%} of TP rank {tp_rank}'s shard is on {plan.target}")


def _wrap_region(original: type) -> type:
    class SharedOffloadRegion(original):  # type: ignore[misc, valid-type]
        """vLLM's region; in devdax mode, during the HiSparse pool, the replica's DAX slice instead."""

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            ctx = _CONTEXT.get()
            p = _STATE.placer
            if ctx is not None and ctx[1] == "shared" and p is not None and _STATE.settings.mode == "devdax":
                return DaxRegion(ctx[0], *args, **kwargs)
            return super().__new__(cls)

    SharedOffloadRegion.__qualname__ = original.__qualname__
    SharedOffloadRegion.__module__ = original.__module__
    return SharedOffloadRegion


class DaxRegion:
    """The shared pool of one DP replica in its slice of a DAX device (or a file standing in for
    one): every TP rank maps the same slice ``MAP_SHARED``; each zeroes its shard between vLLM's two
    barriers (as vLLM's region pre-faults its shard), so the pool starts as zeroes, as a new
    ``/dev/shm`` file does. The interface is the one ``runtime`` uses: ``base_tensor``, ``cleanup``,
    ``is_pinned``/``pinned_addresses``."""

    def __init__(self, vllm_config: Any, engine_id: str, num_chunks: int, rank: int | None, kv_bytes_per_chunk: int,
                 cpu_page_size: int, barrier: Callable[[], None] | None = None, *,
                 creator_memory_check: Callable[[int], None] | None = None,
                 populate_shard: tuple[int, int] | None = None, num_segments: int = 1) -> None:
        import torch

        from sactool.pool import region
        from sactool.pool.contract import standin_devices

        p = _STATE.placer
        self.total_size_bytes = num_chunks * kv_bytes_per_chunk
        owner, how = owner_of(vllm_config, True)
        plan = p.plan_for(owner)
        if creator_memory_check is not None and (populate_shard is None or populate_shard[0] == 0):
            creator_memory_check(self.total_size_bytes)      # answered by the plug-in: the slice
        stand = standin_devices().get(plan.target)
        try:   # the next free stretch of the replica's slice: a second region of this process maps after the first
            buf = p.map_slice(plan, self.total_size_bytes)
        except ValueError as e:
            raise RuntimeError(f"sactool_cxl: {e}") from None
        offset = buf.offset_bytes
        self.buf = buf
        self.mmap_path = buf.path or plan.target
        if barrier is not None:
            barrier()                                        # every TP rank has mapped the slice
        index, count = populate_shard or (0, 1)
        share = -(-self.total_size_bytes // count)
        share = -(-share // mmap.PAGESIZE) * mmap.PAGESIZE
        start = min(index * share, self.total_size_bytes)
        length = max(0, min(share, self.total_size_bytes - start))
        if length:
            region.zero(buf.mmap, start, length)
        if barrier is not None:
            barrier()                                        # every shard is zeroed
        buf.verify()
        tp_rank, _, _ = _tp()
        rec = {"owner": owner, "tp_rank": tp_rank, "target": plan.target, "address": buf.address,
               "size": self.total_size_bytes, "offset_bytes": offset, "path": buf.path, "shard_offset": start,
               "shard_bytes": length, "mapping_verified": bool(buf.mapping and buf.mapping.verified), "mode": "devdax"}
        _STATE.regions.append(rec)
        logger.warning("sactool_cxl: pool %s (%s) shared HiSparse region %d bytes on %s: devdax slice at offset %d of "
                       "%s%s, TP rank %d zeroed its shard [%d, %d); mapping %s", owner, how, self.total_size_bytes,
                       plan.target, offset, buf.path, " (a file standing in for the device)" if stand else "", tp_rank,
                       start, start + length, "verified in /proc/self/maps" if rec["mapping_verified"] else "NOT verified")
        self._base: Any = torch.frombuffer(memoryview(buf.mmap)[:self.total_size_bytes], dtype=torch.int8)
        self.is_pinned = False
        self.pinned_addresses: list[int] = []
        self._views: list[Any] = []

    @property
    def base_tensor(self) -> Any:
        if self._base is None:
            raise RuntimeError("Shared offload region has been released.")
        return self._base

    def cleanup(self) -> None:
        """vLLM releases the region (``release_pinned_state``), as its own region does: what vLLM pinned
        is unregistered, the views dropped, the slice unmapped — only then is its stretch free for the
        next region. Still pinned (unregistering failed) or still viewed: it stays mapped, and held."""
        if self.is_pinned and self._base is not None:
            try:
                from vllm.v1.kv_offload.cpu.host_register import host_unregister

                for address in reversed(self.pinned_addresses or [self._base.data_ptr()]):
                    host_unregister(address)
            except Exception as e:  # noqa: BLE001 - whatever failed, the pages stay registered: keep them
                logger.warning("sactool_cxl: shared region at offset %d of %s stays mapped: unregistering it "
                               "failed (%s)", self.buf.offset_bytes, self.buf.path, e)
                return
            self.pinned_addresses.clear()
            self.is_pinned = False
        self._views.clear()
        self._base = None
        try:
            self.buf.close()
        except BufferError:
            logger.warning("sactool_cxl: shared region at offset %d of %s is still viewed: it stays mapped (and "
                           "its stretch of the slice held)", self.buf.offset_bytes, self.buf.path)


__all__ = ["VLLM_TABLES", "WRAPPERS", "DaxRegion", "PlacementStop", "check_engine", "install", "owner_of", "prove",
           "register", "state", "uninstall"]
