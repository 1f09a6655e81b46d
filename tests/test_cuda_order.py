"""Which GPU each SGLang rank really gets: CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES (CUDA's own
rules, sactool.topology.cuda), and what ``sactool serve`` does with them on the SAC machine.

The machine is the recording sac2s 20-devdax (two sockets, dax0.0 on node0's CXL adapter, dax1.0
on node1's). No recording has a GPU (QEMU had none): the GPU functions are constructed
(tests/fixtures/trees.add_gpus: NVIDIA H100 IDs 10de:2330, class 0x030200), GPUs 0-3 on node0 and
4-7 on node1 unless a test says otherwise. What cannot be checked here: CUDA's FASTEST_FIRST
order itself (no GPU, and sysfs cannot reproduce it) — sactool only says it cannot follow it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.trees import MI300X, add_gpus, add_nvidia_info
from sactool.cli import main
from sactool.pool.contract import GPU_NODES_ENV
from sactool.pool.plan import PoolSpec, rank_plan
from sactool.host.sysfs import SysfsReader
from sactool.profile import load_profile, save_profile, validate
from sactool.topology import probe
from sactool.topology.cuda import cuda_devices

STANDIN_SITE = Path(__file__).resolve().parent / "standins" / "site"
SAC_GPUS = [0, 0, 0, 0, 1, 1, 1, 1]
CUDA_VARS = ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", GPU_NODES_ENV)


@pytest.fixture
def sac_gpus(machine):
    def build(nodes=SAC_GPUS, ids=None):
        return add_gpus(machine("sac2s__20-devdax"), list(nodes), ids)
    return build


def _bus(view):
    return [g.pci_device for g in view.gpus]


def test_cuda_numbering_follows_cuda_rules(sac_gpus):
    # GPUs on node1 get the lower bus numbers: PCI order, not socket order or listing order
    gpus = probe(SysfsReader(sac_gpus([1, 1, 0, 0]))).gpus
    pci = ["0000:18:00.0", "0000:19:00.0", "0000:1a:00.0", "0000:1b:00.0"]
    v = cuda_devices(list(reversed(gpus)), {})
    assert v.known and _bus(v) == pci and v.sockets(0, 4) == (1, 1, 0, 0)
    v = cuda_devices(gpus, {"CUDA_VISIBLE_DEVICES": "2,0"})
    assert v.known and _bus(v) == [pci[2], pci[0]] and v.sockets(0, 2) == (0, 1)
    # the CUDA guide's own example: 0,2,-1,1 shows devices 0 and 2
    v = cuda_devices(gpus, {"CUDA_VISIBLE_DEVICES": "0,2,-1,1"})
    assert v.known and _bus(v) == [pci[0], pci[2]] and "hides it and every later entry" in v.why
    v = cuda_devices(gpus, {"CUDA_VISIBLE_DEVICES": "3,7,0"})       # 7: no such GPU
    assert _bus(v) == [pci[3]] and v.sockets(0, 2) is None
    assert _bus(cuda_devices(gpus, {"CUDA_VISIBLE_DEVICES": ""})) == []
    for env, says in [({"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}, "speed heuristic"),
                      ({"CUDA_VISIBLE_DEVICES": "1,GPU-8932f937"}, "gives no UUID for every GPU"),
                      ({"CUDA_VISIBLE_DEVICES": "MIG-8932f937"}, "MIG instance"),
                      ({"CUDA_VISIBLE_DEVICES": "1,1"}, "named twice")]:
        v = cuda_devices(gpus, env)
        assert not v.known and says in v.why and v.sockets(0, 1) is None, env
    # unset order: what a process gets from sactool serve (PCI_BUS_ID), or CUDA's default
    assert cuda_devices(gpus, {}, order_if_unset=None).known is False


def test_an_nvidia_gpu_bound_to_another_driver_is_no_cuda_device(sac_gpus):
    """The CUDA driver enumerates only the GPUs it is bound to: GPU 0000:19:00.0 given to vfio-pci
    (a VM's) is skipped, so CUDA device 1 is 0000:1a:00.0; links built like the kernel's."""
    import os

    root = sac_gpus([0, 0, 1, 1])
    os.symlink("../../../../bus/pci/drivers/vfio-pci", root / "sys/devices/pci0000:17/0000:17:01.0/0000:19:00.0/driver")
    gpus = probe(SysfsReader(root)).gpus
    assert [g.driver for g in gpus] == [None, "vfio-pci", None, None]
    v = cuda_devices(gpus, {})
    assert _bus(v) == ["0000:18:00.0", "0000:1a:00.0", "0000:1b:00.0"] and v.sockets(0, 3) == (0, 1, 1)


def test_uuid_entries_and_excluded_gpus_follow_the_nvidia_drivers_file(sac_gpus):
    """Built /proc/driver/nvidia/gpus/<bdf>/information files (the driver's format): a UUID or a
    unique prefix of one names its GPU; a GPU the driver excludes is no CUDA device."""
    root = sac_gpus([0, 0, 1, 1])
    bdfs = ["0000:18:00.0", "0000:19:00.0", "0000:1a:00.0", "0000:1b:00.0"]
    uuids = ["GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", "GPU-8932aaaa-0000-0000-0000-000000000001",
             "GPU-1111f937-d72c-4106-c12f-20bd9faed9f6", "GPU-2222f937-d72c-4106-c12f-20bd9faed9f6"]
    for b, u in zip(bdfs, uuids):
        add_nvidia_info(root, b, u, excluded=b == bdfs[3])
    gpus = probe(SysfsReader(root)).gpus
    assert [(g.uuid, g.excluded) for g in gpus] == [(u, b == bdfs[3]) for b, u in zip(bdfs, uuids)]
    v = cuda_devices(gpus, {"CUDA_VISIBLE_DEVICES": f"GPU-1111,{uuids[0]}"})
    assert v.known and _bus(v) == [bdfs[2], bdfs[0]] and v.sockets(0, 2) == (1, 0)
    assert _bus(cuda_devices(gpus, {})) == bdfs[:3]                # the excluded GPU is not enumerated
    for entry, says in [("GPU-8932", "matches more than one GPU's UUID"), ("GPU-ffff", "matches no GPU's UUID"),
                        ("GPU-2222", "matches no GPU's UUID")]:
        v = cuda_devices(gpus, {"CUDA_VISIBLE_DEVICES": entry})
        assert not v.known and says in v.why, entry


def _dry_run(capsys, monkeypatch, profile, root, **env):
    for k in CUDA_VARS:
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PYTHONPATH", str(STANDIN_SITE))   # the target Python reports sglang 0.5.23
    rc = main(["serve", "--profile", str(profile), "--dry-run", "--format", "json", "--sysfs-root", str(root),
               "--python", sys.executable])
    out, err = capsys.readouterr()
    return rc, json.loads(out), err


def _locality_profile(example_profile, tmp_path):
    """The SAC example with the locality rule resolved as tune writes it (pool.rank_targets)."""
    p = example_profile("sac-8rank-devdax")
    p = validate(replace(p, pool=replace(p.pool, rank_assignment="locality",
                                         rank_targets=("dax0.0",) * 4 + ("dax1.0",) * 4)))
    path = tmp_path / "loc.yaml"
    save_profile(p, path)
    return path


def _numa_node_flag(d):
    return next(f["args"][1:] for f in d["flags"] if f["args"][0] == "--numa-node")


def test_serve_sets_pci_order_and_plans_the_gpus_visible(sac_gpus, example_profile, tmp_path, capsys, monkeypatch):
    root, prof = sac_gpus(), _locality_profile(example_profile, tmp_path)
    rc, d, _ = _dry_run(capsys, monkeypatch, prof, root)
    assert rc == 0 and d["problems"] == []
    assert d["env_delta"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and GPU_NODES_ENV not in d["env_delta"]
    assert next(e for e in d["env"] if e["name"] == "CUDA_DEVICE_ORDER")["source"] == "sactool"
    assert [r["target"] for r in d["plan"]] == ["dax0.0"] * 4 + ["dax1.0"] * 4
    assert _numa_node_flag(d) == ["0"] * 4 + ["1"] * 4
    assert any("their sockets are pool.gpu_local_nodes" in c for c in d["checks"])

    # the user's CUDA_VISIBLE_DEVICES puts ranks 0-3 on node1's GPUs: the plan follows them
    rc, d, _ = _dry_run(capsys, monkeypatch, prof, root, CUDA_VISIBLE_DEVICES="4,5,6,7,0,1,2,3")
    assert rc == 0 and d["problems"] == []
    assert [r["target"] for r in d["plan"]] == ["dax1.0"] * 4 + ["dax0.0"] * 4
    assert [r["cpu_node"] for r in d["plan"]] == [1] * 4 + [0] * 4
    assert _numa_node_flag(d) == ["1"] * 4 + ["0"] * 4
    assert d["env_delta"][GPU_NODES_ENV] == "1,1,1,1,0,0,0,0"
    assert d["env_delta"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # slices stay disjoint and aligned on each device
    by = {}
    for r in d["plan"]:
        by.setdefault(r["target"], []).append((r["offset_bytes"], r["size_bytes"]))
    assert all(sorted(v) == [(i * 128 << 20, 128 << 20) for i in range(4)] for v in by.values())

    # the plug-in, given what serve set, plans the same as the dry run showed
    from sactool.plugins import sglang as sglang_plugin
    from sactool.pool.targets import target_facts as pool_targets

    monkeypatch.setenv(GPU_NODES_ENV, d["env_delta"][GPU_NODES_ENV])
    plugged = sglang_plugin.with_env_gpu_nodes(load_profile(prof))
    reader = SysfsReader(root)
    facts = pool_targets(probe(reader), reader, ["dax0.0", "dax1.0"])
    assert rank_plan(PoolSpec.of(plugged), facts).to_data() == d["plan"]
    monkeypatch.setenv(GPU_NODES_ENV, "1,1")
    from sactool.errors import RecordError

    with pytest.raises(RecordError):
        sglang_plugin.with_env_gpu_nodes(load_profile(prof))


def test_serve_warns_once_for_another_order_and_refuses_too_few_gpus(sac_gpus, example_profile, tmp_path, capsys,
                                                                      monkeypatch):
    root, prof = sac_gpus(), _locality_profile(example_profile, tmp_path)
    rc, d, _ = _dry_run(capsys, monkeypatch, prof, root, CUDA_DEVICE_ORDER="FASTEST_FIRST",
                        CUDA_VISIBLE_DEVICES="4,5,6,7,0,1,2,3")
    assert rc == 0 and "CUDA_DEVICE_ORDER" not in d["env_delta"] and GPU_NODES_ENV not in d["env_delta"]
    warns = [c for c in d["checks"] if c.startswith("warning:")]
    assert len(warns) == 1 and "CUDA_DEVICE_ORDER=FASTEST_FIRST" in warns[0] and "PCI bus order" in warns[0]
    assert [r["target"] for r in d["plan"]] == ["dax0.0"] * 4 + ["dax1.0"] * 4     # the profile's, unchanged
    # the user's own PCI_BUS_ID is kept, not set again
    rc, d, _ = _dry_run(capsys, monkeypatch, prof, root, CUDA_DEVICE_ORDER="PCI_BUS_ID")
    assert rc == 0 and "CUDA_DEVICE_ORDER" not in d["env_delta"] and not any("warning" in c for c in d["checks"])
    # eight ranks, four visible GPUs: SGLang could not start them; the dry run says so with exit 3
    rc, d, err = _dry_run(capsys, monkeypatch, prof, root, CUDA_VISIBLE_DEVICES="4,5,6,7")
    assert rc == 3 and "need 8 CUDA devices" in d["problems"][0]["message"]
    assert "4 are visible" in d["problems"][0]["message"]


def test_vllm_serve_plans_the_gpus_visible_and_the_plugin_follows(sac_gpus, vllm_python, tmp_path, capsys,
                                                                  monkeypatch):
    """The same GPU check for a vLLM profile (2 DP replicas of TP 4, one shared pool each, rule locality):
    with CUDA_VISIBLE_DEVICES=4,5,6,7,0,1,2,3 replica 0's GPUs are node1's, so its pool goes to dax1.0;
    serve tells the plug-in (one socket per GPU rank), and the plug-in's plan — a shared pool following
    its replica's first GPU — is the dry run's."""
    from sactool.pool.contract import with_env_gpu_nodes
    from sactool.pool.targets import target_facts

    p = load_profile(Path(__file__).resolve().parent.parent / "profiles/examples/vllm-dp2-devdax.yaml")
    p = validate(replace(p, pool=replace(p.pool, rank_assignment="locality", rank_targets=("dax0.0", "dax1.0"),
                                         gpu_local_nodes=tuple(SAC_GPUS)),
                         vllm=replace(p.vllm, host_pool_gib=0.25, max_model_len=4096, max_num_seqs=1)))
    prof = save_profile(p, tmp_path / "vllm-loc.yaml")
    root = sac_gpus()

    def dry_run(**env):
        for k in CUDA_VARS:
            monkeypatch.delenv(k, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        rc = main(["serve", "--engine", "vllm", "--profile", str(prof), "--dry-run", "--format", "json",
                   "--sysfs-root", str(root), "--python", vllm_python])
        return rc, json.loads(capsys.readouterr().out)

    rc, d = dry_run()
    assert rc == 0 and d["problems"] == [] and GPU_NODES_ENV not in d["env_delta"]
    assert [r["target"] for r in d["plan"]] == ["dax0.0", "dax1.0"]
    rc, d = dry_run(CUDA_VISIBLE_DEVICES="4,5,6,7,0,1,2,3")
    assert rc == 0 and d["problems"] == [], d["problems"]
    assert d["env_delta"][GPU_NODES_ENV] == "1,1,1,1,0,0,0,0"
    assert [r["target"] for r in d["plan"]] == ["dax1.0", "dax0.0"]
    monkeypatch.setenv(GPU_NODES_ENV, d["env_delta"][GPU_NODES_ENV])
    plugged = with_env_gpu_nodes(load_profile(prof))      # what the vLLM plug-in plans with (register)
    reader = SysfsReader(root)
    facts = target_facts(probe(reader), reader, ["dax0.0", "dax1.0"])
    mine = rank_plan(PoolSpec.of(plugged), facts).to_data()
    assert [(r["target"], r["offset_bytes"]) for r in mine] == [(r["target"], r["offset_bytes"]) for r in d["plan"]]
    rc, d = dry_run(CUDA_VISIBLE_DEVICES="4,5,6,7")        # 8 GPU ranks, 4 visible
    assert rc == 3 and d["problems"][0]["message"].startswith("8 ranks (TP 4 x DP 2) from GPU 0 need 8 CUDA devices")


def test_serve_on_a_recording_without_gpus_keeps_the_profile(machine, example_profile, tmp_path, capsys,
                                                              monkeypatch):
    root, prof = machine("sac2s__20-devdax"), _locality_profile(example_profile, tmp_path)
    rc, d, _ = _dry_run(capsys, monkeypatch, prof, root, CUDA_VISIBLE_DEVICES="4,5,6,7")
    assert rc == 0 and d["env_delta"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert [r["target"] for r in d["plan"]] == ["dax0.0"] * 4 + ["dax1.0"] * 4
    warns = [c for c in d["checks"] if c.startswith("warning:")]
    assert len(warns) == 1 and "no GPU is seen in the recording" in warns[0]


def test_tune_reads_gpus_as_cuda_numbers_them(sac_gpus):
    from sactool.pool.discover import gpu_nodes
    from sactool.tune.pool import gpu_warnings

    topo = probe(SysfsReader(sac_gpus()))
    assert gpu_nodes(topo, {}) == tuple(SAC_GPUS)
    assert gpu_nodes(topo, {"CUDA_VISIBLE_DEVICES": "7,6,5,4"}) == (1, 1, 1, 1)
    assert gpu_nodes(topo, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}) == ()
    assert [w["code"] for w in gpu_warnings(topo, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})] == ["gpu_numbering_unknown"]
    assert gpu_warnings(topo, {}) == []


# ---- AMD Instinct (class 0x1200) ------------------------------------------------------------------

def test_amd_instinct_is_found_named_and_not_planned(sac_gpus, example_profile, tmp_path, capsys, monkeypatch):
    """Built entries with a real MI300X's IDs (1002:74a1, class 0x120000)."""
    root = sac_gpus(SAC_GPUS, MI300X)
    topo = probe(SysfsReader(root))
    assert [(g.vendor_name, g.device, g.pci_class, g.class_name, g.cpu_node) for g in topo.gpus] == [
        ("AMD", "0x74a1", "0x120000", "processing accelerator", n) for n in SAC_GPUS]
    (w,) = [w for w in topo.warnings if w.code == "gpu-not-cuda"]
    assert "are not CUDA devices" in w.message and "0000:18:00.0" in w.message and "0000:1f:00.0" in w.message
    from sactool.pool.discover import gpu_nodes
    from sactool.tune.pool import gpu_warnings

    assert gpu_nodes(topo, {}) == ()
    assert {w["code"] for w in gpu_warnings(topo, {})} == {"gpu_not_cuda"}
    rc, d, _ = _dry_run(capsys, monkeypatch, _locality_profile(example_profile, tmp_path), root)
    assert rc == 3 and "need 8 CUDA devices" in d["problems"][0]["message"]
    assert "are not CUDA devices" in d["problems"][0]["message"] and "0000:1f:00.0 (AMD 0x74a1)" in d["problems"][0]["message"]


def test_class_0x12_counts_only_for_amd_and_only_subclass_00(machine, tmp_path):
    """Built entries: an Intel NPU (8086:7d1d, class 0x120000, Core Ultra), an AMD SDXI data mover
    (class 0x120100) and a Habana Gaudi2 (1da3:1020, class 0x120000) are not GPUs."""
    root = machine("sac2s__20-devdax")
    add_gpus(root, [0], {"class": "0x120000", "vendor": "0x8086", "device": "0x7d1d"}, first_bus=0x30)
    add_gpus(root, [0], {"class": "0x120100", "vendor": "0x1002", "device": "0x14a0"}, first_bus=0x31)
    add_gpus(root, [1], {"class": "0x120000", "vendor": "0x1da3", "device": "0x1020"}, first_bus=0x32)
    add_gpus(root, [1], MI300X, first_bus=0x33)
    topo = probe(SysfsReader(root))
    assert [g.pci_device for g in topo.gpus] == ["0000:33:00.0"]
    assert "0000:30:00.0 (vendor 0x8086, class 0x120000, a processing accelerator but no GPU vendor's)" in topo.gpu_scan
    assert "0000:32:00.0 (vendor 0x1da3" in topo.gpu_scan and "0000:31:00.0" not in topo.gpu_scan


def test_tune_on_amd_gpus_warns_and_plans_no_gpu_socket(sac_gpus, capsys, fast_bench_record, tmp_path):
    out = tmp_path / "amd.yaml"
    assert main(["tune", "--sysfs-root", str(sac_gpus(SAC_GPUS, MI300X)), "--bench", str(fast_bench_record),
                 "--tp", "8", "--context", "2k", "--gpu-kv-budget", "10GiB", "--steps", "6", "--replicates", "1",
                 "--out", str(out)]) == 0
    err = " ".join(capsys.readouterr().err.split())      # the console wraps lines
    assert err.count("are not CUDA devices") == 1 and "0000:1f:00.0 (AMD 0x74a1, class 0x120000)" in err
    p = load_profile(out)
    assert p.pool.gpu_local_nodes == () and p.pool.rank_assignment == "round_robin"
