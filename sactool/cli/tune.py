"""``sactool tune``: options → :class:`sactool.tune.api.TuneOptions`, run, render."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from sactool.cli.common import FormatOpt, QuietOpt, SysfsRootOpt, check_format, choices, example, flag, value
from sactool.errors import UsageError
from sactool.hisparse.gpus import GPUS
from sactool.hisparse.layout import _KV_DTYPE_ALIASES

if TYPE_CHECKING:   # choices() builds these str Enums from data at run time: the checker sees their base
    from enum import Enum as Engine, Enum as Gpu, Enum as KvDtype
else:
    Engine = choices("Engine", ("sglang", "vllm"))
    KvDtype = choices("KvDtype", ("fp8", "bf16") + tuple(k for k in _KV_DTYPE_ALIASES if k not in ("fp8", "bf16")))
    Gpu = choices("Gpu", tuple(GPUS))

EXAMPLE = example("sactool tune --model deepseek-v3.2", "sactool tune --engine vllm --model deepseek-v3.2 --out vllm.yaml",
                  "sactool tune --model deepseek-v3.2 --observed http://127.0.0.1:8000/metrics --observed-buffer 4096",
                  "sactool tune --model glm-5.1 --gpu h20 --gpu-kv-budget 20GiB --context 32k,64k --concurrency 64",
                  "sactool tune --model deepseek-v3.2 --bench bench.json --out myhost.yaml")


def _given(ctx: typer.Context, names: dict) -> frozenset:
    """Option names the user set on the command line (provenance "user")."""
    out = set()
    for param, label in names.items():
        src = ctx.get_parameter_source(param)
        if src is not None and getattr(src, "name", "") not in ("DEFAULT", "DEFAULT_MAP"):
            out.add(label)
    return frozenset(out)


POOL_BYTES_HELP = ("Pool bytes per target (node or DAX device), e.g. 256GiB; default: its free memory + "
                   "reclaimable page cache, or the device's size.")


GATHER_SIZE_HELP = ("Buffer of tune's own quick gathers on the pool node, with its unit (e.g. 4GiB). Default: 8x the "
                    "last-level cache of the CPUs that gather (at least 256MiB), or the most the node holds. A "
                    "size inside that cache is refused.")


ObservedOpt = typer.Option(
    None, "--observed", metavar="FILE|URL", help="The running engine's metrics (its /metrics URL or a saved copy) "
    "or a 'sactool watch --once --format json' record: the workload is refit so the hot-buffer simulation "
    "reproduces the observed miss rate at the buffer the engine ran, then tune chooses again.")
ObservedBufferOpt = typer.Option(
    None, "--observed-buffer", min=1, metavar="SLOTS", help="The device_buffer_size the observed engine ran "
    "(default: what the watch record names; engine metrics do not say it).")


def tune(
    ctx: typer.Context,
    model: str = typer.Option("deepseek-v3.2", "--model", "-m", help="Model name or path to a config.json."),
    engine: Engine = typer.Option(Engine("sglang"), "--engine", case_sensitive=False,
                                  help="Serving engine the profile is for: sglang (0.5.23) or vllm (0.34, its own "
                                       "HiSparse)."),
    context: str = typer.Option("16k,32k,64k,128k", "--context", help="Context lengths in tokens (comma list)."),
    concurrency: str = typer.Option("auto", "--concurrency",
                                    help="Concurrent requests in all (auto: SAC's 64, or what the pool holds)."),
    tp: int = typer.Option(8, "--tp", help="GPU ranks (tensor parallel size)."),
    attn_dp: Optional[int] = typer.Option(None, "--attn-dp", help="Attention-DP groups (default: = --tp for SGLang; "
                                          "1 for vLLM: one TP replica sharing one pool)."),
    gpu: Optional[Gpu] = typer.Option(None, "--gpu", case_sensitive=False, help="GPU the budget is planned for (default: the NVIDIA GPUs probe sees, by PCI "
                                   "device id; h200 where probe sees none). Differing from probe: a warning."),
    gpu_kv_budget: Optional[str] = typer.Option(None, "--gpu-kv-budget",
                                                help="GPU memory per GPU for hot buffers + indexer keys, with its "
                                                     "unit (e.g. 30GiB)."),
    weights_bytes: Optional[str] = typer.Option(None, "--weights-bytes", help="Checkpoint size, with its unit "
                                                "(e.g. 642GiB)."),
    kv_dtype: KvDtype = typer.Option(KvDtype("fp8"), "--kv-dtype", case_sensitive=False,
                                     help="KV cache dtype: fp8 (656 B records) or bf16 (1152 B)."),
    bench: Optional[List[Path]] = typer.Option(
        None, "--bench", metavar="<path>", help="Bench record from 'sactool bench gpu-gather --out' (GPU figures) or 'sactool bench "
        "--out' (CPU proxy); repeat it for one record per pool target."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="Replay a real top-k trace (.npz)."),
    strict: bool = flag("--strict", help="Refuse bench records from another machine or node."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Profile path (default profiles/<model>/<host>.yaml: "
                                       "this machine's hostname, or the --sysfs-root recording's name)."),
    force: bool = flag("--force", help="Overwrite an existing profile; restart unfinished points."),
    resume: bool = flag("--resume", help="Continue an interrupted tune from its points file."),
    steps: int = typer.Option(128, "--steps", help="Decode steps simulated per context and seed."),
    replicates: int = typer.Option(3, "--replicates", help="Workload seeds = interleaved measurement rounds."),
    seed: int = typer.Option(0, "--seed", min=0, metavar="<int>", help="First workload seed."),
    workload: str = typer.Option("sharegpt-dsv32", "--workload", metavar="<name>",
                                 help="Top-k workload of the hot-buffer simulation: sharegpt-dsv32 (real prompts: "
                                 "the model fitted to the authors' ShareGPT per-layer statistics) or filler-sac-runs "
                                 "(the SAC paper runs' one synthetic prompt)."),
    sysfs_root: Optional[Path] = SysfsRootOpt,
    fleet: Optional[Path] = typer.Option(
        None, "--fleet", help="Fleet bench record (mpirun … sactool bench gather --out): one profile per host, "
        "each for its share of the shared pool; --out is then a directory (default profiles/<model>/)."),
    pool_bytes: Optional[str] = typer.Option(None, "--pool-bytes", help=POOL_BYTES_HELP),
    gather_size: Optional[str] = typer.Option(None, "--gather-size", help=GATHER_SIZE_HELP),
    observed: Optional[str] = ObservedOpt,
    observed_buffer: Optional[int] = ObservedBufferOpt,
    fmt=FormatOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Choose HiSparse and pool settings for a model from measurements; write a serving profile."""
    from sactool.tune.api import TuneOptions
    from sactool.units import parse_list, parse_size, parse_tokens

    fmt = check_format(fmt)
    opts = TuneOptions(
        model=model, engine=value(engine), contexts=tuple(parse_list(context, parse_tokens, what="context")),
        concurrency=_concurrency(concurrency), tp=tp,
        attn_dp=attn_dp, gpu=value(gpu),
        gpu_kv_budget_bytes=parse_size(gpu_kv_budget, what="--gpu-kv-budget") if gpu_kv_budget else None,
        weights_bytes=parse_size(weights_bytes, what="--weights-bytes") if weights_bytes else None,
        kv_dtype=value(kv_dtype), bench=(tuple(bench) if len(bench) > 1 else bench[0]) if bench else None, trace=trace, strict=strict, out=out, force=force, resume=resume,
        steps=steps, replicates=replicates, seed=seed, workload=workload, sysfs_root=sysfs_root,
        pool_bytes=parse_size(pool_bytes, what="--pool-bytes") if pool_bytes else None,
        gather_size_bytes=parse_size(gather_size, what="--gather-size") if gather_size else None,
        observed=observed, observed_buffer=observed_buffer,
        given=_given(ctx, {"context": "contexts", "concurrency": "concurrency", "tp": "tp", "attn_dp": "attn-dp",
                           "gpu": "gpu", "kv_dtype": "kv-dtype", "pool_bytes": "pool-bytes"}))
    if not _this_rank_tunes(fleet):
        return  # tune --fleet under mpirun: rank 0 writes every host's profile
    if fleet is not None:
        if opts.engine != "sglang":
            raise UsageError("tune --fleet writes SGLang profiles", "drop --engine vllm with --fleet")
        return _tune_fleet(opts, fleet, fmt)
    _say_if_long(opts)
    _tune_one(opts, fmt)


def _say_if_long(opts) -> None:
    """A long run says so before it starts (and is refused past a day: tune.api)."""
    from sactool.tune.api import MAX_MEASURING_S, measuring_lower_bound_s

    low = measuring_lower_bound_s(opts)
    if 600 <= low <= MAX_MEASURING_S:   # a long run says so before it starts (and is refused past a day: tune.api)
        from sactool.render import note

        note(f"tune: {opts.replicates} replicates measure for at least {low / 60:.0f} min, simulation on top")


def _this_rank_tunes(fleet) -> bool:
    """False on the ranks of an mpirun that are not rank 0 (tune --fleet); refuses plain tune under mpirun."""
    from sactool.fleet.mpi import detect

    world = detect()
    if world is not None and fleet is None:
        from sactool.fleet import commands

        commands.refuse(world, UsageError("tune runs on one host, not under mpirun",
                                          "measure the fleet (mpirun … sactool bench gather --out fleet.json), "
                                          "then run: sactool tune --fleet fleet.json"))
    return world is None or world.is_root


def _concurrency(text: str) -> int | None:
    """``--concurrency``: an integer, or ``auto`` (None)."""
    if text.strip().lower() == "auto":
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--concurrency {text!r} is not a number", "give an integer or auto") from None


def _tune_one(opts, fmt: str) -> None:
    from sactool.render.tune import progress_reporter, render_tune, render_warnings
    from sactool.tune.api import tune as do_tune

    cb, close = progress_reporter()
    try:
        result = do_tune(opts, progress=cb)
    finally:
        close()
    render_warnings(result.warnings)
    if fmt == "table":
        render_tune(result)
    else:
        from sactool.render import emit_data

        emit_data(result, fmt)


def _tune_fleet(opts, fleet: Path, fmt: str) -> None:
    from sactool.fleet.tune import tune_fleet
    from sactool.render.tune import progress_reporter, render_fleet_tune, render_warnings

    cb, close = progress_reporter()
    try:
        results, warnings = tune_fleet(opts, fleet, progress=cb)
    finally:
        close()
    render_warnings(tuple(warnings) + tuple(w for r in results for w in r.warnings))
    if fmt == "table":
        render_fleet_tune(results)
    else:
        from sactool.render import emit_data

        emit_data({"kind": "fleet_tune_result", "fleet": str(fleet),
                   "hosts": [{"host": r.profile.fleet["host"], "path": str(r.path) if r.path else None,
                              "share": r.profile.fleet, "result": r.to_data()} for r in results]}, fmt)
