"""Which processes are the engine's ranks.

Given PIDs (``--pid PID[:RANK]``, or the run file ``sactool serve`` wrote): a PID whose rank is
given is that rank; otherwise the PID and its descendants are searched for rank processes by what
the engines name them — SGLang's scheduler processes set their title to ``sglang::scheduler_TP<r>``
(``…_DP<d>_TP<r>`` with DP attention), vLLM's workers ``VLLM::Worker_TP<r>`` (setproctitle, read
back from ``/proc/PID/cmdline``) — or by ``SACTOOL_RANK`` / ``RANK`` in their environment (readable
to the same user or root). A PID with no rank found and no descendant that is one counts as rank
0, 1, … in the order given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_TITLE = re.compile(r"(?:sglang::scheduler|VLLM::Worker)\w*?_TP(\d+)")


@dataclass(frozen=True)
class RankProc:
    """Rank ``rank`` is process ``pid``; ``how``: what told (title, environment, --pid, order)."""

    rank: int
    pid: int
    how: str


def _cmdline(reader: Any, pid: int) -> str:
    t = reader.text(f"proc/{pid}/cmdline")
    return (t or "").replace("\0", " ").strip()


def _env_rank(reader: Any, pid: int) -> int | None:
    t = reader.text(f"proc/{pid}/environ")
    if not t:
        return None
    env = dict(kv.split("=", 1) for kv in t.split("\0") if "=" in kv)
    for k in ("SACTOOL_RANK", "RANK"):
        if env.get(k, "").isdigit():
            return int(env[k])
    return None


def children(reader: Any, pid: int) -> list[int]:
    """Direct children of ``pid`` (``/proc/PID/task/*/children``, Linux 3.5+ with CONFIG_PROC_CHILDREN)."""
    out: list[int] = []
    for tid in reader.listdir(f"proc/{pid}/task"):
        for tok in (reader.text(f"proc/{pid}/task/{tid}/children") or "").split():
            if tok.isdigit():
                out.append(int(tok))
    return out


def descendants(reader: Any, pid: int, limit: int = 4096) -> list[int]:
    """``pid`` and every process below it (breadth first, at most ``limit``)."""
    seen, todo = [pid], [pid]
    while todo and len(seen) < limit:
        for c in children(reader, todo.pop(0)):
            if c not in seen:
                seen.append(c)
                todo.append(c)
    return seen


def rank_of(reader: Any, pid: int) -> tuple[int | None, str]:
    m = _TITLE.search(_cmdline(reader, pid))
    if m:
        return int(m.group(1)), "process title"
    r = _env_rank(reader, pid)
    return (r, "environment") if r is not None else (None, "")


def find_ranks(reader: Any, pids: list[tuple[int, int | None]]) -> tuple[list[RankProc], list[str]]:
    """(rank processes, notes). ``pids``: (pid, rank or None) as given."""
    out: dict[int, RankProc] = {}
    notes: list[str] = []
    loose: list[int] = []
    for pid, rank in pids:
        if rank is not None:
            out.setdefault(rank, RankProc(rank, pid, "--pid"))
            continue
        found = False
        for p in descendants(reader, pid):
            r, how = rank_of(reader, p)
            if r is not None and r not in out:
                out[r] = RankProc(r, p, how)
                found = True
        if not found:
            if not reader.exists(f"proc/{pid}"):
                notes.append(f"pid {pid}: no such process")
                continue
            loose.append(pid)
    nxt = 0
    for pid in loose:
        while nxt in out:
            nxt += 1
        out[nxt] = RankProc(nxt, pid, "order given (no rank found in its title or environment)")
    return [out[r] for r in sorted(out)], notes


__all__ = ["RankProc", "children", "descendants", "find_ranks", "rank_of"]
