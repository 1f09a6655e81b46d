"""Stand-in for ``sglang.srt.mem_cache.pool_host.common`` (tests only, not SGLang): the two
functions the sactool_cxl hooks sit between, with SGLang 0.5.23's signatures and call shapes
(``allocate(self, dims, dtype, device)``; ``alloc_with_host_register`` calls
``allocator.allocate(dims, dtype=dtype, device=device)`` and then pins the result), but numpy
instead of torch and a list instead of cudaHostRegister."""

import math
import mmap

import numpy as np

STOCK_ALLOCATIONS = []   # dims of every buffer the stock allocator made
REGISTERED = []          # buffers "pinned" (cudaHostRegister in SGLang)


class HostTensorAllocator:
    def __init__(self):
        self.dtype = None
        self.dims = None

    def allocate(self, dims: tuple, dtype, device: str):
        assert device == "cpu"
        self.dtype = dtype
        self.dims = dims
        count = math.prod(dims)
        mm = mmap.mmap(-1, count * np.dtype(dtype).itemsize, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        STOCK_ALLOCATIONS.append(dims)
        return np.frombuffer(mm, dtype=dtype, count=count).reshape(dims)


def alloc_with_host_register(dims, dtype, device, pin_memory, allocator, registration_granularity_bytes=None):
    buffer = allocator.allocate(dims, dtype=dtype, device=device)
    if pin_memory:
        REGISTERED.append(buffer)
    return buffer
