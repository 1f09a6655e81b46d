"""Issue 11 item 10: simulate inputs that would make the event loop spin forever (NaN, inf) or
mean nothing (<= 0) are refused at the input boundary with a one-line error and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sactool.data import paper_platform
from sactool.errors import ExitCode, UsageError
from sactool.simulate.api import SimulationOptions
from sactool.simulate.platform import load_platform

SACTOOL = str(Path(sys.executable).with_name("sactool"))


@pytest.mark.parametrize("rate", ["nan", "inf", "-inf", "0", "-2"])
def test_arrival_rate_refused_by_the_command(rate):
    # a real process with a timeout: "nan" used to run for 13 minutes of CPU before being killed
    r = subprocess.run([SACTOOL, "simulate", "--platform", str(paper_platform()), f"--arrival-rate={rate}",
                        "--context", "32k", "--concurrency", "8"], capture_output=True, text=True, timeout=300)
    assert r.returncode == ExitCode.USAGE, r.stderr
    assert r.stderr.startswith("error: arrival rate") and "hint:" in r.stderr and r.stdout == ""


@pytest.mark.parametrize("field,value", [("arrival_rate_per_s", float("nan")), ("arrival_rate_per_s", float("inf")),
                                         ("arrival_rate_per_s", True), ("concurrency", (8, 0)),
                                         ("contexts", (2.5,)), ("output_tokens", 0), ("hotbuffer_steps", 1)])
def test_options_refuse_before_any_work(field, value):
    plat = load_platform(paper_platform())
    with pytest.raises(UsageError) as ei:
        SimulationOptions(plat, **{field: value})
    assert ei.value.hint


def test_platform_file_nan_rate_refused(tmp_path):
    import yaml

    d = yaml.safe_load(Path(paper_platform()).read_text())
    d.setdefault("workload", {})["arrival_rate_per_s"] = float("nan")
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(d))
    with pytest.raises(Exception) as ei:
        load_platform(p)
    assert "finite" in str(ei.value)


def test_concurrency_list_parser():
    r = subprocess.run([SACTOOL, "simulate", "--platform", str(paper_platform()), "--concurrency", "8,x"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == ExitCode.USAGE and "not a list of integers" in r.stderr
