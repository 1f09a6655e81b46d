"""In-process CLI tests for ``sactool probe``: exit codes, stdout carries only data, errors are one
line + hint on stderr, recordings are marked, --snapshot round trip and refusal to overwrite."""

from __future__ import annotations

import json
import shutil

import yaml

from fixtures.trees import unpack
from sactool.cli import main


def test_json_is_pure_data(tmp_path, capsys):
    root = unpack("ram__30-system-ram", tmp_path / "r")
    assert main(["probe", "--sysfs-root", str(root), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)  # nothing but the JSON document on stdout
    assert data["kind"] == "topology" and data["schema_version"] == 4
    assert data["live"] is False and data["source"] == "recording (not this system)"
    assert data["verdict"]["pool_nodes"] == [2]
    assert {n["node"]: n["kind"] for n in data["nodes"]}["node2"] == "cxl"
    assert data["machine"]["kernel"] == "6.12.95+deb12-amd64"
    # the warnings (in the data too) on stderr, as every command prints them (issue 27 N11), nothing else
    assert data["warnings"] and all(f"warning [{w['code']}]" in err for w in data["warnings"])
    assert err.count("warning [") == len(data["warnings"]) and "{" not in err


def test_yaml(tmp_path, capsys):
    root = unpack("hmat-only__00-boot", tmp_path / "r")
    assert main(["probe", "--sysfs-root", str(root), "-f", "yaml"]) == 0
    out, _ = capsys.readouterr()
    data = yaml.safe_load(out)
    assert data["verdict"]["stand_in"] is True and data["verdict"]["pool_nodes"] == [0]


def test_env_var_root(tmp_path, capsys, monkeypatch):
    root = unpack("ram__20-devdax", tmp_path / "r")
    monkeypatch.setenv("SACTOOL_SYSFS_ROOT", str(root))
    assert main(["probe", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["dax_devices"][0]["mode"] == "devdax"


def test_table_marks_recording(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps at the terminal width; keep lines whole
    root = unpack("ram__30-system-ram", tmp_path / "r")
    assert main(["probe", "--sysfs-root", str(root)]) == 0
    out, err = capsys.readouterr()
    assert "not this system" in out
    assert "node2 cxl: node2 ← dax0.0 (kmem) ← region0 (ram, 1-way, mem0) · CPU-less" in out
    assert "KV pool: node2" in out and "ceiling 63.02 GB/s/dir" in out and "not a measurement" in out
    assert "[hmat-scale-mismatch]" in err and "[hmat-scale-mismatch]" not in out   # warnings: stderr


def test_live_table_names_stand_in(capsys):
    assert main(["probe"]) == 0
    out, _ = capsys.readouterr()
    assert "this system" in out and "KV pool" in out


def _err_only(capsys):
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: ") and lines[1].startswith("hint: ") and len(lines) == 2
    assert "Traceback" not in err
    return lines[0]


def test_nonexistent_root(tmp_path, capsys):
    assert main(["probe", "--sysfs-root", str(tmp_path / "nope")]) == 3
    assert "does not exist" in _err_only(capsys)


def test_empty_root(tmp_path, capsys):
    assert main(["probe", "--sysfs-root", str(tmp_path)]) == 3
    assert "no sys/ directory" in _err_only(capsys)


def test_root_is_a_file(tmp_path, capsys):
    f = tmp_path / "snap.tar.gz"
    f.write_bytes(b"x")
    assert main(["probe", "--sysfs-root", str(f)]) == 3
    assert "not a directory" in _err_only(capsys)


def test_missing_node_dir(tmp_path, capsys):
    root = unpack("ram__30-system-ram", tmp_path / "r")
    shutil.rmtree(root / "sys/devices/system/node")
    assert main(["probe", "--sysfs-root", str(root), "--format", "json"]) == 3
    assert "no sys/devices/system/node" in _err_only(capsys)


def test_bad_format(capsys):
    assert main(["probe", "--format", "xml"]) == 2
    assert "'xml' is not one of 'table', 'json', 'yaml'" in _err_only(capsys)


def test_snapshot_round_trip(tmp_path, capsys):
    root = unpack("pmem__30-system-ram", tmp_path / "r")
    snap = tmp_path / "snap.tar.gz"
    assert main(["probe", "--sysfs-root", str(root), "--format", "json", "--snapshot", str(snap)]) == 0
    first, err = capsys.readouterr()
    assert "snapshot:" in err and snap.is_file()
    again = unpack(snap, tmp_path / "again")
    assert main(["probe", "--sysfs-root", str(again), "--format", "json"]) == 0
    second, _ = capsys.readouterr()
    a, b = json.loads(first), json.loads(second)
    for d in (a, b):
        d.pop("created_at"), d.pop("sysfs_root")
    assert a == b
    # refuses to overwrite without --force, before probing
    assert main(["probe", "--sysfs-root", str(root), "--snapshot", str(snap)]) == 5
    assert "exists" in _err_only(capsys)
    assert main(["probe", "--sysfs-root", str(root), "--snapshot", str(snap), "--force", "-f", "json"]) == 0
    capsys.readouterr()


def test_live_snapshot_round_trip(tmp_path, capsys):
    """This machine → snapshot → unpacked: the same probe result, marked as not this system."""
    snap = tmp_path / "live.tar.gz"
    assert main(["probe", "--format", "json", "--snapshot", str(snap)]) == 0
    live = json.loads(capsys.readouterr().out)
    assert live["live"] is True
    root = unpack(snap, tmp_path / "u")
    assert main(["probe", "--sysfs-root", str(root), "--format", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["live"] is False and rec["source"] == "recording (not this system)"
    for d in (live, rec):
        for k in ("created_at", "sysfs_root", "live", "source"):
            d.pop(k)
        d["machine"].pop("live")
        for n in d["nodes"]:  # free memory moves between two reads of a live machine
            n.pop("mem_free_bytes")
        d["verdict"].pop("reason")
    assert live == rec


def test_snapshot_keeps_relative_symlinks(tmp_path, capsys):
    import tarfile

    root = unpack("ram__30-system-ram", tmp_path / "r")
    snap = tmp_path / "s.tar.gz"
    assert main(["probe", "--sysfs-root", str(root), "-f", "json", "--snapshot", str(snap)]) == 0
    capsys.readouterr()
    with tarfile.open(snap) as tar:
        members = {m.name: m for m in tar.getmembers()}
    mem0 = members["sys/bus/cxl/devices/mem0"]
    assert mem0.issym() and mem0.linkname == "../../../devices/pci0000:0c/0000:0c:00.0/0000:0d:00.0/mem0"
    assert members["sys/devices/pci0000:0c/0000:0c:00.0/0000:0d:00.0/mem0/serial"].isfile()
    assert all(not m.linkname.startswith("/") for m in members.values() if m.issym())
    assert "SNAPSHOT.json" in members and "proc/version" in members
