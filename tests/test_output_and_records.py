"""Issue 11 item 8 (library parts): bad sizes and damaged bench records give one-line errors with
the README's exit codes; stdout/stderr trouble (ASCII-only encoding, /dev/full, closed stdout or
stderr, a closed pipe) is handled in one place (cli.guard.run_guarded + sactool.cli.streams).

The stream cases run real processes: the descriptors are what is being tested."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sactool.bench.record import from_data
from sactool.errors import ExitCode, RecordError, UsageError

SACTOOL = str(Path(sys.executable).with_name("sactool"))


# ---- sizes ---------------------------------------------------------------------------------------
def test_bench_size_too_small_for_the_chains(capsys):
    from sactool.cli import main

    assert main(["bench", "latency", "--size", "4KiB"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: a 4096-byte buffer is too small for the latency test") and "hint: use --size" in err


def test_min_chain_buffer_matches_the_chains():
    from sactool.bench import api, suite

    assert api.CHAIN_PAGE_BYTES == suite.PAGE and set(api.CHAIN_TESTS) <= set(api.TESTS)


def test_library_refuses_before_allocating():
    from sactool.bench.api import BenchOptions, run_bench

    with pytest.raises(UsageError, match="too small"):
        run_bench(BenchOptions(tests=("mlp",), size_bytes=4096, node=0))


# ---- damaged bench records -----------------------------------------------------------------------
@pytest.fixture
def bench_data(fast_bench_record) -> dict:
    return json.loads(Path(fast_bench_record).read_text())


@pytest.mark.parametrize("damage", [
    lambda r: r.update(stats={}),
    lambda r: r["stats"].pop("n"),
    lambda r: r["stats"].update(median="fast"),
    lambda r: r["stats"].update(n=0),
    lambda r: r.pop("stats"),
    lambda r: r.update(derived=[1, 2]),
    lambda r: r["derived"].update(ns_per_record=None),
    lambda r: r["params"].update(threads="two"),
])
def test_malformed_results_are_record_errors(bench_data, damage):
    damage(bench_data["results"][0])
    with pytest.raises(RecordError) as ei:
        from_data(bench_data)
    assert ei.value.exit_code == ExitCode.RECORD and "results[0]" in ei.value.message and ei.value.hint


def test_tune_with_malformed_stats_is_exit_4(tmp_path, bench_data, machine, capsys):
    from sactool.cli import main

    bench_data["results"][0]["stats"] = {"median": 1.0}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(bench_data))
    rc = main(["tune", "--context", "4k", "--steps", "6", "--replicates", "2", "--sysfs-root",
               str(machine("this-machine")), "--bench", str(bad), "--out", str(tmp_path / "p.yaml")])
    assert rc == ExitCode.RECORD
    assert "stats lacks" in capsys.readouterr().err


# ---- streams -------------------------------------------------------------------------------------
def _run(args, *, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=None, **kw):
    return subprocess.run([SACTOOL, *args], stdout=stdout, stderr=stderr, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, **kw)


@pytest.fixture
def tree(machine) -> str:
    return str(machine("ram__10-region"))


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_ascii_only_output_encoding(tree, fmt):
    r = _run(["probe", "--sysfs-root", tree, "-f", fmt], env={"PYTHONIOENCODING": "ascii"})
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and r.stdout.isascii()
    if fmt == "table":
        assert "RECORDED machine - not this system" in r.stdout


def test_ascii_error_messages(tmp_path):
    r = _run(["probe", "--sysfs-root", str(tmp_path / "missing.tar.gz")], env={"PYTHONIOENCODING": "ascii"})
    assert r.returncode == ExitCode.UNAVAILABLE and r.stderr.isascii() and "Traceback" not in r.stderr


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_stdout_full_disk(tree, fmt):
    with open("/dev/full", "w") as full:
        r = _run(["probe", "--sysfs-root", tree, "-f", fmt], stdout=full)
    assert r.returncode == ExitCode.ERROR
    assert r.stderr.splitlines()[0] == "error: cannot write to standard output: No space left on device"
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr


@pytest.mark.parametrize("args", [["probe", "-f", "json"], ["probe"], ["--help"]])
def test_stdout_closed(tree, args):
    args = [*args, "--sysfs-root", tree] if args[0] == "probe" else args
    r = subprocess.run(["/bin/sh", "-c", 'exec "$0" "$@" >&-', SACTOOL, *args], stderr=subprocess.PIPE,
                       text=True, timeout=300)
    assert r.returncode == ExitCode.ERROR, r.stderr
    assert r.stderr.startswith("error: cannot write to standard output: it is closed")


def test_stderr_closed_keeps_the_exit_code(tmp_path):
    r = subprocess.run(["/bin/sh", "-c", 'exec "$0" "$@" 2>&-', SACTOOL, "probe", "--sysfs-root",
                        str(tmp_path / "nope")], stdout=subprocess.PIPE, timeout=300)
    assert r.returncode == ExitCode.UNAVAILABLE


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_closed_pipe_is_quiet(tree, fmt):
    """``sactool … | head -1``: exit 0 and nothing on stderr (rich's own handler exits 1)."""
    p = subprocess.Popen([SACTOOL, "probe", "--sysfs-root", tree, "-f", fmt], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.close()  # the reader goes away before sactool writes
    err = p.stderr.read()
    assert p.wait(timeout=300) == 0 and err == b""
