"""Fleet logic without MPI: the pool map from recorded machines, host grouping, the sweep's
arithmetic, CPU sharing between co-located ranks, option agreement, launcher detection.

The QEMU recordings share serial numbers across runs (the same ``sn=`` on the QEMU command line):
``ram__*`` and ``ram-k6.1__*`` all hold memdev serial 0x1001 (volatile 256 MiB), the ``pmem__*``
runs 0x1002 (persistent 256 MiB). Read as three hosts, ram__10-region and ram-k6.1__10-region
therefore share one physical device and pmem__10-region has its own.
"""

from __future__ import annotations

import sys

import pytest

from fixtures.trees import unpack
from sactool.errors import TopologyError, UsageError
from sactool.fleet import mpi
from sactool.fleet.bench import activation_order, check_agreement, rank_cpus, split_cpus
from sactool.fleet.poolmap import norm_serial, pool_map, shared_devices
from sactool.fleet.probe import build_record, group_hosts
from sactool.fleet.sweep import step_entry, sweep_sizes
from sactool.host.sysfs import SysfsReader
from sactool.topology import probe


def _topo(name, tmp_path):
    return probe(SysfsReader(unpack(name, tmp_path / name))).to_data()


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet")
    return [(n, _topo(n, tmp)) for n in ("ram__10-region", "ram-k6.1__10-region", "pmem__10-region",
                                         "ram__20-devdax")]


def test_pool_map_matches_memdevs_by_serial(hosts):
    pm = pool_map(hosts[:3])
    by = {d["serial"]: d for d in pm["memdevs"]}
    assert set(by) == {"0x1001", "0x1002"}
    assert by["0x1001"]["shared"] and by["0x1001"]["host_names"] == ["ram-k6.1__10-region", "ram__10-region"]
    assert not by["0x1002"]["shared"] and by["0x1002"]["host_names"] == ["pmem__10-region"]
    assert [d["serial"] for d in shared_devices(pm)] == ["0x1001"]
    ram = {h["host"]: h for h in by["0x1001"]["hosts"]}
    # on 6.12 the volatile region was onlined by kmem as node2; on 6.1 no region could be created
    assert ram["ram__10-region"]["nodes"] == [2] and ram["ram__10-region"]["dax_devices"] == ["dax0.0"]
    assert ram["ram-k6.1__10-region"]["regions"] == [] and ram["ram-k6.1__10-region"]["nodes"] == []
    assert {h["capacity_bytes"] for h in by["0x1001"]["hosts"]} == {256 << 20}
    assert pm["unmatched"] == [] and pm["warnings"] == []


def test_pool_map_matches_dax_devices_by_backing_memdev(hosts):
    pm = pool_map([hosts[0], hosts[3], hosts[2]])  # the same device onlined (system-ram) and as devdax
    groups = {tuple(g["memdev_serials"]): g for g in pm["dax_devices"]}
    g = groups[("0x1001",)]
    assert g["shared"] and sorted((h["host"], h["mode"]) for h in g["hosts"]) == [
        ("ram__10-region", "system-ram"), ("ram__20-devdax", "devdax")]
    assert not groups[("0x1002",)]["shared"]


def test_pool_map_duplicate_and_missing_serials(hosts):
    name, topo = hosts[0]
    twin = {**topo, "cxl": {**topo["cxl"], "memdevs": topo["cxl"]["memdevs"] + [
        {**topo["cxl"]["memdevs"][0], "name": "mem9"}, {**topo["cxl"]["memdevs"][0], "name": "mem8", "serial": "0x0"}]}}
    pm = pool_map([(name, twin)])
    assert [w["code"] for w in pm["warnings"]] == ["duplicate_serial"]
    assert pm["unmatched"] == [{"host": name, "memdev": "mem8", "reason": "serial '0x0' identifies no device"}]


@pytest.mark.parametrize("text,want", [("0x1001", "0x1001"), ("0X01001", "0x1001"), ("1001", "0x1001"),
                                       ("0x0", None), (None, None), ("zz", None)])
def test_norm_serial(text, want):
    assert norm_serial(text) == want


def test_fleet_record_groups_ranks_into_hosts(hosts):
    entries = [{"rank": r, "host": h, "host_source": "x", "machine": "m", "live": False, "sysfs_root": f"/{h}",
                "topology": t} for r, (h, t) in enumerate(hosts[:2])]
    entries.append({**entries[0], "rank": 2})  # a second rank on the first host
    rec = build_record(entries, 3)
    assert rec["kind"] == "fleet_topology" and rec["world_size"] == 3
    assert [(h["host"], h["ranks"]) for h in rec["hosts"]] == [("ram__10-region", [0, 2]), ("ram-k6.1__10-region", [1])]
    assert shared_devices(rec["pool_map"])[0]["serial"] == "0x1001"


def test_same_name_different_topology_is_two_hosts(hosts):
    entries = [{"rank": r, "host": "vm", "host_source": "hostname", "machine": "vm", "live": False,
                "sysfs_root": f"/{h}", "topology": t} for r, (h, t) in enumerate(hosts[:2])]
    out, warns = group_hosts(entries)
    assert [h["host"] for h in out] == ["vm/rank0", "vm/rank1"]
    assert [w["code"] for w in warns] == ["host_name_ambiguous"]


# ---- sweep arithmetic -------------------------------------------------------------------------
def _s(seconds, work, cpu=None):
    d = {"seconds": seconds, "work": work}
    if cpu:
        d["thread_cpu_seconds"] = cpu
    return d


def test_step_entry_aggregate_is_bytes_over_the_slowest_rank():
    params = {"record_bytes": 1000, "topk": 100, "threads": 1}
    per = [{"rank": 0, "host": "a", "cpus": [0], "samples": [_s(1.0, 1e6, [1.0]), _s(2.0, 1e6, [1.0])]},
           {"rank": 1, "host": "b", "cpus": [1], "samples": [_s(0.5, 1e6, [0.5]), _s(1.0, 1e6, [0.5])]}]
    e = step_entry(2, "gather", "gather/1000B", params, per, single=1e9)
    # sample 0: 2e9 bytes over 1.0 s; sample 1: 2e9 over 2.0 s -> median 1.5e9
    assert e["aggregate_samples_bytes_per_s"] == [2e9, 1e9]
    assert e["aggregate_bytes_per_s"] == pytest.approx(1.5e9)
    assert e["aggregate_sum_of_rates_bytes_per_s"] == pytest.approx((3e9 + 1.5e9) / 2)
    assert e["speedup_vs_one_rank"] == pytest.approx(1.5)
    r0, r1 = e["per_rank"]
    assert r0["bandwidth_bytes_per_s"] == pytest.approx(0.75e9) and r1["bandwidth_bytes_per_s"] == pytest.approx(1.5e9)
    assert r0["on_cpu_fraction"] == pytest.approx(0.75)  # 1 s of CPU in a 1 s and a 2 s sample
    assert e["fairness"] == {"metric": "bandwidth_bytes_per_s", "min": pytest.approx(0.75e9),
                             "max": pytest.approx(1.5e9), "min_over_max": pytest.approx(0.5)}
    # top-k step time: 100 records of a 1e6-record sample of 1 s = 100 µs
    assert r0["topk_step_us"]["median"] == pytest.approx(150.0) and e["topk_step_us"]["worst_p95"] > 190


def test_step_entry_latency_fairness_uses_latency():
    per = [{"rank": 0, "host": "a", "samples": [_s(1e-3, 1e4)] * 3},
           {"rank": 1, "host": "a", "samples": [_s(2e-3, 1e4)] * 3}]
    e = step_entry(2, "latency", "latency/random", {"variant": "random"}, per, None)
    assert e["latency_ns"]["median_of_ranks"] == pytest.approx(150.0)
    assert e["fairness"]["metric"] == "latency_ns" and e["fairness"]["min_over_max"] == pytest.approx(0.5)
    assert e["aggregate_bytes_per_s"] == pytest.approx(2e4 * 64 / 2e-3)


@pytest.mark.parametrize("n,want", [(1, [1]), (2, [1, 2]), (3, [1, 2, 3]), (4, [1, 2, 4]), (6, [1, 2, 4, 6])])
def test_sweep_sizes(n, want):
    assert sweep_sizes(n) == want


# ---- ranks, CPUs, options --------------------------------------------------------------------
def test_activation_order_round_robins_hosts():
    assert activation_order(["a", "a", "b", "b"]) == [0, 2, 1, 3]
    assert activation_order(["a", "b", "a", "c"]) == [0, 1, 3, 2]


def test_cpus_split_among_colocated_ranks():
    assert split_cpus((0, 1, 2, 3), 1, 2) == ((2, 3), False)
    assert split_cpus((0, 1), 3, 4) == ((1,), True)
    # the launcher bound each rank to its own core: keep the binding
    assert rank_cpus((1,), [(0,), (1,)], 1) == ((1,), False)
    # no binding (mpirun --oversubscribe): the same set everywhere, split by local rank
    assert rank_cpus((0, 1), [(0, 1), (0, 1)], 1) == ((1,), False)
    assert rank_cpus((0, 1), [(0, 1)] * 4, 2) == ((0,), True)


def test_ranks_disagreeing_on_options_are_refused():
    a = {"node": 0, "topk": 2048}
    check_agreement([a, dict(a)])
    with pytest.raises(UsageError, match="rank 1 has node=1, rank 0 has node=0"):
        check_agreement([a, dict(a), {"node": 1, "topk": 2048}][0::2])


# ---- detection -----------------------------------------------------------------------------
def test_no_launcher_or_one_rank_is_plain():
    assert mpi.launched_size({}) is None and mpi.detect({}) is None
    assert mpi.detect({"OMPI_COMM_WORLD_SIZE": "1"}) is None
    assert mpi.detect({"PMI_SIZE": "1"}) is None
    assert mpi.launched_size({"PMI_SIZE": "8"}) == 8 and mpi.launched_size({"PMIX_RANK": "0"}) == 0


def test_abort_if_alone_is_a_no_op_without_a_launcher_or_on_success():
    mpi.abort_if_alone(2, {})                                # no launcher: plain exit code
    mpi.abort_if_alone(0, {"OMPI_COMM_WORLD_SIZE": "4"})     # success: nothing to end
    mpi.abort_if_alone(2, {"OMPI_COMM_WORLD_SIZE": "1"})     # a world of one


def test_launcher_without_mpi4py_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # what an environment without the package gives
    with pytest.raises(TopologyError, match="mpi4py is not importable") as e:
        mpi.detect({"OMPI_COMM_WORLD_SIZE": "4"})
    assert "sactool[mpi]" in e.value.hint


# ---- the split for tune --fleet ----------------------------------------------------------------
def _fleet_record(test="gather", record_bytes=656, top=3, world=3):
    """A fleet bench record's fleet block in the form sactool.fleet.bench writes (numbers made up
    for the arithmetic): hosts a (ranks 0, 1) and b (rank 2) share one device; c has its own."""
    dev = {"kind": "cxl", "key": "cxl:0x1001", "memdev_serials": ["0x1001"], "node": "node2"}
    hosts = [{"host": "a", "ranks": [0, 1], "memory_node": "node2", "stand_in": None,
              "pool_device": {**dev, "free_bytes": 100 << 30}},
             {"host": "b", "ranks": [2], "memory_node": "node2", "stand_in": None,
              "pool_device": {**dev, "free_bytes": 90 << 30}},
             {"host": "c", "ranks": [3], "memory_node": "node3", "stand_in": None,
              "pool_device": {**dev, "key": "cxl:0x2002", "free_bytes": 50 << 30}}]
    ranks = [{"rank": r, "host": h, "cpu_node": "node0", "cpus": [0, 1], "machine_block": {"hostname": h}}
             for r, h in enumerate("aabc")]
    per = [{"rank": r, "host": h, "bandwidth_bytes_per_s": bw} for r, h, bw in
           ((0, "a", 1e9), (1, "a", 2e9), (2, "b", 4e9), (3, "c", 8e9))[:top]]
    sweep = [{"active_ranks": top, "test": test, "config": "gather/x", "params": {"record_bytes": record_bytes,
              "threads": 2}, "aggregate_bytes_per_s": 7e9, "aggregate_stats": {"n": 3}, "per_rank": per}]
    return {"fleet": {"world_size": world + 1 if top < 4 else world, "hosts": hosts, "ranks": ranks,
                      "sweep": sweep}}


def test_split_shares_capacity_and_sums_each_hosts_ranks():
    from sactool.fleet.split import plan, pool_source

    shares, warns = plan(_fleet_record(top=4, world=4), 656, path="f.json", digest="sha256:x")
    by = {s.host: s for s in shares}
    assert by["a"].hosts_sharing == ("a", "b") and by["a"].device_capacity_bytes == 90 << 30
    assert by["a"].share_bytes == by["b"].share_bytes == 45 << 30 and by["c"].share_bytes == 50 << 30
    assert (by["a"].bandwidth_bytes_per_s, by["b"].bandwidth_bytes_per_s, by["c"].bandwidth_bytes_per_s) == (3e9, 4e9, 8e9)
    assert by["a"].bandwidth_source == "measured" and warns == []
    src = pool_source(by["a"])
    pool, gather = src.pool, src.gather
    assert [(t.name, t.node, t.capacity_bytes) for t in pool.targets] == [("node2", 2, 45 << 30)]
    assert gather.rounds == ({"node2": 3e9},) and gather.info["source"] == "fleet"
    assert by["a"].machine == {"hostname": "a"} and by["a"].profile_block()["record"] == "f.json"


def test_split_partial_sweep_other_size_and_wrong_test():
    from sactool.errors import RecordError
    from sactool.fleet.split import plan

    shares, warns = plan(_fleet_record(record_bytes=1152, top=3, world=3), 656)
    codes = {w["code"] for w in warns}
    assert {"fleet_partial", "fleet_record_size", "fleet_host_idle"} <= codes  # c had no active rank
    a = next(s for s in shares if s.host == "a")
    # 1152 B touches 18 lines, 656 B 11: same time per line -> 656/11 over 1152/18 of the bandwidth
    assert a.bandwidth_source == "scaled" and a.bandwidth_bytes_per_s == pytest.approx(3e9 * (656 / 11) / (1152 / 18))
    with pytest.raises(RecordError, match="tune needs gather figures"):
        plan(_fleet_record(test="latency"), 656)
    with pytest.raises(RecordError, match="no fleet sweep"):
        plan({"fleet": None}, 656)


def test_host_file_names_stay_in_their_directory():
    from sactool.fleet.split import host_file_name

    assert host_file_name("node-7.example") == "node-7.example"
    assert host_file_name("../../etc/x") == "_.._etc_x" and host_file_name("..") == "host"


def test_pool_map_two_socket_recordings(tmp_path):
    """sac2s (two sockets, a CXL device each: serial 0x3001 is mem1 behind cxl.1, 0x3002 is mem0
    behind cxl.2 — names crossed against bridge order) read as two hosts in two phases of one boot:
    both devices are seen by both, and each DAX device is matched to its memdev by serial."""
    hosts = [(n, _topo(n, tmp_path)) for n in ("sac2s__10-region", "sac2s__20-devdax")]
    pm = pool_map(hosts)
    by = {d["serial"]: d for d in pm["memdevs"]}
    assert sorted(by) == ["0x3001", "0x3002"] and all(d["shared"] for d in by.values())
    assert {h["memdev"] for h in by["0x3001"]["hosts"]} == {"mem1"} and {h["memdev"] for h in by["0x3002"]["hosts"]} == {"mem0"}
    onlined = {h["host"]: h["nodes"] for h in by["0x3001"]["hosts"]}
    assert onlined == {"sac2s__10-region": [2], "sac2s__20-devdax": []}
    dax = {tuple(g["memdev_serials"]): sorted((h["dax"], h["mode"]) for h in g["hosts"]) for g in pm["dax_devices"]}
    assert dax == {("0x3001",): [("dax0.0", "devdax"), ("dax0.0", "system-ram")],
                   ("0x3002",): [("dax1.0", "devdax"), ("dax1.0", "system-ram")]}


def test_sweep_steps_take_the_rounds_every_active_rank_finished():
    from sactool.fleet.record import sweep_steps

    ranks = [{"host": h, "cpus": [i]} for i, h in enumerate("abc")]
    s = {"seconds": 1.0, "work": 1e6}
    got = [{"samples": [[1, "g", [s, s]], [2, "g", [s, s]], [3, "g", [s]]], "params": {"g": {"record_bytes": 64,
            "topk": 10, "threads": 1}}, "tests": {"g": "gather"}},
           {"samples": [[2, "g", [s]], [3, "g", [s]]]}, {"samples": [[3, "g", [s, s]]]}]
    steps = sweep_steps(ranks, [0, 1, 2], got)
    assert [(e["active_ranks"], [len(r["raw"]) for r in e["per_rank"]]) for e in steps] == [
        (1, [2]), (2, [1, 1]), (3, [1, 1, 1])]
    assert steps[1]["speedup_vs_one_rank"] == pytest.approx(2.0)  # twice the bytes in the same time


def test_tune_fleet_simulates_each_set_of_inputs_once(tmp_path, fast_bench_record, monkeypatch, capsys):
    """Three hosts whose tunes have the same model, contexts, workload and candidate buffers (they
    differ in pool share and bandwidth only): the first host runs the hot-buffer simulations, the
    others reuse them — counted at the real simulation function (a counting wrapper around it) and
    in each result. The fleet record is built by the test (the numbers of _fleet_record, in the
    file layout of a fleet bench record): test_fleet_mpi measures a real one under mpirun."""
    import json

    from sactool.cli import main
    from sactool.hisparse import hotbuffer
    from sactool.profile import load_profile

    data = json.loads(fast_bench_record.read_text())
    data.update(_fleet_record(top=4, world=4))
    rec = tmp_path / "fleet.json"
    rec.write_text(json.dumps(data))
    real, calls = hotbuffer.simulate_many, []
    monkeypatch.setattr(hotbuffer, "simulate_many", lambda *a, **k: calls.append(len(a[1])) or real(*a, **k))
    args = ["tune", "--fleet", str(rec), "--context", "4k,8k", "--steps", "6", "--replicates", "2", "--tp", "1",
            "--gpu-kv-budget", "4GiB", "--concurrency", "1", "--format", "json", "--out", str(tmp_path / "p")]
    assert main(args) == 0, capsys.readouterr().err
    hosts = json.loads(capsys.readouterr().out)["hosts"]
    sims = [h["result"]["hotbuffer_simulations"] for h in hosts]
    passes = 2 * 2   # contexts x replicates: one pass each gives every buffer size asked
    assert [h["host"] for h in hosts] == ["a", "b", "c"]
    assert sims[0] == {"run": passes, "reused": 0} and sims[1] == sims[2] == {"run": 0, "reused": passes}
    assert len(calls) == passes                       # not 3 x passes
    # the same inputs give the same misses: every host's hit rates are the first host's
    one = [h["result"]["summary"]["per_context"] for h in hosts]
    assert one[0] and all([r["hit_rate"] for r in o] == [r["hit_rate"] for r in one[0]] for o in one)
    for h in "abc":
        assert load_profile(tmp_path / "p" / f"{h}.yaml").fleet["host"] == h
    # a plain tune (no fleet) runs its own simulations and says nothing about sharing
    calls.clear()
    assert main(["tune", "--sysfs-root", str(_tree(tmp_path)), "--bench", str(fast_bench_record), "--context", "4k",
                 "--steps", "6", "--replicates", "1", "--tp", "1", "--gpu-kv-budget", "4GiB",
                 "--out", str(tmp_path / "one.yaml")]) == 0
    assert len(calls) == 1 and "reused" not in capsys.readouterr().out


def _tree(tmp_path):
    from fixtures.trees import unpack

    return unpack("this-machine", tmp_path / "tree")


def test_size_hint_on_a_cxl_node_is_the_checks_own_room(tmp_path):
    """The fleet's per-rank ``--size`` hint comes from the free-memory rule the check applies
    (memory.nodes: a CPU-less node keeps back 3 %, not 512 MiB): on the SAC recording's 512 MiB CXL
    node two ranks may take what the hint says between them, and the hint is not 0 (issue 19)."""
    from sactool.errors import CapacityError
    from sactool.fleet.bench import _check_fits_all
    from sactool.memory.nodes import check_fits, free_estimate
    from sactool.units import parse_size

    reader = SysfsReader(unpack("sac2s__30-system-ram", tmp_path / "t"))
    free = free_estimate(probe(reader), reader, 2)
    assert free.cpu_less
    with pytest.raises(CapacityError) as e:
        _check_fits_all(free, 300 << 20, 2)
    hinted = parse_size(e.value.hint.split()[2])   # "use --size N or less (per rank) …"
    assert hinted > 0
    check_fits(free, 2 * hinted, reader=reader)              # what the hint says fits
    with pytest.raises(CapacityError):
        check_fits(free, 2 * (hinted + (1 << 20)), reader=reader)   # and no more than about that


def test_an_interrupted_fleet_record_is_planned_with_a_warning():
    """Issue 22: an interrupted (complete: false) fleet record fed tune --fleet without a word."""
    from sactool.fleet.split import plan

    data = _fleet_record(top=4, world=4)
    assert "fleet_incomplete" not in {w["code"] for w in plan(data, 656)[1]}
    data.update(complete=False, protocol={"rounds": 5})
    data["fleet"]["rounds_done"] = 2
    warns = plan(data, 656)[1]
    assert any(w["code"] == "fleet_incomplete" and "2 of 5 rounds" in w["message"] for w in warns), warns


@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan", "inf"])
def test_fleet_timeout_variable_refuses_what_is_not_a_positive_number(value):
    """SACTOOL_FLEET_TIMEOUT's rule without a launcher (test_fleet_mpi.py runs one value under mpirun)."""
    with pytest.raises(UsageError, match="is not a positive number of seconds"):
        mpi.timeout_from_env({"SACTOOL_FLEET_TIMEOUT": value})
    assert mpi.timeout_from_env({"SACTOOL_FLEET_TIMEOUT": "12.5"}) == 12.5 and mpi.timeout_from_env({}) == 300.0
