"""One error type for the whole tool, and the exit codes the CLI maps it to.

Library code raises a :class:`SactoolError` subclass carrying a one-line message and a hint;
the CLI prints ``error: <message>`` and ``hint: <hint>`` on stderr and exits with ``exit_code``.
"""

from __future__ import annotations

import enum
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator


class ExitCode(enum.IntEnum):
    """Process exit codes (docs/sources.md, style §9). Distinct codes let scripts tell failures apart."""

    OK = 0
    ERROR = 1            # generic failure (I/O, corrupt record, …)
    USAGE = 2            # bad option or argument value
    UNAVAILABLE = 3      # topology/hardware unavailable: no such node, CPU-less node, no CXL, …
    RECORD = 4           # a record (profile, bench result, trace) is corrupt, newer or incompatible
    EXISTS = 5           # refusing to overwrite an existing file without --force
    CAPACITY = 6         # does not fit: buffer > free memory, concurrency × context > pool, …
    MODEL_MISMATCH = 7   # serve: the profile was made for another model than --model-path / config.json
    ENGINE_MISSING = 8   # serve: SGLang, its entry point, the sactool_cxl plug-in or numactl not installed
    ENGINE_VERSION = 9   # serve: installed SGLang outside the profile's tested range
    CONFLICT = 10        # serve: an extra SGLang flag contradicts the profile
    BUSY = 11            # another sactool measurement holds the machine and --no-wait was given
    INTERRUPTED = 130    # Ctrl-C (128 + SIGINT)
    TERMINATED = 143     # SIGTERM (128 + SIGTERM), handled like Ctrl-C: finished work is kept


class SactoolError(Exception):
    """Base error: ``message`` says what is wrong, ``hint`` what to do about it."""

    exit_code: ExitCode = ExitCode.ERROR

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


class UsageError(SactoolError):
    """An option or argument value is malformed or out of range."""

    exit_code = ExitCode.USAGE


class TopologyError(SactoolError):
    """The requested node/device does not exist, has no memory/CPUs, or the tree is unreadable."""

    exit_code = ExitCode.UNAVAILABLE


class RecordError(SactoolError):
    """A record file (profile, bench result, trace, config.json) is corrupt, newer or mismatched."""

    exit_code = ExitCode.RECORD


class ExistsError(SactoolError):
    """An output file exists and ``--force`` was not given."""

    exit_code = ExitCode.EXISTS


class CapacityError(SactoolError):
    """A request does not fit the memory available (node free memory, pool, GPU budget)."""

    exit_code = ExitCode.CAPACITY


class Interrupted(SactoolError):
    """The user pressed Ctrl-C; whatever was finished has been kept."""

    exit_code = ExitCode.INTERRUPTED


class OutputError(SactoolError):
    """Standard output cannot be written (full disk, closed descriptor, I/O error)."""

    exit_code = ExitCode.ERROR


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the signal arrives so every path that keeps finished work on Ctrl-C
    (``except KeyboardInterrupt``) keeps it on SIGTERM too; the exit code is then 143. The one
    class for the whole tool: fleet ranks (:mod:`sactool.fleet.mpi`) use it and this policy too."""


_SIGNALLED: dict[str, int | None] = {"signal": None, "count": 0, "deferred": 0, "settled": 0, "kept": 0,
                                     "installed": 0}


def handle_sigterm() -> None:
    """Turn the first SIGTERM into :class:`Terminated` and the first SIGINT into KeyboardInterrupt;
    later ones are counted, not fatal, so the finished record still reaches the disk (GNU
    ``timeout`` signals the child and its group; a double Ctrl-C is a habit).

    An exception raised while Python runs a ctypes callback (llvmlite's object-cache hook while
    numba compiles) is printed and dropped, so the signal is also kept in :data:`_SIGNALLED` and
    :func:`check_signalled` raises it again at the next measurement step.

    Inside :func:`deferred_signals` the first signal is only recorded, not raised: the work that
    deferred it stops at its own next safe point (a fleet rank: the next exchange, which carries
    it to every rank).

    After :func:`settle` (the work is finished, its result complete in memory) the first signal is
    recorded, not raised: the result is saved and the exit status is the command's own — 130/143
    say the work was cut short, never that a finished result is complete but came with a signal
    (:func:`sactool.cli.guard.run_guarded` says which signal came and where the result went)."""
    import signal

    def handler(signum, frame):
        _SIGNALLED["count"] = int(_SIGNALLED["count"] or 0) + 1
        if _SIGNALLED["signal"] is not None:
            return   # already on its way out: counted, the save goes on
        _SIGNALLED["signal"] = signum
        if _SIGNALLED["settled"]:
            _SIGNALLED["kept"] = 1
            return   # the work is finished: it is saved, then the process exits as the work ended
        if _SIGNALLED["deferred"]:
            return   # recorded: the deferring work stops at its next safe point
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    _SIGNALLED["installed"] = 1
    signal.signal(signal.SIGTERM, handler)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, handler)


def settle() -> None:
    """The work is finished and its result complete in memory: from here a first SIGINT/SIGTERM
    is recorded, not raised, so nothing can stop the result from being saved (a signal in the
    middle of the save, also twice). Measurements call it as the **last statement inside the**
    ``try`` **that catches their interrupt**: a signal then either stops the work there (what
    finished is kept, the record says ``complete: false``) or finds it finished — there is no
    moment between the two. :func:`unsettle` makes the work interruptible again."""
    _SIGNALLED["settled"] = 1


def unsettle() -> None:
    """More work follows a :func:`settle` (the next pair of ``bench --node all``): interruptible
    again, and a signal that came meanwhile is raised now, inside the caller's ``try``."""
    _SIGNALLED["settled"] = 0
    if _SIGNALLED["kept"]:
        _SIGNALLED["kept"] = 0
        check_signalled()


def begin_command() -> None:
    """A command starts (:func:`sactool.cli.guard.run_guarded`): nothing is settled yet (in-process
    callers such as the tests run many commands in one interpreter)."""
    _SIGNALLED["settled"] = 0
    _SIGNALLED["kept"] = 0


def received_signal() -> int | None:
    """The first SIGINT or SIGTERM the handlers of :func:`handle_sigterm` recorded, or None."""
    sig = _SIGNALLED["signal"]
    return int(sig) if sig is not None else None


def kept_signal() -> int | None:
    """The signal that arrived after :func:`settle` — the work was finished and is saved — or None."""
    return _SIGNALLED["signal"] if _SIGNALLED["kept"] else None


def handlers_installed() -> bool:
    """Whether :func:`handle_sigterm` runs this process's signals (the process is sactool, not a
    test or a notebook calling it)."""
    return bool(_SIGNALLED["installed"])


@contextmanager
def deferred_signals() -> Iterator[None]:
    """The policy of :func:`handle_sigterm` (installed here if it is not yet), except that the
    first SIGINT/SIGTERM is recorded, not raised, until the block ends: for work that must not be
    cut in the middle of a step others wait on (an MPI collective). The block polls
    :func:`pending_signal` at its safe points; later signals are counted, as everywhere. The
    handlers found on entry are restored on exit; what was recorded stays (:func:`signalled`)."""
    import signal

    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    handle_sigterm()
    _SIGNALLED["deferred"] = int(_SIGNALLED["deferred"] or 0) + 1
    try:
        yield
    finally:
        _SIGNALLED["deferred"] = int(_SIGNALLED["deferred"] or 0) - 1
        for s, h in old.items():
            if h is not None:
                signal.signal(s, h)


def pending_signal() -> int | None:
    """The first SIGINT/SIGTERM recorded since :func:`handle_sigterm` (its number), or None."""
    return _SIGNALLED["signal"]


def ignore_further_signals() -> None:
    """After a signal's work is saved and the process is on its way out: SIGINT/SIGTERM ignored.
    Python's finalization resets every handler it installed to the default action, so a second
    signal arriving then (GNU ``timeout`` signals the child and then its group) would kill the
    process by the signal (exit -15) after the record was saved, with the wrong exit status."""
    import signal

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, signal.SIG_IGN)


def signalled() -> bool:
    """Whether a SIGINT/SIGTERM has arrived since :func:`handle_sigterm`."""
    return _SIGNALLED["signal"] is not None


def check_signalled() -> None:
    """Raise the interrupt a signal asked for if it has not stopped the work yet (see
    :func:`handle_sigterm`); measurement loops call this between steps. Work that has caught the
    interrupt never calls it again, so the saving path is not interrupted twice. Inside
    :func:`deferred_signals` it raises nothing: the deferring work stops at its own safe point; after
    :func:`settle` neither: the work is finished."""
    import signal

    sig = _SIGNALLED["signal"]
    if sig is not None and not _SIGNALLED["deferred"] and not _SIGNALLED["settled"]:
        raise Terminated if sig == signal.SIGTERM else KeyboardInterrupt


def interrupt_code() -> int:
    """143 after a SIGTERM, 130 after a Ctrl-C (the signal :func:`handle_sigterm` recorded)."""
    import signal

    return int(ExitCode.TERMINATED if _SIGNALLED["signal"] == signal.SIGTERM else ExitCode.INTERRUPTED)
