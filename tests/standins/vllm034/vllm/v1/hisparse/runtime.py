"""Stand-in of vllm/v1/hisparse/runtime.py (0.34.0): the symbols the plug-in patches, minimal bodies."""

import mmap

import psutil


class SharedOffloadRegion:
    BLOCK_SIZE_ALIGNMENT = mmap.PAGESIZE

    def __init__(self, engine_id, num_chunks, rank, kv_bytes_per_chunk, cpu_page_size, barrier=None, *,
                 creator_memory_check=None, populate_shard=None, num_segments=1):
        self.total_size_bytes = num_chunks * kv_bytes_per_chunk


def check_hisparse_host_memory(pool_bytes):
    mem = psutil.virtual_memory()
    if pool_bytes > mem.available * 0.95:
        raise ValueError(f"HiSparse pinned host pool needs ~{pool_bytes / 2**30:.0f} GiB but only "
                         f"{mem.available / 2**30:.0f} GiB of RAM is available.")


def pin_tensor(tensor):
    pass


def allocate_pinned_host_pool(size):
    raise NotImplementedError("stand-in: the private pool needs torch")


def allocate_hisparse_host_pools(vllm_config, tensor_sizes, num_blocks, host_block_stride):
    raise NotImplementedError("stand-in")


class HiSparseHostPool:
    def __init__(self, vllm_config, kv_cache_config):
        self.vllm_config = vllm_config
        self.kv_cache_config = kv_cache_config
        self.backing = self.registered = None

    def allocate(self, size):
        check_hisparse_host_memory(size)
        self.backing, self.registered = allocate_pinned_host_pool(size)
        return self.backing
