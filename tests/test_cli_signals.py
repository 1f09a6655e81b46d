"""Work that must survive (issue 11 items 2, 3, 4, 6, 19): real ``sactool`` processes, real
signals at several moments, an unwritable output directory, a write that fails after the work
(RLIMIT_FSIZE makes every write past a few KiB fail with EFBIG, as a full disk fails with
ENOSPC), two runs racing for one ``--out``, and the first-run compile message."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.progress import BAR, Child, default_sigint
from sactool.data import paper_platform

REPO = Path(__file__).resolve().parent.parent
SMALL = ["--size", "64MiB", "--preset", "fast"]
CLI = [sys.executable, "-c", "from sactool.entry import main; main()"]


def start(args, env=None, **kw) -> subprocess.Popen:
    kw.setdefault("preexec_fn", default_sigint)
    return subprocess.Popen(CLI + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, **kw)


def finish(p: subprocess.Popen, timeout=300):
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def wait_for(pred, timeout=60.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.05)
    return False


# ---------------------------------------------------------------------------------------------
# item 2: Ctrl-C during tune's quick gather
# ---------------------------------------------------------------------------------------------
def _small_gather_size() -> str:
    """A quick-gather buffer above any CPU's last-level cache (test_tune_cli.ABOVE_ANY_CACHE), so tune
    accepts it without the test reading this host's cache, and small enough for any test node."""
    from test_tune_cli import ABOVE_ANY_CACHE

    return ABOVE_ANY_CACHE


def _points(path: Path, kind: str) -> int:
    return path.read_text().count(f'"{kind}"') if path.exists() else 0


# The moments are points on disk, not delays: once the journal holds the n-th point of a kind, the
# next quick gather (or page-size gather) is being set up or measured when the signal comes.
# One moment in the README's selection; the others measure more before their signal (.ci/run's slow step).
SLOW = pytest.mark.slow


@pytest.mark.parametrize("sig,kind,n", [pytest.param(signal.SIGINT, "gather", 1, marks=SLOW),
                                        pytest.param(signal.SIGINT, "gather", 2, marks=SLOW),
                                        pytest.param(signal.SIGINT, "pagesize", 1, marks=SLOW),
                                        (signal.SIGTERM, "gather", 1),
                                        pytest.param(signal.SIGTERM, "gather", 2, marks=SLOW)],
                         ids=["SIGINT-after-gather-1", "SIGINT-after-gather-2", "SIGINT-after-pagesize-1",
                              "SIGTERM-after-gather-1", "SIGTERM-after-gather-2"])
def test_ctrl_c_during_tune_quick_gather_is_an_interrupt(tmp_path, sig, kind, n):
    prof = tmp_path / "p.yaml"
    points = tmp_path / "p.yaml.points.jsonl"
    # one rank, 4K contexts, the pool pinned (--pool-bytes: the plan does not follow live free
    # memory) and a small quick-gather buffer (--gather-size), so every node can measure it
    p = start(["tune", "--context", "4k", "--steps", "4", "--replicates", "3", "--tp", "1", "--gpu-kv-budget", "10GiB",
               "--pool-bytes", "1GiB", "--gather-size", _small_gather_size(), "--out", prof])
    if not wait_for(lambda: _points(points, kind) >= n or p.poll() is not None, timeout=300):
        p.kill()
        pytest.fail(f"no {kind} point {n} within 300 s")
    if p.poll() is not None:
        code, _, err = finish(p)
        pytest.fail(f"tune ended before its {kind} point {n + 1}: {code} {err}")
    seen = {k: _points(points, k) for k in ("gather", "pagesize")}
    p.send_signal(sig)
    code, out, err = finish(p, timeout=300)
    assert code == (130 if sig == signal.SIGINT else 143), err
    assert ("interrupted" in err or "terminated" in err) and "no gather results" not in err and not prof.exists()
    kept = [json.loads(ln) for ln in points.read_text().splitlines() if ln.strip()]
    assert all(k["kind"] != "gather" or k["bandwidth_bytes_per_s"] > 0 for k in kept)
    # every point finished before the signal is still there
    assert all(sum(k["kind"] == kd for k in kept) >= c for kd, c in seen.items()), (seen, kept)


def test_quick_gather_interrupted_raises_instead_of_returning_a_partial_figure(monkeypatch, python_ctrl_c):
    """In-process: a real SIGINT while ``run_quick_gather`` measures. The moment is the protocol's
    own progress (its first round sample done), not a delay: the real ``run_protocol`` runs, with
    a progress callback that sends the signal once rounds have begun."""
    from sactool.bench import protocol, run_quick_gather, runner

    sent = []

    def measuring_then_sigint(configs, proto, *, progress=None, **kw):
        def prog(desc, done, total):
            if not desc.startswith("calibrated") and done >= 1 and not sent:
                sent.append((done, total))
                os.kill(os.getpid(), signal.SIGINT)
            if progress:
                progress(desc, done, total)

        return protocol.run_protocol(configs, proto, progress=prog, **kw)

    monkeypatch.setattr(runner, "run_protocol", measuring_then_sigint)
    with pytest.raises(KeyboardInterrupt):
        run_quick_gather(0, 656, 2048, threads=1, size_bytes=64 << 20, seconds=8.0)
    assert sent and sent[0][0] < sent[0][1], sent    # it came mid-rounds, with rounds left to measure


# ---------------------------------------------------------------------------------------------
# item 3: SIGTERM keeps finished results, like SIGINT
# ---------------------------------------------------------------------------------------------
# The moments are steps of the measurement protocol, where the child waits for the signal
# (fixtures.faults.pause_at_step_cli) — never a delay, and not the progress bar either: drawn at
# 10 Hz, it may never show a phase shorter than that on a loaded machine (issue 27, N22).
# "before work" = the first configuration is calibrated, no sample taken; "mid-measurement" = the
# latency test has its first round sample; "between finished results" = latency and MLP are done
# and the loaded-latency test begins calibrating.
BEFORE_WORK = (r"^calibrated latency/", 0)
MID_MEASUREMENT = (r"^latency/", 1)
BETWEEN_RESULTS = (r"^calibrated loaded/", 0)


@pytest.mark.parametrize("sig,moment", [(signal.SIGTERM, BEFORE_WORK), (signal.SIGTERM, MID_MEASUREMENT),
                                        (signal.SIGTERM, BETWEEN_RESULTS), (signal.SIGINT, MID_MEASUREMENT)],
                         ids=["SIGTERM-before-work", "SIGTERM-mid-measurement", "SIGTERM-between-results",
                              "SIGINT-mid-measurement"])
def test_signal_during_bench_all_keeps_finished_results(tmp_path, sig, moment):
    from fixtures.faults import pause_at_step_cli

    out = tmp_path / "all.json"
    child = Child(["bench", "all", *SMALL, "--out", out], cli=pause_at_step_cli(*moment))
    seen = child.wait_for(r"fault: paused after '[^']*' (\d+)/\d+")
    child.send_signal(sig)
    code, _, err = child.finish()
    assert code == 128 + sig, err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error: interrupted: ")]
    assert line.endswith(f"kept in {out} ({sig.name})"), err    # which signal, SIGINT as well as SIGTERM
    data = json.loads(out.read_text())
    assert data["complete"] is False and any(w["code"] == "interrupted" for w in data["warnings"])
    assert "kept" in err
    rounds = data["protocol"]["rounds"]
    by_test: dict[str, list] = {}
    for r in data["results"]:
        by_test.setdefault(r["test"], []).append(r)
    if moment == BEFORE_WORK:            # nothing was measured yet: nothing to keep, and nothing made up
        assert data["results"] == [] and "0 finished results kept" in err, err
    elif moment == MID_MEASUREMENT:      # every latency sample taken is in the record
        assert sum(len(r["samples"]) for r in by_test["latency"]) >= int(seen.group(1)) >= 1
    else:                                # the two finished tests are there whole
        assert by_test["latency"] and by_test["mlp"]
        assert all(len(r["samples"]) == rounds for t in ("latency", "mlp") for r in by_test[t])


# ---------------------------------------------------------------------------------------------
# item 4: unwritable output checked before the work; a failed final write loses nothing;
# two runs racing for one --out
# ---------------------------------------------------------------------------------------------
# "Before the work" is an observation, not a time: the child's stderr is a terminal, and a
# command that works draws its progress bar first; a refused output answers without one.
LONG_BENCH = ["bench", "all", "--preset", "default"]
LONG_SIM = ["simulate", "--platform", paper_platform(), "--context",
            "16k,32k,64k,128k", "--concurrency", "8,16,32,64,128,256,512", "--hotbuffer-steps", "512"]


@pytest.mark.parametrize("argv", [LONG_BENCH, LONG_SIM], ids=["bench", "simulate"])
def test_output_in_a_non_directory_is_refused_before_the_work(tmp_path, argv):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    opt = "--out" if argv[0] == "bench" else "--plot"
    child = Child([*argv, opt, blocker / ("x.json" if opt == "--out" else "x.png")])
    code, out, err = child.finish()
    assert not child.worked(), f"the work began before the output was checked:\n{err[-2000:]}"
    assert code == 1 and out == "" and "cannot write" in err and "hint: " in err, err


def test_the_work_draws_its_bar_first(tmp_path):
    """What the two tests above rely on: a command that goes on to work draws its bar."""
    child = Child([*LONG_SIM, "--plot", tmp_path / "x.png"])
    child.wait_for(BAR)
    child.p.kill()
    child.finish()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged user needs root")
def test_unwritable_directory_refused_before_the_work_as_a_user():
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="sactool-locked-"))   # pytest's tmp_path is 0700 root: not reachable
    try:
        os.chmod(top, 0o755)
        env = dict(os.environ, HOME="/nonexistent", NUMBA_CACHE_DIR=str(top / "nc"))
        child = Child([*LONG_BENCH, "--out", top / "x.json"], env=env, cwd="/",
                      prefix=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        code, out, err = child.finish()
        assert not child.worked(), f"the work began before the output was checked:\n{err[-2000:]}"
        assert code == 1 and out == "" and "cannot write" in err, err
    finally:
        shutil.rmtree(top)


def _limit_file_size():
    default_sigint()
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def test_failed_final_write_keeps_the_record(tmp_path):
    out = tmp_path / "b.json"
    p = start(["bench", "latency", *SMALL, "--format", "json", "--out", out], preexec_fn=_limit_file_size)
    code, stdout, err = finish(p)
    assert code == 1 and "cannot write" in err, err
    data = json.loads(stdout)                  # the record is not lost: it is on stdout
    assert data["kind"] == "bench" and data["results"]
    assert not out.exists()


def test_two_runs_racing_for_one_out_do_not_overwrite(tmp_path):
    out = tmp_path / "same.json"
    a = start(["bench", "latency", *SMALL, "--out", out])
    b = start(["bench", "latency", *SMALL, "--out", out])
    (ca, _, ea), (cb, _, eb) = finish(a), finish(b)
    assert sorted([ca, cb]) == [0, 5], (ea, eb)
    loser = ea if ca == 5 else eb
    saved = [w for w in loser.split() if w.endswith(".json") and w != str(out) and Path(w.rstrip(";,.")).exists()]
    assert saved, loser                         # the second run's record went to another file, named
    assert json.loads(out.read_text())["complete"] is True


def test_tune_failed_write_leaves_nothing_that_blocks_the_next_run(tmp_path, machine, fast_bench_record):
    prof = tmp_path / "p.yaml"
    args = ["tune", "--context", "4k", "--steps", "4", "--replicates", "1", "--out", prof,
            "--bench", fast_bench_record, "--sysfs-root", machine("this-machine")]
    code, _, err = finish(start(args, preexec_fn=_limit_file_size))
    assert code == 1 and "cannot write" in err, err
    code, _, err = finish(start(args))
    assert code == 0, err


# ---------------------------------------------------------------------------------------------
# item 19: the first run says it compiles
# ---------------------------------------------------------------------------------------------
def test_first_run_says_it_compiles_kernels(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    args = ["bench", "gather", "--size", "16MiB", "--preset", "fast", "--record-bytes", "200", "--threads", "1",
            "--topk", "64", "--prefetch", "3"]
    code, _, err = finish(start(args, env=env))
    assert code == 0, err
    assert "compiling kernels (first run, cached afterwards)" in err
    code, _, err = finish(start(args, env=env))
    assert code == 0 and "compiling kernels" not in err
