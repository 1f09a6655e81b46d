"""Stand-in for ``sglang.srt.mem_cache.pool_host.base`` (tests only, not SGLang): the host-memory
budget check SGLang 0.5.23 runs before allocating a host pool — ``host_memory_budget_bytes
(requested_bytes=0, *, auto_size=False)``, and ``_allocate_host_buffer`` raising "Not enough host
memory available" when the pool is larger. ``BUDGET`` stands in for (MemAvailable − reserve) /
ranks per host."""

BUDGET = [1 << 62]


def host_memory_budget_bytes(requested_bytes: int = 0, *, auto_size: bool = False) -> int:
    return BUDGET[0]


def check_host_memory(requested_bytes: int) -> None:
    available = host_memory_budget_bytes(requested_bytes)
    if requested_bytes > available:
        raise ValueError(f"Not enough host memory available. Requesting {requested_bytes / 1e9:.2f} GB but only "
                         f"have {available / 1e9:.2f} GB free. Please reduce the size of the hierarchical cache.")
