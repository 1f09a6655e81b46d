"""``tune()``: model + workload + measured pool → a versioned serving profile, and why.

Order of work: validate every input (cheap) → GPU budget → probe the pool → capacity of the
design point → gather figures (``--bench`` or interleaved quick measurements) → hot-buffer
simulation of the workload over candidate buffer sizes → search → profile. Finished evaluation
points (one simulation of one context and seed, one gather measurement) are appended to a JSONL
file as they complete, so Ctrl-C loses nothing and ``--resume`` continues.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sactool.errors import CapacityError, ExistsError, Interrupted, SactoolError, UsageError
from sactool.records import check_writable, refuse_existing
from sactool.tune.options import (DEFAULT_CONTEXTS, DEFAULT_GATHER_SECONDS, DEFAULT_REPLICATES, DEFAULT_STEPS,
                                  SAC_CONCURRENCY, Progress, TuneOptions, TuneResult)

MAX_MEASURING_S = 24 * 3600
"""A tune whose measuring alone would take longer than a day is refused before it starts."""


def measuring_lower_bound_s(o: TuneOptions) -> float:
    """Seconds tune measures at least when it measures the pool itself (no --bench, no --fleet):
    one quick gather of ``gather_seconds`` per replicate, and as many rounds again for the page
    kinds (:mod:`sactool.tune.pagesize`). Simulation comes on top; 0 when nothing is measured."""
    if o.bench is not None or o.pool_source is not None or o.sysfs_root is not None:
        return 0.0
    return 2.0 * o.replicates * o.gather_seconds


def _check_duration(o: TuneOptions) -> None:
    low = measuring_lower_bound_s(o)
    if low > MAX_MEASURING_S:
        raise UsageError(f"--replicates {o.replicates} would measure for at least {low / 3600:.1f} h "
                         f"({o.replicates} interleaved rounds of {o.gather_seconds:g} s quick gathers, "
                         "and as many of the page kinds)",
                         f"use far fewer (default {DEFAULT_REPLICATES}; tune says when two settings are not "
                         "significantly different), or tune from a bench record: --bench FILE")


def _check_options(o: TuneOptions, spec) -> tuple[str, int, int]:
    from sactool.models import normalize_kv_dtype

    kv = normalize_kv_dtype(o.kv_dtype)
    if o.tp < 1:
        raise UsageError(f"--tp {o.tp} must be >= 1")
    if o.engine not in ("sglang", "vllm"):
        raise UsageError(f"--engine {o.engine!r}", "use sglang or vllm")
    if o.engine == "vllm":
        from sactool.hisparse.vllm import REFUSED_ARCHITECTURES

        if spec.architecture in REFUSED_ARCHITECTURES:
            raise UsageError(f"{spec.name}: {REFUSED_ARCHITECTURES[spec.architecture]}",
                             "tune it for SGLang (drop --engine vllm)")
    # vLLM's own DeepSeek-V3.2 layout is one TP replica (one shared pool); SGLang's default is DP attention
    dp = o.attn_dp if o.attn_dp is not None else (1 if o.engine == "vllm" else o.tp)
    if dp < 1 or o.tp % dp:
        raise UsageError(f"--attn-dp {dp} must divide --tp {o.tp}", "e.g. --tp 8 --attn-dp 8 (DP attention) or 1")
    if o.concurrency is not None and o.concurrency < 1:
        raise UsageError(f"--concurrency {o.concurrency} must be >= 1")
    if not o.contexts:
        raise UsageError("no --context given", "e.g. --context 16k,32k,64k,128k")
    for c in o.contexts:
        if c > spec.max_position_embeddings:
            raise UsageError(f"context {c} tokens is longer than {spec.name}'s max_position_embeddings "
                             f"({spec.max_position_embeddings})", f"use --context up to {spec.max_position_embeddings}")
        if c < spec.index_topk:
            raise UsageError(f"context {c} tokens is shorter than top_k {spec.index_topk}: every token is selected",
                             f"use contexts of at least {spec.index_topk} tokens")
    if o.steps < 2 or o.replicates < 1:
        raise UsageError("--steps must be >= 2 and --replicates >= 1")
    _check_duration(o)
    if o.seed < 0:   # numpy seeds are >= 0: refuse now, not after measuring
        raise UsageError(f"--seed {o.seed} must be >= 0", "e.g. --seed 0")
    rec = spec.record_bytes(kv)
    if o.gather_size_bytes is not None and o.gather_size_bytes < spec.index_topk * rec:
        from sactool.units import format_bytes

        # one top-k step draws index_topk distinct records: a smaller buffer cannot hold them
        raise UsageError(f"--gather-size {format_bytes(o.gather_size_bytes)} is too small to measure a gather: "
                         f"one top-k step reads {spec.index_topk} distinct {rec} B records "
                         f"({format_bytes(spec.index_topk * rec)})",
                         "drop --gather-size: the default is sized from this machine (8x the last-level cache of "
                         "the CPUs that gather, or what the pool node holds)")
    return kv, dp, rec


def _check_output(path: Path, o: TuneOptions) -> Path:
    points = path.with_name(path.name + ".points.jsonl")
    refuse_existing(path, o.force)
    if os.path.lexists(points):   # a link or a device where the journal goes: refused, never written through
        refuse_existing(points, True, "remove it, or choose another --out")
    # a directory that takes no file, a read-only or full file system; only the default
    # profiles/<model>/ is created when missing
    check_writable(path, make_parents=not o.out)
    if points.exists() and not o.resume and not o.force:
        raise ExistsError(f"{points} holds points of an earlier, unfinished tune",
                          "pass --resume to continue it, or --force to start over")
    return points


def tune(options: TuneOptions, progress: Progress | None = None) -> TuneResult:
    """Run the whole tuning; see the module docstring. Raises SactoolError subclasses."""
    from sactool.models import get_model
    from sactool.profile import default_profile_path

    t0 = time.perf_counter()
    o = options
    spec = get_model(o.model)
    kv, attn_dp, rec_bytes = _check_options(o, spec)
    path = Path(o.out) if o.out else default_profile_path(spec.name, sysfs_root=o.sysfs_root)
    points_path = _check_output(path, o) if o.write else None
    from sactool.tune import run  # heavy part (numpy, simulation) lives there

    fresh = points_path is not None and not points_path.exists()
    try:
        return run.execute(run.Job(o=o, spec=spec, kv=kv, attn_dp=attn_dp, rec_bytes=rec_bytes, path=path,
                                   points_path=points_path, progress=progress, t0=t0))
    except Exception as e:
        # a failed run (not an interrupted one) — an error, or a crash (MemoryError, a bug) —
        # leaves no points file behind that would make the next, corrected run stop with
        # "unfinished tune" (exit 5); an earlier run's points stay
        if fresh and points_path is not None and points_path.exists():
            points_path.unlink()
        if isinstance(e, OSError) and not isinstance(e, SactoolError):
            raise SactoolError(f"cannot write {e.filename or points_path}: {e.strerror}",
                               "free some space or choose a writable --out") from None
        raise
    except KeyboardInterrupt:
        raise Interrupted("tune interrupted; finished evaluation points are kept"
                          + (f" in {points_path}" if points_path else ""),
                          "run the same command with --resume to continue") from None


__all__ = ["TuneOptions", "TuneResult", "tune", "CapacityError", "Progress", "SAC_CONCURRENCY", "DEFAULT_CONTEXTS",
           "DEFAULT_STEPS", "DEFAULT_REPLICATES", "DEFAULT_GATHER_SECONDS"]
