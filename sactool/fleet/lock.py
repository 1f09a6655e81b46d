"""The machine-wide measurement lock (:mod:`sactool.bench.lock`) for ``mpirun … sactool bench``.

The ranks of one job that share a machine measure together on purpose (the contention sweep), so
they must not lock each other out; but another sactool measurement on any of the job's machines — a
plain ``sactool bench``, a ``tune``, a second job — must not overlap them. So **one rank per
machine**, its first (local rank 0 of MPI's ``COMM_TYPE_SHARED`` split: rank 0 on its own machine),
takes the machine's lock for all the job's ranks there, through the same :class:`MachineLock` a
plain bench uses, and holds it from before the buffers are placed until the sweep has ended and
they are unmapped; the job's other ranks there take nothing. A plain bench on that machine waits for
it, naming that rank (``pid 4242: sactool bench gather …``); the job waits for one already running.

Several machines: their locks are taken **one after another in the order of the machines' names**
(MPI processor names), each held before the next is tried. Two jobs sharing machines A and B both
take A first, so neither can hold B while it waits for A: no deadlock (a plain bench holds one lock
only). While a machine's rank waits, it tries again every :data:`POLL_S` and every rank of the job
meets it at an exchange each time (:meth:`sactool.fleet.mpi.Fleet.agree`): the job's exchange
timeout never fires however long the other measurement runs, and Ctrl-C or SIGTERM on any rank
stops all of them at the next exchange, with nothing measured. Rank 0 says once per machine for
whom the job waits (``waiting for another sactool measurement to finish on hostB (pid …)``);
``--no-wait`` refuses on every rank alike (exit 11), naming the holder and its host.

The record: every rank's entry in ``fleet.ranks`` carries its machine's ``measurement_lock`` (the
plain bench's block, plus ``held_by_rank``); the top level carries rank 0's, and ``measured`` the
job's locked window (rank 0's clock).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from sactool.bench.lock import MachineLock, busy_error, waiting_line

POLL_S = 0.5
"""Seconds between a waiting rank's tries (and the job's exchanges meanwhile): a wait ends within this
of the other measurement's end; one exchange of a few bytes per try costs nothing measurable."""


@dataclass
class HeldLocks:
    """What :func:`hold_machines` took: ``block`` — this rank's ``measurement_lock`` record block (its
    machine's lock, ``held_by_rank`` naming the rank that holds it); :meth:`release` lets it go."""

    block: dict[str, Any]
    waited_seconds: float = 0.0
    _lock: MachineLock | None = field(default=None, repr=False)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def hold_machines(fleet, *, wait: bool, what: str, notify: Callable[[str], None] | None = None,
                  poll_s: float = POLL_S, opener: Callable[[], MachineLock] = MachineLock) -> HeldLocks:
    """Take the measurement lock of every machine of the job (see the module): on each machine its
    local rank 0 (:attr:`~sactool.fleet.mpi.Fleet.local_root`), machines in name order, polling between
    exchanges of all ranks. ``notify`` (rank 0's stderr) hears for whom the job waits; ``wait`` False:
    :class:`sactool.bench.lock.BusyError` on every rank (a :class:`~sactool.fleet.mpi.FleetError`, exit
    11). ``opener``: how the holding rank opens its machine's lock file (:class:`MachineLock`:
    ``$SACTOOL_MEASURE_LOCK``, else the machine's lock directory). Call on every rank alike; returns
    this rank's :class:`HeldLocks`."""
    seen = fleet.agree(lambda: (fleet.machine, fleet.local_root, fleet.host))
    # one holder per machine (its ranks' COMM_TYPE_SHARED group), in the order of the machines' names
    holders = sorted({(m, root) for m, root, _ in seen})
    mine: MachineLock | None = None
    waited_for, waited_s = None, 0.0
    try:
        for m, root in holders:
            host = seen[root][2]
            lead = root == fleet.rank
            if lead:
                mine = opener()
            t0, said = time.monotonic(), False

            def attempt(lead: bool = lead, host: str = host) -> tuple | None:
                if not lead:
                    return None
                assert mine is not None
                if mine.try_take():
                    return ("held", None, mine.path)
                who = mine.holder()
                if not wait:
                    raise busy_error(who, what, f" on {host}")
                return ("waiting", who, mine.path)

            while True:
                status, who, path = fleet.agree(attempt)[root]
                if status == "held":
                    break
                if not said:
                    said = True
                    if lead:
                        waited_for = who
                    if notify:
                        notify(waiting_line(who, path, f" on {host}"))
                time.sleep(poll_s)
            if said:
                if lead:
                    waited_s = time.monotonic() - t0
                if notify:
                    notify(f"measuring on {host} after waiting {time.monotonic() - t0:.1f} s")
        blocks = fleet.exchange(mine.state(waited_s, waited_for).to_data() if mine is not None else None)
    except BaseException:
        if mine is not None:
            mine.close()
        raise
    root = fleet.local_root
    return HeldLocks(dict(blocks[root], held_by_rank=root), blocks[root]["waited_seconds"], mine)


__all__ = ["POLL_S", "HeldLocks", "hold_machines"]
