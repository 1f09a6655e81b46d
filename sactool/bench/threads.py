"""Run one function per CPU in pinned threads (``sched_setaffinity(0, …)`` pins the calling thread).

The kernels are numba ``nogil`` functions, so these threads run truly in parallel.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


def run_pinned(cpus: Sequence[int], fn: Callable[[int], T]) -> list[T]:
    """Call ``fn(i)`` in a thread pinned to ``cpus[i]`` for every i; all start together (barrier).

    Returns each thread's return value; re-raises the first exception (KeyboardInterrupt included
    is handled by the caller, which runs in the main thread).
    """
    n = len(cpus)
    out: dict[int, T] = {}               # thread i -> fn(i); every i is there unless an error is raised
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def work(i: int) -> None:
        try:
            os.sched_setaffinity(0, {cpus[i]})
            barrier.wait()
            out[i] = fn(i)
        except BaseException as e:  # surfaced in the caller
            errors.append(e)
            barrier.abort()

    ts = [threading.Thread(target=work, args=(i,), daemon=True, name=f"sactool-cpu{cpus[i]}") for i in range(n)]
    interrupted: KeyboardInterrupt | None = None
    try:
        for t in ts:
            t.start()
    except KeyboardInterrupt as e:   # a signal while starting: the started threads must not outlive the buffer
        interrupted = interrupted or e
        barrier.abort()
    # a thread counts as started once it has an ident: a signal inside t.start() (it waits for the new
    # thread to run) arrives after the thread exists, and that thread holds views of the buffer too
    for t in (t for t in ts if t.ident is not None):
        while t.is_alive():
            try:
                t.join(0.05)  # short joins keep the main thread responsive to Ctrl-C
            except KeyboardInterrupt as e:
                interrupted = interrupted or e  # the kernels are bounded: let them finish before the buffer goes
    if interrupted is not None:
        raise interrupted   # the first one as it came: a SIGTERM stays errors.Terminated
    real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if real or errors:
        raise (real or errors)[0]
    return [out[i] for i in range(n)]


def split(n: int, parts: int, align: int = 1) -> list[tuple[int, int]]:
    """``[lo, hi)`` ranges cutting ``n`` into ``parts`` nearly equal pieces, boundaries multiples of ``align``."""
    parts = max(1, parts)
    step = -(-n // parts)
    step = -(-step // align) * align
    return [(min(n, i * step), min(n, (i + 1) * step)) for i in range(parts)]
