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

from sactool.data import paper_platform

REPO = Path(__file__).resolve().parent.parent
SMALL = ["--size", "64MiB", "--preset", "fast"]
CLI = [sys.executable, "-c", "from sactool.entry import main; main()"]


def start(args, env=None, **kw) -> subprocess.Popen:
    return subprocess.Popen(CLI + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, **kw)


def finish(p: subprocess.Popen, timeout=120):
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
    """Twice the last-level cache of node 0's CPUs (test_tune_cli.node0_llc): tune accepts a
    quick-gather buffer larger than that cache, and any node holds this one."""
    from test_tune_cli import node0_llc

    return f"{2 * node0_llc()}B"


@pytest.mark.parametrize("sig,after_point_s", [(signal.SIGINT, 0.0), (signal.SIGINT, 0.4), (signal.SIGINT, 0.9),
                                               (signal.SIGTERM, 0.4), (signal.SIGTERM, 0.9)])
def test_ctrl_c_during_tune_quick_gather_is_an_interrupt(tmp_path, sig, after_point_s):
    prof = tmp_path / "p.yaml"
    points = tmp_path / "p.yaml.points.jsonl"
    # one rank, 4K contexts, the pool pinned (--pool-bytes: the plan does not follow live free
    # memory) and a small quick-gather buffer (--gather-size), so every node can measure it
    p = start(["tune", "--context", "4k", "--steps", "4", "--replicates", "3", "--tp", "1", "--gpu-kv-budget", "10GiB",
               "--pool-bytes", "1GiB", "--gather-size", _small_gather_size(), "--out", prof])
    # the first gather round is on disk: the next quick gather is running now
    if not wait_for(lambda: points.exists() and points.read_text().count('"gather"') >= 1 or p.poll() is not None):
        p.kill()
        pytest.fail("no gather point within 60 s")
    if p.poll() is not None:
        code, _, err = finish(p)
        pytest.fail(f"tune ended before its second gather round: {code} {err}")
    time.sleep(after_point_s)
    p.send_signal(sig)
    code, out, err = finish(p)
    assert code == (130 if sig == signal.SIGINT else 143), err
    assert ("interrupted" in err or "terminated" in err) and "no gather results" not in err and not prof.exists()
    kept = [json.loads(ln) for ln in points.read_text().splitlines() if ln.strip()]
    assert all(k["kind"] != "gather" or k["bandwidth_bytes_per_s"] > 0 for k in kept)


def test_quick_gather_interrupted_raises_instead_of_returning_a_partial_figure():
    """In-process: a real SIGINT while ``run_quick_gather`` measures."""
    import threading

    from sactool.bench import run_quick_gather

    t = threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_quick_gather(0, 656, 2048, threads=1, size_bytes=64 << 20, seconds=8.0)
    finally:
        t.cancel()


# ---------------------------------------------------------------------------------------------
# item 3: SIGTERM keeps finished results, like SIGINT
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sig,delay", [(signal.SIGTERM, 2.5), (signal.SIGTERM, 4.5), (signal.SIGTERM, 6.5),
                                       (signal.SIGINT, 4.5)])
def test_signal_during_bench_all_keeps_finished_results(tmp_path, sig, delay):
    out = tmp_path / "all.json"
    p = start(["bench", "all", *SMALL, "--out", out])
    time.sleep(delay)
    p.send_signal(sig)
    code, _, err = finish(p)
    if code == 0:          # finished before the signal (very fast machine): the record is complete
        assert json.loads(out.read_text())["complete"] is True
        return
    assert code == 128 + sig, err
    assert ("SIGTERM" if sig == signal.SIGTERM else "interrupted") in err
    if delay < 4 and not out.exists():   # so early that nothing was measured yet: nothing to keep
        return
    data = json.loads(out.read_text())
    assert data["complete"] is False and any(w["code"] == "interrupted" for w in data["warnings"])
    assert "kept" in err


# ---------------------------------------------------------------------------------------------
# item 4: unwritable output checked before the work; a failed final write loses nothing;
# two runs racing for one --out
# ---------------------------------------------------------------------------------------------
# the work these would do takes well over LONG_WORK_S here (bench all on 1 GiB: ~40 s; this
# simulate: ~13 s on an idle machine); refusing the output first answers in a second or two
LONG_WORK_S = 10
LONG_BENCH = ["bench", "all", "--preset", "default"]
LONG_SIM = ["simulate", "--platform", paper_platform(), "--context",
            "16k,32k,64k,128k", "--concurrency", "8,16,32,64,128,256,512", "--hotbuffer-steps", "512"]


@pytest.mark.parametrize("argv", [LONG_BENCH, LONG_SIM], ids=["bench", "simulate"])
def test_output_in_a_non_directory_is_refused_before_the_work(tmp_path, argv):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    opt = "--out" if argv[0] == "bench" else "--plot"
    p = start([*argv, opt, blocker / ("x.json" if opt == "--out" else "x.png")])
    try:
        code, out, err = finish(p, timeout=LONG_WORK_S)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail(f"still working after {LONG_WORK_S} s: the output was not checked first")
    assert code == 1 and out == "" and "cannot write" in err and "hint: " in err, err


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged user needs root")
def test_unwritable_directory_refused_before_the_work_as_a_user():
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="sactool-locked-"))   # pytest's tmp_path is 0700 root: not reachable
    try:
        os.chmod(top, 0o755)
        env = dict(os.environ, HOME="/nonexistent", NUMBA_CACHE_DIR=str(top / "nc"))
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *CLI, *LONG_BENCH,
               "--out", str(top / "x.json")]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=LONG_WORK_S, cwd="/")
        assert r.returncode == 1 and r.stdout == "" and "cannot write" in r.stderr, r.stderr
    finally:
        shutil.rmtree(top)


def _limit_file_size():
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
