"""Fleet mode under a real ``mpirun`` (Open MPI from PyPI, the ``mpi`` extra), all ranks on this
machine's node 0 (one memory controller: real contention). Few and small: each mpirun costs seconds.
Those that measure are ``slow`` (.ci/run's second step): the README's ``pytest -q`` keeps a probe of
recorded hosts, a malformed option ending the job and one invalid timeout — the fleet's logic itself
is tested without MPI in test_fleet.py.

Distinct hosts are simulated for the probe by giving each rank its own recorded machine
(``--sysfs-root``, MPMD syntax ``mpirun -n 1 A : -n 1 B``); the QEMU recordings ram__* and
ram-k6.1__* share memdev serial 0x1001, pmem__* has 0x1002 (see test_fleet.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.trees import unpack

BIN = Path(sys.executable).parent
MPIRUN = shutil.which("mpirun", path=str(BIN)) or shutil.which("mpirun")
SACTOOL = str(BIN / "sactool")

pytestmark = pytest.mark.skipif(MPIRUN is None, reason="no mpirun: install the mpi extra (pip install -e '.[mpi]')")

SMALL = ["--node", "0", "--size", "32MiB", "--topk", "256"]
HANG_GUARD_S = 300   # an overall bound on a run that should end by itself, not a speed expectation


def _launcher() -> list[str]:
    return [MPIRUN, "--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])


def _mpmd(*apps: list[str]) -> list[str]:
    cmd = _launcher()
    for i, app in enumerate(apps):
        cmd += ([":"] if i else []) + ["-n", "1", SACTOOL] + app
    return cmd


_CACHE: dict[str, str] = {}


def _env(tmp_path, **extra) -> dict[str, str]:
    """One kernel cache for this module's runs (ranks compile once, not in every test)."""
    cache = _CACHE.setdefault("dir", os.environ.get("SACTOOL_CACHE_DIR") or str(tmp_path / "cache"))
    return {**os.environ, "SACTOOL_CACHE_DIR": cache, **extra}


def _run(cmd, tmp_path, timeout=HANG_GUARD_S):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=_env(tmp_path))


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    """4 ranks named as 2 hosts of 2 ranks (SACTOOL_FLEET_HOST, through ``env`` in MPMD syntax):
    all on this machine's node 0, so both "hosts" really share that memory."""
    tmp = tmp_path_factory.mktemp("fleet4")
    out = tmp / "fleet.json"
    app = ["bench", "gather", "--preset", "fast", "-r", "656", *SMALL, "--out", str(out)]
    cmd = _launcher()
    for i, host in enumerate(("hostA", "hostB")):
        cmd += ([":"] if i else []) + ["-n", "2", "env", f"SACTOOL_FLEET_HOST={host}", SACTOOL, *app]
    return _run(cmd, tmp), out


@pytest.mark.slow   # a real 4-rank contention sweep; the sweep's arithmetic: test_fleet.py
def test_bench_gather_sweep_on_four_ranks(four_ranks):
    from sactool.bench import gather_figure, load_bench

    p, out = four_ranks
    assert p.returncode == 0, p.stderr
    assert "Contention sweep: gather/656B/1t" in p.stdout and p.stdout.count("sactool bench gather") == 1
    rec = load_bench(out)  # a bench record like any other, plus the fleet block
    fl = rec.data["fleet"]
    assert rec.complete and fl["world_size"] == 4
    assert [(h["host"], h["ranks"]) for h in fl["hosts"]] == [("hostA", [0, 1]), ("hostB", [2, 3])]
    assert fl["activation_order"] == [0, 2, 1, 3]  # 2 active ranks = one per host
    assert [s["active_ranks"] for s in fl["sweep"]] == [1, 2, 4]
    for s, ranks in zip(fl["sweep"], ([0], [0, 2], [0, 1, 2, 3])):
        assert [r["rank"] for r in s["per_rank"]] == ranks
        assert all(r["host"] and r["bandwidth_bytes_per_s"] > 0 and r["topk_step_us"]["p95"] > 0 for r in s["per_rank"])
        assert s["aggregate_bytes_per_s"] > 0 and 0 < s["fairness"]["min_over_max"] <= 1
    # 4 ranks on 2 CPUs: the record says they shared CPUs; both "hosts" measured the same memory
    assert "cpus_shared" in {w["code"] for w in rec.warnings}
    assert len({h["pool_device"]["key"] for h in fl["hosts"]}) == 1
    assert gather_figure(rec, 656).bandwidth_bytes_per_s > 0  # rank 0's one-rank result
    # one spelling for a NUMA node (docs/reference/units.md): numbers in the fleet block too
    from fixtures.nodespelling import bare_node_names

    raw = json.loads(out.read_text())
    assert raw["memory_node"] == 0 and {h["memory_node"] for h in raw["fleet"]["hosts"]} == {0}
    assert bare_node_names(raw) == set(), bare_node_names(raw)


@pytest.mark.slow   # on the real 4-rank record; tune --fleet's logic on recorded fleets: test_fleet.py
def test_tune_fleet_writes_one_valid_profile_per_host(four_ranks, tmp_path, monkeypatch, capsys):
    from sactool.cli import main
    from sactool.profile import load_profile

    p, out = four_ranks
    assert p.returncode == 0, p.stderr
    monkeypatch.chdir(tmp_path)
    args = ["tune", "--fleet", str(out), "--context", "4k", "--steps", "6", "--replicates", "1", "--tp", "1",
            "--gpu-kv-budget", "4GiB", "--concurrency", "1"]
    assert main(args) == 0, capsys.readouterr().err
    paths = sorted((tmp_path / "profiles" / "deepseek-v3.2").glob("*.yaml"))
    assert [q.name for q in paths] == ["hostA.yaml", "hostB.yaml"]
    data = json.loads(out.read_text())
    top = data["fleet"]["sweep"][-1]
    for q in paths:
        assert main(["profile", "validate", str(q)]) == 0
        prof = load_profile(q)
        f = prof.fleet
        assert f["hosts_sharing"] == ["hostA", "hostB"] and f["share_bytes"] == f["device_capacity_bytes"] // 2
        assert prof.request["pool_targets"][0]["capacity_bytes"] == f["share_bytes"]
        want = sum(r["bandwidth_bytes_per_s"] for r in top["per_rank"] if r["host"] == f["host"])
        assert f["bandwidth_bytes_per_s"] == pytest.approx(want) and f["active_ranks"] == 4
        assert prof.bench["source"] == "fleet" and prof.bench["bandwidth_bytes_per_s"] == pytest.approx(want)
        assert "fleet record" in prof.provenance["pool.nodes"].detail
        capsys.readouterr()
        assert main(["profile", "show", str(q)]) == 0
        assert f"fleet: host {f['host']} gets " in capsys.readouterr().out
    capsys.readouterr()
    assert main(args) == 5  # the profiles exist: refused before tuning anything
    assert "already exists" in capsys.readouterr().err


def test_probe_of_recorded_hosts_shows_shared_devices(tmp_path):
    roots = {n: unpack(n, tmp_path / n) for n in ("ram__10-region", "ram-k6.1__10-region", "pmem__10-region")}
    p = _run(_mpmd(*[["probe", "--format", "json", "--sysfs-root", str(r)] for r in roots.values()]), tmp_path)
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["kind"] == "fleet_topology" and [h["host"] for h in rec["hosts"]] == list(roots)
    assert [h["topology"]["kind"] for h in rec["hosts"]] == ["topology"] * 3
    shared = [d for d in rec["pool_map"]["memdevs"] if d["shared"]]
    assert [(d["serial"], d["host_names"]) for d in shared] == [("0x1001", ["ram-k6.1__10-region", "ram__10-region"])]


@pytest.mark.slow   # real mpirun; the agreement rule itself: test_fleet.py
def test_ranks_disagreeing_are_refused_before_measuring(tmp_path):
    out = tmp_path / "f.json"
    app = ["bench", "gather", "--preset", "fast", "-r", "656", "--out", str(out)]
    p = _run(_mpmd(app + ["--node", "0"], app + ["--node", "1"]), tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("error: ranks disagree on the options: rank 1 has node=1, rank 0 has node=0") == 1
    assert not out.exists()


@pytest.mark.slow   # real mpirun of two measuring ranks
def test_one_rank_failing_stops_the_others_with_its_error(tmp_path, machine):
    """Rank 1 alone reads a recorded tree (SACTOOL_SYSFS_ROOT): only it fails, all stop, rank 0 says why."""
    out = tmp_path / "f.json"
    app = ["bench", "gather", "--preset", "fast", "-r", "656", *SMALL, "--out", str(out)]
    cmd = _launcher() + ["-n", "1", SACTOOL, *app, ":", "-n", "1", "env",
                         f"SACTOOL_SYSFS_ROOT={machine('ram__10-region')}", SACTOOL, *app]
    p = _run(cmd, tmp_path)
    assert p.returncode == 3, p.stderr
    assert p.stderr.count("error: rank 1: the topology comes from a recording") == 1
    assert not out.exists()


def test_a_rank_with_a_malformed_option_ends_the_job(tmp_path):
    """That rank exits before MPI starts; the others would wait in MPI_Init for it (Open MPI's
    launcher hung there for minutes): it aborts the job instead."""
    app = ["bench", "gather", "--preset", "fast", "-r", "656", *SMALL]
    # the evidence is Open MPI's own report of that rank's abort, not a time: a job left waiting
    # in MPI_Init would not end by itself (HANG_GUARD_S only keeps the suite from waiting forever)
    p = _run(_mpmd(app, app + ["--bogus"]), tmp_path, timeout=HANG_GUARD_S)
    assert p.returncode == 2 and "MPI_ABORT was invoked on rank 1" in p.stderr, p.stderr
    assert "--bogus" in p.stderr


@pytest.mark.parametrize("value", ["0", *(pytest.param(v, marks=pytest.mark.slow) for v in ("-1", "abc", "nan"))])
def test_fleet_timeout_variable_is_validated(tmp_path, value):
    """Under a real mpirun (one value; the others and the parser itself: test_fleet.py and .ci/run's slow step)."""
    r = subprocess.run(_launcher() + ["-n", "2", SACTOOL, "probe", "-f", "json"], capture_output=True, text=True,
                       timeout=HANG_GUARD_S, cwd=tmp_path, env=_env(tmp_path, SACTOOL_FLEET_TIMEOUT=value))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "SACTOOL_FLEET_TIMEOUT" in r.stderr and "is not a positive number of seconds" in r.stderr


@pytest.mark.slow   # a real measuring run under mpirun
def test_world_of_one_is_plain_sactool(tmp_path):
    p = _run(_launcher() + ["-n", "1", SACTOOL, "bench", "gather", "--preset", "fast", "-r", "656", *SMALL,
                            "--format", "json"], tmp_path)
    assert p.returncode == 0, p.stderr
    rec = json.loads(p.stdout)
    assert rec["kind"] == "bench" and "fleet" not in rec


def _rank_pids(launcher_pid: int) -> dict[int, int]:
    out = {}
    kids = subprocess.run(["pgrep", "-P", str(launcher_pid)], capture_output=True, text=True).stdout.split()
    for pid in kids:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for kv in env:
            if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                out[int(kv.split(b"=", 1)[1])] = int(pid)
    return out


@pytest.mark.slow   # real 3-rank sweeps, signalled
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM],
                         ids=["ctrl-c", "killed", "hangs", "terminated"])
def test_a_rank_interrupted_or_killed_stops_all_and_rank0_keeps_finished_steps(tmp_path, sig):
    """Three ranks (steps 1, 2, 3); once rank 0 has written the first round, rank 1 gets the signal.
    SIGSTOP: a rank that hangs without dying; the others give up after SACTOOL_FLEET_TIMEOUT.
    SIGTERM to one rank: every rank stops at the next exchange (exit 143), within seconds."""
    out = tmp_path / "fleet.json"
    cmd = _launcher() + ["-n", "3", SACTOOL, "bench", "gather", "--preset", "fast", "-r", "64,656,1152,4096",
                         *SMALL, "--out", str(out)]
    # the hang's bound holds for every exchange of the run: 10 s ended whole runs before their first
    # round on a loaded machine (a rank descheduled that long at an exchange); 60 s does not
    env = _env(tmp_path, **({"SACTOOL_FLEET_TIMEOUT": "60"} if sig == signal.SIGSTOP else {}))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not out.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.exists(), "the first round never finished"
        victim = _rank_pids(p.pid)[1]
        os.kill(victim, sig)
        signalled = time.monotonic()
        # no hang: the job ends by itself (the guard only bounds a broken run's wait), and why it
        # ended is asserted below (the agreed interrupt, the fleet timeout's message)
        _, err = p.communicate(timeout=HANG_GUARD_S)
    finally:
        if p.poll() is None:
            p.kill()
        if sig == signal.SIGSTOP:
            try:
                os.kill(victim, signal.SIGKILL)  # normally already gone: mpirun's abort killed it
            except (OSError, NameError):
                pass
    rec = json.loads(out.read_text())
    fl = rec["fleet"]
    # rounds interleave the steps: every step is there, with the rounds that finished
    assert not rec["complete"] and 1 <= fl["rounds_done"] < rec["protocol"]["rounds"]
    assert sorted({s["active_ranks"] for s in fl["sweep"]}) == [1, 2, 3]
    assert all(len(r["raw"]) == fl["rounds_done"] for s in fl["sweep"] for r in s["per_rank"])
    assert "interrupted" in {w["code"] for w in rec["warnings"]}
    if sig == signal.SIGINT:
        assert p.returncode == 130, err
        assert err.count("error: interrupted: ") == 1
    elif sig == signal.SIGTERM:   # issue 22: the others waited SACTOOL_FLEET_TIMEOUT (300 s) for it
        assert p.returncode == 143, err
        assert err.count("error: terminated: ") == 1 and time.monotonic() - signalled < 60, err
    else:
        assert p.returncode != 0
    if sig == signal.SIGSTOP:
        assert "did not arrive within 60 s" in err


@pytest.mark.slow   # real 2-rank sweeps, signalled
@pytest.mark.parametrize("victim", [0, 1], ids=["rank0", "rank1"])
def test_two_sigterms_on_one_rank_are_counted_not_an_abort(tmp_path, victim):
    """Issue 19: one signal policy (sactool.errors) for fleet ranks too. Two SIGTERMs 50 ms apart to
    one rank (GNU ``timeout`` signals its child, then the group): the second is counted, not fatal —
    every rank stops at the next exchange, rank 0 writes the finished rounds and the job exits 143,
    with no ``MPI_Abort`` (it used to end the job from the second signal on)."""
    out = tmp_path / "fleet.json"
    cmd = _launcher() + ["-n", "2", SACTOOL, "bench", "gather", "--preset", "fast", "-r", "64,656,1152,4096",
                         *SMALL, "--out", str(out)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                         env=_env(tmp_path))
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not out.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.exists(), "the first round never finished"
        pid = _rank_pids(p.pid)[victim]
        os.kill(pid, signal.SIGTERM)
        time.sleep(0.05)
        os.kill(pid, signal.SIGTERM)
        signalled = time.monotonic()
        _, err = p.communicate(timeout=HANG_GUARD_S)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err
    assert "MPI_ABORT" not in err and err.count("error: terminated: ") == 1, err
    assert time.monotonic() - signalled < 60, err
    rec = json.loads(out.read_text())
    fl = rec["fleet"]
    assert not rec["complete"] and 1 <= fl["rounds_done"] < rec["protocol"]["rounds"]
    assert all(len(r["raw"]) == fl["rounds_done"] for s in fl["sweep"] for r in s["per_rank"])
    assert "interrupted" in {w["code"] for w in rec["warnings"]}


# ---- the machine-wide measurement lock under mpirun (sactool/fleet/lock.py; its ordering over several
# machines, which one machine cannot show for real: test_lock_holders.py) -------------------------------


class _Hold:
    """This test holds the lock file as another measurement would."""

    def __init__(self, path: Path):
        import fcntl

        self.fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def test_fleet_bench_with_no_wait_refuses_while_the_machine_is_held(tmp_path):
    """Another measurement holds this machine: both ranks refuse before placing anything (exit 11), and
    rank 0 says so once, naming the holder and the host."""
    from sactool.bench.lock import ENV

    lock, out = tmp_path / "m.lock", tmp_path / "f.json"
    other = _Hold(lock)
    try:
        p = subprocess.run(_launcher() + ["-n", "2", SACTOOL, "bench", "gather", "--preset", "fast", "-r", "656",
                                          *SMALL, "--no-wait", "--out", str(out)],
                           capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=tmp_path,
                           env=_env(tmp_path, **{ENV: str(lock)}))
    finally:
        other.release()
    assert p.returncode == 11, p.stderr
    # rank 0 holds this machine's lock for the job, so the refusal is its: said once, by rank 0
    assert p.stderr.count("error: rank 0: another sactool measurement is running on ") == 1, p.stderr
    assert f"(pid {os.getpid()}" in p.stderr and "under mpirun would share" in p.stderr
    assert not out.exists()


@pytest.mark.slow   # a real 2-rank sweep that waits, is held and measured
def test_fleet_bench_waits_for_a_measurement_then_holds_the_machine_for_all_its_ranks(tmp_path, capsys,
                                                                                       monkeypatch):
    """The job meets this machine held: rank 0 says for whom it waits, once. Released, the job's rank 0
    (this machine's first rank) holds it for both ranks — a plain bench with --no-wait then refuses,
    naming that rank's sactool bench — and the record says whom it waited for and when it measured."""
    import datetime as dt

    from sactool.bench.lock import ENV, holder
    from sactool.cli import main

    lock, out = tmp_path / "m.lock", tmp_path / "f.json"
    other = _Hold(lock)
    p = subprocess.Popen(_launcher() + ["-n", "2", SACTOOL, "bench", "gather", "--preset", "fast", "-r", "656",
                                        *SMALL, "--out", str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=_env(tmp_path, **{ENV: str(lock)}))
    rank0 = None
    try:
        said = ""
        for line in iter(p.stderr.readline, ""):
            said += line
            if "waiting for" in line:
                break
        assert "waiting for another sactool measurement to finish on " in said and f"(pid {os.getpid()}" in said
        released = dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
        other.release()
        fd = os.open(lock, os.O_RDONLY)
        try:
            deadline = time.monotonic() + HANG_GUARD_S
            while (who := holder(fd)) is None and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)
            assert who is not None, "the job never held the machine"
            rank0 = _rank_pids(p.pid)[0]
            os.kill(rank0, signal.SIGSTOP)      # the job holds the lock until it is let go on
            assert holder(fd).startswith(f"pid {rank0}: sactool bench gather")
        finally:
            os.close(fd)
        monkeypatch.setenv(ENV, str(lock))
        capsys.readouterr()
        assert main(["bench", "gather", *SMALL, "-r", "656", "--preset", "fast", "--threads", "1", "--no-wait"]) == 11
        assert f"another sactool measurement is running (pid {rank0}: sactool bench gather" in capsys.readouterr().err
    finally:
        other.release()
        if rank0 is not None:
            os.kill(rank0, signal.SIGCONT)
        rest, err = p.communicate(timeout=HANG_GUARD_S)
    assert p.returncode == 0, err
    rec = json.loads(out.read_text())
    ml = rec["measurement_lock"]
    assert ml["path"] == str(lock) and ml["waited_for"].startswith(f"pid {os.getpid()}") and ml["waited_seconds"] > 0
    assert rec["measured"]["start_utc"] >= released and rec["measured"]["end_utc"] > rec["measured"]["start_utc"]
    assert [r["measurement_lock"]["held_by_rank"] for r in rec["fleet"]["ranks"]] == [0, 0]
    assert said.count("waiting for") == 1 and (said + err).count("measuring on ") == 1
