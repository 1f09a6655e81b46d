"""Table-driven parser tests with the quirks real kernels print, and the reader's reasons."""

from __future__ import annotations

import pytest

from sactool.host.sysfs import (
    SysfsReader, format_cpulist, parse_bool, parse_cpulist, parse_hex, parse_int, parse_kv,
)
from sactool.topology.cxl import ALL_ONES
from sactool.topology.link import link_ceiling, parse_link_speed


@pytest.mark.parametrize("text,want", [
    ("0\n", 0), ("-1\n", -1), ("  42 ", 42), ("0x10", 16), ("255", 255), ("2097152", 2097152),
])
def test_parse_int(text, want):
    assert parse_int(text) == want


@pytest.mark.parametrize("text", ["", "\n", "garbage", "1.5", "12abc", "0xZZ"])
def test_parse_int_garbage(text):
    with pytest.raises(ValueError):
        parse_int(text)


@pytest.mark.parametrize("text,want", [
    ("0x10000000\n", 256 << 20), ("0x0000000010000000", 256 << 20), ("0x0", 0),
    ("0xffffffffffffffff", ALL_ONES), ("190000000", 0x190000000),
])
def test_parse_hex(text, want):
    assert parse_hex(text) == want


@pytest.mark.parametrize("text,want", [
    ("\n", ()), ("", ()), ("0", (0,)), ("0-1", (0, 1)), ("0-3,8,10-11", (0, 1, 2, 3, 8, 10, 11)),
    ("0-7:2", (0, 2, 4, 6)), ("3,1,2", (1, 2, 3)),
])
def test_parse_cpulist(text, want):
    assert parse_cpulist(text) == want
    assert parse_cpulist(format_cpulist(want)) == want


@pytest.mark.parametrize("text", ["a-b", "3-1", "1,,2", "-1", "0-3:0", "x"])
def test_parse_cpulist_garbage(text):
    with pytest.raises(ValueError):
        parse_cpulist(text)


def test_parse_kv_node_meminfo():
    text = "Node 2 MemTotal:         262144 kB\nNode 2 MemFree:          262144 kB\nNode 2 HugePages_Total:     0\n"
    assert parse_kv(text) == {"MemTotal": 256 << 20, "MemFree": 256 << 20, "HugePages_Total": 0}
    with pytest.raises(ValueError):
        parse_kv("garbage\n")


@pytest.mark.parametrize("text,want", [("1", True), ("0", False), ("true", True), ("false", False),
                                       ("Y", True), ("N", False)])
def test_parse_bool(text, want):
    assert parse_bool(text) is want


@pytest.mark.parametrize("text,want", [
    ("32.0 GT/s PCIe", 32.0), ("2.5 GT/s PCIe", 2.5), ("64.0 GT/s PCIe", 64.0), ("8.0 GT/s", 8.0),
    ("Unknown", None), ("Unknown speed", None), ("", None), (None, None), ("fast", None),
])
def test_parse_link_speed(text, want):
    assert parse_link_speed(text) == want


@pytest.mark.parametrize("gt,lanes,enc,bytes_per_s", [
    (2.5, 1, "8b/10b", 250_000_000),                      # Gen1 x1: 2.5e9 × 0.8 / 8
    (5.0, 4, "8b/10b", 2_000_000_000),                    # Gen2 x4
    (8.0, 16, "128b/130b", round(8e9 * 16 * 128 / 130 / 8)),
    (32.0, 16, "128b/130b", 63_015_384_615),              # Gen5 x16 ≈ 63.0 GB/s per direction
    (32.0, 8, "128b/130b", 31_507_692_308),               # a CZ120-class ×8 device
    (64.0, 16, "FLIT 236/256", 118_000_000_000),          # Gen6 x16: 64e9 × 16 × 236/256 / 8
])
def test_link_ceiling(gt, lanes, enc, bytes_per_s):
    name, eff, ceiling = link_ceiling(gt, lanes)
    assert name == enc and ceiling == bytes_per_s


@pytest.mark.parametrize("gt,lanes", [(None, 16), (32.0, None), (32.0, 0), (3.0, 16)])
def test_link_ceiling_unknown(gt, lanes):
    assert link_ceiling(gt, lanes) == (None, None, None)


def test_reader_reasons(tmp_path):
    (tmp_path / "sys/a").mkdir(parents=True)
    (tmp_path / "sys/a/num").write_text("garbage\n")
    (tmp_path / "sys/a/empty").write_text("")
    r = SysfsReader(tmp_path)
    assert not r.live
    assert r.int("sys/a/num") is None and r.why("sys/a/num").startswith("unparsable 'garbage'")
    assert r.int("sys/a/missing") is None and r.why("sys/a/missing") == "missing"
    assert r.cpulist("sys/a/empty") == ()            # an empty cpulist is a CPU-less node, not an error
    assert r.int("sys/a") is None and r.why("sys/a") == "is a directory"
    assert r.listdir("sys/nope") == [] and r.why("sys/nope") == "missing"
    assert {"sys/a/num", "sys/a/missing", "sys/a/empty"} <= r.touched
