"""Pool checks of ``sactool serve`` on recorded machines (QEMU CXL captures): node present, free
memory against the bytes of the ranks mapped to it, DAX device present / in devdax mode / large
enough, ranks sharing a DAX device each in an aligned slice of it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.trees import unpack
from sactool.errors import CapacityError, ExitCode, RecordError, TopologyError
from sactool.host.sysfs import SysfsReader
from sactool.profile import load_profile, validate
from sactool.pool import capacity
from sactool.pool.plan import PoolSpec
from sactool.profile.sizing import host_sizing

REPO = Path(__file__).resolve().parent.parent


def small(tp=1, **pool):
    """DeepSeek-V3.2 FP8, S = 1 request x 2048 slots, ratio 1: (2048 + 64) x 61 x 656 B per rank."""
    p = load_profile(REPO / "profiles/examples/cxl-one-node.yaml")
    p = replace(p, sglang=replace(p.sglang, tp_size=tp, attn_dp_size=1, max_running_requests=1),
                hisparse=replace(p.hisparse, device_buffer_size=2048, host_to_device_ratio=1),
                pool=replace(p.pool, gpu_local_nodes=(), **pool))
    return validate(p)


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    base = tmp_path_factory.mktemp("trees")
    return {n: SysfsReader(unpack(n, base / n)) for n in ("ram__30-system-ram", "ram__20-devdax")}


PER_RANK = (2048 + 64) * 61 * 656


def check_pool(profile, reader):
    """serve's pool check of the pool a profile asks SGLang for."""
    return capacity.check_pool(PoolSpec.of(profile), reader)


def test_fits_on_two_nodes_round_robin(trees):
    p = small(tp=4, nodes=(0, 1))
    assert host_sizing(p).bytes_per_rank == PER_RANK
    r = check_pool(p, trees["ram__30-system-ram"])
    got = {t.target: (t.ranks, t.need_bytes) for t in r.targets}
    assert got == {"node0": ((0, 2), 2 * PER_RANK), "node1": ((1, 3), 2 * PER_RANK)}
    assert all(t.ok and t.available_bytes > t.need_bytes for t in r.targets)


def test_short_node_says_how_much_is_needed(trees):
    # CXL node2 (256 MiB, CPU-less: 3% kept back) holds one 84.5 MB pool, not four
    r = check_pool(small(tp=2, nodes=(1, 2)), trees["ram__30-system-ram"])
    assert [(t.target, t.ranks) for t in r.targets] == [("node1", (0,)), ("node2", (1,))]
    with pytest.raises(CapacityError) as ei:
        check_pool(small(tp=8, nodes=(1, 2)), trees["ram__30-system-ram"])
    e = ei.value
    assert e.exit_code == ExitCode.CAPACITY
    assert "node2 is short of memory" in e.message and "ranks 1, 3, 5, 7 need" in e.message
    assert "node2/meminfo MemFree" in e.message and "host_to_device_ratio" in e.hint


def test_weighted_interleave_splits_each_rank_by_weight(trees):
    p = small(tp=1, nodes=(1,), policy="weighted_interleave", interleave_weights={0: 3, 1: 1})
    r = check_pool(p, trees["ram__30-system-ram"])
    need = {t.target: t.need_bytes for t in r.targets}
    assert need == {"node0": PER_RANK * 3 // 4, "node1": PER_RANK // 4}


def test_absent_node(trees):
    with pytest.raises(TopologyError) as ei:
        check_pool(small(nodes=(5,)), trees["ram__30-system-ram"])
    assert ei.value.exit_code == ExitCode.UNAVAILABLE and "5" in ei.value.message


def test_devdax(trees):
    r = check_pool(small(mode="devdax", dax_devices=("dax0.0",), nodes=()), trees["ram__20-devdax"])
    assert [(t.target, t.need_bytes, t.available_bytes) for t in r.targets] == [("dax0.0", PER_RANK, 268435456)]
    big = small(mode="devdax", dax_devices=("dax0.0",), nodes=())
    big = replace(big, hisparse=replace(big.hisparse, host_to_device_ratio=8))
    with pytest.raises(CapacityError) as ei:
        check_pool(big, trees["ram__20-devdax"])
    assert "does not fit its 1-way slice of dax0.0 (268435456 bytes, align 2097152)" in ei.value.message
    with pytest.raises(TopologyError) as ei:
        check_pool(small(mode="devdax", dax_devices=("dax0.0",), nodes=()), trees["ram__30-system-ram"])
    assert "system-ram mode" in ei.value.message and "pool.nodes [2]" in ei.value.hint
    with pytest.raises(TopologyError) as ei:
        check_pool(small(mode="devdax", dax_devices=("dax3.0",), nodes=()), trees["ram__20-devdax"])
    assert "dax3.0 does not exist" in ei.value.message and "dax0.0" in ei.value.message
    # ranks share a device, each in its own aligned slice (the recorded device: 256 MiB, align 2 MiB)
    shared = check_pool(small(tp=2, mode="devdax", dax_devices=("dax0.0",), nodes=()), trees["ram__20-devdax"])
    assert [(s.rank, s.target, s.offset_bytes, s.size_bytes) for s in shared.plan.slots] == [
        (0, "dax0.0", 0, 128 << 20), (1, "dax0.0", 128 << 20, 128 << 20)]
    assert shared.plan.total_bytes == 256 << 20 and shared.targets[0].need_bytes == 2 * PER_RANK
    with pytest.raises(CapacityError) as ei:   # 4 slices of 64 MiB cannot hold 84.5 MB pools
        check_pool(small(tp=4, mode="devdax", dax_devices=("dax0.0",), nodes=()), trees["ram__20-devdax"])
    assert "4-way slice of dax0.0 (67108864 bytes" in ei.value.message


def test_unknown_sizing_is_reported_not_refused(trees):
    p = small(nodes=(1,))
    p = replace(p, sglang=replace(p.sglang, max_running_requests=None), request={})
    r = check_pool(p, trees["ram__30-system-ram"])
    assert "capacity not checked" in r.note and r.targets[0].need_bytes is None


def test_capacity_is_checked_from_the_argv_sglang_receives(trees):
    """An edited profile: its stored prediction (1 MiB per rank) is not what runs; SGLang gets
    --max-total-tokens and --hisparse-config's host_to_device_ratio, and the check uses those."""
    p = replace(small(tp=2, nodes=(0,)), predictions={"host_pool_bytes_per_rank": 1 << 20})
    p = replace(p, sglang=replace(p.sglang, max_total_tokens=2048))
    s = host_sizing(p)
    assert s.bytes_per_rank == PER_RANK and "--max-total-tokens 2048" in s.source and "host_to_device_ratio 1" in s.source
    r = check_pool(p, trees["ram__30-system-ram"])
    assert r.targets[0].need_bytes == 2 * PER_RANK
    # host_to_device_ratio edited 1 -> 1000: SGLang would try 1000x the pool; refused with the argv's figure
    big = replace(p, hisparse=replace(p.hisparse, host_to_device_ratio=1000))
    with pytest.raises(CapacityError) as e:
        check_pool(big, trees["ram__30-system-ram"])
    assert "node0 is short of memory" in e.value.message
    assert host_sizing(big).bytes_per_rank == (2048 * 1000 + 64) * 61 * 656
