"""DAX devices from ``/sys/bus/dax/devices`` (Documentation/ABI/testing/sysfs-bus-dax).

Mode comes from the bound driver: ``kmem`` onlines the range as system RAM on ``target_node``
("system-ram", daxctl's name), ``device_dax`` exposes ``/dev/daxX.Y`` ("devdax").
The source region is found from the device path (``…/decoderX.Y/regionN/dax_regionN/daxN.M`` is a
CXL region) or, for NVDIMM (``ndbus``) and ``hmem`` devices, from the physical address range.
"""

from __future__ import annotations

import re

from sactool.host.sysfs import SysfsReader
from sactool.topology.model import CxlRegion, DaxDevice

DAX_DEVICES = "sys/bus/dax/devices"
MEMORY_DIR = "sys/devices/system/memory"
MODES = {"kmem": "system-ram", "device_dax": "devdax"}
_DAX_RE = re.compile(r"^dax\d+\.\d+$")


def _key(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", name))


def read_dax(r: SysfsReader, regions: list[CxlRegion]) -> list[DaxDevice]:
    out = []
    for name in sorted((n for n in r.listdir(DAX_DEVICES) if _DAX_RE.match(n)), key=_key):
        path = r.resolve(f"{DAX_DEVICES}/{name}")
        if path is None:
            continue
        parts = path.split("/")
        driver = r.basename_of_link(f"{path}/driver")
        resource = r.hex(f"{path}/resource")
        region = None
        if "ndbus" in path or any(p.startswith("ndbus") for p in parts):
            source = "nd"
        elif any(p.startswith("hmem") for p in parts):
            source = "hmem"
        else:
            source = None
        for i in range(1, len(parts)):
            if re.match(r"^region\d+$", parts[i]) and re.match(r"^decoder\d+\.\d+$", parts[i - 1]):
                region, source = parts[i], "cxl"
        if region is None and resource is not None:
            for reg in regions:
                if reg.resource is not None and reg.size_bytes and reg.resource <= resource < reg.resource + reg.size_bytes:
                    region = reg.name
                    source = "cxl" if source is None else source
        target = r.int(f"{path}/target_node")
        mode = MODES.get(driver or "")
        size = r.int(f"{path}/size")
        blocks = _blocks(r, resource, size) if mode == "system-ram" else (None, None, None)
        out.append(DaxDevice(
            name=name,
            size_bytes=size,
            target_node=None if target is None or target < 0 else target,
            align_bytes=r.int(f"{path}/align"),
            mode=mode,
            driver=driver,
            resource=resource,
            source=source,
            region=region,
            memory_blocks=blocks[0],
            memory_blocks_online=blocks[1],
            block_size_bytes=blocks[2],
        ))
    return out


def _blocks(r: SysfsReader, start: int | None, size: int | None) -> tuple[int | None, int | None, int | None]:
    """(blocks wholly inside [start, start+size), of which online, block size) — kmem adds only
    whole memory blocks (drivers/dax/kmem.c aligns the range in to ``memory_block_size_bytes``).
    Nones when the range or the block size is unknown."""
    bs = r.hex(f"{MEMORY_DIR}/block_size_bytes")
    if not start or not size or not bs:
        return None, None, bs
    first, last = -(-start // bs), (start + size) // bs  # [first, last)
    online: int | None = 0
    for i in range(first, last):
        if not r.exists(f"{MEMORY_DIR}/memory{i}"):
            continue  # never added (or removed): not online
        state = r.str(f"{MEMORY_DIR}/memory{i}/state")
        if state is None:
            online = None  # a block whose state cannot be read: the count is unknown, not low
            break
        online += state == "online"
    return max(0, last - first), online, bs
