"""The SAC machine on its recording (tests/fixtures/sysfs/sac2s__*: a real Linux 6.12 in QEMU with
two sockets and one 512 MiB CXL Type-3 device behind each host bridge): the rank plan of eight
ranks on two devdax devices (round-robin and locality), the NUMA rows of the same plan, tune
planning the devdax devices (not a DRAM stand-in) from the recording, and the shipped SAC
example validating and dry-running clean there.

GPU locality: no recording has GPUs (QEMU had none), so the GPU → socket table these tests use is
constructed — ranks 0-3 on socket 0 (node0), 4-7 on socket 1 (node1), as on the SAC machine — and
given to the plan as ``pool.gpu_local_nodes``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sactool.cli import main
from sactool.pool.plan import PoolSpec, rank_plan
from sactool.pool.rankplan import pool_bytes_per_rank, round_robin
from sactool.pool.rankplan import check_disjoint
from sactool.pool.targets import target_facts as pool_targets
from sactool.host.sysfs import SysfsReader
from sactool.profile import load_profile, validate
from sactool.topology import probe

from fixtures.trees import add_gpus

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "profiles" / "examples"
STANDIN_SITE = HERE / "standins" / "site"

MiB = 1 << 20
SAC = EXAMPLES / "sac-8rank-devdax.yaml"
GPU_NODES = (0, 0, 0, 0, 1, 1, 1, 1)      # constructed: no recording has GPUs


def _facts(root, names):
    reader = SysfsReader(root)
    return pool_targets(probe(reader), reader, names)


@pytest.mark.parametrize("rule, expect", [
    ("round_robin", ["dax0.0", "dax1.0"] * 4),                       # the authors' rank % devices
    ("locality", ["dax0.0"] * 4 + ["dax1.0"] * 4),                   # each socket's GPUs on its own device
])
def test_eight_ranks_on_two_devdax_devices(machine, rule, expect):
    root = machine("sac2s__20-devdax")
    facts = _facts(root, ["dax0.0", "dax1.0"])
    # the crossed names of the recording: region0 -> mem1 on node0's bridge, region1 -> mem0 on node1's
    assert [(t.name, t.cpu_node, t.capacity_bytes, t.align_bytes) for t in facts] == [
        ("dax0.0", 0, 512 * MiB, 2 * MiB), ("dax1.0", 1, 512 * MiB, 2 * MiB)]
    prof = load_profile(SAC)
    prof = validate(replace(prof, pool=replace(prof.pool, rank_assignment=rule, gpu_local_nodes=GPU_NODES)))
    plan = rank_plan(PoolSpec.of(prof), facts)
    assert [s.target for s in plan.slots] == expect
    assert [s.gpu for s in plan.slots] == list(range(8)) and not plan.notes
    check_disjoint(plan, facts)
    for t in facts:
        rows = sorted((s.offset_bytes, s.size_bytes) for s in plan.slots if s.target == t.name)
        assert rows == [(i * 128 * MiB, 128 * MiB) for i in range(4)]          # 4 aligned slices fill 512 MiB
        assert {s.cpu_node for s in plan.slots if s.target == t.name} == {t.cpu_node}
    # the sizes add up to the capacity plan: tune's per-rank partition times the ranks
    part = pool_bytes_per_rank(round_robin(8, [t.name for t in facts]), facts)   # one Target type for both
    assert plan.total_bytes == 8 * part == 1024 * MiB


def test_slices_follow_align_and_rank_count(machine):
    """Three ranks on one 512 MiB device: 170.67 MiB each rounds down to the 2 MiB align."""
    facts = _facts(machine("sac2s__20-devdax"), ["dax0.0", "dax1.0"])
    prof = load_profile(SAC)
    prof = validate(replace(prof, sglang=replace(prof.sglang, tp_size=6, attn_dp_size=6),
                            pool=replace(prof.pool, gpu_local_nodes=())))
    plan = rank_plan(PoolSpec.of(prof), facts)
    size = (512 * MiB // 3) // (2 * MiB) * (2 * MiB)
    assert [(s.target, s.offset_bytes, s.size_bytes) for s in plan.slots[:3]] == [
        ("dax0.0", 0, size), ("dax1.0", 0, size), ("dax0.0", size, size)]
    assert plan.total_bytes == 6 * size
    check_disjoint(plan, facts)


def test_numa_mode_rows_have_no_offsets(machine):
    """30-system-ram: the same devices onlined as node2 (behind node0) and node3 (behind node1)."""
    root = machine("sac2s__30-system-ram")
    facts = _facts(root, ["node2", "node3"])
    assert [(t.name, t.cpu_node) for t in facts] == [("node2", 0), ("node3", 1)]
    prof = load_profile(SAC)
    prof = validate(replace(prof, pool=replace(prof.pool, mode="numa", nodes=(2, 3), dax_devices=(),
                                               rank_assignment="locality", gpu_local_nodes=GPU_NODES)))
    plan = rank_plan(PoolSpec.of(prof), facts)
    assert [(s.target, s.offset_bytes) for s in plan.slots] == [("node2", None)] * 4 + [("node3", None)] * 4
    assert all(s.size_bytes == facts[0 if s.target == "node2" else 1].capacity_bytes // 4 for s in plan.slots)


def test_locality_without_a_target_on_the_socket_falls_back_and_says_so(machine):
    facts = _facts(machine("sac2s__20-devdax"), ["dax0.0"])
    prof = load_profile(SAC)
    prof = validate(replace(prof, pool=replace(prof.pool, dax_devices=("dax0.0",), rank_assignment="locality",
                                               gpu_local_nodes=GPU_NODES),
                            sglang=replace(prof.sglang, max_total_tokens=None, max_running_requests=None),
                            request={}))
    plan = rank_plan(PoolSpec.of(prof), facts)
    assert {s.target for s in plan.slots} == {"dax0.0"}
    assert len(plan.notes) == 4 and "rank 4: no pool target on the socket of its GPU (node1)" in plan.notes[0]


def _dry_run(capsys, monkeypatch, profile, root):
    monkeypatch.setenv("PYTHONPATH", str(STANDIN_SITE))      # the target Python reports sglang 0.5.23
    rc = main(["serve", "--profile", str(profile), "--dry-run", "--format", "json", "--sysfs-root", str(root),
               "--python", sys.executable])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def test_sac_example_validates_and_dry_runs_clean_on_the_recording(machine, capsys, monkeypatch):
    root = machine("sac2s__20-devdax")
    prof = load_profile(SAC)
    assert (prof.sglang.tp_size, prof.pool.mode, prof.pool.dax_devices) == (8, "devdax", ("dax0.0", "dax1.0"))
    d = _dry_run(capsys, monkeypatch, SAC, root)
    assert d["problems"] == [], d["problems"]
    assert [(r["rank"], r["gpu"], r["target"], r["kind"], r["offset_bytes"], r["size_bytes"], r["cpu_node"])
            for r in d["plan"]] == [(r, r, f"dax{r % 2}.0", "devdax", (r // 2) * 128 * MiB, 128 * MiB, r % 2)
                                    for r in range(8)]
    assert d["plan_total_bytes"] == 1024 * MiB and "SGLANG_PLUGINS" not in d["env_delta"]
    assert d["pool"]["bytes_per_rank"] <= 128 * MiB


def test_tune_plans_the_devdax_devices_of_a_recording(machine, capsys, monkeypatch, fast_bench_record, tmp_path):
    """Before: 'pool: node1 (stand-in for CXL: DRAM figures)', mode numa. Now the two devdax
    devices hold the pool; the profile tune writes dry-runs on the same recording, and
    --pool-bytes pins each device's share."""
    root = machine("sac2s__20-devdax")
    out = tmp_path / "sac.yaml"
    args = ["tune", "--sysfs-root", str(root), "--bench", str(fast_bench_record), "--tp", "8", "--context", "2k",
            "--gpu-kv-budget", "10GiB", "--steps", "6", "--replicates", "1"]
    assert main([*args, "--out", str(out)]) == 0
    capsys.readouterr()
    p = load_profile(out)
    assert (p.pool.mode, p.pool.dax_devices, p.pool.stand_in) == ("devdax", ("dax0.0", "dax1.0"), False)
    assert p.pool.capacity_bytes is None and "devdax devices hold the pool" in p.provenance["pool.mode"].detail
    d = _dry_run(capsys, monkeypatch, out, root)
    assert d["problems"] == [] and len(d["plan"]) == 8 and d["plan_total_bytes"] == 1024 * MiB
    pinned = tmp_path / "pinned.yaml"
    assert main([*args, "--pool-bytes", "384MiB", "--out", str(pinned)]) == 0
    capsys.readouterr()
    q = load_profile(pinned)
    assert q.pool.capacity_bytes == 384 * MiB and q.provenance["pool.capacity_bytes"].source == "user"
    d = _dry_run(capsys, monkeypatch, pinned, root)
    assert d["problems"] == [] and {r["size_bytes"] for r in d["plan"]} == {96 * MiB}
    assert d["plan_total_bytes"] == 768 * MiB
    assert all("pool.capacity_bytes" in t["capacity_source"] for t in d["plan_targets"])


def _eight_gpus(root: Path) -> Path:
    """Constructed (no recording has GPUs): eight H100 functions (class 0x030200, NVIDIA 0x10de,
    0x2330) behind two host bridges, GPUs 0-3 on node0 and 4-7 on node1, as on the SAC box."""
    return add_gpus(root, list(GPU_NODES))


def test_tune_chooses_locality_when_gpu_locality_is_known(machine, capsys, fast_bench_record, tmp_path):
    root = _eight_gpus(machine("sac2s__20-devdax"))
    assert [g.cpu_node for g in sorted(probe(SysfsReader(root)).gpus, key=lambda g: g.pci_device)] == list(GPU_NODES)
    out = tmp_path / "loc.yaml"
    assert main(["tune", "--sysfs-root", str(root), "--bench", str(fast_bench_record), "--tp", "8", "--context", "2k",
                 "--gpu-kv-budget", "10GiB", "--steps", "6", "--replicates", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    p = load_profile(out)
    assert p.pool.rank_assignment == "locality" and p.pool.gpu_local_nodes == GPU_NODES
    assert p.pool.rank_targets == ("dax0.0",) * 4 + ("dax1.0",) * 4
    assert p.provenance["pool.gpu_local_nodes"].source == "measured"
    # round_robin stays a rule a profile can ask for
    from sactool.pool.rankplan import candidates

    names = ["dax0.0", "dax1.0"]
    got = candidates(8, names, rank_nodes=GPU_NODES, target_nodes={"dax0.0": 0, "dax1.0": 1})
    assert [c.strategy for c in got][:2] == ["locality", "round_robin"]
    assert [c.strategy for c in candidates(8, names)][0] == "round_robin"       # no GPU locality: SAC's rule
