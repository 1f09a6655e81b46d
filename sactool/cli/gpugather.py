"""``sactool bench gpu-gather``: options → :class:`sactool.bench.gpugather.GpuGatherOptions`, run,
write, render. Registered on the ``bench`` app by :mod:`sactool.cli.app`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from sactool.cli.bench import _B_NO_WAIT, Hugepages, Preset
from sactool.cli.common import FormatOpt, QuietOpt, check_format, check_output, example, flag, value, write_result
from sactool.errors import Interrupted, UsageError


def _ints(text: str | None, what: str):
    from sactool.cli.bench import _ints as ints

    return ints(text, what)


def gpu_gather(
    ctx: typer.Context,
    node: Optional[str] = typer.Option(None, "--node", "-n", help="Pool memory: a NUMA node (2 or node2) or a devdax "
                                       "device (dax0.0). Default: the pool node of 'sactool probe'."),
    gpu: int = typer.Option(0, "--gpu", "-g", help="CUDA device index."),
    cpus: Optional[str] = typer.Option(None, "--cpus", help="CPUs that pre-fault the buffer (0-3 or node0). "
                                       "Default: the CPU node nearest the memory."),
    size: Optional[str] = typer.Option(None, "--size", help="Host buffer (default: one prefix per request in flight "
                                       "at the largest record size, at least 1GiB)."),
    blocks: Optional[str] = typer.Option(None, "--blocks", "-b", help="Requests in flight, one block each "
                                         "(default 1,2,4,8,16,32,64)."),
    threads: Optional[str] = typer.Option(None, "--threads", "-t", help="Threads per block, swap_in_block_size "
                                          "(default 256,512,960,1024)."),
    record_bytes: Optional[str] = typer.Option(None, "--record-bytes", "-r", help="Record sizes (default 656,1152)."),
    topk: Optional[str] = typer.Option(None, "--topk", "-k", help="Records per request per step (default 2048)."),
    pattern: Optional[str] = typer.Option(None, "--pattern", metavar="<list>", help="Index patterns: uniform, clustered, trace "
                                          "(default all three)."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="Trace for the 'trace' pattern: a workload .npz or an "
                                         "index file (.npy/text). Default: the DSA workload model."),
    context: int = typer.Option(32768, "--context", help="Prefix length per request, tokens (records)."),
    full_prefix: bool = typer.Option(True, "--full-prefix/--no-full-prefix", help="Also time the bulk copy of each "
                                     "request's whole prefix."),
    placement: str = typer.Option("strict", "--placement", metavar="<strict|best-effort>", help="strict (mbind + verified, as 'bench'), or "
                                  "best-effort (first-touch where the kernel lacks mbind/move_pages; the record says so)."),
    hugepages: Hugepages = typer.Option(Hugepages("thp"), "--hugepages", help="thp, none, or a hugetlb pool."),
    preset: Preset = typer.Option(Preset("default"), "--preset", case_sensitive=False, help="Protocol."),
    seed: int = typer.Option(1, "--seed", help="Seed for the index streams."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the bench record here (JSON, or YAML by suffix)."),
    force: bool = flag("--force", help="Overwrite --out."),
    no_wait: bool = _B_NO_WAIT,
    fmt=FormatOpt,
    quiet: bool = QuietOpt,
) -> None:
    """GPU top-k swap-in from pool memory (HiSparse's data path): µs per step, GB/s, vs the full-prefix copy."""
    fmt = check_format(fmt)
    check_output(out, force)
    from sactool.bench.gpugather import DEFAULT_BLOCKS, DEFAULT_RECORDS, DEFAULT_THREADS, DEFAULT_TOPK, PATTERNS
    from sactool.bench.gpugather import GpuGatherOptions, run_gpu_gather
    from sactool.cli.bench import parse_cpus, parse_node
    from sactool.units import parse_size

    nd = parse_node(node)
    if nd == "all":
        raise UsageError("gpu-gather measures one pool target", "give --node N or --node daxX.Y")
    pats = tuple(p.strip() for p in pattern.split(",") if p.strip()) if pattern else PATTERNS
    opts = GpuGatherOptions(
        node=nd if isinstance(nd, int) else None, dax=nd if isinstance(nd, str) else None, gpu=gpu,
        cpus=None, size_bytes=parse_size(size, what="--size") if size else None,
        blocks=_ints(blocks, "--blocks") or DEFAULT_BLOCKS, threads=_ints(threads, "--threads") or DEFAULT_THREADS,
        record_bytes=_ints(record_bytes, "--record-bytes") or DEFAULT_RECORDS, topk=_ints(topk, "--topk") or DEFAULT_TOPK,
        patterns=pats, trace=str(trace) if trace else None, context_tokens=context, full_prefix=full_prefix,
        preset=value(preset), seed=seed, placement=placement, hugepages=value(hugepages), wait=not no_wait)
    from sactool.bench.gpugather import validate

    validate(opts)
    from sactool.bench.gpuplace import gpu_runtime

    gpu_runtime()  # no GPU: one line, exit 3, before the topology, the buffer or any index
    opts = _simulator_sweep(opts, {"blocks": "blocks", "threads": "threads", "record_bytes": "record_bytes",
                                   "topk": "topk", "patterns": "pattern", "context_tokens": "context"}, ctx)
    if cpus is not None:
        from dataclasses import replace

        from sactool.memory.nodes import topology

        opts = replace(opts, cpus=parse_cpus(cpus, topology()))
    from sactool.render import note
    from sactool.render.bench import PLAIN_PROGRESS_S, progress_reporter

    cb, close = progress_reporter(PLAIN_PROGRESS_S)   # off a terminal too: a run takes minutes
    try:
        rec = run_gpu_gather(opts, progress=cb, notify=note)   # note: for whom it waits (sactool.bench.lock)
    finally:
        close()
    _emit(rec, out, fmt, force)


def _simulator_sweep(opts, params: dict, ctx):
    """Under numba's CUDA simulator, every sweep option not given (``params``: option field -> CLI
    parameter) takes the small simulator sweep (:data:`sactool.bench.gpuoptions.SIMULATOR_SWEEP`), and a
    note says so; on a GPU, ``opts`` as they are."""
    from dataclasses import replace

    from sactool.bench.gpuoptions import SIMULATOR_SWEEP
    from sactool.bench.gpuplace import simulated
    from sactool.render import note

    if not simulated():
        return opts
    def given(param: str) -> bool:
        src = ctx.get_parameter_source(param)
        return src is not None and getattr(src, "name", "") not in ("DEFAULT", "DEFAULT_MAP")

    small = {k: v for k, v in SIMULATOR_SWEEP.items() if not given(params[k])}
    if small:
        note("gpu-gather: numba's CUDA simulator runs every GPU thread in Python: options not given take a small "
             "sweep (" + ", ".join(f"{k} {v if not isinstance(v, tuple) else ','.join(map(str, v))}"
                                   for k, v in small.items()) + "); the simulator checks correctness, not speed")
    return replace(opts, **small)


def _emit(rec, out: Path | None, fmt: str, force: bool) -> None:
    """Render it (table) or print it (json/yaml), then write the record (a failed write loses
    nothing: it is saved elsewhere or on stdout); an interrupted run exits 130."""
    from sactool import records
    from sactool.render import emit_data

    if fmt == "table":   # the result first, then the file (a failed write loses nothing)
        from sactool.render.gpugather import render_gpu_gather

        render_gpu_gather(rec)
    else:
        from sactool.render.bench import render_warnings

        render_warnings(rec)
        emit_data(rec.data, fmt)
    if out is not None:
        kind = "yaml" if out.suffix in (".yaml", ".yml") else "json"
        write_result(out, records.dumps(rec.data, kind), force=force, kind="gpu-gather", suffix=f".{kind}",
                     fallback_stdout=None if fmt != "table" else (lambda: emit_data(rec.data, "json")),
                     on_stdout=fmt != "table")
    if not rec.complete:
        raise Interrupted(f"interrupted: {len(rec.results)} finished results kept" + (f" in {out}" if out else ""),
                          "rerun to complete the measurement")


def register(bench_app) -> None:
    bench_app.command(name="gpu-gather", epilog=example(
        "sactool bench gpu-gather --node 2 --gpu 0 -r 656 --blocks 1,8,64 --out gpu.json"))(gpu_gather)
