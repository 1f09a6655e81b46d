"""The ``bench`` record (schema 3): what was measured, where, how, and how sure we are.

Top level: ``records.header("bench", 2)`` + ``machine`` + ``command``, ``protocol``,
``memory_node``, ``cpu_node``, ``cpus`` (separate: CXL nodes have no CPUs), ``stand_in``,
``buffer``, ``results`` [{test, memory_node, cpu_node, params, kernel, unit, stats, samples,
derived, first_call_seconds, reps_per_sample}], ``warnings`` [{code, message, hint}],
``complete`` (False when Ctrl-C cut the run short; finished samples are kept).

A NUMA node is its number (``memory_node: 2``; docs/reference/units.md) — schema 2; a schema-1
record (``"node2"``) is upgraded on loading by :func:`_upgrade_1_to_2`.

Loading validates what sactool reads back with a pydantic v2 schema (``_Record``, ``_Result``,
``_Stats``; the pattern of :mod:`sactool.simulate.platform`): the first error becomes one
RecordError (exit 4) naming the result and the field; every other key is kept as stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeGuard

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainValidator, ValidationError, ValidationInfo, model_validator
from pydantic_core import PydanticCustomError

from sactool import records
from sactool.errors import RecordError, UsageError
from sactool.host.machine import upgrade_machine
from sactool.units import node_name, node_number

KIND = "bench"
SCHEMA_VERSION = 3
"""Version of the ``bench`` record; its history (upgrades: :data:`UPGRADES`):

1 — the first format (GPU gather and convert results are ``test`` values in it; the ``fleet`` block optional).
2 — every NUMA node is its number (``memory_node``, ``cpu_node``, ``stand_in.node``, results', pairs', buffer's, GPU's, fleet's and machine's nodes; 1 wrote ``"node2"``).
3 — every gather result states its working set (``params.footprint_bytes``, ``params.index_shift``: ``"per pass"`` for the generated stream, ``"none"`` for a stored one repeated as 2 measured it, with ``footprint_source``); results carry ``other_cpu_busy`` (what else ran while they were measured, None: not recorded); the record carries ``measurement_lock`` and ``measured`` (the locked window)."""


def _nodes_to_numbers(d: Any, keys: tuple[str, ...]) -> Any:
    """``d`` with each of ``keys`` that holds ``"nodeN"`` as ``N`` (other values left to the checks)."""
    if not isinstance(d, dict):
        return d
    out = dict(d)
    for k in keys:
        v = out.get(k)
        if isinstance(v, str) and node_number(v) is not None:
            out[k] = node_number(v)
    return out


def _upgrade_1_to_2(rec: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 spelled NUMA nodes ``"node2"``; 2 holds the number. Only values that are nodes
    move: names that may be a DAX device (``dax_device``) and mapping keys (``node_pages``) stay."""
    pair = ("memory_node", "cpu_node")
    rec = _nodes_to_numbers(rec, pair)
    rec["machine"] = upgrade_machine(rec.get("machine"))
    rec["stand_in"] = _nodes_to_numbers(rec.get("stand_in"), ("node",))
    for k in ("results", "pairs"):
        if isinstance(rec.get(k), list):
            rec[k] = [_nodes_to_numbers(r, pair) for r in rec[k]]
    buf = rec.get("buffer")
    if isinstance(buf, dict) and isinstance(buf.get("memory_nodes"), list):
        rec["buffer"] = {**buf, "memory_nodes": [node_number(n) if node_number(n) is not None else n
                                                 for n in buf["memory_nodes"]]}
    if isinstance(rec.get("gpu"), dict):
        rec["gpu"] = _nodes_to_numbers(rec["gpu"], ("numa_node",))
    fl = rec.get("fleet")
    if isinstance(fl, dict):
        fl = dict(fl)
        for k in ("hosts", "ranks"):
            if isinstance(fl.get(k), list):
                fl[k] = [_fleet_entry(e) for e in fl[k]]
        rec["fleet"] = fl
    return rec


def _fleet_entry(e: Any) -> Any:
    """A fleet block's host or rank entry with its nodes as numbers."""
    e = _nodes_to_numbers(e, ("memory_node", "cpu_node"))
    if isinstance(e, dict):
        for k in ("stand_in", "pool_device"):
            if isinstance(e.get(k), dict):
                e[k] = _nodes_to_numbers(e[k], ("node",))
        if "machine_block" in e:
            e["machine_block"] = upgrade_machine(e["machine_block"])
    return e


def expected_footprint(indices: int, records: int, record_bytes: int) -> int:
    """Bytes of the distinct records ``indices`` uniform draws over ``records`` records touch, expected:
    ``records × (1 − e^(−indices/records)) × R`` (a schema-2 gather's stored stream, repeated pass after pass)."""
    return int(records * (1 - math.exp(-indices / max(1, records))) * record_bytes)


def _upgrade_2_to_3(rec: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 gathers repeated one stored stream unshifted: their working set was the stream's distinct
    records (``footprint_bytes`` since sactool 0.1.1, else estimated here and said so); nothing recorded
    what else ran, nor a lock (null)."""
    buf = (rec.get("buffer") or {}).get("size_bytes") if isinstance(rec.get("buffer"), dict) else None
    if isinstance(rec.get("results"), list):
        out = []
        for r in rec["results"]:
            if isinstance(r, dict):
                r = dict(r)
                p = r.get("params")
                if r.get("test") == "gather" and isinstance(p, dict):
                    p = dict(p)
                    p.setdefault("index_shift", "none")
                    if "footprint_bytes" in p:
                        p.setdefault("footprint_source", "the stream's distinct records, counted when measured")
                    elif _number(p.get("indices")) and _number(p.get("record_bytes")) and _number(buf) and p["record_bytes"] > 0:
                        p["footprint_bytes"] = expected_footprint(int(p["indices"]), int(buf // p["record_bytes"]),
                                                                  int(p["record_bytes"]))
                        p["footprint_source"] = ("estimated on upgrade from schema 2: the expected distinct records "
                                                 "of its uniform stream")
                    r["params"] = p
                r.setdefault("other_cpu_busy", None)
            out.append(r)
        rec["results"] = out
    rec.setdefault("measurement_lock", None)
    rec.setdefault("measured", None)
    return rec


UPGRADES: dict = {1: _upgrade_1_to_2, 2: _upgrade_2_to_3}  # schema n -> n+1 steps, applied in order


@dataclass(frozen=True)
class BenchRecord:
    """A loaded or freshly measured bench record. ``memory_node``/``cpu_node`` are node ids;
    ``results`` and ``warnings`` are plain dicts as stored; ``data`` is the whole record."""

    memory_node: int | None
    cpu_node: int | None
    cpus: tuple[int, ...]
    stand_in: dict | None
    buffer: dict
    results: tuple[dict, ...]
    warnings: tuple[dict, ...]
    complete: bool
    data: dict
    path: str | None = None

    def to_data(self) -> dict:
        return self.data


_node_id = node_number


STAT_KEYS = ("median", "mean", "stdev", "min", "max", "p05", "p95", "n")
"""What every result's ``stats`` holds (bench/stats.py ``stats_dict``); renderers and tune read them."""


UNIT_SUFFIXES = ("_ns", "_us", "_s", "_bytes", "_per_s", "_fraction")
"""A derived figure whose key names a unit (docs/sources.md, style §7) must be a finite number (or None)."""


def _number(v: Any) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# ---- the record's schema (pydantic v2, as sactool.simulate.platform) --------------------------
# Each refusal is a PydanticCustomError whose type says how the message joins the result's name:
# "shape" ("results[0] (gather/656B) has no test name"), "field" ("results[0] (…): stats.n is 0, …").
HINT = "the record was edited or damaged: re-run 'sactool bench … --out'"


def _fail(kind: str, msg: str) -> NoReturn:
    raise PydanticCustomError(kind, "{msg}", {"msg": msg})


def _finite(v: Any, info: ValidationInfo) -> float:
    if not _number(v):
        _fail("field", f"stats.{info.field_name} is {v!r}, not a finite number")
    return float(v)


def _count(v: Any) -> int:
    if not _number(v) or not isinstance(v, int) or v < 1:
        _fail("field", f"stats.n is {v!r}, not a finite number >= 1")
    return v


def _mapping(name: str) -> Any:
    def check(v: Any) -> dict[str, Any]:
        if not isinstance(v, dict):
            _fail("shape", f"has no '{name}' mapping")
        return v
    return PlainValidator(check)


Finite = Annotated[float, PlainValidator(_finite)]


class _Stats(BaseModel):
    """A result's ``stats`` (bench/stats.py ``stats_dict``); other keys are kept, not read."""

    model_config = ConfigDict(extra="allow")
    median: Finite
    mean: Finite
    stdev: Finite
    min: Finite
    max: Finite
    p05: Finite
    p95: Finite
    n: Annotated[int, PlainValidator(_count)]

    @model_validator(mode="before")
    @classmethod
    def _all_present(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            _fail("shape", "has no 'stats' mapping")
        missing = [k for k in STAT_KEYS if k not in v]
        if missing:
            _fail("field", f"stats lacks {', '.join(missing)}")
        return v


def _test_name(v: Any) -> str:
    if not isinstance(v, str):
        _fail("shape", "has no test name")
    return v


_POSITIVE = {"gather": (("record_bytes", "threads"), ("bandwidth_bytes_per_s", "ns_per_record")),
             # what sactool.bench.gpufigure and tune read
             "gpu_gather": (("record_bytes", "topk", "blocks", "threads_per_block"),
                            ("bandwidth_bytes_per_s", "topk_step_us", "records_per_s"))}
"""Per test with derived figures: the params that must be positive integers, the derived figures that
must be positive numbers (what gather_figure, gpufigure and tune divide by)."""


def _fraction(v: Any) -> float | None:
    # on-CPU time over sample time: thread and wall clocks tick apart, so a hair above 1 is real
    if v is not None and (not _number(v) or v < 0):
        _fail("field", f"on_cpu_fraction is {v!r}, not a number >= 0")
    return v


class _Result(BaseModel):
    """One result (one configuration): what the renderers and tune read must be there and be numbers
    (a KeyError or TypeError there would be a traceback); the rest is kept as stored."""

    model_config = ConfigDict(extra="allow")
    test: Annotated[str, PlainValidator(_test_name)]
    params: Annotated[dict[str, Any], _mapping("params")]
    stats: _Stats
    derived: Annotated[dict[str, Any], _mapping("derived")]
    on_cpu_fraction: Annotated[float | None, PlainValidator(_fraction)] = None   # bench/trust.py compares it

    @model_validator(mode="after")
    def _figures(self) -> "_Result":
        bad = [k for k, v in self.derived.items() if v is not None and k.endswith(UNIT_SUFFIXES) and not _number(v)]
        if bad:
            _fail("field", f"derived.{bad[0]} is {self.derived[bad[0]]!r}, not a finite number")
        ints, nums = _POSITIVE.get(self.test, ((), ()))
        if self.derived:
            for k in ints:
                v = self.params.get(k)
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    _fail("field", f"params.{k} is {v!r}, not a positive integer")
            for k in nums:
                x = self.derived.get(k)
                if not _number(x) or x <= 0:
                    _fail("field", f"derived.{k} is {x!r}, not a positive number")
        return self


def _cpu(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        _fail("top", f"cpus holds {v!r}, not a CPU number")
    return v


def _results(v: Any) -> Any:
    if not isinstance(v, list) or not all(isinstance(r, dict) and "test" in r for r in v):
        _fail("top", "has no valid 'results' list")
    return v


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _warnings(v: Any) -> Any:
    ok = isinstance(v, list) and all(isinstance(w, dict) and isinstance(w.get("code"), str)
                                     and isinstance(w.get("message"), str)
                                     and isinstance(w.get("hint"), (str, type(None))) for w in v)
    if v is not None and not ok:
        _fail("top", f"warnings is {_short(v)}, not a list of {{code, message, hint}} mappings")
    return v


def _buffer(v: Any) -> Any:
    if v is not None and not isinstance(v, dict):
        _fail("top", f"buffer is {_short(v)}, not a mapping")
    return v


class _Record(BaseModel):
    """The parts of a bench record sactool reads back (:class:`BenchRecord`); other keys are kept."""

    model_config = ConfigDict(extra="allow")
    results: Annotated[list[_Result], BeforeValidator(_results)]
    cpus: list[Annotated[int, PlainValidator(_cpu)]] | None = None
    complete: Any = True
    warnings: Annotated[Any, PlainValidator(_warnings)] = None   # rendered and merged as {code, message, hint}
    buffer: Annotated[Any, PlainValidator(_buffer)] = None       # BenchRecord.buffer is a mapping


def _refusal(e: ValidationError, data: dict[str, Any], source: str) -> RecordError:
    """The first error as one line: where (the result, by index and key), which field, what is wrong."""
    err = e.errors()[0]
    loc, kind, msg = err["loc"], err["type"], err["msg"]
    if loc[:1] == ("results",) and len(loc) >= 2 and isinstance(loc[1], int) and kind != "top":
        if kind == "missing":            # params, stats or derived absent
            kind, msg = "shape", f"has no '{loc[2]}' mapping"
        r = data["results"][loc[1]]
        where = f"{source}: results[{loc[1]}] ({r.get('key') or r.get('test')})"
        return RecordError(f"{where} {msg}" if kind == "shape" else f"{where}: {msg}", HINT)
    if loc[:1] == ("results",):
        return RecordError(f"{source} has no valid 'results' list", "re-run 'sactool bench'")
    if kind != "top":                    # cpus not a list
        msg = f"{'.'.join(map(str, loc))} is {err.get('input')!r}, not a list of CPU numbers"
    return RecordError(f"{source}: {msg}", HINT)


def from_data(data: dict, *, source: str = "bench record", path: str | None = None) -> BenchRecord:
    """A :class:`BenchRecord` from loaded JSON/YAML: an older schema is upgraded, a newer one refused
    ("upgrade sactool"); a result the renderers or tune would trip over is a RecordError naming it."""
    data = records.upgrade(data, kind=KIND, current=SCHEMA_VERSION, steps=UPGRADES, source=source)
    try:
        rec = _Record.model_validate(data)
    except ValidationError as e:
        raise _refusal(e, data, source) from None
    res = data["results"]
    warns = data.get("warnings") or []
    return BenchRecord(memory_node=_node_id(data.get("memory_node")), cpu_node=_node_id(data.get("cpu_node")),
                       cpus=tuple(rec.cpus or ()), stand_in=data.get("stand_in"),
                       buffer=dict(data.get("buffer") or {}), results=tuple(res), warnings=tuple(warns),
                       complete=bool(rec.complete), data=data, path=path)


def load_bench(path: str | Path) -> BenchRecord:
    """Load a bench record written by ``sactool bench --out``: older schemas are upgraded, newer
    ones refused ("upgrade sactool"); a corrupt file raises RecordError."""
    data = records.load_structured(path, what="bench record")
    return from_data(data, source=f"bench record {path}", path=str(path))


# ---- gather figures --------------------------------------------------------------------------
@dataclass(frozen=True)
class GatherFigure:
    """Gather throughput for ``record_bytes`` records. ``source``: "measured" (that size was
    measured), "interpolated" or "extrapolated" (derived from measured sizes, scaled by cache lines
    touched per record, see ``detail``)."""

    record_bytes: int
    threads: int
    bandwidth_bytes_per_s: float
    ns_per_record: float
    records_per_s: float
    memory_node: int | None
    source: str
    detail: str


def lines_touched(record_bytes: int, line: int = 64) -> float:
    """Mean cache lines one record touches when records are packed back to back from a
    line-aligned base: offsets ``i*R mod 64`` cycle with period ``64/gcd(R,64)``.
    656 B → 11.0; 1152 B → 18.0; 100 B → 2.5."""
    period = line // math.gcd(record_bytes, line)
    return sum(-(-((i * record_bytes) % line + record_bytes) // line) for i in range(period)) / period


def gather_figure(record: BenchRecord, record_bytes: int, threads: int | None = None) -> GatherFigure:
    """Gather figure for ``record_bytes`` from a bench record's gather results.

    Picks results on the record's memory node at ``threads`` (nearest measured thread count when
    absent; the highest measured when None), uniform indices preferred. A size that was not
    measured is derived from the nearest measured sizes by time per cache line touched
    (linear interpolation in lines per record), and marked so.
    """
    if not isinstance(record_bytes, int) or record_bytes <= 0:
        raise UsageError(f"record size {record_bytes!r} must be a positive number of bytes", "e.g. 656")
    gs = [r for r in record.results if r.get("test") == "gather" and r.get("derived")
          and _node_id(r.get("memory_node", record.memory_node)) == record.memory_node]
    if not gs:
        raise RecordError("the bench record has no gather results" + (f" ({record.path})" if record.path else ""),
                          "run 'sactool bench gather' (or 'all') and pass its --out file")
    pats = {r["params"].get("index_pattern") for r in gs}
    if "uniform" in pats:
        gs = [r for r in gs if r["params"].get("index_pattern") == "uniform"]
    tcounts = sorted({int(r["params"]["threads"]) for r in gs})
    want = max(tcounts) if threads is None else threads
    t = min(tcounts, key=lambda c: (abs(c - want), -c))
    notes = []
    if threads is not None and t != threads:
        notes.append(f"{threads} threads not measured; used {t}")
    by_size: dict[int, dict] = {}
    for r in gs:
        if int(r["params"]["threads"]) != t:
            continue
        R = int(r["params"]["record_bytes"])
        if R not in by_size or r["derived"]["bandwidth_bytes_per_s"] > by_size[R]["derived"]["bandwidth_bytes_per_s"]:
            by_size[R] = r  # best prefetch distance measured for that size
    node = record.memory_node

    def fig(ns: float, source: str, detail: str) -> GatherFigure:
        rps = 1e9 / ns
        return GatherFigure(record_bytes, t, rps * record_bytes, ns, rps, node, source,
                            "; ".join([detail] + notes))

    if record_bytes in by_size:
        d = by_size[record_bytes]["derived"]
        p = by_size[record_bytes]["params"]
        return fig(d["ns_per_record"], "measured",
                   f"measured: {record_bytes} B records, {t} threads, prefetch {p.get('prefetch_distance')}, "
                   f"{p.get('index_pattern')} indices, median of {by_size[record_bytes]['stats']['n']} samples")
    L = lines_touched(record_bytes)
    per_line = sorted((lines_touched(R), R, by_size[R]["derived"]["ns_per_record"] / lines_touched(R)) for R in by_size)
    lower = [x for x in per_line if x[0] <= L]
    upper = [x for x in per_line if x[0] >= L]
    if lower and upper:
        (l0, r0, c0), (l1, r1, c1) = lower[-1], upper[0]
        c = c0 if l1 == l0 else c0 + (c1 - c0) * (L - l0) / (l1 - l0)
        return fig(c * L, "interpolated",
                   f"derived: not measured; time per cache line interpolated between {r0} B ({l0:g} lines) and "
                   f"{r1} B ({l1:g} lines), times {L:g} lines per {record_bytes} B record")
    ln, rn, cn = (lower[-1] if lower else upper[0])
    return fig(cn * L, "extrapolated",
               f"derived: not measured; scaled from {rn} B ({ln:g} lines) by cache lines per record "
               f"({L:g}), outside the measured sizes")


def convert_figure(record: BenchRecord, record_bytes: int = 1152, impl: str | None = None) -> tuple[float, str]:
    """(prefix bytes per second, source) of the layout-conversion test (``sactool bench convert``):
    the fastest thread count measured for ``record_bytes`` (``impl`` numba/numpy, None: numpy
    when measured — the fork's passes are tensor expressions — else numba)."""
    cs = [r for r in record.results if r.get("test") == "convert" and r.get("derived")
          and int(r["params"]["record_bytes"]) == record_bytes]
    if not cs:
        raise RecordError(f"the bench record has no convert results for {record_bytes} B records"
                          + (f" ({record.path})" if record.path else ""),
                          f"run 'sactool bench convert --record-bytes {record_bytes} --out FILE'")
    impls = {r["params"].get("implementation", "numba") for r in cs}
    want = impl or ("numpy" if "numpy" in impls else "numba")
    cs = [r for r in cs if r["params"].get("implementation", "numba") == want]
    if not cs:
        raise RecordError(f"the bench record has no {want} convert results", f"measured: {', '.join(sorted(impls))}")
    best = max(cs, key=lambda r: r["derived"]["bandwidth_bytes_per_s"])
    bw = float(best["derived"]["bandwidth_bytes_per_s"])
    src = (f"sactool bench convert ({want}, {best['params']['threads']} thread(s), {record_bytes} B x "
           f"{best['params']['layers']} layers, {best['params']['tokens']} tokens, "
           f"{node_name(record.memory_node if best.get('memory_node') is None else best['memory_node'])})"
           f": {bw / 1e9:.2f} GB/s")
    return bw, src
