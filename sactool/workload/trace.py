"""Top-k trace files: real DSA traces (or generated ones) to replay instead of the model.

Format (``.npz``, written with ``numpy.savez_compressed``, read with ``allow_pickle=False``):

==================  ======================================================================
``indices``         int32 ``[steps, layers, top_k]``: token ids the indexer selected at each
                    decode step in each layer; row ``[s, l]`` holds distinct ids in
                    ``[0, context_tokens + s)``
``context_tokens``  int64 scalar: sequence length at the first decode step (prompt tokens)
``format_version``  int64 scalar: ``TRACE_FORMAT_VERSION``
``meta``            str scalar: JSON object; ``model`` and ``source`` (e.g. ``"generated"`` or
                    ``"sglang-capture"``) always, anything else the writer adds (seed, knobs…)
==================  ======================================================================
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np

from sactool.errors import RecordError, UsageError
from sactool.records import atomic_write

TRACE_FORMAT_VERSION = 1
"""The trace file's ``format_version``; its history:

1 — the first format."""


@dataclass(frozen=True)
class Trace:
    """A loaded trace: ``indices`` int32 [steps, layers, top_k] plus its context and metadata."""

    indices: np.ndarray
    context_tokens: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return int(self.indices.shape[0])

    @property
    def layers(self) -> int:
        return int(self.indices.shape[1])

    @property
    def top_k(self) -> int:
        return int(self.indices.shape[2])


def check_indices(indices: np.ndarray, context_tokens: int, *, where: str, error=RecordError) -> None:
    """Shape, dtype and range checks: ids of step s within [0, context_tokens + s), distinct."""
    if not isinstance(indices, np.ndarray) or indices.ndim != 3 or 0 in indices.shape:
        shape = getattr(indices, "shape", None)
        raise error(f"{where}: indices must be a non-empty [steps, layers, top_k] array, got shape {shape}",
                    "a trace holds one top-k row per decode step and layer")
    if not np.issubdtype(indices.dtype, np.integer):
        raise error(f"{where}: indices must be integers, got {indices.dtype}", "store int32 token ids")
    if isinstance(context_tokens, bool) or not isinstance(context_tokens, (int, np.integer)) or context_tokens < 1:
        raise error(f"{where}: context_tokens must be a positive integer, got {context_tokens!r}",
                    "context_tokens is the sequence length at the first decode step")
    steps, _, k = indices.shape
    if k > context_tokens:
        raise error(f"{where}: top_k={k} exceeds context_tokens={context_tokens}", "check the trace")
    limit = context_tokens + np.arange(steps, dtype=np.int64)[:, None, None]
    bad = (indices < 0) | (indices >= limit)
    if bad.any():
        s, l, i = (int(v[0]) for v in np.nonzero(bad))
        raise error(f"{where}: step {s} layer {l} selects token {int(indices[s, l, i])}, outside "
                    f"[0, {context_tokens + s})", "the context grows by one token per decode step")
    srt = np.sort(indices, axis=2)
    dup = srt[:, :, 1:] == srt[:, :, :-1]
    if dup.any():
        s, l, _ = (int(v[0]) for v in np.nonzero(dup))
        raise error(f"{where}: step {s} layer {l} selects a token twice", "top-k rows hold distinct ids")


def save_trace(path: str | os.PathLike[str], indices: np.ndarray, context_tokens: int, *,
               force: bool = False, **meta: Any) -> Path:
    """Write a trace atomically (``--force`` semantics via ``force``). ``meta`` must be JSON-able."""
    check_indices(indices, context_tokens, where="trace", error=UsageError)
    meta = {"model": meta.pop("model", None), "source": meta.pop("source", "unknown"), **meta}
    try:
        meta_json = json.dumps(meta, sort_keys=True)
    except TypeError as e:
        raise UsageError(f"trace metadata is not JSON-serialisable: {e}") from None
    buf = BytesIO()
    np.savez_compressed(buf, indices=indices.astype(np.int32, copy=False),
                        context_tokens=np.int64(context_tokens),
                        format_version=np.int64(TRACE_FORMAT_VERSION), meta=np.array(meta_json))
    return atomic_write(path, buf.getvalue(), force=force)


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read and validate a trace file; anything wrong → RecordError naming the problem."""
    p = Path(path)
    hint = "re-capture or re-generate the trace (format: README 'Models and workload')"
    from sactool.inputfile import open_input

    try:
        with open_input(p, what="trace") as f:   # a regular file, no larger than a trace can be
            if f.read(4) != b"PK\x03\x04":  # an .npz is a zip archive
                raise RecordError(f"trace {p} is not an .npz archive", hint)
            f.seek(0)
            with np.load(f, allow_pickle=False) as z:
                missing = [k for k in ("indices", "context_tokens", "format_version") if k not in z.files]
                if missing:
                    raise RecordError(f"trace {p} lacks {', '.join(missing)}", hint)
                version = int(z["format_version"])
                if version > TRACE_FORMAT_VERSION:
                    raise RecordError(f"trace {p} has format_version {version}, newer than this sactool "
                                      f"reads ({TRACE_FORMAT_VERSION})", "upgrade sactool")
                if version < 1:
                    raise RecordError(f"trace {p} has an invalid format_version {version}", hint)
                indices = z["indices"]
                ctx_arr = z["context_tokens"]
                meta_text = str(z["meta"]) if "meta" in z.files else "{}"
    except FileNotFoundError:
        raise RecordError(f"trace {p} does not exist", "check the path") from None
    except RecordError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError, TypeError) as e:
        raise RecordError(f"trace {p} is corrupt or not an .npz trace ({type(e).__name__}: {e})", hint) from None
    if ctx_arr.ndim != 0 or not np.issubdtype(ctx_arr.dtype, np.integer):
        raise RecordError(f"trace {p}: context_tokens must be an integer scalar", hint)
    check_indices(indices, int(ctx_arr), where=f"trace {p}")
    try:
        meta = json.loads(meta_text)
    except json.JSONDecodeError:
        raise RecordError(f"trace {p}: meta is not valid JSON", hint) from None
    if not isinstance(meta, dict):
        raise RecordError(f"trace {p}: meta is not a JSON object", hint)
    return Trace(indices=np.ascontiguousarray(indices, dtype=np.int32), context_tokens=int(ctx_arr), meta=meta)
