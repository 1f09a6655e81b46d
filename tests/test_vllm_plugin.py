"""The sactool_cxl vLLM plug-in's seams: every hook resolved and its parameters checked at load (a
missing or changed one stops a strict worker naming the symbol and the version, and is a loud
warning otherwise), vLLM's preflight answered for the pool's target, and the proof after the fact
that the plug-in's allocator built the pool vLLM kept (a second allocation path beside intact hooks
fails it). vLLM itself (9 GB) is not installed in CI: its patched symbols come from stand-ins with
vLLM 0.34.0's module paths and parameter names (tests/standins/vllm034); the real vLLM is driven by
scripts/vllm-integration. Placement itself is real, on node 0."""

from __future__ import annotations

import json
import logging
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest

from sactool.models import get_model
from sactool.plugins import vllm as P
from sactool.profile import (HiSparseSettings, ModelRef, PoolSettings, Provenance, SglangSettings, VllmSettings,
                             new_profile, save_profile, settings_fields)

STANDINS = Path(__file__).resolve().parent / "standins" / "vllm034"


@pytest.fixture()
def vllm(monkeypatch):
    """The stand-in vLLM 0.34.0 on sys.path (and out of sys.modules afterwards)."""
    monkeypatch.syspath_prepend(str(STANDINS))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(P, "installed_vllm", lambda: "0.34.0")
    yield __import__("vllm.v1.hisparse.runtime").v1.hisparse.runtime
    P.uninstall()
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]


def profile_file(tmp_path, *, strict=True, mode="numa", devices=(), **pool) -> Path:
    v = VllmSettings(tp_size=1, dp_size=1, host_pool_gib=0.25, max_model_len=4096)
    q = PoolSettings(placement="plugin", mode=mode, nodes=(0,) if mode == "numa" else (), dax_devices=tuple(devices),
                     rank_targets=("node0",) if mode == "numa" else (), strict=strict, stand_in=mode == "numa",
                     prefault_threads=1, **pool)
    p = new_profile(model=ModelRef.of(get_model("deepseek-v3.2")), pool=q,
                    hisparse=HiSparseSettings(top_k=2048, device_buffer_size=4096), sglang=SglangSettings(),
                    engine="vllm", vllm=v, provenance={f: Provenance("user", "test") for f in settings_fields("vllm")})
    return save_profile(p, tmp_path / "vllm.yaml")


def test_every_hook_of_vllm_0_34_resolves_in_the_standins(vllm):
    """vLLM's rows of the one hook table (sactool/plugins/hooks.py TABLES["vllm"]), checked by the
    same function as SGLang's (hooks.check_hooks) — here against the stand-ins."""
    from sactool.plugins.hooks import TABLES, VLLM_TABLES

    assert TABLES["vllm"] is VLLM_TABLES and P.VLLM_TABLES is VLLM_TABLES
    check = P.check_engine("0.34.0")
    assert check.ok and not check.problems and not check.note, check.lines()
    assert check.table is not None and check.table.versions == ">=0.34.0,<0.35"
    assert {h.target.rsplit(".", 1)[1] for h in check.table.hooks} >= {
        "allocate_pinned_host_pool", "check_hisparse_host_memory", "_get_populate_write_fn", "SharedOffloadRegion",
        "allocate_hisparse_kv_caches", "pin_tensor"}
    assert {h.role for h in check.table.hooks if h.use == "around"} == set(P.WRAPPERS)


def test_a_release_outside_the_table_is_named_and_checked_against_the_newest(vllm):
    check = P.check_engine("0.35.1")
    assert "vLLM 0.35.1 is outside every hook table's range (>=0.34.0,<0.35): checked against the " \
        ">=0.34.0,<0.35 table" == check.note
    assert check.ok                      # the stand-ins have 0.34's symbols: the newest table resolves


def test_a_call_hook_whose_signature_needs_more_arguments_is_a_problem(vllm, monkeypatch):
    """``pin_tensor`` is called by the plug-in with the tensor only: a vLLM whose pin_tensor needs a
    second argument is named."""
    def pin_tensor(tensor, stream):
        return None
    monkeypatch.setattr(vllm, "pin_tensor", pin_tensor)
    check = P.check_engine("0.34.0")
    assert [p.role for p in check.problems] == ["pin"]
    assert "takes required parameters (stream); the plug-in calls it with (tensor)" in check.problems[0].why


def test_strict_worker_stops_when_a_hook_target_disappears(vllm, tmp_path, monkeypatch):
    monkeypatch.setenv("SACTOOL_PROFILE", str(profile_file(tmp_path)))
    monkeypatch.delattr(vllm, "allocate_pinned_host_pool")
    with pytest.raises(P.PlacementStop) as e:
        P.register()
    assert "hook target vllm.v1.hisparse.runtime.allocate_pinned_host_pool is missing" in str(e.value)
    assert "in vLLM 0.34.0" in str(e.value) and "would NOT be placed" in str(e.value)


def test_non_strict_worker_warns_loudly_when_a_hook_changed(vllm, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SACTOOL_PROFILE", str(profile_file(tmp_path, strict=False)))

    def check_hisparse_host_memory(total_bytes, reserve_bytes=0):   # the same name, other parameters
        return None
    monkeypatch.setattr(vllm, "check_hisparse_host_memory", check_hisparse_host_memory)
    with caplog.at_level(logging.WARNING, logger="sactool.plugins.vllm"):
        assert P.register() is False
    msg = caplog.text
    assert "check_hisparse_host_memory changed" in msg and "the plug-in relies on (pool_bytes, …)" in msg
    assert "vLLM 0.34.0" in msg
    assert vllm.check_hisparse_host_memory is check_hisparse_host_memory    # nothing patched


def test_an_sglang_profile_is_not_placed_by_the_vllm_plugin(vllm, tmp_path, monkeypatch, caplog):
    from sactool.profile import load_profile

    sg = save_profile(load_profile(Path(__file__).resolve().parent.parent / "profiles/examples/cxl-one-node.yaml"),
                      tmp_path / "sg.yaml")
    monkeypatch.setenv("SACTOOL_PROFILE", str(sg))
    with caplog.at_level(logging.WARNING, logger="sactool.plugins.vllm"):
        assert P.register() is False
    assert "is a profile for sglang, not vLLM" in caplog.text


def test_preflight_is_answered_for_the_devdax_slice_only_through_the_plugin(vllm, tmp_path, monkeypatch):
    """A pool larger than this machine's available memory: vLLM's 95 % check refuses it; through the
    plug-in, inside the pool's allocation, it is checked against the rank's slice of its device."""
    import psutil

    big = int(psutil.virtual_memory().available * 1.5) // (2 << 20) * (2 << 20)
    dev = tmp_path / "dax0.0"
    with open(dev, "wb") as f:
        f.truncate(2 * big)                        # sparse: never touched here
    monkeypatch.setenv("SACTOOL_DEVDAX_STANDIN", json.dumps({"dax0.0": {"path": str(dev), "align_bytes": 2 << 20}}))
    monkeypatch.setenv("SACTOOL_PROFILE", str(profile_file(tmp_path, mode="devdax", devices=("dax0.0",))))
    monkeypatch.setenv("SACTOOL_RANK", "0")
    original = vllm.check_hisparse_host_memory
    with pytest.raises(ValueError, match="HiSparse pinned host pool needs"):
        original(big)                               # vLLM's own answer
    assert P.register() is True
    assert vllm.check_hisparse_host_memory is not original
    with pytest.raises(ValueError, match="HiSparse pinned host pool needs"):
        vllm.check_hisparse_host_memory(big)        # outside the pool's allocation: vLLM's check, unchanged
    cfg = types.SimpleNamespace(instance_id="t", parallel_config=types.SimpleNamespace(data_parallel_index=0))
    token = P._CONTEXT.set((cfg, "private"))
    try:
        vllm.check_hisparse_host_memory(big)        # the slice (2x big) holds it
        with pytest.raises(ValueError, match="its slice of dax0.0|holds"):
            vllm.check_hisparse_host_memory(3 * big)
    finally:
        P._CONTEXT.reset(token)


class _View:
    def __init__(self, address: int):
        self.address = address

    def data_ptr(self) -> int:
        return self.address


class _Config:
    """What the proof reads of a KVCacheConfig: host-resident tensors and their layers."""

    def __init__(self, names):
        self.kv_cache_tensors = [types.SimpleNamespace(host_resident=True, layers=list(names)),
                                 types.SimpleNamespace(host_resident=False, layers=["gpu.0"])]


def test_the_proof_fails_for_a_pool_built_beside_intact_hooks(vllm, tmp_path, monkeypatch):
    """A second allocation path (a pool class that allocates on its own) leaves every hook intact;
    only the check after the fact sees the pool is not the plug-in's: strict stops the worker."""
    import numpy as np

    monkeypatch.setenv("SACTOOL_PROFILE", str(profile_file(tmp_path)))
    monkeypatch.setenv("SACTOOL_RANK", "0")
    assert P.register() is True
    other = np.zeros(1 << 20, dtype=np.uint8)      # the pool the other path built, in whatever memory
    names = [f"layer.{i}" for i in range(3)]
    caches = {n: _View(other.ctypes.data + i * 4096) for i, n in enumerate(names)}
    with pytest.raises(P.PlacementStop, match="pool 0: host pool NOT on node0: the plug-in's allocator was not called"):
        P.prove(_Config(names), caches, None, False)


def test_the_proof_passes_for_views_in_the_placed_pool(vllm, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SACTOOL_PROFILE", str(profile_file(tmp_path)))
    monkeypatch.setenv("SACTOOL_RANK", "0")
    assert P.register() is True
    buf = P.state().placer.place(0, 8 << 20, rank_source="$SACTOOL_RANK")     # on node 0, verified
    assert buf is not None and P.state().placer.placed[-1].verified_fraction == 1.0
    names = [f"layer.{i}" for i in range(4)]
    caches = {n: _View(buf.address + i * (2 << 20)) for i, n in enumerate(names)}
    with caplog.at_level(logging.WARNING, logger="sactool.plugins.vllm"):
        assert P.prove(_Config(names), caches, None, False) is True
    assert "all 4 host-resident KV views lie in the pool placed on node0" in caplog.text
    caches["layer.3"] = _View(buf.address + buf.size_bytes)                    # one past the end
    with pytest.raises(P.PlacementStop, match="1 of 4 host-resident KV views lie outside"):
        P.prove(_Config(names), caches, None, False)


def test_owner_of_follows_vllms_parallel_config(monkeypatch):
    monkeypatch.delenv("SACTOOL_RANK", raising=False)
    cfg = types.SimpleNamespace(parallel_config=types.SimpleNamespace(data_parallel_index=3))
    assert P.owner_of(cfg, True)[0] == 3                       # a shared pool belongs to its DP replica
    monkeypatch.setattr(P, "_tp", lambda: (1, 2, "vLLM's TP group"))
    assert P.owner_of(cfg, False)[0] == 3 * 2 + 1              # a private one to its rank
    assert replace(VllmSettings(tp_size=2, dp_size=4, shared_host_pool=True,
                                distributed_executor_backend="mp")).pool_owners == 4


# ---- several pools in one worker ------------------------------------------------------------

def _devdax_worker(vllm, tmp_path, monkeypatch, size=16 << 20, **kw):
    dev = tmp_path / "dax0.0"
    with open(dev, "wb") as f:
        f.truncate(size)
    monkeypatch.setenv("SACTOOL_DEVDAX_STANDIN", json.dumps({"dax0.0": {"path": str(dev), "align_bytes": 2 << 20}}))
    monkeypatch.setenv("SACTOOL_PROFILE", str(profile_file(tmp_path, mode="devdax", devices=("dax0.0",), **kw)))
    monkeypatch.setenv("SACTOOL_RANK", "0")
    assert P.register() is True
    return dev


def _file_bytes(path, offset, n=8):
    import mmap

    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 2 << 20, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ, offset=offset)
    try:
        return m[:n]
    finally:
        m.close()


def test_the_private_pool_path_called_twice_maps_two_stretches_of_the_slice(vllm, tmp_path, monkeypatch):
    """The private pool's allocation run twice in one worker (allocate_pinned_host_pool asks the placer
    for the owner's pool, page-padded, each time): the second pool maps after the first in the owner's
    slice (a 16 MiB stand-in, one owner), the first's bytes survive the second's zero-fill, vLLM's
    preflight is answered with what is left, and a third that does not fit stops the strict worker."""
    dev = _devdax_worker(vllm, tmp_path, monkeypatch)
    p = P.state().placer
    first = p.place(0, 5 << 20, rank_source="$SACTOOL_RANK")
    first.mmap[0:8] = b"vllm-one"
    second = p.place(0, 5 << 20, rank_source="$SACTOOL_RANK")
    second.mmap[0:8] = b"vllm-two"
    assert (first.offset_bytes, second.offset_bytes) == (0, 6 << 20)
    assert _file_bytes(dev, 0) == b"vllm-one" and _file_bytes(dev, 6 << 20) == b"vllm-two"
    cfg = types.SimpleNamespace(instance_id="t", parallel_config=types.SimpleNamespace(data_parallel_index=0))
    token = P._CONTEXT.set((cfg, "private"))
    try:
        vllm.check_hisparse_host_memory(4 << 20)         # 4 MiB left of the slice
        with pytest.raises(ValueError, match="needs 5242880 bytes but the largest free stretch of its slice"):
            vllm.check_hisparse_host_memory(5 << 20)
    finally:
        P._CONTEXT.reset(token)
    with pytest.raises(P.PlacementStop, match="held by 2 earlier pool"):
        p.place(0, 5 << 20, rank_source="$SACTOOL_RANK")
    assert _file_bytes(dev, 0) == b"vllm-one"


def test_a_second_shared_region_maps_after_the_first(vllm, tmp_path, monkeypatch):
    """Two shared devdax regions of one DP replica in one worker (what DaxRegion asks the placer for,
    no zero-fill: its TP ranks do that): disjoint stretches of the replica's slice; once the first is
    unmapped (vLLM released it, no view left) its stretch is taken again."""
    _devdax_worker(vllm, tmp_path, monkeypatch)
    p = P.state().placer
    plan = p.plan_for(0)
    a = p.map_slice(plan, 4 << 20)
    b = p.map_slice(plan, 4 << 20)
    assert (a.offset_bytes, b.offset_bytes) == (0, 4 << 20)
    a.close()
    c = p.map_slice(plan, 2 << 20)
    assert c.offset_bytes == 0
    for buf in (b, c):
        buf.close()


def test_dax_region_twice_in_one_worker(vllm, tmp_path, monkeypatch):
    """The plug-in's DaxRegion itself (torch: vLLM's environment has it), built twice in one worker."""
    pytest.importorskip("torch", reason="DaxRegion views the slice with torch (vLLM's environment has it)")
    dev = _devdax_worker(vllm, tmp_path, monkeypatch)
    cfg = types.SimpleNamespace(instance_id="t", parallel_config=types.SimpleNamespace(data_parallel_index=0))
    one = P.DaxRegion(cfg, "e", 3, 0, 2 << 20, 4096)
    one.base_tensor[:8] = 7
    two = P.DaxRegion(cfg, "e", 3, 0, 2 << 20, 4096)
    assert (one.buf.offset_bytes, two.buf.offset_bytes) == (0, 6 << 20)
    assert _file_bytes(dev, 0) == bytes([7]) * 8 and _file_bytes(dev, 6 << 20) == bytes(8)
    with pytest.raises(RuntimeError, match="held by 2 earlier pool"):
        P.DaxRegion(cfg, "e", 3, 0, 2 << 20, 4096)
    one.cleanup()
    two.cleanup()
    assert one.buf.closed and two.buf.closed
