"""numba kernels and the spec of what each one measures (docs/sources.md, style §6).

All index arithmetic is unsigned (``np.uint64``): signed indices make numba emit a negative-index
fix-up on every access and block vectorisation (docs/sources.md, Numba kernels:
656 B gather 1.9 → 8.0 GB/s). Kernels are ``nogil`` so pinned Python threads run them in
parallel; ``cache=True`` so a warm process loads them instead of compiling. Gather kernels are
generated per (record size, prefetch distance) — see :mod:`sactool.bench.gathergen`.
"""

from __future__ import annotations

import sactool.cachedir  # noqa: F401  (NUMBA_CACHE_DIR before numba loads)
import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LINE_BYTES = 64
"""Cache-line size: x86-64 and Neoverse (``/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size``)."""


@intrinsic
def prefetch_addr(typingctx, addr):
    """``llvm.prefetch(ptr, rw=0 read, locality=3 keep in all levels, cache=1 data)`` at ``addr``
    (numba has no prefetch API; this emits the intrinsic directly)."""
    if not isinstance(addr, types.Integer):
        return None
    sig = types.void(addr)

    def codegen(context, builder, signature, args):
        i8p = ir.IntType(8).as_pointer()
        ptr = builder.inttoptr(args[0], i8p)
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def copy_bytes(typingctx, dst, src, nbytes):
    """``llvm.memcpy(dst, src, nbytes)`` between raw addresses (non-overlapping, as C's ``memcpy``).

    With ``nbytes`` a literal LLVM inlines the copy into full-width vector moves for small records and
    calls the C library's ``memcpy`` for large ones, as gcc does for the C reference. An element loop
    (``dst[d+k] = src[s+k]``) cannot be proven free of overlap between two arrays, so LLVM keeps it
    scalar for small records (eight 8-byte moves for 64 B) or guards it with run-time checks."""
    if not all(isinstance(a, types.Integer) for a in (dst, src, nbytes)):
        return None
    sig = types.void(dst, src, nbytes)

    def codegen(context, builder, signature, args):
        i8p = ir.IntType(8).as_pointer()
        i64 = ir.IntType(64)
        d = builder.inttoptr(args[0], i8p)
        s = builder.inttoptr(args[1], i8p)
        n = args[2] if args[2].type == i64 else builder.zext(args[2], i64)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i8p, i64, ir.IntType(1)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.memcpy.p0.p0.i64")
        builder.call(fn, [d, s, n, ir.IntType(1)(0)])
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def chase(buf, start, steps):
    """Dependent loads ``i = buf[i]``; ``buf`` uint64 words holding the next word index."""
    i = np.uint64(start)
    for _ in range(np.uint64(steps)):
        i = buf[i]
    return i


@nb.njit(cache=True, nogil=True)
def mlp_chase(buf, starts, steps):
    """``starts.size`` independent chases advanced in lock-step (misses in flight = chains).
    ``starts`` is advanced in place, so the next call continues along the chains."""
    p = starts
    n = p.size
    for _ in range(np.uint64(steps)):
        for j in range(n):
            p[j] = buf[p[j]]
    acc = np.uint64(0)
    for j in range(n):
        acc ^= p[j]
    return acc


@nb.njit(cache=True, nogil=True)
def link_chain(buf, order, words_per_line):
    """Write the cycle ``order[0] → order[1] → … → order[0]`` (line ids) into ``buf``."""
    n = order.size
    w = np.uint64(words_per_line)
    for k in range(n - 1):
        buf[np.uint64(order[k]) * w] = np.uint64(order[k + 1]) * w
    buf[np.uint64(order[n - 1]) * w] = np.uint64(order[0]) * w


@nb.njit(cache=True, nogil=True)
def seq_read(a, lo, hi):
    """Sum of uint64 words ``a[lo:hi]`` (LLVM vectorises the loop to full-width loads)."""
    s = np.uint64(0)
    for i in range(np.uint64(lo), np.uint64(hi)):
        s += a[i]
    return s


@nb.njit(cache=True, nogil=True)
def seq_write(a, lo, hi, v):
    """``a[i] = v ^ i``: regular (not non-temporal) stores; the xor keeps LLVM from calling memset."""
    x = np.uint64(v)
    for i in range(np.uint64(lo), np.uint64(hi)):
        a[i] = x ^ i


@nb.njit(cache=True, nogil=True)
def seq_copy(a, src_lo, dst_lo, n):
    """``a[dst_lo+i] = a[src_lo+i] ^ 1`` (the xor keeps LLVM from calling memcpy)."""
    one = np.uint64(1)
    s = np.uint64(src_lo)
    d = np.uint64(dst_lo)
    for i in range(np.uint64(n)):
        a[d + i] = a[s + i] ^ one


@nb.njit(cache=True, nogil=True)
def throttled_read(a, lo, hi, delay):
    """Read one word per 64 B line of ``a[lo:hi]``, spinning ``delay`` dependent multiply-adds
    between lines (MLC's injected delay). Returns a checksum so nothing is optimised away."""
    s = np.uint64(0)
    x = np.uint64(1)
    mul = np.uint64(6364136223846793005)  # Knuth's MMIX LCG multiplier
    for i in range(np.uint64(lo), np.uint64(hi), np.uint64(8)):
        s += a[i]
        for _ in range(np.uint64(delay)):
            x = x * mul + np.uint64(1)
    return s + x


KERNEL_SPECS = {
    "chase": {"bytes_read_per_element": 8, "bytes_written_per_element": 0, "element": "dependent load",
              "access_pattern": "pointer chase over a random cyclic permutation of 64 B lines", "load_width_bytes": 8},
    "mlp": {"bytes_read_per_element": 8, "bytes_written_per_element": 0, "element": "dependent load of one chain",
            "access_pattern": "N independent pointer chases on one random cyclic permutation", "load_width_bytes": 8},
    "read": {"bytes_read_per_element": 8, "bytes_written_per_element": 0, "element": "uint64 word",
             "access_pattern": "sequential, each thread its own contiguous slice",
             "load_width_bytes": 8, "note": "8-byte loads in source; LLVM vectorises to the widest SIMD loads"},
    "write": {"bytes_read_per_element": 0, "bytes_written_per_element": 8, "element": "uint64 word",
              "access_pattern": "sequential regular stores (write-allocate traffic not counted)",
              "load_width_bytes": 8},
    "copy": {"bytes_read_per_element": 8, "bytes_written_per_element": 8, "element": "uint64 word",
             "access_pattern": "sequential copy within each thread's slice", "load_width_bytes": 8},
    "loaded": {"bytes_read_per_element": 8, "bytes_written_per_element": 0, "element": "dependent load",
               "access_pattern": "one pointer chase while other threads read sequentially (one load per line) "
                                 "with an injected delay", "load_width_bytes": 8},
    "convert": {"bytes_read_per_element": 3, "bytes_written_per_element": 3, "element": "byte of prefix KV",
                "access_pattern": "three passes over one request's prefix (the RDMA baseline's CPU work after "
                                  "its NIC read): gather page-first rows by host index into a staging buffer, "
                                  "transpose page-first -> layer-first, scatter layer-first rows by host index",
                "load_width_bytes": 8},
}


# ---- RDMA-baseline layout conversion (``sactool bench convert``) -------------------------------
# The authors' RDMA pool (magicYang1573/sglang, branch hisparse-cxl-prefix-cache-opt-rdma,
# python/sglang/srt/mem_cache/rdma_memory_pool.py, ``_prefetch_for_decode_single``) runs three
# CPU passes over every fetched prefix: a gather copy ``staging[:n] = remote[valid]``, the
# page-first -> layer-first transpose ``staging.permute(1, 0, 2, 3).contiguous()`` and an index
# scatter ``kv_buffer[:, valid] = src``. Rows are one token's record of one layer (``w`` words).

@nb.njit(cache=True, nogil=True)
def convert_gather(remote, staging, idx, lo, hi):
    """Pass 1: ``staging[i] = remote[idx[i]]`` for tokens ``lo <= i < hi`` (page-first rows of
    ``layers × w`` words: one token's KV of every layer, contiguous)."""
    row = remote.shape[1]
    for i in range(np.uint64(lo), np.uint64(hi)):
        s = np.uint64(idx[i])
        for k in range(row):
            staging[i, k] = remote[s, k]


@nb.njit(cache=True, nogil=True)
def convert_transpose(staging, tmp, layers, w, lo, hi):
    """Pass 2: page-first ``staging[token, layer, :]`` -> layer-first ``tmp[layer, token, :]``
    (the ``permute(1, 0, 2, 3).contiguous()`` copy), tokens ``lo <= i < hi``."""
    for i in range(np.uint64(lo), np.uint64(hi)):
        for layer in range(layers):
            base = np.uint64(layer) * np.uint64(w)
            for k in range(w):
                tmp[layer, i, k] = staging[i, base + np.uint64(k)]


@nb.njit(cache=True, nogil=True)
def convert_scatter(tmp, kv, idx, lo, hi):
    """Pass 3: ``kv[layer, idx[i], :] = tmp[layer, i, :]`` (the layer-first host pool), tokens
    ``lo <= i < hi``."""
    layers = tmp.shape[0]
    w = tmp.shape[2]
    for layer in range(layers):
        for i in range(np.uint64(lo), np.uint64(hi)):
            d = np.uint64(idx[i])
            for k in range(w):
                kv[layer, d, k] = tmp[layer, i, k]
