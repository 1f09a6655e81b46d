"""Who holds the machine-wide measurement lock beside ``sactool bench`` (issue 28): the ranks of an MPI
job (one per machine, machines in name order), ``bench gpu-gather`` (under numba's CUDA simulator) and
tune's quick gathers, which also place each buffer once for all their points.

Real locks throughout (``flock`` on files of the test's own, ``SACTOOL_MEASURE_LOCK``); the MPI job's
ordering across machines is shown with the fleet's collective played by threads of this process, one
per rank (separate ``open``s of one file conflict under ``flock`` as separate processes do), since one
machine cannot host two MPI "machines"; the real ``mpirun`` runs are in test_fleet_mpi.py. No test
waits for a guessed time: each waits for a state (a lock held, a line said), with a generous bound.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sactool.bench.lock import ENV, MachineLock
from sactool.errors import ExitCode, SactoolError
from sactool.fleet.lock import hold_machines
from sactool.fleet.mpi import FleetError

BOUND_S = 300.0   # an overall bound on a state that should come by itself, not a speed expectation


def _held(path: Path) -> bool:
    """Whether someone (another process, or another open file of this one) holds the flock on ``path``."""
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _wait(pred, what: str, timeout: float = BOUND_S) -> None:
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"not reached: {what}")
        time.sleep(0.005)


class _Hold:
    """This process holds ``path``'s lock as another measurement would (its own open file)."""

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# ---- the MPI job's rule, its collective played by threads ------------------------------------------


class _Err:
    def __init__(self, e: SactoolError):
        self.e = e


class _ThreadRank:
    """One rank of a job whose ranks are threads: :meth:`agree` and :meth:`exchange` as the fleet's
    (every rank meets at each; an error on any rank raises on all), and the rank's place."""

    def __init__(self, barrier: threading.Barrier, slots: list, rank: int, machine: str, local_root: int):
        self.barrier, self.slots, self.rank = barrier, slots, rank
        self.machine, self.local_root, self.host = machine, local_root, f"host{machine}"
        self.is_root = rank == 0

    def exchange(self, payload=None) -> list:
        self.slots[self.rank] = payload
        self.barrier.wait()
        got = list(self.slots)
        self.barrier.wait()
        errs = [g.e for g in got if isinstance(g, _Err)]
        if errs:
            raise FleetError(errs[0].message, errs[0].hint, exit_code=int(errs[0].exit_code))
        return got

    def agree(self, fn) -> list:
        try:
            value = fn()
        except SactoolError as e:
            value = _Err(e)
        return self.exchange(value)


def _job(machines: list[str], lock_dir: Path, *, wait: bool = True, said: list | None = None):
    """Run ``hold_machines`` on one thread per rank (rank r on ``machines[r]``; a machine's first rank is
    its local root); each rank opens its machine's lock file ``lock_dir/<machine>.lock``. Returns (threads,
    results): results[r] is the rank's HeldLocks or the exception it raised; rank 0's lines go to ``said``."""
    n = len(machines)
    barrier, slots, results = threading.Barrier(n, timeout=BOUND_S), [None] * n, [None] * n
    roots = {m: machines.index(m) for m in machines}

    def run(r: int) -> None:
        rank = _ThreadRank(barrier, slots, r, machines[r], roots[machines[r]])
        try:
            results[r] = hold_machines(rank, wait=wait, what="this job", poll_s=0.01,
                                       notify=said.append if (said is not None and r == 0) else None,
                                       opener=lambda: MachineLock(str(lock_dir / f"{machines[r]}.lock")))
        except BaseException as e:  # noqa: BLE001 - handed to the test
            results[r] = e

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    return threads, results


def test_a_fleet_takes_its_machines_locks_in_name_order_holding_none_ahead_while_it_waits(tmp_path):
    """Rank 0 is on machine B, rank 1 on A. Someone holds A: the job waits for A (rank 0 says so, naming
    the holder and host A) and meanwhile does NOT hold B — a job that took B first could wait on A while
    another job, holding A, waited on B: a deadlock. Once A is free the job holds both, each held by its
    machine's first rank, whose record block says whom it waited for."""
    a, b = tmp_path / "A.lock", tmp_path / "B.lock"
    other = _Hold(a)
    said: list[str] = []
    threads, results = _job(["B", "A"], tmp_path, said=said)
    try:
        _wait(lambda: said, "rank 0 says the job waits")
        assert said[0].startswith(f"waiting for another sactool measurement to finish on hostA (pid {os.getpid()}")
        assert not _held(b), "the job holds B while it waits for A"
        other.release()
        for t in threads:
            t.join(BOUND_S)
        got_b, got_a = results
        assert not isinstance(got_b, BaseException) and not isinstance(got_a, BaseException), results
        assert _held(a) and _held(b)        # held by the job's two ranks, one each
        assert got_b.block["held_by_rank"] == 0 and got_a.block["held_by_rank"] == 1
        assert got_a.block["waited_for"].startswith(f"pid {os.getpid()}") and got_a.block["waited_seconds"] > 0
        assert got_b.block["waited_for"] is None and got_b.block["path"] == str(b)
        assert any(s.startswith("measuring on hostA after waiting") for s in said)
    finally:
        other.release()
        for h in results:
            if h is not None and not isinstance(h, BaseException):
                h.release()
    assert not _held(a) and not _held(b)


def test_two_jobs_sharing_machines_both_finish_one_after_the_other(tmp_path):
    """Jobs on (A, B) and (B, A) started together: whatever the interleaving, one holds both machines
    while the other waits for it — never one machine each (a deadlock) — and then the other gets both."""
    jobs = [_job(["A", "B"], tmp_path), _job(["B", "A"], tmp_path)]

    def holds(job) -> bool:
        return all(r is not None for r in job[1])

    _wait(lambda: any(holds(j) for j in jobs), "one job holds its machines")
    first = next(j for j in jobs if holds(j))
    second = next(j for j in jobs if j is not first)
    assert all(not isinstance(r, BaseException) for r in first[1]), first[1]
    assert all(r is None for r in second[1])          # still waiting, at A (both take A first)
    for r in first[1]:
        r.release()
    _wait(lambda: holds(second), "the other job holds its machines once the first let them go")
    assert all(not isinstance(r, BaseException) for r in second[1]), second[1]
    assert any(r.block["waited_for"] for r in second[1])   # it waited for the first job's rank
    for r in second[1]:
        r.release()
    assert not _held(tmp_path / "A.lock") and not _held(tmp_path / "B.lock")


def test_a_fleet_with_no_wait_refuses_on_every_rank_naming_the_holder(tmp_path):
    other = _Hold(tmp_path / "A.lock")
    try:
        threads, results = _job(["B", "A"], tmp_path, wait=False)
        for t in threads:
            t.join(BOUND_S)
    finally:
        other.release()
    for e in results:
        assert isinstance(e, FleetError) and e.exit_code == ExitCode.BUSY == 11, results
        assert e.message.startswith(f"another sactool measurement is running on hostA (pid {os.getpid()}")
    assert not _held(tmp_path / "B.lock")


# ---- bench gpu-gather, under numba's CUDA simulator ----------------------------------------------------

GPU_ARGS = ["bench", "gpu-gather", "--node", "0", "--blocks", "1", "--threads", "32", "--record-bytes", "656",
            "--topk", "4", "--context", "16", "--size", "2MiB", "--pattern", "uniform", "--preset", "fast",
            "--no-full-prefix"]


def _gpu_child(args: list[str], lock: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env.update(NUMBA_ENABLE_CUDASIM="1", **{ENV: str(lock)})
    code = f"from sactool.cli import main\nraise SystemExit(main({args!r}))"
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=str(lock.parent))


def test_gpu_gather_no_wait_refuses_while_another_measurement_holds_the_machine(tmp_path):
    lock = tmp_path / "m.lock"
    other = _Hold(lock)
    try:
        p = _gpu_child(GPU_ARGS + ["--no-wait", "--out", str(tmp_path / "g.json")], lock)
        out, err = p.communicate(timeout=BOUND_S)
    finally:
        other.release()
    assert p.returncode == ExitCode.BUSY == 11, err[-2000:]
    assert f"error: another sactool measurement is running (pid {os.getpid()}" in err
    assert "'sactool bench gpu-gather' would share" in err and not (tmp_path / "g.json").exists()


def test_gpu_gather_waits_for_the_holder_and_its_record_says_so(tmp_path):
    """The child meets the lock held, says for whom it waits, and measures only once it is free: its
    locked window starts after the release, and the record names the holder."""
    lock, out = tmp_path / "m.lock", tmp_path / "g.json"
    other = _Hold(lock)
    p = _gpu_child(GPU_ARGS + ["--format", "json", "--out", str(out)], lock)
    try:
        said = ""
        for line in iter(p.stderr.readline, ""):
            said += line
            if "waiting for" in line:
                break
        assert f"waiting for another sactool measurement to finish (pid {os.getpid()}" in said, said
        from datetime import datetime, timezone

        released = datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
    finally:
        other.release()
    _, err = p.communicate(timeout=BOUND_S)
    assert p.returncode == 0, err[-2000:]
    rec = json.loads(out.read_text())
    ml = rec["measurement_lock"]
    assert ml["held"] and ml["path"] == str(lock) and ml["waited_for"].startswith(f"pid {os.getpid()}")
    assert ml["waited_seconds"] > 0 and rec["measured"]["start_utc"] >= released
    assert rec["measured"]["end_utc"] >= rec["measured"]["start_utc"]
    assert rec["results"] and "measuring after waiting" in err


# ---- tune's quick gathers: each buffer placed once, the lock held throughout ------------------------


def test_quick_gathers_place_each_buffer_once_for_all_points_and_hold_the_lock(tmp_path, monkeypatch):
    """tune's gather rounds and page-size rounds (3 rounds each, interleaved over kinds) in one session:
    9 points on one pool node, 2 buffers placed (THP, reused by the page-size rounds; 4 KiB), each point a full quick
    gather whose record says how many points its buffer served; the lock is held from the first
    placement to the session's end."""
    from sactool.bench.quick import QuickGathers
    from sactool.pool.discover import pool_info
    from sactool.host.sysfs import SysfsReader
    from sactool.topology import probe
    from sactool.tune import pagesize
    from sactool.tune.pool import measure_rounds

    lock = tmp_path / "m.lock"
    monkeypatch.setenv(ENV, str(lock))
    size = 64 << 20
    reader = SysfsReader()
    pool = pool_info(probe(reader), reader)
    node = pool.targets[0].node
    points: list[dict] = []
    with QuickGathers() as qg:
        assert not _held(lock)                                  # nothing placed, nothing held yet
        g = measure_rounds(pool, 656, 256, 3, seconds=0.05, done=[], on_point=points.append, size_bytes=size,
                           gathers=qg)
        assert _held(lock)
        figures = pagesize.measure(node, ["none", "thp"], 656, 256, 3, seconds=0.05, done=[],
                                   on_point=points.append, size_bytes=size, gathers=qg)
        assert qg.placements == [(t.node, "thp", size) for t in pool.targets] + [(node, "none", size)]
        rec = qg.gather(node, 656, 256, seconds=0.05, size_bytes=size, hugepages="none")
        assert rec.buffer["measurement_on_buffer"] == 4             # 3 page-size rounds, then this one
        assert rec.buffer["size_bytes"] == size and rec.buffer["verified_fraction"] == 1.0
        (r,) = rec.results
        assert r["params"]["footprint_bytes"] == size // 656 * 656   # the working set: the buffer's records
        assert rec.data["measurement_lock"]["held"] and rec.data["measurement_lock"]["waited_for"] is None
    assert not _held(lock)
    assert len(points) == 3 * len(pool.targets) + 6 and all(p["bandwidth_bytes_per_s"] > 0 for p in points)
    assert len(g.rounds) == 3 and {k: len(v) for k, v in figures.items()} == {"none": 3, "thp": 3}


UNMAP_CHILD = r"""
import json, resource
from sactool.bench.quick import QuickGathers

size = 64 << 20
with QuickGathers() as qg:
    qg.gather(0, 656, 256, seconds=0.05, size_bytes=size)          # the THP buffer placed, the kernel loaded
    vm = next(int(ln.split()[1]) * 1024 for ln in open("/proc/self/status") if ln.startswith("VmSize:"))
    # ulimit -v: half a buffer more than this process maps now, so a second buffer never fits beside the first
    resource.setrlimit(resource.RLIMIT_AS, (vm + size // 2, resource.RLIM_INFINITY))
    uses = []
    for _ in range(2):
        for kind in ("none", "thp"):
            rec = qg.gather(0, 656, 256, seconds=0.05, size_bytes=size, hugepages=kind)
            uses.append([kind, rec.buffer["measurement_on_buffer"], rec.complete])
    print(json.dumps({"placements": qg.placements, "uses": uses}))
"""


def test_quick_gathers_unmap_their_buffers_when_the_next_does_not_fit_beside_them(tmp_path):
    """A real limit (``ulimit -v``, RLIMIT_AS, in a child: it is process-wide) that holds one buffer but not
    two: each page kind's buffer is placed after the other's is unmapped, every point is measured (nothing
    refused), as before the session kept buffers. MALLOC_ARENA_MAX=1: glibc's per-thread arenas would
    reserve address space of their own."""
    env = dict(os.environ, MALLOC_ARENA_MAX="1", **{ENV: str(tmp_path / "m.lock")})
    p = subprocess.run([sys.executable, "-c", UNMAP_CHILD], env=env, capture_output=True, text=True,
                       timeout=BOUND_S, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    size = 64 << 20
    assert got["placements"] == [[0, "thp", size], [0, "none", size], [0, "thp", size], [0, "none", size],
                                 [0, "thp", size]]
    assert got["uses"] == [["none", 1, True], ["thp", 1, True], ["none", 1, True], ["thp", 1, True]]
