"""The pool's page size, chosen by measurement (issue 10 item 9).

SGLang 0.5.23 fixes the HiSparse KV layout (layer-first), the device page (64 tokens) and the
per-token swap-in, so the page size sactool can choose is the host pool's own: 4 KiB base pages
(``none``), transparent huge pages (``thp``, MADV_HUGEPAGE), hugetlb pages (``2MB``/``1GB``) where the
pool node has enough reserved, or — for a devdax pool — the device's ``align``, which the device
fixes (``daxctl reconfigure-device --align`` changes it, not the mapping).

``tune`` measures the top-k gather (random 656-byte record gathers over the quick-gather buffer,
sized from this machine's last-level cache and free memory: ``sactool.bench.sizing``) with each available kind on the pool node, in rounds interleaved over the kinds
(A B C A B C, so drift hits each alike), and picks the kind with the highest median bandwidth.
A kind is preferred over THP (the engine-side default) only when it wins every paired round;
otherwise the pick stays THP and says "not significant". The figures go into the profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from sactool.units import format_bytes

KINDS = ("none", "thp", "2MB", "1GB")
BUFFER_BYTES = 256 << 20            # sactool.bench.sizing.FLOOR_BYTES: tune passes the size it derived
DEFAULT_KIND = "thp"


@dataclass(frozen=True)
class PageChoice:
    kind: str                               # none | thp | 2MB | 1GB, or "devdax align N"
    figures: dict[str, list[float]]         # kind -> bandwidth samples (B/s), round order
    why: str
    skipped: dict[str, str]                 # kind -> why it was not measured

    def to_data(self) -> dict:
        med = {k: sorted(v)[len(v) // 2] for k, v in self.figures.items() if v}
        return {"chosen": self.kind, "why": self.why,
                "median_bandwidth_bytes_per_s": med, "samples_bytes_per_s": self.figures,
                "not_measured": self.skipped}


def available(topo, reader, node: int, size_bytes: int = BUFFER_BYTES) -> tuple[list[str], dict[str, str]]:
    """Kinds that can back a ``size_bytes`` buffer on ``node``, and why the others cannot."""
    kinds, skipped = ["none"], {}
    thp = (reader.str("sys/kernel/mm/transparent_hugepage/enabled") or "") if reader is not None else ""
    if "[never]" in thp:
        skipped["thp"] = "transparent_hugepage/enabled is [never]"
    elif thp:
        kinds.append("thp")
    else:
        skipped["thp"] = "transparent_hugepage/enabled unreadable"
    hp = {h.page_size_bytes: h for h in topo.node(node).hugepages}
    for kind, size in (("2MB", 2 << 20), ("1GB", 1 << 30)):
        h = hp.get(size)
        free = (h.free or 0) * size if h is not None else 0
        if free >= size_bytes:
            kinds.append(kind)
        else:
            skipped[kind] = (f"node{node} has {format_bytes(free)} of free {kind} hugetlb pages, {format_bytes(size_bytes)} needed "
                             f"(nodeN/hugepages/hugepages-{size // 1024}kB/free_hugepages)")
    return kinds, skipped


def choose(figures: dict[str, list[float]], skipped: dict[str, str]) -> PageChoice:
    """Highest median; over THP only when it wins every paired round."""
    med = {k: sorted(v)[len(v) // 2] for k, v in figures.items() if v}
    best = max(med, key=lambda k: med[k])
    if best == DEFAULT_KIND or DEFAULT_KIND not in figures:
        return PageChoice(best, figures, f"highest median gather bandwidth ({med[best] / 1e9:.2f} GB/s)", skipped)
    wins = all(a > b for a, b in zip(figures[best], figures[DEFAULT_KIND]))
    if wins:
        return PageChoice(best, figures, f"highest median gather bandwidth ({med[best] / 1e9:.2f} GB/s vs THP "
                          f"{med[DEFAULT_KIND] / 1e9:.2f} GB/s), faster in every one of "
                          f"{len(figures[best])} paired rounds", skipped)
    return PageChoice(DEFAULT_KIND, figures, f"not significant: {best} had the highest median "
                      f"({med[best] / 1e9:.2f} vs {med[DEFAULT_KIND] / 1e9:.2f} GB/s) but did not win every "
                      "paired round; THP kept", skipped)


def measure(node: int, kinds: Sequence[str], record_bytes: int, top_k: int, rounds: int, *, seconds: float,
            done: Sequence[dict], on_point: Callable[[dict], None],
            progress: Callable[[str, int, int], None] | None = None,
            size_bytes: int = BUFFER_BYTES, gathers=None) -> dict[str, list[float]]:
    """``rounds`` quick gathers per kind on ``node``, interleaved over kinds (resumable points).
    ``gathers``: the :class:`sactool.bench.quick.QuickGathers` session whose buffers the points reuse
    (None: one of its own) — one buffer per kind, placed and verified once for all rounds (tune's
    gather rounds already placed the THP one)."""
    from sactool.bench.quick import QuickGathers

    if gathers is None:
        with QuickGathers() as own:
            return measure(node, kinds, record_bytes, top_k, rounds, seconds=seconds, done=done, on_point=on_point,
                           progress=progress, size_bytes=size_bytes, gathers=own)
    from sactool.bench.figures import fetch_figure
    from sactool.errors import unsettle

    have = {(p["round"], p["page_kind"]): p for p in done}
    out: dict[str, list[float]] = {k: [] for k in kinds}
    n, total = 0, rounds * len(kinds)
    for r in range(rounds):
        for k in kinds:
            p = have.get((r, k))
            if p is None:
                rec = gathers.gather(node, record_bytes, top_k, seconds=seconds, hugepages=k, size_bytes=size_bytes,
                                     notify=(lambda m: progress(m, n, total)) if progress else None)
                fig = fetch_figure(rec, record_bytes, paths=("cpu_proxy",))
                p = {"kind": "pagesize", "round": r, "page_kind": k, "node": node,
                     "bandwidth_bytes_per_s": fig.bandwidth_bytes_per_s,
                     "hugepage_fraction": (rec.data.get("buffer") or {}).get("hugepage_fraction")}
                on_point(p)
                unsettle()   # the point is on disk: a signal that came after the gather stops tune here
            out[k].append(float(p["bandwidth_bytes_per_s"]))
            n += 1
            if progress:
                progress("page size", n, total)
    return out
