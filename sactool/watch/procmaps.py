"""A process's mappings as the kernel reports them: ``/proc/PID/maps`` (ranges, offsets, paths) joined
with ``/proc/PID/numa_maps`` (each mapping's memory policy and its pages per node).

Formats (Documentation/filesystems/proc.rst, "numa_maps"; ``fs/proc/task_mmu.c`` show_numa_map):
a numa_maps line is ``<start hex> <policy> [file=<path>] [heap|stack] [huge] [anon=N] [dirty=N]
[mapped=N] … [N<node>=<pages>]… kernelpagesize_kB=<k>``; the policy is the mapping's own
(``bind:2``, ``prefer:2``, ``interleave:0-1``, ``weighted interleave:2-3``, ``preferred_many:…``), or
``default`` when none was set with mbind(2) — a task policy (``numactl --membind``) does not show.
Page counts are of pages present (faulted in), in units of ``kernelpagesize_kB``.

Reading numa_maps walks the page tables of every mapping (and takes the process's mmap lock): its
cost grows with the process's resident memory, which is why :mod:`sactool.watch.api` re-reads it
no more often than its measured cost allows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MAX_BYTES = 32 << 20
"""numa_maps of a serving engine with thousands of mappings is a few MiB at most; a larger file is cut
there and the record says so."""

_NODE = re.compile(r"^N(\d+)=(\d+)$")
_SPACED = ("weighted interleave", "prefer (many)")


@dataclass(frozen=True)
class Vma:
    """One mapping: ``[start, end)``, ``offset`` (bytes into the mapped file or device), ``path``
    ("" for anonymous), ``policy`` (numa_maps' word, "default" when none was set), ``node_pages``
    {node: pages present}, ``page_bytes`` (kernelpagesize_kB × 1024), ``anon`` pages."""

    start: int
    end: int
    perms: str
    offset: int
    path: str
    policy: str = "default"
    node_pages: dict[int, int] = field(default_factory=dict)
    page_bytes: int = 4096
    anon: int = 0

    @property
    def size_bytes(self) -> int:
        return self.end - self.start

    @property
    def node_bytes(self) -> dict[int, int]:
        return {n: p * self.page_bytes for n, p in self.node_pages.items()}

    @property
    def present_bytes(self) -> int:
        return sum(self.node_pages.values()) * self.page_bytes

    @property
    def anonymous(self) -> bool:
        return not self.path or self.path.startswith("[anon")

    @property
    def policy_nodes(self) -> str:
        """``bind:2`` → ``2``; ``default`` → ""."""
        return self.policy.split(":", 1)[1] if ":" in self.policy else ""


def parse_maps(text: str) -> list[Vma]:
    """``start-end perms offset dev inode [path]`` lines; garbage lines are skipped."""
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5 or "-" not in parts[0]:
            continue
        try:
            a, b = (int(x, 16) for x in parts[0].split("-", 1))
            off = int(parts[2], 16)
        except ValueError:
            continue
        out.append(Vma(a, b, parts[1], off, parts[5].strip() if len(parts) > 5 else ""))
    return out


def parse_numa_maps(text: str) -> dict[int, dict[str, Any]]:
    """start → {policy, node_pages, page_bytes, anon} for each numa_maps line."""
    out: dict[int, dict[str, Any]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        start_s, _, rest = line.partition(" ")
        try:
            start = int(start_s, 16)
        except ValueError:
            continue
        # the policy is the second field; "weighted interleave:2-3" and "prefer (many):2-3" hold a space
        head = next((w for w in _SPACED if rest.startswith(w)), "")
        tail, _, rest = rest[len(head):].partition(" ")
        policy = head + tail
        rec: dict[str, Any] = {"policy": policy, "node_pages": {}, "page_bytes": 4096, "anon": 0}
        for tok in rest.split():
            m = _NODE.match(tok)
            if m:
                rec["node_pages"][int(m.group(1))] = int(m.group(2))
            elif tok.startswith("kernelpagesize_kB="):
                rec["page_bytes"] = int(tok.split("=", 1)[1]) * 1024
            elif tok.startswith("anon="):
                rec["anon"] = int(tok.split("=", 1)[1])
        out[start] = rec
    return out


def read_vmas(reader: Any, pid: int, *, numa: bool = True) -> tuple[list[Vma], str]:
    """The mappings of ``pid`` (numa_maps joined in when ``numa``), and "" or why they could not be
    read (the process is gone, permission: another user's numa_maps needs ptrace access)."""
    from sactool.host.files import NotRead

    def read(name: str) -> tuple[str | None, str]:
        rel = f"proc/{pid}/{name}"
        try:
            data = reader.tree.read(rel, MAX_BYTES)
        except NotRead as e:
            return None, f"/{rel}: {e.reason}"
        note = f"/{rel} cut at {MAX_BYTES} bytes" if len(data) >= MAX_BYTES else ""
        return data.decode("utf-8", "replace"), note

    maps, why = read("maps")
    if maps is None:
        return [], why
    vmas = parse_maps(maps)
    if not numa:
        return vmas, why
    nm, why2 = read("numa_maps")
    if nm is None:
        return vmas, why2
    info = parse_numa_maps(nm)
    joined = []
    for v in vmas:
        r = info.get(v.start)
        joined.append(v if r is None else Vma(v.start, v.end, v.perms, v.offset, v.path, r["policy"],
                                              r["node_pages"], r["page_bytes"], r["anon"]))
    return joined, why or why2


__all__ = ["MAX_BYTES", "Vma", "parse_maps", "parse_numa_maps", "read_vmas"]
