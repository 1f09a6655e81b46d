"""PCIe link of a CXL memdev and its theoretical per-direction bandwidth ceiling.

ceiling [bytes/s] = speed [GT/s] × 1e9 × lanes × encoding efficiency / 8 bits

Encoding efficiency by signalling rate (PCI Express Base Specification):
- 2.5 and 5.0 GT/s: 8b/10b → 8/10 (Base Spec 1.x/2.0, §4.2.1 "8b/10b encoding");
- 8.0, 16.0, 32.0 GT/s: 128b/130b → 128/130 (Base Spec 3.0, 4.0, 5.0, §4.2.2);
- 64.0 GT/s (and 128.0 GT/s): PAM4 with 1b/1b encoding in Flit Mode; a 256-byte flit carries
  236 bytes of TLP, 6 bytes DLP, 8 bytes CRC and 6 bytes FEC (Base Spec 6.0, §4.2.3.1 "Flit Mode")
  → 236/256 of the raw rate is TLP bytes.

This is a ceiling for the link alone: CXL.mem flit/protocol overhead, device media and controller
limits all come on top. It is never a measurement, and it is labelled so wherever it is shown.
"""

from __future__ import annotations

import re

from sactool.host.sysfs import SysfsReader
from sactool.topology.hardware import PcieLink

# (encoding name, efficiency) by GT/s, see the module docstring for the spec sections.
ENCODINGS: dict[float, tuple[str, float]] = {
    2.5: ("8b/10b", 8 / 10),
    5.0: ("8b/10b", 8 / 10),
    8.0: ("128b/130b", 128 / 130),
    16.0: ("128b/130b", 128 / 130),
    32.0: ("128b/130b", 128 / 130),
    64.0: ("FLIT 236/256", 236 / 256),
    128.0: ("FLIT 236/256", 236 / 256),
}

_SPEED_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s")


def parse_link_speed(text: str | None) -> float | None:
    """``"32.0 GT/s PCIe"`` → 32.0; ``"Unknown"``/garbage/None → None."""
    if not text:
        return None
    m = _SPEED_RE.match(text)
    return float(m.group(1)) if m else None


def link_ceiling(speed_gt_s: float | None, width: int | None) -> tuple[str | None, float | None, int | None]:
    """(encoding, efficiency, ceiling bytes/s per direction) — Nones when a factor is unknown."""
    if speed_gt_s is None or not width or width <= 0:
        return None, None, None
    enc = ENCODINGS.get(speed_gt_s)
    if enc is None:
        return None, None, None
    name, eff = enc
    return name, eff, int(round(speed_gt_s * 1e9 * width * eff / 8))


def read_link(r: SysfsReader, pci_dir: str) -> PcieLink | None:
    """Link attributes of the PCI function at ``pci_dir`` (None if it is not a PCI device)."""
    if not r.exists(f"{pci_dir}/current_link_speed"):
        return None
    speed = parse_link_speed(r.str(f"{pci_dir}/current_link_speed"))
    width = r.int(f"{pci_dir}/current_link_width")
    enc, eff, ceiling = link_ceiling(speed, width)
    return PcieLink(
        pci_device=pci_dir.rstrip("/").rsplit("/", 1)[-1],
        speed_gt_s=speed,
        width=width,
        max_speed_gt_s=parse_link_speed(r.str(f"{pci_dir}/max_link_speed")),
        max_width=r.int(f"{pci_dir}/max_link_width"),
        encoding=enc,
        efficiency=eff,
        ceiling_bytes_per_s=ceiling,
    )


def link_caps(own: PcieLink, upstream: PcieLink | None = None) -> tuple[float | None, int | None]:
    """(GT/s, width) both ends of a link can do: the lower ``max_link_*`` of ``own`` and ``upstream`` (the
    same link seen from the port above it), where known."""
    ends = [x for x in (own, upstream) if x is not None]
    speeds = [x.max_speed_gt_s for x in ends if x.max_speed_gt_s]
    widths = [x.max_width for x in ends if x.max_width]
    return (min(speeds) if speeds else None), (min(widths) if widths else None)


def trained_below(own: PcieLink | None, upstream: PcieLink | None = None) -> str | None:
    """``"32.0 GT/s x8, both ends capable of 32.0 GT/s x16: its ceiling is 31.5 of 63.0 GB/s per direction"``
    when the link ``own`` reports trained slower or narrower than both its ends can do (:func:`link_caps`);
    None when it runs at that, or cannot be told. The rule the machine picture's red link draws
    (render.machine ``Hop.downgraded``)."""
    if own is None:
        return None
    cs, cw = link_caps(own, upstream)
    slow = bool(cs and own.speed_gt_s and own.speed_gt_s < cs)
    narrow = bool(cw and own.width and own.width < cw)
    if not (slow or narrow):
        return None
    text = (f"{own.speed_gt_s} GT/s x{own.width}, " + ("both ends" if upstream is not None else "it is")
            + f" capable of {cs or own.speed_gt_s} GT/s x{cw or own.width}")
    full = link_ceiling(cs or own.speed_gt_s, cw or own.width)[2]
    if own.ceiling_bytes_per_s and full:
        text += f": its ceiling is {own.ceiling_bytes_per_s / 1e9:.1f} of {full / 1e9:.1f} GB/s per direction"
    return text
