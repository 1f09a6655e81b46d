"""Stand-in of vllm/v1/kv_offload/cpu/shared_offload_region.py (0.34.0): the pre-fault selector."""


def _get_populate_write_fn(mmap_obj):
    def populate(mm, offset, length):
        mm[offset:offset + length] = bytes(length)
    return populate
