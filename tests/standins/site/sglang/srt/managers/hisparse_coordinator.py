"""Stand-in for ``sglang.srt.managers.hisparse_coordinator`` (tests only, not SGLang): like
0.5.23, the constructor builds the MLA host pool (``self.mem_pool_host``), which checks the host
memory budget and then allocates one layer-first buffer ``[layers, host tokens, 1, row bytes]``
of uint8 through HostTensorAllocator and pins it (``mem_pool_host.kv_buffer``). With ``per_layer``
it builds what 0.5.23 builds for DeepSeek-V4 instead (``DeepSeekV4PagedHostPool``, layout
``layer_first``, memory_pool_host.py): one budget check for all layers, then one allocation of
``[pages, item bytes]`` per layer, ``kv_buffer`` being the list of them."""

import numpy as np

from sglang.srt.mem_cache.pool_host import base
from sglang.srt.mem_cache.pool_host.common import HostTensorAllocator, alloc_with_host_register


class _HostPool:
    pass


class HiSparseCoordinator:
    def __init__(self, req_to_token_pool, token_to_kv_pool_allocator, top_k, device_buffer_size, device, tp_group,
                 host_to_device_ratio=2, swap_in_block_size=960, shared_index_layers=None, num_draft_tokens=0,
                 *, layers=4, row_bytes=656, page_size=64, per_layer=False):
        self.allocator = HostTensorAllocator()
        tokens = device_buffer_size * host_to_device_ratio + page_size
        if per_layer:
            pages = -(-tokens // page_size)
            base.check_host_memory(layers * pages * row_bytes)
            self.mem_pool_host = _HostPool()
            self.mem_pool_host.kv_buffer = [
                alloc_with_host_register((pages, row_bytes), dtype=np.uint8, device="cpu", pin_memory=True,
                                         allocator=self.allocator) for _ in range(layers)]
            self.host_buffer = self.mem_pool_host.kv_buffer[0]
            return
        base.check_host_memory(layers * tokens * row_bytes)
        self.host_buffer = alloc_with_host_register((layers, tokens, 1, row_bytes), dtype=np.uint8, device="cpu",
                                                    pin_memory=True, allocator=self.allocator)
        self.mem_pool_host = _HostPool()
        self.mem_pool_host.kv_buffer = self.host_buffer
