"""ctypes wrappers for the NUMA memory-policy syscalls (no C extension, no libnuma).

Sources: mbind(2), set_mempolicy(2), get_mempolicy(2), move_pages(2) man pages and
``include/uapi/linux/mempolicy.h``; syscall numbers from ``arch/x86/entry/syscalls/syscall_64.tbl``
and ``include/uapi/asm-generic/unistd.h`` (arm64, riscv64).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

# include/uapi/linux/mempolicy.h
MPOL_DEFAULT = 0
MPOL_PREFERRED = 1
MPOL_BIND = 2
MPOL_INTERLEAVE = 3
MPOL_LOCAL = 4
MPOL_PREFERRED_MANY = 5
MPOL_WEIGHTED_INTERLEAVE = 6  # Linux 6.9+
MPOL_MF_STRICT = 1 << 0
MPOL_MF_MOVE = 1 << 1

POLICIES = {"bind": MPOL_BIND, "preferred": MPOL_PREFERRED, "interleave": MPOL_INTERLEAVE,
            "weighted_interleave": MPOL_WEIGHTED_INTERLEAVE}

# mmap flags (include/uapi/asm-generic/mman-common.h, include/uapi/linux/mman.h)
MAP_HUGETLB = 0x40000
MAP_HUGE_SHIFT = 26
MAP_HUGE_2MB = 21 << MAP_HUGE_SHIFT
MAP_HUGE_1GB = 30 << MAP_HUGE_SHIFT
MADV_HUGEPAGE = 14
MADV_NOHUGEPAGE = 15

_NR = {
    "x86_64": {"mbind": 237, "set_mempolicy": 238, "get_mempolicy": 239, "move_pages": 279},
    "aarch64": {"mbind": 235, "get_mempolicy": 236, "set_mempolicy": 237, "move_pages": 239},
    "riscv64": {"mbind": 235, "get_mempolicy": 236, "set_mempolicy": 237, "move_pages": 239},
}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class SyscallError(OSError):
    """A memory-policy syscall failed; ``errno`` is set."""


def _nr(name: str) -> int:
    arch = platform.machine()
    try:
        return _NR[arch][name]
    except KeyError:
        raise SyscallError(errno.ENOSYS, f"{name}: syscall number unknown on {arch}") from None


def _call(name: str, *args) -> int:
    ctypes.set_errno(0)
    rv = _libc.syscall(ctypes.c_long(_nr(name)), *args)
    if rv < 0:
        e = ctypes.get_errno()
        raise SyscallError(e, f"{name}: {os.strerror(e)}")
    return rv


def nodemask(nodes) -> tuple[ctypes.Array, int]:
    """Bitmask of ``nodes`` as an ``unsigned long[]`` and the ``maxnode`` argument.

    The kernel reads ``maxnode - 1`` bits (get_nodes() decrements it), so pass bits + 1.
    """
    nodes = list(nodes)
    top = max(nodes) if nodes else 0
    nlongs = top // 64 + 1
    arr = (ctypes.c_ulong * nlongs)()
    for n in nodes:
        arr[n // 64] |= 1 << (n % 64)
    return arr, nlongs * 64 + 1


def mbind(addr: int, length: int, mode: int, nodes, flags: int = 0) -> None:
    """``mbind(addr, len, mode, nodemask, maxnode, flags)``."""
    mask, maxnode = nodemask(nodes)
    _call("mbind", ctypes.c_void_p(addr), ctypes.c_ulong(length), ctypes.c_int(mode),
          mask, ctypes.c_ulong(maxnode), ctypes.c_uint(flags))


def set_mempolicy(mode: int, nodes=()) -> None:
    """``set_mempolicy(mode, nodemask, maxnode)`` for the calling thread."""
    if mode == MPOL_DEFAULT:
        _call("set_mempolicy", ctypes.c_int(mode), None, ctypes.c_ulong(0))
        return
    mask, maxnode = nodemask(nodes)
    _call("set_mempolicy", ctypes.c_int(mode), mask, ctypes.c_ulong(maxnode))


def page_nodes(addresses) -> list[int]:
    """Node of each page via ``move_pages(0, n, pages, NULL, status, 0)``.

    Returns one entry per address: a node id (>= 0) or a negative errno (``-ENOENT``: not
    present, ``-EFAULT``: not mapped). ``addresses`` is a sequence of ints or a uint64 array.
    """
    n = len(addresses)
    if n == 0:
        return []
    try:
        import numpy as np

        pages = np.ascontiguousarray(addresses, dtype=np.uint64)
        status = np.full(n, -1, dtype=np.int32)
        _call("move_pages", ctypes.c_int(0), ctypes.c_ulong(n),
              ctypes.c_void_p(pages.ctypes.data), None, ctypes.c_void_p(status.ctypes.data), ctypes.c_int(0))
        return status.tolist()
    except ImportError:  # pragma: no cover - numpy is a dependency
        arr = (ctypes.c_void_p * n)(*addresses)
        st = (ctypes.c_int * n)()
        _call("move_pages", ctypes.c_int(0), ctypes.c_ulong(n), arr, None, st, ctypes.c_int(0))
        return list(st)


def kernel_has_weighted_interleave(reader) -> bool:
    """Linux 6.9+ exposes ``/sys/kernel/mm/mempolicy/weighted_interleave``."""
    return reader.is_dir("sys/kernel/mm/mempolicy/weighted_interleave")
