"""``bench gpu-gather``'s options, their defaults and their validation (before any GPU work)."""

from __future__ import annotations

from dataclasses import dataclass

from sactool import records
from sactool.bench.protocol import PRESETS, Protocol
from sactool.errors import UsageError
from sactool.hisparse.engine import SWAP_IN_BLOCK_SIZES


DEFAULT_BLOCKS = (1, 2, 4, 8, 16, 32, 64)
"""Requests in flight (one CTA each) swept by default: 1 … 64 (issue 14)."""

DEFAULT_THREADS = SWAP_IN_BLOCK_SIZES
"""Threads per block (``swap_in_block_size``): 960 the SGLang 0.5.23 default, 512 the HiSparse
guide's, 1024 SAC's hard-coded width, 256 a narrower one (docs/sources.md, SGLang §2.2, §4;
docs/sources.md, SAC §5) — the widths ``sactool tune`` chooses among."""

DEFAULT_RECORDS = (656, 1152)
"""KV row bytes of DeepSeek-V3.2/GLM-5.x MLA: FP8 with scales (656) and BF16 (1152) (docs/sources.md, SGLang §1.3)."""

DEFAULT_TOPK = (2048,)
"""``index_topk`` of DeepSeek-V3.2 and GLM-5.x (docs/sources.md, SGLang §1.6)."""

DEFAULT_CONTEXT = 32768
"""Prefix length per request, tokens (records). A sweep parameter, not a fact about a model."""

PATTERNS = ("uniform", "clustered", "trace")

SIMULATOR_SWEEP = {"blocks": (1,), "threads": (32,), "record_bytes": (656,), "topk": (64,), "patterns": ("uniform",),
                   "context_tokens": 4096}
"""The sweep of every option not given, under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``): it runs each
GPU thread as a Python thread, so the default sweep (7 block counts x 4 widths x 2 record sizes x 3 patterns of
2048 records) did not end in 300 s, and one 2048-record step of one 256-thread block took 2 minutes on the
2-vCPU development VM; this one, one warp gathering 64 records (and a 64 MiB buffer: no cache to outrun),
took 4 s there at load 5, 10 s at load 17. The simulator checks the kernels and the record, never speed,
so nothing is lost."""

LINE = 64
L2_FALLBACK_BYTES = 64 << 20
"""Used for the footprint rule only when the device does not report its L2 size (the simulator)."""

MAX_INDEX_BYTES = 256 << 20


@dataclass(frozen=True)
class GpuGatherOptions:
    """What ``sactool bench gpu-gather`` measures. ``node``/``dax``: the pool memory (None: the
    pool node of ``sactool probe``); ``gpu``: CUDA device index; ``cpus``: pre-fault CPUs (None:
    nearest CPU node); ``size_bytes``: host buffer (None: one prefix region per request in flight
    at the largest record size, at least 1 GiB); ``placement``: "strict" or "best-effort" (see
    :mod:`sactool.bench.gpuplace`); ``steps``: top-k steps per stream (None: the L2 footprint rule);
    ``wait``: another sactool measurement on this machine: wait for it, or (False) refuse
    (:mod:`sactool.bench.lock`)."""

    node: int | None = None
    dax: str | None = None
    gpu: int = 0
    cpus: tuple[int, ...] | None = None
    size_bytes: int | None = None
    blocks: tuple[int, ...] = DEFAULT_BLOCKS
    threads: tuple[int, ...] = DEFAULT_THREADS
    record_bytes: tuple[int, ...] = DEFAULT_RECORDS
    topk: tuple[int, ...] = DEFAULT_TOPK
    patterns: tuple[str, ...] = PATTERNS
    trace: str | None = None
    context_tokens: int = DEFAULT_CONTEXT
    full_prefix: bool = True
    preset: str = "default"
    seed: int = 1
    placement: str = "strict"
    hugepages: str = "thp"
    steps: int | None = None
    command: str = "gpu-gather"
    protocol: Protocol | None = None
    wait: bool = True          # another sactool measurement running: wait for it (False: refuse, exit 11)


def validate(o: GpuGatherOptions) -> None:
    """Bad values fail here, before the GPU, the buffer or any index is touched."""
    from sactool.bench.gpuplace import PLACEMENTS

    def positive(vals, what, eg):
        if not vals:
            raise UsageError(f"{what} is empty", f"e.g. {eg}")
        for v in vals:
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise UsageError(f"{what} {v!r} must be a positive integer", f"e.g. {eg}")

    positive(o.blocks, "--blocks", "--blocks 1,8,64")
    positive(o.threads, "--threads", "--threads 512,960")
    positive(o.record_bytes, "--record-bytes", "--record-bytes 656,1152")
    positive(o.topk, "--topk", "--topk 2048")
    for t in o.threads:
        if t % 32 or t > 1024:
            raise UsageError(f"--threads {t}: threads per block must be a multiple of 32, at most 1024",
                             "HiSparse gives each record one warp of 32 threads; e.g. 512 or 960")
    for b in o.blocks:
        if b > 65535:
            raise UsageError(f"--blocks {b} is more than a grid dimension takes", "use at most 65535")
    if isinstance(o.context_tokens, bool) or not isinstance(o.context_tokens, int) or o.context_tokens <= 0:
        raise UsageError(f"--context {o.context_tokens!r} must be a positive number of tokens", "e.g. --context 32768")
    big = max(o.topk)
    if big > o.context_tokens:
        raise UsageError(f"top-k {big} is larger than the {o.context_tokens}-token prefix",
                         "use a smaller --topk or a longer --context")
    bad = [p for p in o.patterns if p not in PATTERNS]
    if bad or not o.patterns:
        raise UsageError(f"unknown index pattern {bad[0] if bad else ''!r}", f"use some of: {', '.join(PATTERNS)}")
    if o.placement not in PLACEMENTS:
        raise UsageError(f"unknown placement {o.placement!r}", f"use one of: {', '.join(PLACEMENTS)}")
    if o.preset not in PRESETS:
        raise UsageError(f"unknown preset {o.preset!r}", f"use one of: {', '.join(PRESETS)}")
    if o.steps is not None and o.steps <= 0:
        raise UsageError(f"steps {o.steps} must be positive", "e.g. 16")
    if o.gpu < 0:
        raise UsageError(f"--gpu {o.gpu} must be >= 0", "e.g. --gpu 0")


