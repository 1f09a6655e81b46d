"""Engine-neutral helpers for the plug-ins: the table of every engine symbol a plug-in patches or
calls, per engine version range, checked against the installed engine (at plug-in load, and by
``serve`` before the launch, in the engine's Python); resolving a dotted hook target the way the
engines' hook registries do; finding this process's rank; and handing a placed buffer back as the
tensor the engine's allocator would have returned.

Nothing here imports an engine at module level; torch is imported only when a torch dtype is
asked for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable


def missing(target: str) -> str:
    """Why dotted ``target`` cannot be hooked ("" when it can): resolved as SGLang's
    ``HookRegistry.apply_hooks`` resolves it (the owner, then the attribute), so a target that would
    fail there — and be swallowed there — fails here, where strict mode can act on it. A module on
    the way that exists but fails to import (a missing dependency of the engine's) is named with its
    own error, not hidden behind "has no attribute" (``pkgutil.resolve_name`` takes such a module
    for a missing one)."""
    return resolve(target)[1]


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


# ------------------------------------------------------------------------------------------
# the hook table: every engine symbol a plug-in patches or calls, per engine version range
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Hook:
    """One engine symbol a plug-in relies on. ``role``: the plug-in's name for it; ``target``: the
    dotted name (``module.Class.method``; a class's parameters are its constructor's, without
    ``self``); ``use``: ``around`` (patched: the plug-in wraps or replaces it), ``call`` (the
    plug-in calls it) or ``path`` (left alone, but the plug-in relies on it calling the patched
    ones); ``params``: the leading parameter names the plug-in relies on (it reads or passes
    arguments by position or name), checked against the installed signature — for a ``call``,
    every parameter after them must have a default (the plug-in passes only those); ``why``:
    what the plug-in does with it."""

    role: str
    target: str
    use: str
    params: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class HookTable:
    """The symbols of one engine over one version range (``versions``, e.g. ``>=0.5.23,<0.6``:
    the releases whose code was read and checked)."""

    engine: str                 # the name in messages: "SGLang"
    dist: str                   # the distribution importlib.metadata knows it by: "sglang"
    versions: str
    hooks: tuple[Hook, ...]

    def target(self, role: str) -> str:
        return next(h.target for h in self.hooks if h.role == role)


SGLANG_TABLES: tuple[HookTable, ...] = (
    HookTable("SGLang", "sglang", ">=0.5.23,<0.6", (
        Hook("caller", "sglang.srt.model_executor.model_runner.ModelRunner.maybe_init_hisparse_coordinator",
             "around", ("self",),
             "the scope in which the HiSparse host pool is built (model_runner.py: the one place 0.5.23 "
             "constructs a coordinator); afterwards, whichever coordinator it built is checked"),
        Hook("coordinator", "sglang.srt.managers.hisparse_coordinator.HiSparseCoordinator.__init__",
             "around", ("self",),
             "the coordinator's constructor builds mem_pool_host; its kv_buffer is checked against what was placed"),
        Hook("budget", "sglang.srt.mem_cache.pool_host.base.host_memory_budget_bytes", "around",
             ("requested_bytes",),
             "SGLang's host-memory check before the allocation: answered for the memory the pool goes to"),
        Hook("allocate", "sglang.srt.mem_cache.pool_host.common.HostTensorAllocator.allocate", "around",
             ("self", "dims", "dtype", "device"),
             "the host pool's allocation: the plug-in places the buffer and returns it as this returns its own"),
        Hook("rank", "sglang.srt.distributed.parallel_state.get_tensor_model_parallel_rank", "call", (),
             "the scheduler's TP rank, which selects the rank's row of the plan"),
    )),
)
"""SGLang's hook tables, newest last. A new release that moves a symbol gets a new row with its
range; the range of the row it replaces ends there."""

_R = "vllm.v1.hisparse.runtime"

VLLM_TABLES: tuple[HookTable, ...] = (
    # read in vLLM 0.34.0 (v1/hisparse/binding.py:85, runtime.py:204-350, kv_offload/cpu/shared_offload_region.py:73,
    # 110); each resolved in the installed release by scripts/vllm-integration
    HookTable("vLLM", "vllm", ">=0.34.0,<0.35", (
        Hook("kv_caches", "vllm.v1.hisparse.binding.allocate_hisparse_kv_caches", "around",
             ("kv_cache_config", "device", "layout", "kernel_block_sizes", "host_pool", "allocate"),
             "marks the pool's allocation; afterwards proves the host-resident views lie in the plug-in's buffers"),
        Hook("private", f"{_R}.allocate_pinned_host_pool", "around", ("size",),
             "the private pool, placed on the rank's target"),
        Hook("preflight", f"{_R}.check_hisparse_host_memory", "around", ("pool_bytes",),
             "vLLM's 95 %-of-MemAvailable preflight, answered for the target"),
        Hook("shared", f"{_R}.allocate_hisparse_host_pools", "around",
             ("vllm_config", "tensor_sizes", "num_blocks", "host_block_stride"), "marks the shared pool"),
        Hook("region", f"{_R}.SharedOffloadRegion", "around",
             ("engine_id", "num_chunks", "rank", "kv_bytes_per_chunk", "cpu_page_size", "barrier",
              "creator_memory_check", "populate_shard", "num_segments"),
             "the shared region (the name runtime constructs it by); mapped from the DAX slice in devdax mode"),
        Hook("populate", "vllm.v1.kv_offload.cpu.shared_offload_region._get_populate_write_fn", "around",
             ("mmap_obj",), "the first touch of the shared region: bound to the node before it"),
        Hook("pin", f"{_R}.pin_tensor", "call", ("tensor",), "vLLM's cudaHostRegister, kept for the placed pool"),
        Hook("allocate", f"{_R}.HiSparseHostPool.allocate", "path", ("self", "size"),
             "the pool's allocation path, which calls the patched functions by their module names"),
    )),
)
"""vLLM's hook tables, newest last (:mod:`sactool.plugins.vllm`): the ``around`` rows are module
globals the plug-in replaces in their modules (looked up at call time there)."""

TABLES: dict[str, tuple[HookTable, ...]] = {"sglang": SGLANG_TABLES, "vllm": VLLM_TABLES}
"""Every engine's tables, by distribution name (a plug-in for another engine adds its own)."""


@dataclass(frozen=True)
class HookProblem:
    """A symbol of the table that is missing or changed in the installed engine."""

    role: str
    target: str
    why: str


@dataclass(frozen=True)
class HookCheck:
    """The hook table checked against the installed engine: ``version`` (None: not installed),
    the ``table`` used, its ``problems``, and ``note`` (the version is outside every table's range:
    the newest table was checked)."""

    engine: str
    version: str | None
    table: HookTable | None
    problems: tuple[HookProblem, ...] = ()
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.table is not None and self.version is not None and not self.problems

    def message(self) -> str:
        """One line naming the first problem, the symbol and the version ("" when none)."""
        if self.version is None:
            return f"{self.engine} is not installed in this Python"
        if not self.problems:
            return ""
        p = self.problems[0]
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        return f"hook target {p.target} {p.why} in {self.engine} {self.version}{more}"

    def lines(self) -> list[str]:
        if self.version is None or self.table is None:
            return [self.message()]
        out = [f"{self.engine} {self.version}: {len(self.table.hooks)} hook targets of the {self.table.versions} "
               f"table " + ("resolved, signatures as expected" if not self.problems else
                            f"checked, {len(self.problems)} missing or changed")]
        out += [f"{p.role}: {p.target} {p.why}" for p in self.problems]
        return out + ([self.note] if self.note else [])

    def to_data(self) -> dict[str, Any]:
        return {"engine": self.engine, "version": self.version,
                "table": self.table.versions if self.table is not None else None,
                "problems": [{"role": p.role, "target": p.target, "why": p.why} for p in self.problems],
                "note": self.note, "ok": self.ok}


def installed_version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (importlib.metadata), None when absent."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def table_for(tables: tuple[HookTable, ...], version: str) -> tuple[HookTable, str]:
    """The table whose range holds ``version``; outside every range, the newest, with a note."""
    from sactool.profile import version_in

    for t in tables:
        if version_in(version, t.versions):
            return t, ""
    newest = tables[-1]
    return newest, (f"{newest.engine} {version} is outside every hook table's range "
                    f"({', '.join(t.versions for t in tables)}): checked against the {newest.versions} table")


def signature_problem(obj: Any, hook: Hook) -> str:
    """Why ``obj``'s signature is not what ``hook`` relies on ("" when it is, or cannot be read)."""
    import inspect

    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""
    params = list(sig.parameters.values())
    names = [p.name for p in params]
    if hook.use == "call" and names[:len(hook.params)] == list(hook.params):
        required = [p.name for p in params[len(hook.params):]
                    if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        return (f"takes required parameters ({', '.join(required)}); the plug-in calls it with "
                + (f"({', '.join(hook.params)})" if hook.params else "none")) if required else ""
    if names[:len(hook.params)] != list(hook.params):
        return (f"has parameters ({', '.join(names)}); the plug-in relies on "
                f"({', '.join(hook.params)}{', …' if len(hook.params) else ''})")
    return ""


def check_hooks(tables: tuple[HookTable, ...], version: str | None = None) -> HookCheck:
    """Resolve every symbol of the table for ``version`` (default: the installed version) and check
    its signature where the plug-in relies on it. Imports the engine's modules (seconds)."""
    engine, dist = tables[-1].engine, tables[-1].dist
    version = installed_version(dist) if version is None else version
    if version is None:
        return HookCheck(engine, None, None)
    table, note = table_for(tables, version)
    problems = []
    for h in table.hooks:
        obj, why = resolve(h.target)
        if not why:
            why = signature_problem(obj, h)
            if why and obj is not None:
                why = f"changed: {why}"
        else:
            why = f"is missing: {why}"
        if why:
            problems.append(HookProblem(h.role, h.target, why))
    return HookCheck(engine, version, table, tuple(problems), note)
