"""Issue 22, hangs and leaks on input: every loader reads a regular file with a bound fitting its
kind, YAML with an alias budget, JSON and YAML with a depth budget. Real commands, in-process.

Before (e141ef7): ``bench gather --trace /dev/zero`` was killed by the OOM killer at 22.7 GB;
``tune --bench``, ``profile validate``, ``serve --profile``, ``simulate --platform`` raised
MemoryError on /dev/zero under a memory cap; a FIFO blocked the open forever; a billion laughs in a
profile was "valid profile" and ``profile show --format json`` then hung; a deeply nested JSON
record was a RecursionError traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sactool.cli import main

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "profiles" / "examples" / "prefill.yaml"
LAUGHS = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['lol'] * 9)}]\n"
                 for p, c in zip([None, *"abcdefgh"], "abcdefghi"))


def commands(f: Path) -> dict[str, list[str]]:
    return {
        "profile validate": ["profile", "validate", str(f)],
        "profile show": ["profile", "show", str(f), "--format", "json"],
        "serve --profile": ["serve", "--profile", str(f), "--dry-run", "--", "--model-path", "x"],
        "simulate --platform": ["simulate", "--platform", str(f), "--context", "16k", "--concurrency", "8"],
        "tune --bench": ["tune", "--bench", str(f), "--context", "4k", "--steps", "4", "--replicates", "1",
                         "--out", str(f.parent / "never.yaml")],
        "bench gather --trace": ["bench", "gather", "--pattern", "trace", "--trace", str(f), "--size", "64MiB",
                                 "--preset", "fast"],
    }


def refused(args, capsys, code=4) -> str:
    assert main(args) == code
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert "Traceback" not in err and len(lines) == 1 and "hint: " in err, err
    return lines[0]


@pytest.mark.parametrize("cmd", list(commands(Path("x"))))
def test_dev_zero_is_refused_as_not_a_regular_file(cmd, capsys):
    assert "not a regular file" in refused(commands(Path("/dev/zero"))[cmd], capsys)


@pytest.mark.parametrize("cmd", ["profile validate", "simulate --platform", "tune --bench", "bench gather --trace"])
def test_fifo_is_refused_without_blocking(tmp_path, cmd, capsys):
    fifo = tmp_path / ("in.npy" if "trace" in cmd else "in.yaml")
    os.mkfifo(fifo)
    assert "is a fifo, not a regular file" in refused(commands(fifo)[cmd], capsys)


def test_a_file_larger_than_its_kind_is_refused_by_its_size(tmp_path, capsys):
    big = tmp_path / "p.yaml"
    with open(big, "wb") as f:
        f.truncate(300 << 20)       # sparse: costs no disk, would cost 300 MiB of memory to read
    assert "more than a profile can be" in refused(["profile", "validate", str(big)], capsys)


@pytest.mark.parametrize("cmd", ["profile validate", "profile show", "simulate --platform"])
def test_billion_laughs_is_refused(tmp_path, cmd, capsys):
    f = tmp_path / "p.yaml"
    f.write_text(EXAMPLE.read_text() + "laughs:\n" + "".join("  " + ln + "\n" for ln in LAUGHS.splitlines()))
    assert "billion laughs" in refused(commands(f)[cmd], capsys)


def test_deep_json_is_refused(tmp_path, capsys):
    f = tmp_path / "b.json"
    f.write_text('{"kind": "bench", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert "nests too deep" in refused(["tune", "--bench", str(f), "--context", "4k", "--out", str(tmp_path / "o.yaml")],
                                       capsys)
    f.write_text('{"kind": "bench", "x": ' + "[" * 200 + "]" * 200 + "}")
    assert "nests deeper than 64" in refused(["tune", "--bench", str(f), "--context", "4k",
                                              "--out", str(tmp_path / "o.yaml")], capsys)


def test_example_profiles_still_load(capsys):
    for p in sorted((REPO / "profiles" / "examples").glob("*.yaml")):
        assert main(["profile", "validate", str(p)]) == 0, capsys.readouterr().err


def test_memory_stays_bounded_on_an_endless_input(tmp_path):
    """Under a 1 GiB address-space cap the refusal comes before any read (was MemoryError)."""
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "from sactool.cli import main; raise SystemExit(main(['profile', 'validate', '/dev/zero']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 4 and "MemoryError" not in r.stderr, r.stderr


def test_simulate_huge_concurrency_is_refused_up_front(capsys):
    """It simulated a million requests for minutes before exit 6; now exit 6 before any point."""
    import time

    t0 = time.monotonic()
    line = refused(["simulate", "--platform", "sac-paper", "--context", "16k", "--concurrency", "1000000"], capsys,
                   code=6)
    assert "fits in no placement" in line and "at most" in line
    assert time.monotonic() - t0 < 60


def test_tune_replicates_beyond_a_day_of_measuring_is_refused(tmp_path, capsys):
    line = refused(["tune", "--replicates", "100000", "--out", str(tmp_path / "p.yaml")], capsys, code=2)
    assert "would measure for at least 33.3 h" in line
    assert not (tmp_path / "p.yaml").exists() and not list(tmp_path.iterdir())
