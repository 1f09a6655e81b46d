"""One spelling for a NUMA node in JSON across every record (issue 19; docs/reference/units.md): a
node is its number; ``nodeN`` only where the value is a name (a pool target that may as well be a
DAX device, a topology node's own name) or a mapping key. Older records (``"node2"``) are
upgraded on loading and read and render as before; people still read ``node2``."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest
import yaml
from fixtures.nodespelling import TOPOLOGY_NAMES, bare_node_names
from fixtures.trees import unpack
from rich.console import Console

from sactool.bench.record import SCHEMA_VERSION, from_data, gather_figure, load_bench
from sactool.cli import main
from sactool.host.sysfs import SysfsReader
from sactool.units import node_name, node_number

FIXTURE = Path(__file__).parent / "fixtures" / "bench" / "node0-gather.json"
GOLDEN = Path(__file__).parent / "golden" / "bench" / "node0-gather.render.txt"


def test_node_number_and_name_read_both_spellings():
    assert [node_number(v) for v in (2, "node2", "node12", "dax0.0", None, True, -1, "node", "2")] == [
        2, 2, 12, None, None, None, None, None, None]
    assert [node_name(v) for v in (2, "node2", "dax0.0", None)] == ["node2", "node2", "dax0.0", "?"]


def test_probe_record_machine_block_has_numbers(machine, capsys):
    assert main(["probe", "--sysfs-root", str(machine("sac2s__30-system-ram")), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [n["node"] for n in data["machine"]["numa_nodes"]] == [0, 1, 2, 3]
    assert bare_node_names(data) <= TOPOLOGY_NAMES


def test_simulation_record_has_no_node_names(capsys):
    assert main(["simulate", "--platform", "sac-paper", "--context", "16k", "--concurrency", "8",
                 "--hotbuffer-steps", "2", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == 2 and bare_node_names(data) == set()


def test_fleet_topology_record_pool_map_has_numbers(tmp_path):
    from sactool.fleet.probe import build_record
    from sactool.topology import probe

    topo = probe(SysfsReader(unpack("sac2s__10-region", tmp_path / "t"))).to_data()
    rec = build_record([{"rank": 0, "host": "a", "host_source": "x", "machine": "m", "live": False,
                         "sysfs_root": "/a", "topology": topo}], 1)
    nodes = [h["nodes"] for d in rec["pool_map"]["memdevs"] for h in d["hosts"]]
    assert [2] in nodes
    assert bare_node_names(rec) <= {".hosts[].topology" + p for p in TOPOLOGY_NAMES}


def test_fleet_topology_schema_1_is_upgraded(tmp_path):
    from sactool.fleet.probe import SCHEMA_VERSION, build_record, load_fleet_topology
    from sactool.records import dumps

    topo = probe_data(tmp_path)
    rec = build_record([{"rank": 0, "host": "a", "host_source": "x", "machine": "m", "live": False,
                         "sysfs_root": "/a", "topology": topo}], 1)
    old = copy.deepcopy(rec)
    old["schema_version"] = 1
    for d in old["pool_map"]["memdevs"]:
        for h in d["hosts"]:
            h["nodes"] = [f"node{n}" for n in h["nodes"]]
    for h in old["hosts"]:
        for n in h["topology"]["machine"]["numa_nodes"]:
            n["node"] = f"node{n['node']}"
    p = tmp_path / "old.json"
    p.write_text(dumps(old, "json"))
    back = load_fleet_topology(p)
    assert back["pool_map"] == rec["pool_map"] and back["hosts"] == rec["hosts"]
    assert back["schema_version"] == SCHEMA_VERSION


def probe_data(tmp_path):
    from sactool.topology import probe

    return probe(SysfsReader(unpack("sac2s__10-region", tmp_path / "t2"))).to_data()


def test_bench_record_written_now_has_numbers(fast_bench_record):
    data = json.loads(fast_bench_record.read_text())
    assert data["schema_version"] == SCHEMA_VERSION == 3
    assert data["memory_node"] == 0 and data["cpu_node"] == 0 and data["stand_in"]["node"] == 0
    assert {(r["memory_node"], r["cpu_node"]) for r in data["results"]} == {(0, 0)}
    assert data["buffer"]["memory_nodes"] == [0] and data["machine"]["numa_nodes"][0]["node"] == 0
    assert "node0" in data["buffer"]["node_pages"]            # a mapping key stays nodeN
    assert bare_node_names(data) == set()


def test_profile_machine_block_has_numbers_and_targets_stay_names(tmp_path, fast_bench_record, machine, capsys):
    from sactool.profile import SCHEMA_VERSION as PROFILE_SCHEMA

    out = tmp_path / "p.yaml"
    assert main(["tune", "--context", "4k", "--steps", "6", "--replicates", "2", "--sysfs-root",
                 str(machine("this-machine")), "--bench", str(fast_bench_record), "--out", str(out)]) == 0
    capsys.readouterr()
    prof = yaml.safe_load(out.read_text())
    assert prof["schema_version"] == PROFILE_SCHEMA and prof["machine"]["numa_nodes"][0]["node"] == 0
    # pool targets are names (node2 or dax0.0): the bench block's memory_node, rank targets, targets
    names = bare_node_names(prof)
    assert ".bench.memory_node" in names and prof["bench"]["memory_node"] == "node0"
    assert names <= {".bench.memory_node", ".pool.rank_targets[]", ".pool.targets[].name",
                     ".bench.targets[].target", ".request.pool_targets[].name", ".fleet.memory_node"}, names


def test_schema_1_bench_record_loads_as_numbers_and_renders_as_before():
    """The real recorded fixture (schema 1, "node0" strings) reads as numbers, renders byte for byte as
    the code before the change rendered it (tests/golden/bench/node0-gather.render.txt), and its
    gather figure is unchanged."""
    raw = json.loads(FIXTURE.read_text())
    assert raw["schema_version"] == 1 and raw["memory_node"] == "node0"   # history, not rewritten
    rec = load_bench(FIXTURE)
    assert rec.data["schema_version"] == 3 and rec.memory_node == 0 and rec.cpu_node == 0
    assert bare_node_names(rec.data) == set()
    from sactool.render.bench import render_bench

    out, err = io.StringIO(), io.StringIO()
    render_bench(rec, console=Console(file=out, width=120, color_system=None),
                 err=Console(file=err, width=120, color_system=None))
    assert out.getvalue() + "--- stderr ---\n" + err.getvalue() == GOLDEN.read_text()
    fig = gather_figure(rec, 656)
    assert fig.memory_node == 0 and fig.source == "measured"


def test_schema_1_and_schema_2_records_load_alike():
    """An old record and the same record written in today's form load to the same data."""
    old = json.loads(FIXTURE.read_text())
    new = from_data(copy.deepcopy(old)).data
    assert from_data(copy.deepcopy(new)).data == new


def test_schema_1_fleet_block_is_upgraded():
    old = json.loads(FIXTURE.read_text())
    old["fleet"] = {"world_size": 1, "hosts": [{"host": "a", "ranks": [0], "machines": ["m"], "memory_node": "node2",
                                                "pool_device": {"kind": "cxl", "key": "cxl:0x1", "node": "node2"},
                                                "stand_in": {"node": "node2", "kind": "dram"}}],
                    "ranks": [{"rank": 0, "host": "a", "memory_node": "node2", "cpu_node": "node0",
                               "machine_block": {"numa_nodes": [{"node": "node2", "cpus": 0}]}}], "sweep": []}
    fl = from_data(old).data["fleet"]
    h, r = fl["hosts"][0], fl["ranks"][0]
    assert (h["memory_node"], h["pool_device"]["node"], h["stand_in"]["node"]) == (2, 2, 2)
    assert (r["memory_node"], r["cpu_node"], r["machine_block"]["numa_nodes"][0]["node"]) == (2, 0, 2)
    assert h["pool_device"]["key"] == "cxl:0x1"


@pytest.mark.parametrize("value", ["dax0.0", "nodeX", None])
def test_upgrade_leaves_what_is_not_a_node_name(value):
    old = json.loads(FIXTURE.read_text())
    old["memory_node"] = value
    assert from_data(old).data["memory_node"] == value
