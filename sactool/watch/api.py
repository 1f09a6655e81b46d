"""``sactool watch``: the pool while the engine serves — one :class:`Watcher` holding the sources,
:meth:`Watcher.sample` returning a frozen :class:`WatchSample` per interval.

Sources (each bounded by a timeout, :mod:`sactool.watch.bounded`): ``placement`` (each rank's
mappings: :mod:`~sactool.watch.placement`), ``occupancy`` (:mod:`~sactool.watch.occupancy`),
``pmu`` (:mod:`~sactool.watch.traffic`), ``engine`` (:mod:`~sactool.watch.engine`). The plan comes
from the profile (:mod:`~sactool.watch.plan`), the prediction too (:mod:`~sactool.watch.predict`).

Cost: numa_maps walks the page tables of every mapping of a rank, so it is re-read no more often
than every ``PLACEMENT_DUTY`` × its last read time (at least every interval): the reading keeps
below 1 % of one CPU whatever the pool's size, and the record gives its age.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sactool.watch.bounded import Bounded, Reading

SCHEMA_VERSION = 1
"""Version of the ``watch`` record (``sactool watch --once --format json``); its history:

1 — the first format."""
KIND = "watch"
SCRAPE_TIMEOUT_S = 10.0
"""The socket timeout of one scrape of the engine's endpoint (the view waits ``--timeout`` for it)."""
PLACEMENT_DUTY = 200
"""numa_maps is re-read at most once per this many times its own last read time (0.5 % of a CPU)."""


@dataclass(frozen=True)
class WatchOptions:
    """``profile``: the serving profile (the plan and the prediction); ``pids``: (pid, rank or None);
    ``metrics_url``: the engine's endpoint; ``run_file``: what serve recorded; ``interval_s``;
    ``timeout_s``: the most one source's read may take before it is shown stale; ``sysfs_root``: a
    recorded machine (its /proc too) instead of this one."""

    profile: Path | None = None
    pids: tuple[tuple[int, int | None], ...] = ()
    metrics_url: str | None = None
    run_file: Path | None = None
    interval_s: float = 1.0
    timeout_s: float = 0.5
    sysfs_root: Path | None = None


@dataclass(frozen=True)
class WatchSample:
    """One interval's view (``to_data``: the ``watch`` record)."""

    header: dict[str, Any]
    live: bool
    profile: str | None
    model: str | None
    ranks: tuple[Any, ...]
    targets: tuple[Any, ...]
    traffic: tuple[Any, ...]
    pmus: tuple[Any, ...]
    pmu_absent: str
    engine: Any
    prediction: Any
    sources: tuple[Reading, ...]
    warnings: tuple[dict, ...]
    notes: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_data(self) -> dict[str, Any]:
        return {**self.header, "live": self.live, "profile": self.profile, "model": self.model,
                "elapsed_s": round(self.elapsed_s, 3),
                "ranks": [r.to_data() for r in self.ranks], "targets": [t.to_data() for t in self.targets],
                "traffic": [t.to_data() for t in self.traffic],
                "pmus": [{"name": p.name, "kind": p.kind, "read": p.read, "reason": p.reason, "memdev": p.memdev}
                         for p in self.pmus],
                "pmu_absent": self.pmu_absent,
                "engine": self.engine.to_data() if self.engine is not None else None,
                "prediction": self.prediction.to_data() if self.prediction is not None else None,
                "sources": [s.to_data() for s in self.sources], "warnings": list(self.warnings),
                "notes": list(self.notes), **self.extra}


class Watcher:
    """The sources of one watch (see the module docstring). ``close()`` releases the counters."""

    def __init__(self, options: WatchOptions, *, clock=time.monotonic):
        from sactool.host.sysfs import SysfsReader

        self.o, self.clock = options, clock
        self.reader = SysfsReader(options.sysfs_root)
        self.t0 = clock()
        self.notes: list[str] = []
        self.profile, self.profile_path, pids, self.url = self._inputs()
        self.pids = pids
        from sactool.watch.plan import plan_rows

        self.plan, note = plan_rows(self.profile, self.reader, [p for p, _ in pids]) if self.profile is not None \
            else ([], "")
        if note:
            self.notes.append(note)
        self._placement_next = 0.0
        self._engine_prev: Any = None
        t = options.timeout_s
        self.sources = {"placement": Bounded("placement", self._read_placement, t),
                        "occupancy": Bounded("occupancy", self._read_occupancy, t),
                        "pmu": Bounded("pmu", self._read_pmu, t)}
        if self.url:
            self.sources["engine"] = Bounded("engine", self._read_engine, t)
        self._traffic: Any = None
        self._pmus: list[Any] = []
        self._pmu_absent = ""
        self._placements: list[Any] = []

    # ---- inputs --------------------------------------------------------------------------------
    def _inputs(self) -> tuple[Any, str | None, list[tuple[int, int | None]], str | None]:
        from sactool import runfile
        from sactool.errors import UsageError
        from sactool.profile import load_profile

        o = self.o
        run = None
        if o.run_file is not None:
            run = runfile.read(o.run_file)
        elif not o.pids and o.profile is None and not o.metrics_url:
            latest = runfile.latest()
            if latest is None:
                raise UsageError("nothing to watch: no --pid, --metrics-url or --profile, and no running launch of "
                                 f"'sactool serve' recorded in {runfile.run_dir()}",
                                 "pass --pid PID (the engine's) and --profile FILE, or launch with sactool serve")
            run = runfile.read(latest)
            self.notes.append(f"run file {latest}: pid {run['pid']} ({run.get('engine')})")
        profile_path = str(o.profile) if o.profile else (run or {}).get("profile")
        profile = load_profile(profile_path) if profile_path else None
        pids = list(o.pids) or ([(int(run["pid"]), None)] if run else [])
        url = o.metrics_url or (run or {}).get("metrics_url")
        if profile is None:
            self.notes.append("no profile: no plan to compare placement with, no prediction")
        return profile, profile_path, pids, url

    # ---- sources -------------------------------------------------------------------------------
    def _read_placement(self) -> list[Any]:
        from sactool.watch.discover import find_ranks
        from sactool.watch.placement import RankPlacement, evaluate
        from sactool.watch.procmaps import read_vmas

        procs, notes = find_ranks(self.reader, self.pids)
        by_rank = {p.rank: p for p in procs}
        out: list[RankPlacement] = []
        for row in self.plan:
            p = by_rank.get(row.rank)
            vmas, why = read_vmas(self.reader, p.pid) if p is not None else ([], "")
            out.append(evaluate(row, p.pid if p is not None else None, vmas, why))
        return out

    def _read_occupancy(self) -> list[Any]:
        from sactool.watch.occupancy import occupancy

        return occupancy(self.reader, self.plan, self._placements)

    def _read_pmu(self) -> list[Any]:
        if self._traffic is None:
            from sactool.topology import probe
            from sactool.watch import pmu
            from sactool.watch.traffic import Traffic, links

            self._pmus, self._pmu_absent = pmu.discover(self.reader)
            ceil: dict[str, int | None] = {}
            backs: dict[str, str] = {}
            if any(p.kind == "cxl_pmu" for p in self._pmus):
                ceil, backs = links(probe(self.reader), {r.target: r.node for r in self.plan})
            self._traffic = Traffic([p for p in self._pmus if p.read], ceil, backs)
        if not self.reader.live:
            return []   # a recording has PMUs to list, no counters to read
        return self._traffic.read(self.clock)

    def _read_engine(self) -> Any:
        from sactool.watch import engine

        assert self.url is not None   # the source exists only with a URL
        # the socket may wait longer than the view does: a slow endpoint's answer, read in the background,
        # is shown at the next interval; one that never answers parks this one thread (bounded.py)
        now = engine.scrape(self.url, max(SCRAPE_TIMEOUT_S, self.o.timeout_s), self.clock())
        prev, self._engine_prev = self._engine_prev, now
        return engine.demand(self.url, now, prev)

    # ---- one interval --------------------------------------------------------------------------
    def sample(self) -> WatchSample:
        from sactool.records import header, warning
        from sactool.watch.placement import warnings_of
        from sactool.watch.predict import compare

        now = self.clock()
        readings = []
        if now >= self._placement_next or not self._placements:
            r = self.sources["placement"].read()
            cost = r.seconds or 0.0
            self._placement_next = now + max(self.o.interval_s * 0.5, PLACEMENT_DUTY * cost)
        else:
            b = self.sources["placement"]
            age = None if b.read_at is None else now - b.read_at
            r = Reading("placement", b.value, True, False, "", age, b.seconds)
        readings.append(r)
        self._placements = list(r.value or [])
        for name in ("occupancy", "pmu", "engine"):
            if name in self.sources:
                readings.append(self.sources[name].read())
        val = {x.source: x.value for x in readings}
        demand = val.get("engine")
        warns = warnings_of(self._placements)
        for x in readings:
            if not x.ok:
                warns.append(warning(f"{x.source}_stale" if x.stale else f"{x.source}_failed",
                                     f"{x.source}: {x.error}" + (f" (showing the value of {x.age_s:.1f} s ago)"
                                                                  if x.stale and x.age_s is not None else ""), None))
        pred = compare(self.profile, demand) if self.profile is not None else None
        return WatchSample(header(KIND, SCHEMA_VERSION), self.reader.live, self.profile_path,
                           self.profile.model.name if self.profile is not None else None,
                           tuple(self._placements), tuple(val.get("occupancy") or ()), tuple(val.get("pmu") or ()),
                           tuple(self._pmus), self._pmu_absent, demand, pred, tuple(readings), tuple(warns),
                           tuple(self.notes), now - self.t0,
                           {"interval_s": self.o.interval_s, "timeout_s": self.o.timeout_s,
                            "metrics_url": self.url})

    def close(self) -> None:
        if self._traffic is not None:
            self._traffic.close()


def watch_once(options: WatchOptions) -> WatchSample:
    """One sample; with an engine endpoint, two scrapes ``interval_s`` apart give rates (else totals)."""
    w = Watcher(options)
    try:
        s = w.sample()
        if w.url is None and not any(p.read for p in w._pmus):
            return s
        time.sleep(options.interval_s)
        return w.sample()
    finally:
        w.close()


__all__ = ["KIND", "SCHEMA_VERSION", "WatchOptions", "WatchSample", "Watcher", "watch_once"]
