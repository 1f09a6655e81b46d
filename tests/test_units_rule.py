"""Issue 11 item 17 (library part): one unit rule in units.py — memory sizes in IEC units, rates in
GB/s, hit rates as percentages, a bare number for a size refused, all-ones 'unknown'."""

from __future__ import annotations

import re

import pytest

from sactool.errors import ExitCode, UsageError
from sactool.units import format_bytes, format_percent, format_rate, known_size, parse_size


@pytest.mark.parametrize("text", ["30", "4096", "1.5"])
def test_bare_number_is_not_a_size(text):
    with pytest.raises(UsageError) as ei:
        parse_size(text, what="--gpu-kv-budget")
    assert "has no unit" in ei.value.message and f"{text}GiB" in ei.value.hint and f"{text}B" in ei.value.hint


def test_gpu_kv_budget_without_unit_is_refused_before_work(capsys, machine, tmp_path):
    from sactool.cli import main

    rc = main(["tune", "--gpu-kv-budget", "30", "--sysfs-root", str(machine("this-machine")),
               "--out", str(tmp_path / "p.yaml")])
    assert rc == ExitCode.USAGE
    assert "--gpu-kv-budget '30' has no unit" in capsys.readouterr().err
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("n", [(1 << 64) - 1, ((1 << 64) - 1) * 1024, float("inf"), float("nan"), 4.0016e34])
def test_all_ones_and_impossible_sizes_are_unknown(n):
    assert format_bytes(n) == "unknown" and known_size(n) is None


def test_sizes_rates_percentages():
    assert format_bytes(3 << 30) == "3.00 GiB" and format_bytes(256 << 20) == "256.00 MiB"
    assert format_bytes((1 << 64) - 2) == "16.00 EiB"  # largest real value still a size
    assert format_bytes(None) == "-"
    assert format_rate(12.5e9) == "12.50 GB/s"
    assert format_percent(0.985) == "98.50%" and format_percent(None) == "-"


def test_simulate_table_shows_hit_rate_as_percent(capsys):
    from sactool.cli import main
    from sactool.data import paper_platform

    rc = main(["simulate", "--platform", str(paper_platform()), "--context", "32k", "--concurrency", "8",
               "--placements", "sac,dram", "--hotbuffer-steps", "8"])
    assert rc == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "SAC/CXL" in line and "32K" in line]
    assert rows and re.search(r"\b\d{1,3}\.\d{2}%", rows[0]), rows


def test_no_hand_rolled_gb_or_gib_formatting_in_messages():
    """Memory sizes in messages go through units.format_bytes (no '/ 1e9:.0f} GB', no '/ 2**30')."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "sactool"
    # hand-rolled GB / GiB; exact byte counts stay allowed where exactness is the point (offsets, align)
    pat = re.compile(r"/ ?(1e9|2 ?\*\* ?30|\(1 << 30\))[^\"]*\} ?Gi?B\b(?!/s)")
    hits = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py") for i, line in
            enumerate(p.read_text().splitlines(), 1) if pat.search(line)]
    assert hits == []
