"""Fleet mode: detect an MPI launch and run sactool's collectives over ``mpi4py``'s COMM_WORLD.

Detection, not configuration: a process started by ``mpirun``/``mpiexec`` (or ``srun`` with PMI)
finds its world size in the launcher's environment. Only when that says more than one rank is
``mpi4py`` imported (importing it initialises MPI; a singleton initialisation costs ~1 s here and
is pointless without a launcher). No launcher variable, or a world of one: :func:`detect` returns
``None`` and sactool behaves exactly as without MPI.

Every collective of a fleet command is one :meth:`Fleet.exchange`: a non-blocking barrier polled
with short sleeps (idle ranks sleep instead of spinning on a CPU the active ranks need, and signals
reach Python while waiting), then an ``allgather`` of ``(status, payload)``. Because there is only
one kind of collective, a rank that failed locally joins whatever exchange the others are at with
status ``ERROR``, and every rank stops at that same exchange — no rank waits for a partner that
will never come.

Signals follow the one policy of every sactool process (:mod:`sactool.errors`), with the first
signal deferred (:func:`sactool.errors.deferred_signals`) while a rank waits at an exchange or
runs the bench sweep: Ctrl-C (SIGINT) or a SIGTERM — what ``mpirun`` sends every rank when the job
is torn down, or what someone sends one rank — is recorded, the running sample finishes, and the
next exchange carries it to every rank (also one already waiting there: the status is taken after
the barrier); rank 0 writes the finished rounds and the job exits 130 (143 for SIGTERM) within
seconds instead of the others waiting ``SACTOOL_FLEET_TIMEOUT`` for a rank that left. Later
signals are counted, not fatal, as everywhere: the finished rounds are saved and no rank aborts
the job. Outside those blocks the first signal raises at once (:class:`sactool.errors.Terminated`
for SIGTERM) and :meth:`Fleet.agree` turns it into the same agreed stop.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from sactool.errors import ExitCode, SactoolError, TopologyError, deferred_signals, pending_signal

SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")
"""World-size variables MPI launchers export: Open MPI (``OMPI_COMM_WORLD_SIZE``), MPICH/Hydra and
Intel MPI (``PMI_SIZE``), PMIx launchers, MVAPICH2. ``MPI_LOCALNRANKS`` (Hydra) only when no other is set."""

RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK")

HOST_ENV = "SACTOOL_FLEET_HOST"
"""Overrides the host name a rank reports in fleet records. For tests and for hosts whose
``hostname`` is not the name operators use; ranks that share a machine are still recognised as
such through MPI (``COMM_TYPE_SHARED``), whatever they are called."""

TIMEOUT_ENV = "SACTOOL_FLEET_TIMEOUT"
DEFAULT_TIMEOUT_S = 300.0
"""Longest wait for the other ranks at one exchange before this rank gives up (policy: longer than
any calibrated sample or buffer placement of the rigorous preset, short enough not to hang a job)."""

OK, INTERRUPTED, ERROR, TERMINATED = 0, 1, 2, 3


def timeout_from_env(env: Mapping[str, str] | None = None) -> float:
    """``$SACTOOL_FLEET_TIMEOUT`` in seconds (default :data:`DEFAULT_TIMEOUT_S`); anything but a
    positive finite number is a UsageError (``0`` or ``-1`` waited forever, ``abc`` was a traceback)."""
    import math

    from sactool.errors import UsageError

    raw = (os.environ if env is None else env).get(TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_TIMEOUT_S
    try:
        v = float(raw)
    except ValueError:
        v = float("nan")
    if not math.isfinite(v) or v <= 0:
        raise UsageError(f"{TIMEOUT_ENV}={raw!r} is not a positive number of seconds",
                         f"e.g. {TIMEOUT_ENV}=600, or unset it for the default {DEFAULT_TIMEOUT_S:.0f} s")
    return v


class FleetError(SactoolError):
    """A fleet-wide failure. ``quiet`` on ranks other than 0: rank 0 reports it once for all."""

    def __init__(self, message: str, hint: str | None = None, *, exit_code: int = ExitCode.ERROR,
                 quiet: bool = False, local: bool = False):
        super().__init__(message, hint)
        self.exit_code = ExitCode(exit_code)
        self.quiet = quiet
        self.local = local  # raised by this rank alone (a timeout): the others did not see it


class FleetInterrupted(FleetError):
    """Some rank was interrupted (Ctrl-C); every rank stops at the same exchange."""


def launched_size(env: Mapping[str, str] | None = None) -> int | None:
    """World size an MPI launcher announced in the environment, or None when none did."""
    env = os.environ if env is None else env
    for var in SIZE_VARS:
        v = env.get(var)
        if v is not None and v.strip().isdigit():
            return int(v)
    if any(v in env for v in RANK_VARS):
        return 0  # a launcher without a size variable: ask MPI
    return None


def detect(env: Mapping[str, str] | None = None) -> "Fleet | None":
    """The fleet this process belongs to, or None (no launcher, or a world of one rank)."""
    n = launched_size(env)
    if n is None or n == 1:
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        raise TopologyError(
            f"started by an MPI launcher ({n or 'unknown number of'} ranks) but mpi4py is not importable",
            "install the MPI extra in this environment: pip install 'sactool[mpi]'; or run without mpirun") from None
    comm = MPI.COMM_WORLD
    if comm.Get_size() <= 1:
        return None
    return Fleet(comm)


_JOINED = False
"""True once this process made its :class:`Fleet` (after that, errors are agreed between ranks)."""


def abort_if_alone(code: int, env: Mapping[str, str] | None = None) -> None:
    """End the whole MPI job when this rank fails before joining its fleet (a malformed option on
    one rank of an MPMD line, say): the other ranks would wait in ``MPI_Init`` for it, and Open
    MPI's launcher was seen to hang then instead of ending the job."""
    n = launched_size(env)
    if _JOINED or not code or n is None or n <= 1:
        return
    try:
        from mpi4py import MPI
    except ImportError:
        return
    import sys

    sys.stderr.flush()
    MPI.COMM_WORLD.Abort(int(code))  # pragma: no cover - ends every rank's process


@dataclass(frozen=True)
class RankInfo:
    rank: int
    host: str            # label: SACTOOL_FLEET_HOST, else the machine's host name
    machine: str         # MPI processor name: ranks with the same machine share its memory
    local_rank: int      # rank among the ranks of the same machine (COMM_TYPE_SHARED)
    local_size: int


class Fleet:
    """COMM_WORLD with sactool's one collective (:meth:`exchange`) and signal handling."""

    def __init__(self, comm, *, timeout_s: float | None = None):
        from mpi4py import MPI

        global _JOINED
        _JOINED = True
        self.comm = comm
        self.MPI = MPI
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.interrupted = False
        self.timeout_s = timeout_s if timeout_s is not None else timeout_from_env()
        self.exchanges = 0
        local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self.local_rank, self.local_size = local.Get_rank(), local.Get_size()
        # the world rank of this machine's local rank 0: it holds the machine's measurement lock (fleet.lock)
        self.local_root = local.bcast(self.rank, root=0)
        local.Free()
        self.machine = MPI.Get_processor_name()
        self.host = os.environ.get(HOST_ENV) or os.uname().nodename or self.machine

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def info(self) -> RankInfo:
        return RankInfo(self.rank, self.host, self.machine, self.local_rank, self.local_size)

    # ---- the one collective ------------------------------------------------------------------
    def exchange(self, payload: Any = None, status: int | None = None) -> list[Any]:
        """Wait for every rank (sleeping), then allgather ``payload``; returns every rank's payload
        in rank order. Raises on every rank alike when any rank sent ``ERROR`` (:class:`FleetError`
        with each failing rank's message) or was interrupted (:class:`FleetInterrupted`)."""
        with deferred_signals():   # a signal must not leave the others waiting in this collective
            self._wait_all()
            # taken after the barrier: a signal that came while this rank waited there stops this exchange
            sig = pending_signal()
            st = status if status is not None else (
                TERMINATED if sig == signal.SIGTERM else INTERRUPTED if sig is not None or self.interrupted else OK)
            got = self.comm.allgather((st, payload))
        self.exchanges += 1
        errors = [(r, p) for r, (s, p) in enumerate(got) if s == ERROR]
        if errors:
            raise self._error_of(errors)
        stopped = [r for r, (s, _) in enumerate(got) if s in (INTERRUPTED, TERMINATED)]
        if stopped:
            self.interrupted = True
            term = any(s == TERMINATED for s, _ in got)
            raise FleetInterrupted(f"{'terminated (SIGTERM)' if term else 'interrupted'} on rank "
                                   f"{', '.join(map(str, stopped))}: all ranks stopped",
                                   "rerun to complete the measurement",
                                   exit_code=ExitCode.TERMINATED if term else ExitCode.INTERRUPTED,
                                   quiet=not self.is_root)
        return [p for _, p in got]

    def fail(self, exc: BaseException) -> FleetError:
        """Join the next exchange with this rank's error; returns the fleet-wide error to raise."""
        if isinstance(exc, SactoolError):
            info = {"message": exc.message, "hint": exc.hint, "exit_code": int(exc.exit_code)}
        else:
            info = {"message": f"{type(exc).__name__}: {exc}", "hint": "rerun with --debug for a traceback",
                    "exit_code": int(ExitCode.ERROR)}
        try:
            self.exchange(info, status=ERROR)
        except FleetError as e:
            return e
        raise AssertionError("an exchange carrying an error did not raise")  # pragma: no cover

    def agree(self, fn) -> list[Any]:
        """Run ``fn()`` on every rank and exchange the results; an error on any rank stops all."""
        try:
            value = fn()
        except (Exception, KeyboardInterrupt) as e:
            if isinstance(e, KeyboardInterrupt):   # Ctrl-C, or SIGTERM's errors.Terminated
                self.interrupted = True
                return self.exchange(None)  # raises FleetInterrupted everywhere
            raise self.fail(e) from e
        return self.exchange(value)

    def everywhere(self, err: SactoolError) -> FleetError:
        """``err``, raised by every rank alike (a check on exchanged data): rank 0 reports it."""
        return FleetError(err.message, err.hint, exit_code=int(err.exit_code), quiet=not self.is_root)

    def _error_of(self, errors: list[tuple[int, dict]]) -> FleetError:
        import re

        by_msg: dict[str, tuple[str, list[int]]] = {}
        for r, p in errors:  # the same error with other figures (each rank read its own free memory) once
            m = str(p.get("message"))
            by_msg.setdefault(re.sub(r"\d+(\.\d+)?", "#", m), (m, []))[1].append(r)
        if len(by_msg) == 1 and len(errors) == self.size:  # every rank, one error: say it once, plainly
            parts = [m for m, _ in by_msg.values()]
        else:
            parts = [f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}: {m}" for m, rs in by_msg.values()]
        first = errors[0][1]
        return FleetError("; ".join(parts), first.get("hint"), exit_code=int(first.get("exit_code", 1)),
                          quiet=not self.is_root)

    def _wait_all(self) -> None:
        req = self.comm.Ibarrier()
        t0 = time.monotonic()
        nap = 5e-5
        while not req.Test():
            time.sleep(nap)
            nap = min(2e-3, nap * 2)
            if time.monotonic() - t0 > self.timeout_s:
                raise FleetError(f"rank {self.rank}: the other ranks did not arrive within {self.timeout_s:.0f} s "
                                 "(a rank hangs, or died without the launcher noticing)",
                                 f"check every rank's host; raise {TIMEOUT_ENV} if a step legitimately takes longer",
                                 local=True)

    def abort(self, code: int) -> None:  # pragma: no cover - ends the process
        self.comm.Abort(int(code))

    # ---- signals -------------------------------------------------------------------------------
    @contextmanager
    def signals(self) -> Iterator[None]:
        """The block runs under :func:`sactool.errors.deferred_signals`: a first SIGINT/SIGTERM is
        recorded (the running sample finishes; the next exchange stops every rank), later ones are
        counted, not fatal. Previous handlers are restored."""
        with deferred_signals():
            yield


__all__ = ["Fleet", "FleetError", "FleetInterrupted", "RankInfo", "detect", "launched_size",
           "HOST_ENV", "OK", "INTERRUPTED", "ERROR"]
