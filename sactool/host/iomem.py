"""``/proc/iomem``: the kernel's physical address map, read through :class:`SysfsReader`.

Lines are ``<start>-<end> : <name>``, hex, ``end`` inclusive, nested by two spaces per level
(kernel/resource.c ``r_show``). The entries sactool uses: top-level ``CXL Window N`` (one per CFMWS,
inserted by cxl_acpi), ``Soft Reserved`` (EFI_MEMORY_SP "specific purpose" memory — firmware-mapped
CXL or HBM that dax_hmem may claim), and the ``daxX.Y`` / ``System RAM (kmem)`` entries under them.
Without CAP_SYS_ADMIN the kernel prints every address as 0 (``iomem_is_exclusive`` /
``r_show``: "the user cannot see the addresses"): then the map is unusable, and said so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sactool.host.sysfs import SysfsReader

IOMEM = "proc/iomem"
_LINE_RE = re.compile(r"^( *)([0-9a-fA-F]+)-([0-9a-fA-F]+) : (.*)$")


@dataclass(frozen=True)
class IomemRange:
    start: int
    end: int        # inclusive, as printed
    name: str
    depth: int      # nesting level (0 = top)

    def contains(self, addr: int) -> bool:
        return self.start <= addr <= self.end


def parse_iomem(text: str) -> tuple[IomemRange, ...]:
    """Every line of ``/proc/iomem``; ValueError when no line parses (an empty file — a snapshot's
    copy of a map with no CXL Window or Soft Reserved entry — is no entry, not an error)."""
    out = []
    for line in text.splitlines():
        m = _LINE_RE.match(line.rstrip())
        if m:
            out.append(IomemRange(int(m.group(2), 16), int(m.group(3), 16), m.group(4).strip(), len(m.group(1)) // 2))
    if not out and text.strip():
        raise ValueError("no '<start>-<end> : <name>' line")
    return tuple(out)


def read_iomem(r: SysfsReader) -> tuple[tuple[IomemRange, ...] | None, str | None]:
    """(ranges, None), or (None, why) when absent, unreadable, unparsable or addresses hidden."""
    a = r.attr(IOMEM, parse_iomem)
    if a.value is None:
        return None, a.reason
    if a.value and all(x.start == 0 and x.end == 0 for x in a.value):
        return None, "addresses read as 0: the kernel shows them only to CAP_SYS_ADMIN (run as root)"
    return a.value, None


def containing(ranges: tuple[IomemRange, ...], addr: int) -> list[IomemRange]:
    """Entries that contain ``addr``, outermost first."""
    return sorted((x for x in ranges if x.contains(addr)), key=lambda x: x.depth)
