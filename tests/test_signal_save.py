"""Nothing finished is lost to a signal at any moment, and the exit status says whether the record
is complete (issue 27, R1, R5, the exit-status finding).

Before: one SIGINT or SIGTERM after the measurement (while rendering, or inside the save) became a
KeyboardInterrupt that only the measurement loop caught; ``atomic_write`` deleted its temporary file
holding the complete record: exit 130/143, no file, no message — the same for ``--plot`` and tune's
profile. ``probe --snapshot`` had no SIGTERM handling at all (a ``.NAME.<hex>.tmp`` left behind). And
a signal as the process ended (GNU ``timeout`` firing as the run finished) exited 143 with a complete
record: the handlers were back to the default action by then.

The moments are exact, never slept for: the child is made to signal itself as it is about to fsync
the chosen output's temporary file (``fixtures.faults``), or — the reliability review's way — strace
holds the fsync while the test signals it from outside.
"""

from __future__ import annotations

import json
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from fixtures import faults
from fixtures.progress import default_sigint

REPO = Path(__file__).resolve().parent.parent
SMALL = ["--size", "64MiB", "--preset", "fast"]
SMALL_GATHER = ["--size", "16MiB", "--preset", "fast", "--record-bytes", "656", "--threads", "1", "--topk", "64"]
NAMES = {signal.SIGTERM: "terminated (SIGTERM)", signal.SIGINT: "interrupted (SIGINT)"}


def run(argv, *args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([*argv, *(str(a) for a in args)], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=default_sigint)


def no_temporaries(d: Path) -> list[str]:
    return [p.name for p in d.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("sig,times", [(signal.SIGTERM, 1), (signal.SIGTERM, 2), (signal.SIGINT, 2)],
                         ids=["SIGTERM", "SIGTERM-twice", "SIGINT-twice"])
def test_a_signal_inside_the_records_save_keeps_the_complete_record(tmp_path, sig, times):
    out = tmp_path / "lat.json"
    r = run(faults.signal_in_fsync_cli([(out.name, sig, times)]), "bench", "latency", *SMALL, "--out", out)
    assert r.returncode == 0, r.stderr          # the record is complete: 130/143 would say it is not
    data = json.loads(out.read_text())
    assert data["complete"] is True and data["results"]
    assert f"{NAMES[sig]} after the work had finished: the result is complete, saved as {out}" in r.stderr
    assert no_temporaries(tmp_path) == []


def test_a_signal_inside_the_plots_save_keeps_record_and_plot(tmp_path):
    out, plot = tmp_path / "g.json", tmp_path / "g.png"
    r = run(faults.signal_in_fsync_cli([(plot.name, signal.SIGTERM, 1)]), "bench", "gather", *SMALL_GATHER,
            "--out", out, "--plot", plot)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["complete"] is True
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"saved as {out}, {plot}" in r.stderr and no_temporaries(tmp_path) == []


def test_a_signal_inside_the_profiles_save_keeps_the_profile(tmp_path, machine, fast_bench_record):
    prof = tmp_path / "p.yaml"
    r = run(faults.signal_in_fsync_cli([(prof.name, signal.SIGTERM, 2)]), "tune", "--context", "4k", "--steps", "4",
            "--replicates", "1", "--out", prof, "--bench", fast_bench_record, "--sysfs-root", machine("this-machine"))
    assert r.returncode == 0, r.stderr
    from sactool.profile import load_profile

    assert load_profile(prof).model.name == "deepseek-v3.2"
    assert f"saved as {prof}" in r.stderr and no_temporaries(tmp_path) == []
    assert not (tmp_path / "p.yaml.points.jsonl").exists()   # superseded by the profile, as on a quiet run


@pytest.mark.parametrize("sig,times", [(signal.SIGTERM, 1), pytest.param(signal.SIGINT, 2, marks=pytest.mark.slow)],
                         ids=["SIGTERM", "SIGINT-twice"])
def test_a_signal_after_a_quick_gather_keeps_its_point_in_tunes_journal(tmp_path, sig, times):
    """R1, tune's window (fc97a41): the signal comes the moment tune's first quick gather
    (``QuickGathers.gather``, what ``run_quick_gather`` runs too) has returned — the measurement
    complete and settled, its point not yet in the journal. ``run_quick_gather`` used to call
    ``unsettle()`` before returning, so a signal there raised at once and the finished gather was lost
    (0 points; checked by putting that call back at the end of ``gather``). Now the caller journals the
    point, then unsettles: tune stops with the point on disk, exit 130/143 (tune's work was cut short),
    no profile. The moment is the real method's return (fixtures.faults), not a time."""
    from test_tune_cli import ABOVE_ANY_CACHE

    prof, points = tmp_path / "p.yaml", tmp_path / "p.yaml.points.jsonl"
    r = run(faults.signal_after_return_cli("sactool.bench.quick", "QuickGathers.gather", 1, sig, times),
            "tune", "--context", "4k", "--steps", "4", "--replicates", "1", "--tp", "1", "--gpu-kv-budget", "10GiB",
            "--pool-bytes", "1GiB", "--gather-size", ABOVE_ANY_CACHE, "--out", prof)
    assert "fault: signal" in r.stderr and "QuickGathers.gather returned (call 1)" in r.stderr, r.stderr
    assert r.returncode == (130 if sig == signal.SIGINT else 143), r.stderr
    assert f"tune interrupted; finished evaluation points are kept in {points}" in r.stderr, r.stderr
    assert f"error: tune interrupted; finished evaluation points are kept in {points} ({sig.name})" in r.stderr
    assert not prof.exists()
    kept = [json.loads(ln) for ln in points.read_text().splitlines() if ln.strip()] if points.exists() else []
    measured = [p for p in kept if p.get("kind") in ("gather", "pagesize")]
    assert len(measured) == 1 and measured[0]["bandwidth_bytes_per_s"] > 0, (kept, r.stderr)
    assert no_temporaries(tmp_path) == []


def test_probe_snapshot_survives_a_sigterm_inside_its_save(tmp_path, machine):
    """R5: the fast probe path had no SIGTERM handler: killed mid-save, a .NAME.<hex>.tmp stayed."""
    snap = tmp_path / "s.tar.gz"
    r = run(faults.signal_in_fsync_cli([(snap.name, signal.SIGTERM, 1)]), "probe", "--sysfs-root",
            machine("sac2s__30-system-ram"), "--snapshot", snap, "--format", "json")
    assert r.returncode == 0, r.stderr
    with tarfile.open(snap) as t:
        assert any(n.endswith("devices/system/node/node2/meminfo") for n in t.getnames())
    assert json.loads(r.stdout)["kind"] == "topology"
    assert no_temporaries(tmp_path) == []


@pytest.mark.parametrize("args", [["probe", "--format", "json"], ["profile", "validate"]],
                         ids=["probe-fast-path", "typer-path"])
def test_a_signal_as_the_process_exits_cannot_change_its_exit_status(args, machine):
    """The exit status is decided when the command returns: from then on SIGINT/SIGTERM are ignored
    (Python's finalization puts the default action back for handlers it installed, and a signal
    there killed a process whose record was complete: exit 143)."""
    extra = ["--sysfs-root", machine("this-machine")] if args[0] == "probe" else \
        [REPO / "profiles" / "examples" / "cxl-one-node.yaml"]
    r = run(faults.exit_disposition_cli(), *args, *extra)
    assert r.returncode == 0, r.stderr
    assert "at-exit SIGTERM=SIG_IGN SIGINT=SIG_IGN" in r.stderr


@pytest.mark.skipif(faults.strace() is None, reason="strace is not installed (apt-get install strace); "
                    "test_a_signal_inside_the_records_save_keeps_the_complete_record covers the same moment in Python")
def test_signals_from_outside_while_strace_holds_the_records_fsync(tmp_path):
    """The reliability review's reproducer: every fsync held 5 s; two SIGTERMs from outside (GNU
    timeout's child, then its group) while the record's temporary file is full and being flushed."""
    import subprocess as sp

    out = tmp_path / "lat.json"
    argv = [*faults.strace_fsync_delay(5.0), *faults.signal_in_fsync_cli([]), "bench", "latency", *SMALL,
            "--out", str(out)]
    p = sp.Popen(argv, stdout=sp.PIPE, stderr=sp.PIPE, text=True, preexec_fn=default_sigint)
    try:
        deadline = time.monotonic() + 300
        while faults.temp_with_content(out) is None:   # the state, not a time: the save has begun
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()[1][-3000:]
            time.sleep(0.01)
        pid = faults.tracee_pid(p.pid)
        assert pid is not None
        import os

        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGTERM)
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert json.loads(out.read_text())["complete"] is True
    assert "terminated (SIGTERM) after the work had finished" in err and no_temporaries(tmp_path) == []
