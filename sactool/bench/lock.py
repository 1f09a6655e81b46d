"""One machine-wide advisory lock, so two sactool measurements never overlap silently.

Two benches on one host share its memory bandwidth, its last-level cache and, when they pick the
same CPUs, the CPUs themselves: each figure would describe half a machine and say nothing. Every
measurement (``sactool bench``, ``sactool bench gpu-gather`` — its CPUs stage and time the copies —, the
quick gathers of ``tune``, and ``mpirun … sactool bench``: one rank per machine holds it for all the job's
ranks there, :mod:`sactool.fleet.lock`) holds an exclusive ``flock(2)`` on one file for as long as it
measures; a second one **waits** and says so on stderr, naming the holder
(``pid 4242: sactool bench gather --size 8GiB``, read from ``/proc/locks`` and
``/proc/<pid>/cmdline``), or with ``--no-wait`` **refuses** (exit 11). The record keeps what happened
(``measurement_lock``: the file, whom it waited for, how long). The lock is advisory: other programs
(a memory copy loop, another tool) are not held off — the per-sample CPU business of the other CPUs
(:mod:`sactool.bench.disturb`) is what reports those.

The file: ``$SACTOOL_MEASURE_LOCK`` when set, else ``/run/lock/sactool-measure.lock`` (the FHS
directory for lock files; ``/tmp`` where that is not writable). Any user can take it: the file is
created mode 0644 and opened read-only when it exists (``flock`` needs no write access), never
through a symbolic link, and never truncated. Where it cannot be opened at all the measurement
goes on unlocked and the record says why (a lock must not stop a measurement the user asked for).
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from sactool.errors import SactoolError
from sactool.errors import ExitCode

ENV = "SACTOOL_MEASURE_LOCK"
NAME = "sactool-measure.lock"
LOCK_DIRS = ("/run/lock", None)    # None: tempfile.gettempdir()


class BusyError(SactoolError):
    """Another sactool measurement holds the machine and ``--no-wait`` was given."""

    exit_code = ExitCode.BUSY


@dataclass(frozen=True)
class LockState:
    """What the lock did for one measurement: ``path`` (None: no lock could be taken, ``why``),
    ``waited_seconds``, ``waited_for`` (the holder found when it was busy, else None)."""

    path: str | None
    waited_seconds: float
    waited_for: str | None
    why: str | None = None

    def to_data(self) -> dict:
        return {"path": self.path, "held": self.path is not None, "waited_seconds": round(self.waited_seconds, 3),
                "waited_for": self.waited_for, "unavailable_reason": self.why}


def lock_path() -> str:
    """``$SACTOOL_MEASURE_LOCK``, or the lock file in the first writable lock directory."""
    given = os.environ.get(ENV)
    if given:
        return given
    for d in LOCK_DIRS:
        d = d or tempfile.gettempdir()
        if os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return os.path.join(d, NAME)
    return os.path.join(tempfile.gettempdir(), NAME)


def _open(path: str) -> int:
    """A descriptor of the lock file: opened read-only when it exists (another user's file too; no
    O_CREAT, so ``fs.protected_regular`` does not refuse it), else created 0644; never a symlink, never
    anything but a regular file."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(3):
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
                os.fchmod(fd, 0o644)      # whatever the umask: every user must be able to open it
            except FileExistsError:       # created by another process just now: open that one
                continue
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file")
        return fd
    raise OSError(errno.EAGAIN, "created and removed while opening")


def holder(fd: int, reader=None) -> str | None:
    """Who holds the flock on ``fd``'s file: ``pid N: <command line>`` from ``/proc/locks`` (the line
    whose device and inode are the file's) and ``/proc/N/cmdline``; None when it cannot be told."""
    from sactool.host.sysfs import SysfsReader

    reader = reader or SysfsReader()
    st = os.fstat(fd)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in (reader.text("proc/locks") or "").splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF" (a waiter's line starts "1: -> FLOCK")
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == dev and parts[4].isdigit():
            pid = parts[4]
            raw = (reader.text(f"proc/{pid}/cmdline") or "").strip("\0")
            return f"pid {pid}" + (f": {_short(raw)}" if raw else "")
    return None


def _short(cmd: str, limit: int = 160) -> str:
    """A command line (NUL-separated, as ``/proc/N/cmdline``) for one message line: from ``sactool`` on when
    it runs sactool (``…/bin/sactool bench …``, ``python -m sactool …``, ``python -c "…sactool…" …``)."""
    words = cmd.split("\0") if "\0" in cmd else cmd.split(" ")
    for i, w in enumerate(words):
        if os.path.basename(w) == "sactool":                       # the console script
            words = ["sactool"] + words[i + 1:]
            break
        if w in ("-m", "-c") and i + 1 < len(words) and "sactool" in words[i + 1]:   # python -m sactool, -c "…"
            words = ["sactool"] + words[i + 2:]
            break
    text = " ".join(words)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def busy_error(who: str, what: str, where: str = "") -> BusyError:
    """The ``--no-wait`` refusal: ``who`` holds the lock (``where``: " on hostB" in a fleet)."""
    return BusyError(f"another sactool measurement is running{where} ({who}); {what} would share the "
                     "machine's memory bandwidth and caches with it",
                     "run it when that one has finished, or drop --no-wait to wait for it")


def waiting_line(who: str, path: str | None, where: str = "") -> str:
    """What a measurement that waits says (stderr), once."""
    return (f"waiting for another sactool measurement to finish{where} ({who}), so the two do not share "
            f"the machine; lock file {path} (--no-wait refuses instead)")


class MachineLock:
    """The lock file, opened, and the one way every sactool measurement takes it: :func:`measurement_lock`
    (one process: block until free) and :func:`sactool.fleet.lock.hold_machines` (the ranks of an MPI job:
    one rank per machine polls, between the job's exchanges) both go through it. ``path`` None: no lock can
    be taken here (``why`` says so) and :meth:`try_take` succeeds without one."""

    def __init__(self, path: str | None = None):
        path = path or lock_path()
        self.path: str | None = path
        self.why: str | None = None
        self._fd: int | None = None
        try:
            self._fd = _open(path)
        except OSError as e:
            self.why, self.path = f"{path}: {e.strerror or e}", None

    def try_take(self) -> bool:
        """Take the lock now if it is free (True), else False; True without a file (nothing to take)."""
        import fcntl

        if self._fd is None:
            return True
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def take(self) -> None:
        """Block until the lock is free and take it (a signal raises as anywhere: nothing was measured yet)."""
        import fcntl

        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX)

    def holder(self) -> str:
        """Who holds it (:func:`holder`), or a phrase saying it cannot be told."""
        who = holder(self._fd) if self._fd is not None else None
        return who or "another process (its pid is not readable here)"

    def state(self, waited_seconds: float = 0.0, waited_for: str | None = None) -> LockState:
        return LockState(self.path, waited_seconds, waited_for, self.why)

    def close(self) -> None:
        """Release it: closing the last descriptor releases the flock."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@contextmanager
def measurement_lock(*, wait: bool = True, notify: Callable[[str], None] | None = None,
                     what: str = "this measurement") -> Iterator[LockState]:
    """Hold the machine-wide measurement lock for the block (see the module). Busy: ``notify`` (stderr)
    names the holder and the block waits, or :class:`BusyError` with ``wait=False``. A signal while
    waiting raises as anywhere (nothing was measured yet). Yields the :class:`LockState`."""
    lk = MachineLock()
    try:
        waited_for = None
        t0 = time.monotonic()
        if not lk.try_take():
            waited_for = lk.holder()
            if not wait:
                raise busy_error(waited_for, what) from None
            if notify:
                notify(waiting_line(waited_for, lk.path))
            lk.take()
            if notify:
                notify(f"measuring after waiting {time.monotonic() - t0:.1f} s")
        yield lk.state(time.monotonic() - t0 if waited_for else 0.0, waited_for)
    finally:
        lk.close()
