"""The ``sactool_cxl`` plug-in: placement for real on node 0 (mbind, pre-fault, move_pages), the
fallback and strict paths, and the hook wrappers applied by SGLang's own HookRegistry (the real
0.5.23 ``hook_registry.py``, stdlib-only, loaded from the cached release; the minimal stand-in in
tests/standins only when that cannot be had) around stand-ins of the two SGLang functions."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sactool.plugins import sglang as sp
from sactool.profile import load_profile, save_profile, validate

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SITE = HERE / "standins" / "site"


def node0_profile(**pool):
    p = load_profile(REPO / "profiles/examples/cxl-one-node.yaml")
    pool = {"nodes": (0,), "gpu_local_nodes": (), "stand_in": True, "prefault_threads": 2, **pool}
    return validate(replace(p, sglang=replace(p.sglang, tp_size=2, attn_dp_size=1),
                            pool=replace(p.pool, **pool)))


@pytest.fixture(autouse=True)
def clean_state():
    sp.reset()
    yield
    sp.reset()


# ---- placement, for real --------------------------------------------------------------------

def test_one_probe_per_process(monkeypatch):
    """The placer probes the machine once for its targets, every budget and the prefault CPUs (each
    re-probed before the split, issue 19); only each allocation's free-memory check reads the node's
    free memory again, as it is when the pool is mapped."""
    from sactool.memory import nodes as memnodes
    from sactool.pool.plan import PoolSpec
    from sactool.pool.placer import HostPoolPlacer

    probes = []
    real = memnodes.topology
    monkeypatch.setattr(memnodes, "topology", lambda reader=None: probes.append(1) or real(reader))
    p = HostPoolPlacer(PoolSpec.of(node0_profile()))
    for rank in (0, 1):
        assert p.place(rank, 4 << 20) is not None
        assert p.pool_budget(p.plan_for(rank))[0] > 0
    p.close()
    assert len(probes) == 1 + 2


def test_place_pool_on_node0_verified(caplog):
    caplog.set_level(logging.INFO, logger="sactool")
    buf = sp.place_pool(node0_profile(), 1, 32 << 20, rank_source="test")
    r = buf.report
    assert r.expected_nodes == (0,) and r.verified_fraction == 1.0
    assert r.pages_checked == r.pages_total == (32 << 20) // 4096 and r.node_pages == {0: r.pages_total}
    assert buf in sp.placer()._keep and buf.size_bytes >= 32 << 20
    line = caplog.records[-1].getMessage()
    assert line.startswith("sactool_cxl: rank 1 (test)") and "on node0" in line and "stood in for CXL" in line
    assert "verified 100.0%" in line and "policy bind" in line


def test_policies_and_hugepages_reach_the_allocation():
    pref = sp.place_pool(node0_profile(policy="preferred", hugepages="none"), 0, 8 << 20)
    assert pref.policy == "preferred" and pref.hugepages == "none" and pref.report.verified_fraction == 1.0
    wi = sp.place_pool(node0_profile(policy="weighted_interleave", interleave_weights={0: 1}), 0, 8 << 20)
    assert wi.policy == "weighted_interleave" and wi.nodes == (0,)
    cpus = sp.place_pool(node0_profile(prefault_cpus="0", prefault_threads=1), 0, 4 << 20)
    assert cpus.report.verified_fraction == 1.0


def test_one_prefault_thread_is_said_in_the_singular(caplog):
    caplog.set_level(logging.INFO, logger="sactool")
    prof = node0_profile(prefault_cpus="0", prefault_threads=1)
    assert sp.place_pool(prof, 0, 4 << 20) is not None
    line = caplog.records[-1].getMessage()
    assert line.startswith("sactool_cxl: rank 0") and line.endswith(" s by 1 thread"), line
    from sactool.pool.plan import PoolSpec, plan_for_rank

    assert "prefault 1 thread on CPUs 0" in plan_for_rank(PoolSpec.of(prof), 0).describe()


def test_fallback_on_missing_node_and_strict_stop(caplog):
    caplog.set_level(logging.WARNING, logger="sactool")
    prof = node0_profile(nodes=(7,))
    assert sp.place_pool(prof, 0, 4 << 20) is None
    assert "SGLang's own allocator is used" in caplog.text and "node7" in caplog.text
    with pytest.raises(sp.PlacementStop, match="node7"):
        sp.place_pool(prof, 0, 4 << 20, strict=True)
    assert sp.place_pool(node0_profile(), None, 4 << 20) is None and "cannot tell" in caplog.text
    assert sp.place_pool(node0_profile(), 5, 4 << 20) is None and "outside the profile's 2 ranks" in caplog.text


def test_devdax_missing_device_falls_back(caplog, monkeypatch):
    caplog.set_level(logging.WARNING, logger="sactool")
    monkeypatch.delenv(sp.STANDIN_ENV, raising=False)
    prof = node0_profile(mode="devdax", nodes=(), dax_devices=("dax0.0", "dax1.0"))
    assert sp.place_pool(prof, 0, 4 << 20) is None and "DAX device dax0.0 does not exist" in caplog.text


MiB = 1 << 20


def _standin(monkeypatch, tmp_path, n=2, size=64 * MiB):
    import json

    devs = {}
    for d in range(n):
        f = tmp_path / f"dax{d}.0"
        with open(f, "wb") as fh:
            fh.truncate(size)
        devs[f"dax{d}.0"] = {"path": str(f), "align_bytes": 2 * MiB}
    monkeypatch.setenv(sp.STANDIN_ENV, json.dumps(devs))
    return devs


def devdax_profile(ranks=4, devices=2, **pool):
    p = node0_profile(mode="devdax", nodes=(), dax_devices=tuple(f"dax{d}.0" for d in range(devices)),
                      stand_in=False, **pool)
    return validate(replace(p, sglang=replace(p.sglang, tp_size=ranks, attn_dp_size=ranks)))


def test_ranks_share_a_devdax_device_each_in_its_own_slice(monkeypatch, tmp_path, caplog):
    """4 ranks on 2 devices (round-robin): each maps its own aligned slice at the rank plan's
    offset — a file stands in for each device, written through the slice and read back from the file."""
    caplog.set_level(logging.WARNING, logger="sactool")
    devs = _standin(monkeypatch, tmp_path)
    prof = devdax_profile()
    seen = {}
    for r in range(4):
        buf = sp.place_pool(prof, r, 5 * MiB)
        assert buf is not None, caplog.text
        res = sp.placed_pools()[-1]
        seen[r] = (res.target, res.offset_bytes, buf.size_bytes)
        buf.mmap[0:1] = bytes([0x40 + r])   # no flush(): msync returns EINVAL on a real device-DAX mapping
    # partition = 64 MiB // 2 ranks, on the 2 MiB align; rank r on device r % 2
    assert seen == {0: ("dax0.0", 0, 6 * MiB), 1: ("dax1.0", 0, 6 * MiB),
                    2: ("dax0.0", 32 * MiB, 6 * MiB), 3: ("dax1.0", 32 * MiB, 6 * MiB)}
    import mmap

    for r, (t, off, _) in seen.items():
        # read back as on a real /dev/daxX.Y (read/pread return EINVAL there): a second MAP_SHARED mapping
        with open(devs[t]["path"], "rb") as f:
            second = mmap.mmap(f.fileno(), 2 * MiB, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ, offset=off)
        try:
            assert second[0:1] == bytes([0x40 + r])
        finally:
            second.close()
    assert "devdax slice (GPU 2) at offset 33554432" in caplog.text and "standing in" in caplog.text


def test_devdax_pool_larger_than_its_slice_is_refused(monkeypatch, tmp_path, caplog):
    _standin(monkeypatch, tmp_path, size=16 * MiB)
    prof = devdax_profile(ranks=8)          # 4 ranks per 16 MiB device: 4 MiB slices
    assert sp.place_pool(prof, 0, 5 * MiB) is None and "slice of dax0.0 holds 4194304" in caplog.text
    with pytest.raises(sp.PlacementStop):
        sp.place_pool(prof, 0, 5 * MiB, strict=True)


# ---- registration -----------------------------------------------------------------------------

@pytest.fixture
def sglang(monkeypatch, tmp_path, sglang_wheel):
    """Stand-in SGLang modules on sys.path, with the real 0.5.23 HookRegistry when obtainable."""
    monkeypatch.syspath_prepend(str(SITE))
    for m in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, m)
    root, why = sglang_wheel.source_root()
    if root is not None:
        spec = importlib.util.spec_from_file_location("sglang.srt.plugins.hook_registry",
                                                      root / "sglang/srt/plugins/hook_registry.py")
        mod = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "sglang.srt.plugins.hook_registry", mod)
        spec.loader.exec_module(mod)
        which = "real SGLang 0.5.23 HookRegistry"
    else:
        mod = importlib.import_module("sglang.srt.plugins.hook_registry")
        which = f"stand-in HookRegistry ({why})"
    print(f"\nhooks applied by the {which}")
    mod.HookRegistry.reset()
    yield mod
    mod.HookRegistry.reset()
    for m in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        sys.modules.pop(m, None)


def _write(tmp_path, prof):
    path = tmp_path / "profile.yaml"
    save_profile(prof, path, force=True)
    return path


def test_register_is_a_noop_without_a_profile(monkeypatch, sglang):
    monkeypatch.delenv("SACTOOL_PROFILE", raising=False)
    assert sp.register() is False and not sglang.HookRegistry._hooks


def test_unreadable_profile_falls_back_or_stops(monkeypatch, tmp_path, sglang, caplog):
    monkeypatch.setenv("SACTOOL_PROFILE", str(tmp_path / "nope.yaml"))
    monkeypatch.delenv("SACTOOL_STRICT", raising=False)
    assert sp.register() is False and "unreadable" in caplog.text
    monkeypatch.setenv("SACTOOL_STRICT", "1")
    with pytest.raises(SystemExit, match="unreadable"):
        sp.register()


def _coordinator(**kw):
    from sglang.srt.managers.hisparse_coordinator import HiSparseCoordinator

    return HiSparseCoordinator(None, None, top_k=2048, device_buffer_size=2048, device="cuda", tp_group=None,
                               host_to_device_ratio=2, **kw)


def test_hooks_place_the_hisparse_pool_and_nothing_else(monkeypatch, tmp_path, sglang, caplog):
    caplog.set_level(logging.INFO, logger="sactool")
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile())))
    monkeypatch.setenv("SACTOOL_RANK", "1")
    assert sp.register() is True
    sglang.HookRegistry.apply_hooks()
    from sglang.srt.mem_cache.pool_host import common

    # outside the coordinator: SGLang's own allocator (HiCache pools etc. are not ours)
    other = common.HostTensorAllocator().allocate((4, 8), dtype=np.uint8, device="cpu")
    assert common.STOCK_ALLOCATIONS == [(4, 8)] and other.shape == (4, 8)
    # inside: placed, verified, returned as the same kind of view, then "pinned" as usual
    coord = _coordinator()
    buf = sp.placer()._keep[-1]
    host = coord.host_buffer
    assert common.STOCK_ALLOCATIONS == [(4, 8)]
    assert host.shape == (4, 2048 * 2 + 64, 1, 656) and host.dtype == np.uint8
    assert host.ctypes.data == buf.address and common.REGISTERED[-1] is host
    assert coord.allocator.dims == host.shape and coord.allocator.dtype == np.uint8
    assert buf.report.verified_fraction == 1.0 and buf.report.expected_nodes == (0,)
    host[3, -1, 0, -1] = 7                                   # the view is the placed mapping
    assert buf.mmap[host.nbytes - 1] == 7
    assert "rank 1 ($SACTOOL_RANK)" in caplog.text and "on node0" in caplog.text


def test_hooks_fall_back_or_stop_when_placement_fails(monkeypatch, tmp_path, sglang, caplog):
    monkeypatch.setenv("SACTOOL_RANK", "0")
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile(nodes=(7,)))))
    assert sp.register() is True
    sglang.HookRegistry.apply_hooks()
    from sglang.srt.mem_cache.pool_host import common

    coord = _coordinator()
    assert common.STOCK_ALLOCATIONS == [coord.host_buffer.shape] and not (sp.placer() and sp.placer()._keep)
    assert "SGLang's own allocator is used" in caplog.text
    sp.placer().strict = True                                # pool.strict, as register() sets it
    with pytest.raises(sp.PlacementStop):
        _coordinator()


REMOVABLE = [   # (module, owner or None, attribute): every "around" target of the 0.5.23 table
    ("sglang.srt.model_executor.model_runner", "ModelRunner", "maybe_init_hisparse_coordinator"),
    ("sglang.srt.managers.hisparse_coordinator", "HiSparseCoordinator", "__init__"),
    ("sglang.srt.mem_cache.pool_host.base", None, "host_memory_budget_bytes"),
    ("sglang.srt.mem_cache.pool_host.common", "HostTensorAllocator", "allocate"),
]


def test_every_patched_symbol_of_the_table_is_removable_here():
    from sactool.plugins.hooks import SGLANG_TABLES

    assert {f"{m}.{o + '.' if o else ''}{a}" for m, o, a in REMOVABLE} == \
        {h.target for h in SGLANG_TABLES[0].hooks if h.use == "around"}


@pytest.mark.parametrize("module, owner, attr", REMOVABLE)
def test_a_hook_target_removed_stops_a_strict_rank_and_warns_otherwise(monkeypatch, tmp_path, sglang, caplog,
                                                                       module, owner, attr):
    """The symbol is gone from the engine (a class without the method, a module without the
    function): SGLang's apply_hooks would log "Failed to apply hooks" and go on; the plug-in's table
    check at load names the symbol and the SGLang version — strict stops, else a WARNING and no hook."""
    caplog.set_level(logging.WARNING, logger="sactool")
    mod = importlib.import_module(module)
    if attr == "__init__":      # a class has an __init__ always: the coordinator class itself goes
        monkeypatch.delattr(mod, owner)
        gone = f"{module} has no attribute {owner}"
    else:
        monkeypatch.delattr(getattr(mod, owner) if owner else mod, attr)
        gone = f"has no attribute {attr}"
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile(strict=True))))
    with pytest.raises(SystemExit, match=rf"hook target \S*{owner or attr}\S* is missing: .*{gone} in SGLang 0\.5\.23"):
        sp.register()
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile(strict=False))))
    assert sp.register() is False and not sglang.HookRegistry._hooks
    warn = [r.getMessage() for r in caplog.records if "WARNING:" in r.getMessage()]
    assert warn and gone in warn[-1] and "SGLang 0.5.23" in warn[-1] and "will be in DRAM" in warn[-1]


def test_a_hook_target_whose_signature_changed_is_refused(monkeypatch, tmp_path, sglang):
    """Still there, but the plug-in reads its arguments by name and position: a renamed parameter
    is a changed target (signature checked at load)."""
    from sglang.srt.mem_cache.pool_host import common

    def allocate(self, shape, dtype, device):   # 'dims' renamed
        raise AssertionError("never called")

    monkeypatch.setattr(common.HostTensorAllocator, "allocate", allocate)
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile(strict=True))))
    with pytest.raises(SystemExit, match=r"allocate changed: has parameters \(self, shape, dtype, device\); the "
                                         r"plug-in relies on \(self, dims, dtype, device, …\) in SGLang 0\.5\.23"):
        sp.register()


def test_an_sglang_outside_every_table_is_checked_against_the_newest(monkeypatch, sglang):
    check = sp.check_engine("0.7.1")
    assert check.ok and "outside every hook table's range" in check.note and check.version == "0.7.1"


# ---- a second coordinator class beside intact hooks -------------------------------------------------

class _BypassCoordinator:
    """A coordinator class other than HiSparseCoordinator whose host pool comes from another
    allocation path (a plain array: not HostTensorAllocator.allocate)."""

    def __init__(self, req_to_token_pool, token_to_kv_pool_allocator, top_k, device_buffer_size, device, tp_group,
                 host_to_device_ratio=2, **kw):
        from types import SimpleNamespace

        tokens = device_buffer_size * host_to_device_ratio + 64
        self.mem_pool_host = SimpleNamespace(kv_buffer=np.zeros((4, tokens, 1, 656), dtype=np.uint8))


class _AllocatorCoordinator:
    """A second coordinator class that builds its pool through SGLang's own allocator."""

    def __init__(self, req_to_token_pool, token_to_kv_pool_allocator, top_k, device_buffer_size, device, tp_group,
                 host_to_device_ratio=2, **kw):
        from types import SimpleNamespace

        from sglang.srt.mem_cache.pool_host.common import HostTensorAllocator, alloc_with_host_register

        tokens = device_buffer_size * host_to_device_ratio + 64
        kv = alloc_with_host_register((4, tokens, 1, 656), dtype=np.uint8, device="cpu", pin_memory=True,
                                      allocator=HostTensorAllocator())
        self.mem_pool_host = SimpleNamespace(kv_buffer=kv)


def _runner(monkeypatch, second=None):
    from sglang.srt.model_executor import model_runner

    monkeypatch.setattr(model_runner, "SECOND_COORDINATOR", [second])
    return model_runner.ModelRunner()


def test_a_second_coordinator_class_with_its_own_allocation_is_caught(monkeypatch, tmp_path, sglang, caplog):
    """Every hook target intact, HiSparseCoordinator never built: the caller hook
    (maybe_init_hisparse_coordinator) checks the coordinator it built — strict stops, else WARNING."""
    caplog.set_level(logging.WARNING, logger="sactool")
    monkeypatch.setenv("SACTOOL_RANK", "1")
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile())))
    assert sp.register() is True
    sglang.HookRegistry.apply_hooks()
    runner = _runner(monkeypatch, _BypassCoordinator)
    runner.maybe_init_hisparse_coordinator()
    assert isinstance(runner.hisparse_coordinator, _BypassCoordinator) and not sp.placed_pools()
    assert ("rank 1: host pool NOT on node0: the allocation hook did not run or did not place it; the coordinator "
            "is _BypassCoordinator (built by maybe_init_hisparse_coordinator") in caplog.text
    sp.placer().strict = True
    with pytest.raises(sp.PlacementStop, match="NOT on node0.*_BypassCoordinator"):
        _runner(monkeypatch, _BypassCoordinator).maybe_init_hisparse_coordinator()


def test_a_second_coordinator_class_through_sglang_s_allocator_is_placed(monkeypatch, tmp_path, sglang, caplog):
    caplog.set_level(logging.WARNING, logger="sactool")
    monkeypatch.setenv("SACTOOL_RANK", "0")
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile(strict=True))))
    assert sp.register() is True
    sglang.HookRegistry.apply_hooks()
    runner = _runner(monkeypatch, _AllocatorCoordinator)
    runner.maybe_init_hisparse_coordinator()                 # strict: would raise if it were not placed
    (res,) = sp.placed_pools()
    assert runner.hisparse_coordinator.mem_pool_host.kv_buffer.ctypes.data == res.address
    assert "NOT on" not in caplog.text


def test_the_caller_hook_checks_the_hooked_coordinator_once(monkeypatch, tmp_path, sglang, caplog):
    caplog.set_level(logging.WARNING, logger="sactool")
    monkeypatch.setenv("SACTOOL_RANK", "0")
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile(strict=True))))
    assert sp.register() is True
    sglang.HookRegistry.apply_hooks()
    checks = []
    real = sp.check_placed
    monkeypatch.setattr(sp, "check_placed", lambda c, **kw: checks.append(type(c).__name__) or real(c, **kw))
    _runner(monkeypatch).maybe_init_hisparse_coordinator()
    assert checks == ["HiSparseCoordinator"] and len(sp.placed_pools()) == 1


# ---- a pinned capacity share smaller than the pool ----------------------------------------------------

def test_a_pinned_share_smaller_than_the_pool_falls_back_or_stops_with_sactool_s_own_reason(monkeypatch, tmp_path,
                                                                                          sglang, caplog):
    """pool.capacity_bytes 8 MiB over 2 ranks: each rank's share (4 MiB) is smaller than its 10.9 MB
    pool. Non-strict: SGLang's own budget and allocator (the pool in DRAM, said); strict: the
    plug-in's stop naming the share — never SGLang's "Not enough host memory"."""
    caplog.set_level(logging.WARNING, logger="sactool")
    from sglang.srt.mem_cache.pool_host import common

    monkeypatch.setenv("SACTOOL_RANK", "0")
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile(capacity_bytes=8 * MiB))))
    assert sp.register() is True
    sglang.HookRegistry.apply_hooks()
    coord = _coordinator()
    assert common.STOCK_ALLOCATIONS[-1] == coord.host_buffer.shape and not sp.placed_pools()
    assert ("rank 0: the 10915840-byte HiSparse pool does not fit rank 0's share of node0's pinned capacity: 4.00 MiB "
            "(pool.capacity_bytes over 2 rank(s)) (4194304 bytes); SGLang's own allocator is used") in caplog.text
    assert "host pool NOT on node0: the plug-in stepped aside" in caplog.text
    sp.placer().strict = True
    with pytest.raises(sp.PlacementStop, match="10915840-byte HiSparse pool does not fit rank 0's share"):
        _coordinator()


def test_budget_check_answered_for_the_placed_memory(monkeypatch, tmp_path, sglang, caplog):
    """SGLang's host-memory check (stand-in budget far below the pool, a host short of DRAM)
    refuses the pool without the plug-in and accepts it with it: the answer is the rank's devdax
    slice; outside the coordinator SGLang's own budget stands."""
    caplog.set_level(logging.WARNING, logger="sactool")
    _standin(monkeypatch, tmp_path)
    from sglang.srt.mem_cache.pool_host import base

    monkeypatch.setattr(base, "BUDGET", [1 << 20])
    with pytest.raises(ValueError, match="Not enough host memory"):
        _coordinator()                                       # no hooks yet: SGLang alone refuses
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, devdax_profile(ranks=2))))
    monkeypatch.setenv("SACTOOL_RANK", "1")
    assert sp.register() is True
    sglang.HookRegistry.apply_hooks()
    from sglang.srt.mem_cache.pool_host import base as patched

    assert patched.host_memory_budget_bytes(5) == 1 << 20     # not inside the coordinator: SGLang's
    coord = _coordinator()
    res = sp.placed_pools()[-1]
    assert res.target == "dax1.0" and res.budget_answer == 64 * MiB and res.offset_bytes == 0  # 1 rank/device
    assert coord.mem_pool_host.kv_buffer.ctypes.data == res.address
    assert "host-memory check of the 10915840-byte HiSparse pool answered with 67108864 bytes" in caplog.text


def test_numa_budget_answer_is_the_target_nodes_free_memory(monkeypatch, tmp_path, sglang, caplog):
    """The answer comes from node 0's free memory by the free-memory rule, not SGLang's own budget
    (pinned at 1 MiB here). Node 0's free memory moves while other processes run, so the figure is
    checked by where it came from (the hook's log line) and against the node's size, not against a
    second reading taken later."""
    from sglang.srt.mem_cache.pool_host import base

    caplog.set_level(logging.WARNING, logger="sactool")
    monkeypatch.setattr(base, "BUDGET", [1 << 20])
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile())))
    monkeypatch.setenv("SACTOOL_RANK", "0")
    assert sp.register() is True
    sglang.HookRegistry.apply_hooks()
    _coordinator()
    answer = sp.placed_pools()[-1].budget_answer
    assert answer is not None and answer > 1 << 20
    assert f"answered with {answer} bytes: free memory of node0: " in caplog.text
    assert sp.pool_budget(sp.plans_for(0))[1].startswith("free memory of node0: ")
    meminfo = Path("/sys/devices/system/node/node0/meminfo").read_text()
    total_kb = int(re.search(r"MemTotal:\s+(\d+) kB", meminfo).group(1))
    assert answer < total_kb * 1024


def test_strict_stops_when_the_allocation_hook_did_not_place_the_pool(monkeypatch, tmp_path, sglang, caplog):
    """The allocation hook patched nothing (as when apply_hooks swallowed its failure): after the
    coordinator's constructor, strict raises; fallback logs "host pool NOT on <target>"."""
    caplog.set_level(logging.WARNING, logger="sactool")
    monkeypatch.setenv("SACTOOL_RANK", "1")
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile())))
    assert sp.register() is True
    reg = sglang.HookRegistry
    reg._hooks.pop(sp.ALLOCATE_TARGET)            # its patch "failed": only the coordinator hook applies
    reg.apply_hooks()
    _coordinator()
    assert "rank 1: host pool NOT on node0: the allocation hook did not run or did not place it" in caplog.text
    sp.placer().strict = True
    with pytest.raises(sp.PlacementStop, match="host pool NOT on node0"):
        _coordinator()


def test_a_vllm_profile_is_not_placed_by_the_sglang_plugin(monkeypatch, tmp_path, sglang, caplog):
    monkeypatch.setenv("SACTOOL_PROFILE", str(REPO / "profiles/examples/vllm-tp8-one-node.yaml"))
    assert sp.register() is False and "is a profile for vllm, not SGLang" in caplog.text
    assert not sglang.HookRegistry._hooks


def test_non_plugin_profiles_register_nothing(monkeypatch, tmp_path, sglang):
    for name in ("dram-baseline.yaml", "cxl-numactl.yaml", "prefill.yaml"):
        monkeypatch.setenv("SACTOOL_PROFILE", str(REPO / "profiles/examples" / name))
        assert sp.register() is False
    assert not sglang.HookRegistry._hooks


def test_torch_view_matches_sglang_return_type():
    torch = pytest.importorskip("torch", reason="torch is optional: SGLang's environment has it")
    buf = sp.place_pool(node0_profile(), 0, 1 << 20)
    t = sp.view(buf, (4, 100, 1, 656), torch.uint8)
    assert isinstance(t, torch.Tensor) and t.shape == (4, 100, 1, 656) and t.data_ptr() == buf.address
    assert sp.element_size(torch.bfloat16) == 2


def test_strict_stops_at_the_budget_check_when_the_pool_cannot_be_planned(monkeypatch, tmp_path, sglang, caplog):
    """A strict profile naming an absent node: the rank stops at SGLang's host-memory check (the
    first hook that needs the plan), not with SGLang's "Not enough host memory" about DRAM."""
    from sglang.srt.mem_cache.pool_host import base

    monkeypatch.setattr(base, "BUDGET", [1 << 20])
    monkeypatch.setenv("SACTOOL_RANK", "0")
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile(nodes=(7,), strict=True))))
    assert sp.register() is True
    sglang.HookRegistry.apply_hooks()
    with pytest.raises(sp.PlacementStop, match="pool target node7"):
        _coordinator()
    sp.placer().strict = False                 # fallback: SGLang's own budget applies, and refuses
    with pytest.raises(ValueError, match="Not enough host memory"):
        _coordinator()
    assert "no pool budget, SGLang's host-memory budget applies" in caplog.text


# ---- DeepSeek-V4's host pool: one allocation per layer ----------------------------------------

def test_a_per_layer_pool_gets_disjoint_stretches_of_the_slice(monkeypatch, tmp_path, sglang, caplog):
    """The stand-in coordinator with ``per_layer`` builds what 0.5.23 builds for DeepSeek-V4
    (``DeepSeekV4PagedHostPool``, layer_first: one allocation per layer, ``kv_buffer`` a list):
    each layer maps the next aligned stretch of the rank's slice, none overlapping, and the
    post-constructor check accepts the list; a byte written through layer 3 is in the file there."""
    caplog.set_level(logging.WARNING, logger="sactool")
    devs = _standin(monkeypatch, tmp_path, n=1)               # one 64 MiB device, 2 ranks: 32 MiB slices
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, devdax_profile(ranks=2, devices=1, strict=True))))
    monkeypatch.setenv("SACTOOL_RANK", "1")
    assert sp.register() is True
    sglang.HookRegistry.apply_hooks()
    coord = _coordinator(per_layer=True, layers=4)           # (2048*2+64)/64 = 65 pages of 656 B per layer
    layers = coord.mem_pool_host.kv_buffer
    assert isinstance(layers, list) and len(layers) == 4 and layers[0].shape == (65, 656)
    placed = sp.placed_pools()
    assert [p.offset_bytes for p in placed] == [32 * MiB + i * 2 * MiB for i in range(4)]
    assert [p.address for p in placed] == [t.ctypes.data for t in layers]
    assert "NOT on" not in caplog.text
    layers[3][64, 655] = 0x5A
    with open(devs["dax0.0"]["path"], "rb") as f:
        f.seek(32 * MiB + 3 * 2 * MiB + 65 * 656 - 1)
        assert f.read(1) == b"\x5a"


def test_a_per_layer_pool_larger_than_the_slice_stops_strict(monkeypatch, tmp_path, sglang, caplog):
    _standin(monkeypatch, tmp_path, n=1, size=16 * MiB)        # 8 ranks: 2 MiB slices, one layer's worth
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, devdax_profile(ranks=8, devices=1))))
    monkeypatch.setenv("SACTOOL_RANK", "0")
    assert sp.register() is True
    sglang.HookRegistry.apply_hooks()
    _coordinator(per_layer=True, layers=2)                     # layer 1 does not fit: SGLang's allocator, said
    assert len(sp.placed_pools()) == 1 and "held by 1 earlier pool(s) of this process" in caplog.text
    assert "1 of SGLang's 2 kv_buffer tensor(s) are not in the placed buffers" in caplog.text
    sp.placer().strict = True
    with pytest.raises(sp.PlacementStop, match=r"held by 1 earlier pool\(s\) of this process"):
        _coordinator(per_layer=True, layers=2)


def _file_bytes(path, offset, n=8):
    """``n`` bytes at ``offset`` (on the 2 MiB align) of a stand-in device, through a mapping of its own."""
    import mmap

    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 2 * MiB, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ, offset=offset)
    try:
        return m[:n]
    finally:
        m.close()


def test_the_caller_hook_firing_twice_places_two_pools_side_by_side(monkeypatch, tmp_path, sglang, caplog):
    """Two coordinators in one rank process (the caller hook firing twice): the second pool maps the
    next aligned stretch of the rank's slice — the first pool's bytes survive its zero-fill, read
    back from the file —, SGLang's check is answered with what is left of the slice, and a third
    pool that finds too little left stops a strict rank at that check (non-strict: SGLang's own
    allocator, said) — never over the first two."""
    caplog.set_level(logging.WARNING, logger="sactool")
    devs = _standin(monkeypatch, tmp_path, n=1)               # one 64 MiB device, 2 ranks: 32 MiB slices
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, devdax_profile(ranks=2, devices=1, strict=True))))
    monkeypatch.setenv("SACTOOL_RANK", "1")
    assert sp.register() is True
    sglang.HookRegistry.apply_hooks()
    pools = []
    for mark in (b"pool-one", b"pool-two"):
        runner = _runner(monkeypatch)
        runner.maybe_init_hisparse_coordinator()
        host = runner.hisparse_coordinator.host_buffer
        host.reshape(-1)[:8] = np.frombuffer(mark, dtype=np.uint8)
        pools.append(host)
    a, b = sp.placed_pools()
    assert (a.offset_bytes, b.offset_bytes) == (32 * MiB, 44 * MiB)   # 10.9 MB pools: 12 MiB of 2 MiB blocks
    assert [h.ctypes.data for h in pools] == [a.address, b.address]
    path = devs["dax0.0"]["path"]
    assert _file_bytes(path, 32 * MiB) == b"pool-one" and _file_bytes(path, 44 * MiB) == b"pool-two"
    assert (f"answered with {20 * MiB} bytes: the largest free stretch of its slice of dax0.0 at offset 33554432"
            in caplog.text)
    with pytest.raises(sp.PlacementStop, match=r"10915840-byte HiSparse pool does not fit the largest free stretch "
                                               r".* held by 2 earlier pool\(s\) of this process .*\(8388608 bytes\)"):
        _runner(monkeypatch).maybe_init_hisparse_coordinator()
    sp.placer().strict = False
    _runner(monkeypatch).maybe_init_hisparse_coordinator()
    assert len(sp.placed_pools()) == 2 and "host pool NOT on dax0.0: the plug-in stepped aside" in caplog.text
    assert _file_bytes(path, 32 * MiB) == b"pool-one" and _file_bytes(path, 44 * MiB) == b"pool-two"


def test_numa_mode_honours_a_pinned_capacity(caplog):
    """pool.capacity_bytes in NUMA mode: each of the profile's two ranks on node 0 may place half of it;
    SGLang's host-memory check is answered with that share (not the node's free memory), and a pool
    larger than the share is refused with the figures (fallback; strict stops)."""
    prof = node0_profile(capacity_bytes=64 * MiB)
    assert sp.place_pool(prof, 0, 48 * MiB) is None
    assert "rank 0's share of node0's pinned capacity holds 32.00 MiB" in caplog.text
    assert "pool.capacity_bytes over 2 rank(s)" in caplog.text
    with pytest.raises(sp.PlacementStop):
        sp.place_pool(prof, 0, 48 * MiB, strict=True)
    buf = sp.place_pool(prof, 1, 16 * MiB)
    assert buf is not None and buf.report.verified_fraction == 1.0
    budget, why = sp.pool_budget(sp.plans_for(1))             # what the placed pool left of the share
    assert budget == 16 * MiB and "pinned capacity" in why and "less the 16.00 MiB earlier pools" in why
    # not pinned: the node's free memory answers, as before
    sp._placer_for(node0_profile())
    assert sp.pool_budget(sp.plans_for(0))[0] > 64 * MiB


def _table_target(monkeypatch, role, target):
    """The plug-in's hook table with ``role`` pointing at ``target`` (a release that moved it)."""
    from dataclasses import replace as dc_replace

    (t,) = sp.SGLANG_TABLES
    monkeypatch.setattr(sp, "SGLANG_TABLES", (dc_replace(t, hooks=tuple(
        dc_replace(h, target=target) if h.role == role else h for h in t.hooks)),))


def test_a_hook_target_whose_module_fails_to_import_keeps_the_import_error(monkeypatch, tmp_path, sglang, caplog):
    """The coordinator's module exists but one of its imports is missing (as when SGLang's environment
    lacks a dependency): the plug-in's error names that ImportError, not just "no attribute"."""
    pkg = tmp_path / "brokensg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "coord.py").write_text("import sactool_test_missing_dependency\n\nclass Coordinator:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _table_target(monkeypatch, "coordinator", "brokensg.coord.Coordinator.__init__")
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile())))
    assert sp.register() is False
    assert ("importing brokensg.coord failed: ModuleNotFoundError: No module named "
            "'sactool_test_missing_dependency'") in caplog.text
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile(strict=True))))
    with pytest.raises(SystemExit, match="sactool_test_missing_dependency"):
        sp.register()


def test_integration_script_counts_plugins_by_what_load_plugins_left_behind(sglang, monkeypatch, tmp_path):
    """Not from SGLang's log wording: an entry point counts when its module was imported, ours only when
    its hooks are in the registry and it read a profile."""
    from importlib.metadata import EntryPoint

    from test_sglang_integration_script import load_script

    script = load_script()
    ours = EntryPoint("sactool_cxl", "sactool.plugins.sglang:register", "sglang.srt.plugins")
    other = EntryPoint("never_imported", "sactool_no_such_plugin_module:register", "sglang.srt.plugins")
    registry = sglang.HookRegistry
    sp.reset()
    assert script.loaded_plugins([ours, other], registry) == []        # imported, but registered nothing
    monkeypatch.setenv("SACTOOL_PROFILE", str(_write(tmp_path, node0_profile())))
    assert sp.register() is True
    assert script.loaded_plugins([ours, other], registry) == ["sactool_cxl"]
    sp.reset()
