"""The GPU swap-in kernel: a numba-cuda copy shaped like HiSparse's ``load_cache_to_device_buffer``.

What SGLang 0.5.23 runs per layer (docs/sources.md, SGLang §2.3 step 5; ``hisparse.cuh``): one
CTA per request; inside it each *warp* copies one missed record from pinned, device-mapped host
memory straight into the request's device hot buffer, its 32 lanes each moving one 8-byte word
per round (``ld.global.nc.b64`` from host, ``st.global.cg.b64`` into VRAM), ``for (j = lane;
j < words; j += 32)``; warp ``w`` takes records ``w, w + warps, …``. No DMA engine and no CPU
thread touch the bytes: every load crosses the PCIe link (and the CXL link behind it) as a
GPU-initiated read.

This kernel does exactly that copy and nothing else: the hot-buffer hash, LRU bookkeeping and
hit detection of the real kernel are left out (they run on GPU-resident data), so every top-k
record is a miss — the worst case the swap-in can meet. Differences from the CUDA source,
stated so a reader can weigh them: numba emits plain ``ld.global``/``st.global`` (no ``.nc``
read-only hint, no ``.cg`` cache-global hint); the word width follows the record size (8-byte
words when it is a multiple of 8 — 576, 656 and 1152 B all are — else 4, 2 or 1 bytes); and a
launch walks ``nsteps`` decode steps back to back (``syncthreads`` between steps), so one timed
launch covers many steps and Python's launch overhead (microseconds per launch in numba) does
not enter the per-step time. SGLang launches once per layer from C++ (CUDA graphs in decode).

Import cost: this module imports ``numba.cuda`` (the NVIDIA ``numba-cuda`` package when it is
installed, else numba's built-in target); only ``sactool bench gpu-gather`` and its tests load it.
"""

from __future__ import annotations

import numpy as np

import sactool.cachedir  # noqa: F401  (NUMBA_CACHE_DIR before numba loads)
from numba import cuda

WARP = 32
"""Threads per warp on every NVIDIA GPU (CUDA Programming Guide, "SIMT Architecture")."""

_W = np.uint64(WARP)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)


def load_bytes_for(record_bytes: int) -> int:
    """Width of one lane's load for records of ``record_bytes``: the widest of 8, 4, 2, 1 bytes
    that divides the record (records are packed back to back, so every record start is then
    aligned to it). HiSparse's CUDA kernel always uses 8 (its rows are 576, 656 or 1152 B)."""
    for w in (8, 4, 2):
        if record_bytes % w == 0:
            return w
    return 1


def word_dtype(load_bytes: int):
    return {8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}[load_bytes]


@cuda.jit(cache=True)
def swap_in(src, idx, base, dst, step0, nsteps, words):
    """Copy one top-k set per request per step, one block per request, one warp per record.

    ``src``: the host pool as words (device-mapped host memory); ``idx`` uint32
    ``[steps, requests, topk]``: record index of each top-k entry *within* the request's prefix;
    ``base`` uint64 ``[steps, requests]``: the record where that request's prefix starts at that
    step; ``dst`` ``[requests, topk * words]``: the device hot buffer (slot ``r`` receives top-k
    entry ``r``); steps ``step0 … step0 + nsteps - 1`` (mod ``steps``) run in order; ``words``:
    words per record. Block ``b`` serves request ``b``; its warp ``w`` copies entries
    ``w, w + warps, …``; lane ``l`` moves words ``l, l + 32, …`` of each record.
    """
    b = np.uint64(cuda.blockIdx.x)
    t = np.uint64(cuda.threadIdx.x)
    lane = t % _W
    warp = t // _W
    warps = np.uint64(cuda.blockDim.x) // _W
    total = np.uint64(idx.shape[0])
    topk = np.uint64(idx.shape[2])
    w = np.uint64(words)
    s0 = np.uint64(step0)
    n = np.uint64(nsteps)
    i = _ZERO
    while i < n:
        s = (s0 + i) % total
        rb = base[s, b]
        r = warp
        while r < topk:
            so = (rb + np.uint64(idx[s, b, r])) * w
            do = r * w
            j = lane
            while j < w:
                dst[b, do + j] = src[so + j]
                j += _W
            r += warps
        cuda.syncthreads()  # a step (layer) boundary: the next swap-in starts after this one
        i += _ONE


def kernel_spec(record_bytes: int, threads_per_block: int) -> dict:
    """What one launch does, for the bench record (docs/sources.md, style §6)."""
    lb = load_bytes_for(record_bytes)
    words = record_bytes // lb
    return {
        "name": "gpu_swap_in", "shape": "HiSparse load_cache_to_device_buffer: one block per request, "
        "one warp per record, lanes copy words j = lane, lane+32, … (docs/sources.md, SGLang §2.3)",
        "source_memory": "device-mapped host memory (cuMemHostRegister DEVICEMAP)", "destination": "device memory",
        "load_bytes": lb, "words_per_record": words, "rounds_per_record": -(-words // WARP),
        "threads_per_block": threads_per_block, "warps_per_block": threads_per_block // WARP,
        "bytes_read_per_record": record_bytes, "bytes_written_per_record": record_bytes,
        "hits": "none: every top-k record is copied (the worst case)",
        "differs_from_cuda_source": "plain ld.global/st.global (no .nc/.cg hints); steps run back to back "
        "inside one launch with syncthreads between them",
    }
