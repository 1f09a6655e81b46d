"""The resumable points file of tune (``<profile>.points.jsonl``): :class:`PointsStore` appends each
finished point (gather round, page-size round, hot-buffer simulation) under a digest of the run's
inputs and hands an interrupted run's points back to the next ``--resume``.

What a resumed tune accepts from its points file (``<profile>.points.jsonl``): each point of a
kind this tune writes, with the fields it reads, of the types it reads them as — anything else (a
file edited by hand, another program's lines that happen to parse) is refused with where it is,
instead of a KeyError or a NaN deep inside the search (issue 22)."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from sactool.errors import RecordError
from sactool.inputfile import read_input


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


class PointsStore:
    """The resumable evaluation points file: what an earlier, interrupted run finished."""

    def __init__(self, job: Any, target_names: list[str], model_wl, gather_size: int | None = None):
        from sactool.records import digest, read_jsonl
        from sactool.tune.pool import bench_paths

        o = job.o
        self.path = job.points_path
        self.key = digest(json.dumps({"model": job.spec.name, "kv": job.kv, "steps": o.steps, "seed": o.seed,
                                      "trace": digest(read_input(o.trace, what="trace")) if o.trace else None,
                                      "gather_seconds": o.gather_seconds,
                                      **({"gather_size": gather_size} if gather_size else {}),
                                      "bench": [str(b) for b in bench_paths(o.bench)] or None,
                                      "fleet": o.pool_source.block if o.pool_source else None,
                                      "targets": target_names,
                                      "layer_targets": model_wl.layer_targets,
                                      **({"rate_scale": model_wl.rate_scale}
                                         if getattr(model_wl, "rate_scale", 1.0) != 1.0 else {}),
                                      **({"workload": model_wl.name} if getattr(model_wl, "name", None) else {})},
                                     sort_keys=True))[:23]
        self.done: list[dict] = []
        self._new = True   # the first point creates the journal afresh (O_EXCL), unless --resume found one
        if self.path is not None:
            if o.resume and os.path.lexists(self.path):
                self.done = check_points([p for p in read_jsonl(self.path) if p.get("key") == self.key], self.path)
                self._new = False
            elif os.path.lexists(self.path):
                self.path.unlink()

    def of_kind(self, kind: str) -> list[dict]:
        return [p for p in self.done if p.get("kind") == kind]

    def add(self, p: dict) -> None:
        from sactool.records import append_jsonl

        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            append_jsonl(self.path, {**p, "key": self.key}, new=self._new)
            self._new = False
