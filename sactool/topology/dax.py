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
        out.append(DaxDevice(
            name=name,
            size_bytes=r.int(f"{path}/size"),
            target_node=None if target is None or target < 0 else target,
            align_bytes=r.int(f"{path}/align"),
            mode=MODES.get(driver or ""),
            driver=driver,
            resource=resource,
            source=source,
            region=region,
        ))
    return out
