"""Link traffic per CXL memdev from its cxl_pmu counters (:mod:`sactool.watch.pmu`), each against
probe's link ceiling of that memdev and the pool target the memdev backs.

The counters are opened once (system-wide, on the PMU's cpumask CPU) and read every interval; bytes
per second = Δcount × 64 B / Δt, scaled by time-enabled / time-running when the kernel multiplexed
the counter (as perf stat does). A counter that cannot be opened says why (permission, the device's
PMU refused it) and is tried again at most once a minute.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from sactool.watch.pmu import CXL_EVENTS, LINE_BYTES, Pmu

RETRY_S = 60.0


@dataclass(frozen=True)
class LinkTraffic:
    """One memdev's link: bytes/s each way (None: not counted, ``detail`` says why), the ceiling
    (``ceiling_bytes_per_s``: probe's per-direction link ceiling, computed, not measured), and the
    pool ``target`` the memdev backs (None: none of the plan's)."""

    pmu: str
    memdev: str | None
    target: str | None
    read_bytes_per_s: float | None
    write_bytes_per_s: float | None
    read_bytes_total: int | None
    write_bytes_total: int | None
    ceiling_bytes_per_s: int | None
    detail: str = ""

    def to_data(self) -> dict[str, Any]:
        frac = (self.read_bytes_per_s / self.ceiling_bytes_per_s
                if self.read_bytes_per_s is not None and self.ceiling_bytes_per_s else None)
        return {"pmu": self.pmu, "memdev": self.memdev, "target": self.target,
                "read_bytes_per_s": self.read_bytes_per_s, "write_bytes_per_s": self.write_bytes_per_s,
                "read_bytes_total": self.read_bytes_total, "write_bytes_total": self.write_bytes_total,
                "ceiling_bytes_per_s": self.ceiling_bytes_per_s, "read_fraction_of_ceiling": frac,
                "detail": self.detail}


@dataclass
class _Counter:
    fd: int | None = None
    error: str = ""
    tried_at: float = -1e18
    last: tuple[int, int, int] | None = None   # count, enabled, running
    last_at: float | None = None
    total: float = 0.0
    rate: float | None = None


@dataclass
class Traffic:
    """Open counters of the readable cxl_pmu PMUs; :meth:`read` once per interval."""

    pmus: list[Pmu]
    ceilings: dict[str, int | None]                 # memdev → ceiling bytes/s
    targets: dict[str, str]                         # memdev → pool target
    counters: dict[tuple[str, str], _Counter] = field(default_factory=dict)

    def _open(self, p: Pmu, direction: str, c: _Counter, now: float) -> None:
        from sactool.host import perf

        ev = p.event(CXL_EVENTS[direction])
        if ev is None or ev.config is None or p.type is None or p.cpu is None:
            c.error = ev.reason if ev is not None and ev.reason else "not offered by this PMU"
            c.tried_at = float("inf")
            return
        c.tried_at = now
        try:
            c.fd = perf.open_counter(p.type, ev.config, cpu=p.cpu)
            c.error = ""
        except OSError as e:
            c.error = e.strerror or str(e)

    def _sample(self, c: _Counter, now: float) -> None:
        from sactool.host import perf

        assert c.fd is not None   # only open counters are sampled
        count, enabled, running = perf.read_counter(c.fd)
        if c.last is not None and c.last_at is not None and now > c.last_at:
            d_en, d_run = enabled - c.last[1], running - c.last[2]
            scale = d_en / d_run if d_run > 0 else 0.0
            d = (count - c.last[0]) * scale * LINE_BYTES
            c.total += d
            c.rate = d / (now - c.last_at)
        c.last, c.last_at = (count, enabled, running), now

    def read(self, clock=time.monotonic) -> list[LinkTraffic]:
        out = []
        for p in self.pmus:
            if p.kind != "cxl_pmu":
                continue
            vals: dict[str, _Counter] = {}
            for direction in CXL_EVENTS:
                c = self.counters.setdefault((p.name, direction), _Counter())
                now = clock()
                if c.fd is None and now - c.tried_at >= RETRY_S:
                    self._open(p, direction, c, now)
                if c.fd is not None:
                    try:
                        self._sample(c, now)
                    except OSError as e:
                        c.error, c.rate = str(e), None
                        os.close(c.fd)
                        c.fd = None
                vals[direction] = c
            r, w = vals["read"], vals["write"]
            errs = "; ".join(f"{d}: {c.error}" for d, c in vals.items() if c.error)
            memdev = p.memdev
            out.append(LinkTraffic(p.name, memdev, self.targets.get(memdev or ""), r.rate, w.rate,
                                   int(r.total) if r.fd is not None else None,
                                   int(w.total) if w.fd is not None else None,
                                   self.ceilings.get(memdev or ""), errs if errs else
                                   ("" if r.rate is not None else "first read: a rate needs two")))
        return out

    def close(self) -> None:
        for c in self.counters.values():
            if c.fd is not None:
                os.close(c.fd)
                c.fd = None


def links(topo: Any, plan_targets: dict[str, str | int | None]) -> tuple[dict[str, int | None], dict[str, str]]:
    """(memdev → its narrowest path link ceiling, memdev → the pool target it backs) from probe's
    topology; ``plan_targets``: target name → node (numa) or None (devdax: matched by name)."""
    ceil = {m.name: (m.narrowest_link or m.link).ceiling_bytes_per_s if (m.narrowest_link or m.link) else None
            for m in topo.memdevs}
    backs: dict[str, str] = {}
    for name, node in plan_targets.items():
        mds = topo.memdevs_of_node(node) if isinstance(node, int) else topo.memdevs_of_dax(name)
        for m in mds:
            backs.setdefault(m.name, name)
    return ceil, backs


__all__ = ["LinkTraffic", "Traffic", "links"]
