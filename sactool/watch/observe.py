"""An observation of the running engine, for ``sactool tune --observed FILE|URL``: the engine's own
metrics (a Prometheus exposition, as a file or at an http(s) URL) or a ``sactool watch --once`` record
(JSON/YAML). What tune refits on: the hot-buffer miss rate, at the buffer size the engine ran; and
what it weighs requests against hot-buffer slots with: the engine's decode step (vLLM's mean
inter-token latency) at the requests it was running.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Observation:
    """``miss_rate`` over ``lookups`` hot-buffer look-ups (None: not counted), ``bytes_per_token``,
    ``device_buffer_size`` (the buffer the engine ran; None: the observation does not say),
    ``source`` (the path or URL), ``kind`` (engine_metrics | watch_record), ``naming``, ``window``;
    ``step_time_s``: the mean inter-token latency over the window (the engine's decode step, fetches
    included) and ``requests_running``: requests in the batch per engine at the scrape (None: not
    exported)."""

    source: str
    kind: str
    miss_rate: float
    lookups: float | None
    bytes_per_token: float | None
    device_buffer_size: int | None
    naming: str
    window: str
    step_time_s: float | None = None
    requests_running: float | None = None

    def to_data(self) -> dict[str, Any]:
        return {"source": self.source, "kind": self.kind, "miss_rate": self.miss_rate, "lookups": self.lookups,
                "host_to_device_bytes_per_token": self.bytes_per_token,
                "device_buffer_size": self.device_buffer_size, "naming": self.naming, "window": self.window,
                "decode_step_s": self.step_time_s, "requests_running": self.requests_running}


def _from_demand(src: str, kind: str, d: Any, buf: int | None) -> Observation:
    from sactool.errors import RecordError

    if d.miss_rate is None:
        raise RecordError(f"{src}: no hot-buffer miss rate in it ({d.detail or 'no HiSparse counters'})",
                          "give the engine's /metrics (vLLM with the HiSparse connector) or a 'sactool watch --once "
                          "--format json' record that saw them")
    return Observation(src, kind, float(d.miss_rate), d.lookups, d.h2d_bytes_per_token, buf, d.naming, d.window,
                       d.step_time_s, d.requests_running)


def _positive(v: Any) -> float | None:
    """A record's figure when it is a positive finite number (a watch record is untrusted input)."""
    import math

    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    return float(v) if ok else None


def load(src: str, *, timeout: float = 10.0) -> Observation:
    """The observation at ``src`` (RecordError: unreadable, or it holds no miss rate)."""
    from sactool.errors import RecordError
    from sactool.watch import engine

    if src.startswith(("http://", "https://")):
        try:
            counts = engine.scrape(src, timeout, 0.0)
        except (OSError, ValueError) as err:
            raise RecordError(f"--observed {src}: {err}", "is the engine serving /metrics there?") from None
        return _from_demand(src, "engine_metrics", engine.demand(src, counts), None)
    from sactool.inputfile import read_input

    text = read_input(src, what="observation", limit=engine.MAX_BYTES).decode("utf-8", "replace")
    if text.lstrip().startswith("{") or text.lstrip().startswith("kind:"):
        from sactool.inputfile import parse_structured

        rec = parse_structured(text, json_format=text.lstrip().startswith("{"), where=f"observation {src}")
        if not isinstance(rec, dict) or rec.get("kind") != "watch":
            raise RecordError(f"--observed {src} is neither a Prometheus exposition nor a 'sactool watch' record",
                              "give the engine's /metrics (saved or its URL) or 'sactool watch --once --format json'")
        eng = rec.get("engine") or {}
        if not isinstance(eng, dict) or not isinstance(eng.get("miss_rate"), (int, float)):
            raise RecordError(f"--observed {src}: the watch record holds no engine miss rate "
                              f"({(eng or {}).get('detail') if isinstance(eng, dict) else 'no engine block'})",
                              "watch with --metrics-url of an engine that exports HiSparse counters (vLLM)")
        pred = rec.get("prediction") or {}
        buf = pred.get("device_buffer_size") if isinstance(pred, dict) else None
        return Observation(src, "watch_record", float(eng["miss_rate"]), eng.get("lookups"),
                           eng.get("host_to_device_bytes_per_token"), buf if isinstance(buf, int) else None,
                           str(eng.get("naming")), str(eng.get("window")), _positive(eng.get("decode_step_s")),
                           _positive(eng.get("requests_running")))
    try:
        counts = engine.Counts.of(engine.totals(text), 0.0)
    except ValueError as err:
        raise RecordError(f"--observed {src}: not a Prometheus exposition ({err})",
                          "save the engine's /metrics as it serves it (curl URL > FILE)") from None
    return _from_demand(src, "engine_metrics", engine.demand(src, counts), None)


__all__ = ["Observation", "load"]
