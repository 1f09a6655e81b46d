"""Issue 11 item 22: one size-suffix parser, one integer-list parser, psutil instead of a
hand-written /proc/stat parser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sactool.errors import ExitCode, UsageError
from sactool.host.sysfs import parse_cpulist, parse_kv
from sactool.units import expand_int_list, parse_int_list, parse_kernel_size, parse_size, suffix_bytes

PKG = Path(__file__).resolve().parents[1] / "sactool"


@pytest.mark.parametrize("text,expected", [("32768K", 32 << 20), ("1024 kB", 1 << 20), ("48M", 48 << 20),
                                           ("4096", 4096), ("1G", 1 << 30)])
def test_kernel_sizes_are_binary(text, expected):
    assert parse_kernel_size(text) == expected


@pytest.mark.parametrize("text", ["", "K", "1.5K", "12 parsecs", "-1K"])
def test_kernel_size_garbage(text):
    with pytest.raises(ValueError):
        parse_kernel_size(text)


def test_one_suffix_table_two_conventions():
    assert suffix_bytes("kB") == 1000 and suffix_bytes("kB", kernel=True) == 1024
    assert parse_size("1GB") == 10**9 and parse_kv("MemTotal: 1 kB\nHugePages_Total: 3\n") == {
        "MemTotal": 1024, "HugePages_Total": 3}


def test_int_lists():
    assert expand_int_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert expand_int_list("8,1,2", ranges=False) == [8, 1, 2]
    assert parse_cpulist("3,0-1,1") == (0, 1, 3)
    assert parse_int_list("1, 2,4", what="--threads") == (1, 2, 4)
    for bad in ("1,x", "-2", "1-3", " , "):
        with pytest.raises(UsageError) as ei:
            parse_int_list(bad, what="--threads")
        assert ei.value.exit_code == ExitCode.USAGE and ei.value.hint


def test_bench_options_use_the_shared_list_parser():
    from sactool.cli.bench import _ints

    assert _ints("1,2,4", "--threads") == (1, 2, 4)
    with pytest.raises(UsageError, match="not a list of integers"):
        _ints("1,-2", "--threads")


def test_no_hand_written_proc_stat_parser():
    hits = [str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if re.search(r"[\"']/?proc/stat", p.read_text())]
    assert hits == []


def test_declared_dependencies_are_used():
    text = (PKG.parent / "pyproject.toml").read_text()
    block = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    names = [re.match(r'\s*"([A-Za-z0-9_.-]+)', line).group(1) for line in block.splitlines()
             if re.match(r'\s*"', line)]
    module = {"pyyaml": "yaml"}
    src = "\n".join(p.read_text() for p in PKG.rglob("*.py"))
    unused = [n for n in names if not re.search(rf"^\s*(import|from) {module.get(n, n)}\b", src, re.M)]
    assert unused == []


def test_busy_fraction_live_and_recorded(tmp_path):
    from sactool.bench.env import busy_fraction
    from sactool.host.sysfs import SysfsReader

    live = SysfsReader()
    f = busy_fraction(live, live.cpulist("sys/devices/system/cpu/online"), seconds=0.05)
    assert f is None or 0.0 <= f <= 1.0
    (tmp_path / "sys").mkdir()
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "stat").write_text("cpu0 1 2 3 4 5 6 7 8 0 0\n")
    assert busy_fraction(SysfsReader(tmp_path), [0], seconds=0.0) is None  # never this machine's psutil
