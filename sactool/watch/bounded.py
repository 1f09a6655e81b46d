"""A source read that fails or hangs must never stall the view: each source runs in its own worker
thread, waited for at most its timeout; a read still running then leaves the last good value shown
as stale (with its age), and no second read of that source starts until the first one returns — a
hung read (a process stuck holding its mmap lock, an endpoint that accepts and never answers) costs
one parked thread, not one per interval.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Reading:
    """The outcome of one bounded read: ``value`` (the fresh one, or the last good one when
    ``stale``), ``ok`` (this interval's read succeeded), ``error`` (why not), ``age_s`` (since the
    value was read; None: never read), ``seconds`` (how long the last finished read took)."""

    source: str
    value: Any
    ok: bool
    stale: bool
    error: str
    age_s: float | None
    seconds: float | None

    def to_data(self) -> dict[str, Any]:
        return {"source": self.source, "ok": self.ok, "stale": self.stale, "error": self.error,
                "age_s": None if self.age_s is None else round(self.age_s, 3),
                "read_seconds": None if self.seconds is None else round(self.seconds, 6)}


class Bounded:
    """Runs ``fn`` for source ``name`` with a ``timeout`` (seconds); see the module docstring."""

    def __init__(self, name: str, fn: Callable[[], Any], timeout: float, *, clock: Callable[[], float] = time.monotonic):
        self.name, self.fn, self.timeout, self.clock = name, fn, timeout, clock
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._result: tuple[bool, Any, str, float] | None = None
        self.value: Any = None
        self.read_at: float | None = None
        self.seconds: float | None = None

    def _run(self) -> None:
        t0 = self.clock()
        try:
            v, ok, err = self.fn(), True, ""
        except Exception as e:   # a source's failure is shown, never raised into the loop
            v, ok, err = None, False, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        with self._lock:
            self._result = (ok, v, err, self.clock() - t0)
        self._done.set()

    def _collect(self, now: float) -> Reading | None:
        """The finished read's outcome (None when none is waiting to be collected)."""
        with self._lock:
            res, self._result = self._result, None
        if res is None:
            return None
        ok, v, err, secs = res
        self.seconds = secs
        if ok:
            self.value, self.read_at = v, now
            return Reading(self.name, v, True, False, "", 0.0, secs)
        age = None if self.read_at is None else now - self.read_at
        return Reading(self.name, self.value, False, self.value is not None, err, age, secs)

    def read(self) -> Reading:
        """Start a read (unless the previous one still runs) and wait for it at most ``timeout``."""
        busy = self._thread is not None and self._thread.is_alive()
        if not busy:
            self._collect(self.clock())   # a late answer of an earlier, timed-out read: superseded
            self._done.clear()
            self._thread = threading.Thread(target=self._run, name=f"sactool-watch-{self.name}", daemon=True)
            self._thread.start()
            if self._done.wait(self.timeout):
                out = self._collect(self.clock())
                assert out is not None   # the result is stored before the event is set
                return out
        now = self.clock()
        age = None if self.read_at is None else now - self.read_at
        why = (f"no answer within {self.timeout:g} s" if not busy else
               "the previous read has not returned yet") + " (no new read starts until it does)"
        return Reading(self.name, self.value, False, self.value is not None, why, age, self.seconds)


__all__ = ["Bounded", "Reading"]
