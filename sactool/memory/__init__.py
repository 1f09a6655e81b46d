"""NUMA-placed and devdax buffers: the one placement implementation of sactool.

``allocate(size_bytes, node=N)`` → :class:`PlacedBuffer` (anonymous mmap, mbind, huge pages,
pre-faulted, verified page by page with move_pages); ``map_devdax("dax0.0")`` for device DAX.
"""

from sactool.memory.alloc import allocate, default_prefault_cpus, map_devdax, map_shared
from sactool.memory.nodes import FreeEstimate, check_cpu_node, check_fits, check_memory_node, free_estimate
from sactool.memory.placed import PlacedBuffer, PlacementReport

__all__ = ["allocate", "map_devdax", "map_shared", "PlacedBuffer", "PlacementReport", "FreeEstimate", "free_estimate",
           "check_memory_node", "check_cpu_node", "check_fits", "default_prefault_cpus"]
