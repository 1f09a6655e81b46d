"""DAX devices from ``/sys/bus/dax/devices`` (Documentation/ABI/testing/sysfs-bus-dax).

Mode comes from the bound driver: ``kmem`` onlines the range as system RAM on ``target_node``
("system-ram", daxctl's name), ``device_dax`` exposes ``/dev/daxX.Y`` ("devdax").
The source region is found from the device path (``…/decoderX.Y/regionN/dax_regionN/daxN.M`` is a
CXL region) or, for NVDIMM (``ndbus``) and ``hmem`` devices, from the physical address range.
"""

from __future__ import annotations

import re

from sactool.host.sysfs import SysfsReader
from sactool.topology.records import CxlRegion, DaxDevice, DaxMapping, DaxRegion

DAX_DEVICES = "sys/bus/dax/devices"
MEMORY_DIR = "sys/devices/system/memory"
MODES = {"kmem": "system-ram", "device_dax": "devdax"}
_DAX_RE = re.compile(r"^dax\d+\.\d+$")


def _key(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", name))


def read_dax(r: SysfsReader, regions: list[CxlRegion]) -> list[DaxDevice]:
    out: list[DaxDevice] = []
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
        blocks = _blocks(r, resource, size) if mode == "system-ram" else (None, None, None, None)
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
            movable=blocks[3],
            mappings=_mappings(r, path),
            dax_region=_dax_region(r, path),
        ))
    return out


def _mappings(r: SysfsReader, path: str) -> tuple[DaxMapping, ...]:
    """``mapping<N>/{start,end,page_offset}`` of the device at ``path`` (sysfs-bus-dax, v5.10+)."""
    idx = sorted(int(e[7:]) for e in r.listdir(path) if re.match(r"^mapping\d+$", e))
    return tuple(DaxMapping(i, r.hex(f"{path}/mapping{i}/start"), r.hex(f"{path}/mapping{i}/end"),
                            r.hex(f"{path}/mapping{i}/page_offset")) for i in idx)


def _dax_region(r: SysfsReader, path: str) -> DaxRegion | None:
    """The parent's ``dax_region/`` attributes (the region the device was carved from)."""
    parent = path.rsplit("/", 1)[0]
    base = f"{parent}/dax_region"
    if not r.is_dir(base):
        return None
    shown = parent[len("sys/devices"):] if parent.startswith("sys/devices/") else "/" + parent
    return DaxRegion(path=shown, id=r.int(f"{base}/id"), size_bytes=r.int(f"{base}/size"),
                     align_bytes=r.int(f"{base}/align"), available_size_bytes=r.int(f"{base}/available_size"))


def _blocks(r: SysfsReader, start: int | None, size: int | None
            ) -> tuple[int | None, int | None, int | None, bool | None]:
    """(blocks wholly inside [start, start+size), of which online, block size, movable) — kmem adds
    only whole memory blocks (drivers/dax/kmem.c aligns the range in to ``memory_block_size_bytes``).
    ``movable``: every online block's ``valid_zones`` reads ``Movable`` (an online block shows only
    its own zone), as daxctl decides it (libdaxctl ``daxctl_memory_is_movable``); None when no
    block is online or a zone cannot be read. Nones when the range or the block size is unknown."""
    bs = r.hex(f"{MEMORY_DIR}/block_size_bytes")
    if not start or not size or not bs:
        return None, None, bs, None
    first, last = -(-start // bs), (start + size) // bs  # [first, last)
    online = 0
    unknown = False
    zones: set[str | None] = set()
    for i in range(first, last):
        if not r.exists(f"{MEMORY_DIR}/memory{i}"):
            continue  # never added (or removed): not online
        state = r.str(f"{MEMORY_DIR}/memory{i}/state")
        if state is None:
            unknown = True  # a block whose state cannot be read: the count is unknown, not low
            break
        if state == "online":
            online += 1
            zones.add(r.str(f"{MEMORY_DIR}/memory{i}/valid_zones"))
    movable = None if not zones or None in zones or unknown else zones == {"Movable"}
    return max(0, last - first), None if unknown else online, bs, movable
