"""What a resumed tune accepts from its points file (``<profile>.points.jsonl``): each point of a
kind this tune writes, with the fields it reads, of the types it reads them as — anything else (a
file edited by hand, another program's lines that happen to parse) is refused with where it is,
instead of a KeyError or a NaN deep inside the search (issue 22)."""

from __future__ import annotations

import math
from typing import Any

from sactool.errors import RecordError


def _finite(v: Any, *, low: float = 0.0, high: float = math.inf) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and low <= v <= high


def _index(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _sim_buffers(b: Any) -> bool:
    return isinstance(b, dict) and all(
        isinstance(k, str) and k.isdigit() and isinstance(v, list) and len(v) == 2
        and _finite(v[0]) and _finite(v[1], low=-1e-9, high=1.0 + 1e-9) for k, v in b.items())


CHECKS = {
    "gather": {"round": _index, "target": lambda v: isinstance(v, str),
               "bandwidth_bytes_per_s": lambda v: _finite(v) and v > 0},
    "pagesize": {"round": _index, "page_kind": lambda v: isinstance(v, str),
                 "bandwidth_bytes_per_s": lambda v: _finite(v) and v > 0},
    "sim": {"context": _index, "rep": _index, "buffers": _sim_buffers},
}


def check_points(points: list[dict], path) -> list[dict]:
    """``points`` when every one is a well-formed point (RecordError naming the first that is not)."""
    for i, p in enumerate(points, 1):
        kind = p.get("kind") if isinstance(p, dict) else None
        checks = CHECKS.get(kind) if isinstance(kind, str) else None
        if checks is None:
            raise RecordError(f"{path}: point {i} is not one tune writes (kind {kind!r})",
                              "pass --force to start over instead of --resume")
        bad = [f for f, ok in checks.items() if not ok(p.get(f))]
        if bad:
            raise RecordError(f"{path}: {kind} point {i} has a missing or invalid {', '.join(bad)}",
                              "pass --force to start over instead of --resume")
    return points
