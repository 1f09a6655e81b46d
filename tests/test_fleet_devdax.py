"""``mpirun … sactool bench … --node daxX.Y``: the ranks of one machine each take their own aligned,
disjoint slice of the device, by the rank plan's rule (the one ``serve`` and the plug-in follow).

What runs here: the slicing on the recorded sac2s 20-devdax devices (dax0.0 / dax1.0, 512 MiB each,
2 MiB align); the fleet-wide plan from an exchange's rows; and, under a real ``mpirun`` of two
ranks, the plan made by the ranks themselves from the recording (``SACTOOL_SYSFS_ROOT``), shown in
the refusal to measure a recording. What cannot run here: mapping and measuring a real
``/dev/daxX.Y`` — this machine has no devdax device (the live run is refused with the device's
absence, also checked below).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sactool.errors import CapacityError
from sactool.fleet.daxslice import check_fits_slice, dax_slices, fleet_slices
from sactool.pool.plan import PoolSpec, rank_plan
from sactool.pool.targets import target_facts as pool_targets
from sactool.host.sysfs import SysfsReader
from sactool.profile import validate
from sactool.topology import probe

MiB = 1 << 20
BIN = Path(sys.executable).parent
MPIRUN = shutil.which("mpirun", path=str(BIN)) or shutil.which("mpirun")


def _dax(root, name="dax0.0"):
    reader = SysfsReader(root)
    (t,) = pool_targets(probe(reader), reader, [name])
    return t


def test_slices_are_the_rank_plans_on_the_recorded_device(machine, example_profile):
    t = _dax(machine("sac2s__20-devdax"))
    assert (t.capacity_bytes, t.align_bytes) == (512 * MiB, 2 * MiB)
    four = dax_slices(t, 4)
    assert [(s.offset_bytes, s.size_bytes) for s in four] == [(i * 128 * MiB, 128 * MiB) for i in range(4)]
    # three ranks: 512/3 MiB rounded down to the 2 MiB align -> 170 MiB each, 2 MiB left at the end
    three = dax_slices(t, 3)
    assert [(s.offset_bytes, s.size_bytes) for s in three] == [(i * 170 * MiB, 170 * MiB) for i in range(3)]
    # the same rule serve's rank plan cuts for four ranks on that one device
    p = example_profile("sac-8rank-devdax")
    p = validate(replace(p, sglang=replace(p.sglang, tp_size=4, attn_dp_size=4, max_running_requests=None,
                                           max_total_tokens=None, context_length=None),
                         pool=replace(p.pool, dax_devices=("dax0.0",), gpu_local_nodes=(), rank_targets=())))
    assert [(s.offset_bytes, s.size_bytes) for s in rank_plan(PoolSpec.of(p), [t], check_pool=False).slots] == \
        [(s.offset_bytes, s.size_bytes) for s in four]
    with pytest.raises(CapacityError, match="cannot give 257 ranks an aligned slice"):
        dax_slices(t, 257)


def test_fleet_plan_groups_ranks_by_machine_and_local_rank(machine):
    t = _dax(machine("sac2s__20-devdax"))
    fact = (t.name, t.capacity_bytes, t.align_bytes)
    # rows as the exchange gives them, rank order: (machine, local rank, cpus, device facts);
    # mpirun placed ranks 0 and 3 on hostA, 1 and 2 on hostB, rank 3 being hostA's local rank 0
    seen = [("hostA", 1, (), fact), ("hostB", 0, (), fact), ("hostB", 1, (), fact), ("hostA", 0, (), fact)]
    got = fleet_slices(seen)
    assert [(s["machine"], s["offset_bytes"], s["size_bytes"], s["ranks_sharing"]) for s in got] == [
        ("hostA", 256 * MiB, 256 * MiB, 2), ("hostB", 0, 256 * MiB, 2),
        ("hostB", 256 * MiB, 256 * MiB, 2), ("hostA", 0, 256 * MiB, 2)]
    check_fits_slice(got[0], 256 * MiB, t.capacity_bytes)
    with pytest.raises(CapacityError) as e:
        check_fits_slice(got[0], 300 * MiB, t.capacity_bytes)
    assert "2 ranks on hostA share" in e.value.message and "--size 256.00MiB or less" in e.value.hint


def _mpirun(args, tmp_path, **env):
    cmd = [MPIRUN, "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else []) + args
    e = {**os.environ, "SACTOOL_CACHE_DIR": str(tmp_path / "cache"), **env}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=e)


@pytest.mark.skipif(MPIRUN is None, reason="no mpirun: install the mpi extra (pip install -e '.[mpi]')")
def test_two_ranks_plan_their_slices_under_mpirun(machine, tmp_path):
    """Real mpirun, two ranks on this machine: each rank reads the recording, the exchange groups
    them, and the plan is the one above; measuring a recording is refused (exit 3), before any work."""
    root = machine("sac2s__20-devdax")
    app = [str(BIN / "sactool"), "bench", "gather", "--node", "dax1.0", "--preset", "fast", "--size", "64MiB"]
    p = _mpirun(["-n", "2", *app], tmp_path, SACTOOL_SYSFS_ROOT=str(root))
    assert p.returncode == 3, p.stderr
    assert p.stderr.count("error: ") == 1 and "the slices the ranks would map" in p.stderr
    err = " ".join(p.stderr.split())
    assert re.search(rf"rank 0 \([^)]+\): dax1\.0 \[0, {256 * MiB}\); rank 1 \([^)]+\): dax1\.0 "
                     rf"\[{256 * MiB}, {512 * MiB}\)", err), err
    # the live machine has no devdax device: refused with what exists
    p = _mpirun(["-n", "2", *app], tmp_path)
    assert p.returncode == 3 and "dax1.0 does not exist (DAX devices: none)" in p.stderr, p.stderr


def test_the_device_is_named_by_its_memdevs_and_tune_fleet_refuses_devdax_records(machine):
    """Hosts sharing a device are told by the serials of its region's memdevs (region1 -> mem0 on
    the recording's crossed names); a devdax fleet record is no NUMA pool for tune --fleet."""
    from sactool.errors import RecordError
    from sactool.fleet.daxslice import dax_pool_device
    from sactool.fleet.split import plan

    root = machine("sac2s__20-devdax")
    reader = SysfsReader(root)
    topo = probe(reader)
    dev = dax_pool_device(topo, reader, _dax(root, "dax1.0"), "vm")
    serials = sorted({m.serial for m in topo.memdevs_of_dax("dax1.0")})
    assert dev["kind"] == "devdax" and dev["device"] == "dax1.0" and dev["capacity_bytes"] == 512 * MiB
    assert dev["memdev_serials"] and dev["key"] == "cxl:" + "+".join(dev["memdev_serials"]) and serials
    other = dax_pool_device(topo, reader, _dax(root, "dax0.0"), "vm")
    assert other["key"] != dev["key"]
    hosts = [{"host": "a", "ranks": [0, 1], "memory_node": "node3", "stand_in": None, "pool_device": dev}]
    sweep = [{"active_ranks": 2, "test": "gather", "config": "gather/x", "params": {"record_bytes": 656},
              "aggregate_bytes_per_s": 1e9, "aggregate_stats": {"n": 3},
              "per_rank": [{"rank": r, "host": "a", "bandwidth_bytes_per_s": 5e8} for r in (0, 1)]}]
    with pytest.raises(RecordError, match="measured devdax devices"):
        plan({"fleet": {"world_size": 2, "hosts": hosts, "ranks": [], "sweep": sweep}}, 656)
