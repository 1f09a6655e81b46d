"""Stand-in of vllm/v1/hisparse/binding.py (0.34.0): allocate_hisparse_kv_caches, minimal body."""


def allocate_hisparse_kv_caches(kv_cache_config, device, layout, kernel_block_sizes, host_pool, allocate=None):
    backing = host_pool.allocate(kv_cache_config.host_bytes)
    return {name: view for name, view in kv_cache_config.views(backing).items()}
