"""Pool health per CXL memdev: media health, PCIe AER counters, error-handling mode, known poison.

Read-only in probe. Sources, each named in the record:

- **media health**: the device's *Get Health Info* mailbox command (CXL 3.1 §8.2.9.9.3.1, opcode
  4200h) through the kernel's ``CXL_MEM_SEND_COMMAND`` ioctl on ``/dev/cxl/memX`` (command id 7,
  ``GET_HEALTH_INFO`` of ``include/uapi/linux/cxl_mem.h``; a read-only command the kernel lets
  through without ``CONFIG_CXL_MEM_RAW_COMMANDS``; needs root) — the same reply ``cxl list -H`` prints;
- **AER**: ``aer_dev_correctable``/``aer_dev_fatal``/``aer_dev_nonfatal`` of the memdev's PCI
  function (Documentation/ABI/testing/sysfs-bus-pci-devices-aer-stats);
- **error-handling mode**: OS-first when the kernel's AER service owns the root port above the device
  (its ``aer_rootport_total_err_*`` attributes exist), firmware-first when the ACPI HEST describes a
  PCIe AER source with its FIRMWARE_FIRST flag (ACPI 6.5 §18.3.2.4-6, types 6/7/8, flags bit 0);
- **poison**: the device's poison list, asked for by writing ``memX/trigger_poison_list`` and read from
  the ``cxl:cxl_poison`` trace events (Documentation/ABI/testing/sysfs-bus-cxl; include/trace/events in
  drivers/cxl/core/trace.h) in a private tracefs instance — a write, so only with ``probe --poison``.

What is read by other means than a file (the mailbox reply, the poison trace) is kept in the reader's
``captured`` files beneath ``sactool/capture/`` so that ``probe --snapshot`` replays it.

Each poisoned range is translated with the interleave math probe already knows: device physical
address (DPA) → host physical address (HPA) through the endpoint decoder and region → DAX device and
offset → NUMA node (system-ram), and with a profile → the rank whose slice holds it and the offset in
that rank's pool (:func:`locate`).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, replace
from typing import Any, Sequence

from sactool.host.cxl_io import mailbox_health_info, read_poison_live
from sactool.host.sysfs import SysfsReader

CAPTURE = "sactool/capture"
"""Where a reader keeps, and a snapshot stores, facts that are no file (mailbox replies, trace text)."""

GET_HEALTH_INFO = 7   # index in CXL_CMDS: INVALID, IDENTIFY, RAW, GET_SUPPORTED_LOGS, GET_FW_INFO,
                      # GET_PARTITION_INFO, GET_LSA, GET_HEALTH_INFO (uapi cxl_mem.h)
HEALTH_INFO_BYTES = 0x12
"""Get Health Info output payload: health status, media status, additional status, life used (1 byte
each), device temperature (s16, °C), dirty shutdown count, corrected volatile and persistent error
counts (u32 each), little-endian (CXL 3.1 Table 8-133)."""

HEALTH_STATUS_BITS = ("maintenance_needed", "performance_degraded", "hw_replacement_needed")
MEDIA_STATUS = {0: "normal", 1: "not_ready", 2: "write_persistency_lost", 3: "all_data_lost",
                4: "write_persistency_loss_in_event_of_power_loss", 5: "write_persistency_loss_in_event_of_shutdown",
                6: "write_persistency_loss_imminent", 7: "all_data_loss_in_event_of_power_loss",
                8: "all_data_loss_in_event_of_shutdown", 9: "all_data_loss_imminent"}
TEMPERATURE_UNKNOWN = 0x7FFF   # CXL: "not implemented" (ndctl reads 0xffff the same way)
LIFE_USED_UNKNOWN = 0xFF


@dataclass(frozen=True)
class MediaHealth:
    """The device's Get Health Info reply. ``source``: how it was read (the ioctl, or a recording of
    it); ``temperature_c``/``life_used_percent``: None when the device does not implement them."""

    source: str
    health_status: tuple[str, ...]       # set bits of HEALTH_STATUS_BITS
    media_status: str                    # MEDIA_STATUS name, or "reserved(N)"
    life_used_percent: int | None
    temperature_c: int | None
    dirty_shutdowns: int
    corrected_volatile_errors: int
    corrected_persistent_errors: int

    @property
    def degraded(self) -> bool:
        return self.media_status != "normal" or bool(self.health_status)


@dataclass(frozen=True)
class AerCounters:
    """``/sys/bus/pci/devices/<function>/aer_dev_{correctable,nonfatal,fatal}``: every counter the
    kernel prints (``RxErr 0``, …, ``TOTAL_ERR_COR 0``) and the three totals."""

    pci_device: str
    correctable: int | None
    nonfatal: int | None
    fatal: int | None
    counters: tuple[tuple[str, int], ...] = ()   # the non-zero ones, "correctable.RxErr" style


@dataclass(frozen=True)
class PoisonRecord:
    """One range of the device's poison list, translated as far as the facts go (None: not mapped).

    ``dpa``/``length_bytes``: from the device (cxl_poison ``dpa``, ``dpa_len``); ``source``: Unknown,
    External, Internal, Injected, Vendor; ``hpa``: host physical address — the kernel's where it gave
    one, else computed (region base + interleave position); ``dax_offset_bytes``: offset in
    ``dax_device``; ``node``: the NUMA node that memory is onlined as (system-ram), else None;
    ``rank``/``pool_offset_bytes``: the profile's rank whose devdax slice holds it, and where in that
    rank's pool (only with a profile)."""

    memdev: str
    dpa: int
    length_bytes: int
    source: str
    region: str | None = None
    hpa: int | None = None
    hpa_source: str = ""
    dax_device: str | None = None
    dax_offset_bytes: int | None = None
    node: int | None = None
    rank: int | None = None
    pool_target: str | None = None
    pool_offset_bytes: int | None = None

    def to_data(self) -> dict[str, Any]:
        return {"memdev": self.memdev, "dpa": f"{self.dpa:#x}", "length_bytes": self.length_bytes,
                "source": self.source, "region": self.region, "hpa": None if self.hpa is None else f"{self.hpa:#x}",
                "hpa_source": self.hpa_source, "dax_device": self.dax_device, "dax_offset_bytes": self.dax_offset_bytes,
                "node": self.node, "rank": self.rank, "pool_target": self.pool_target,
                "pool_offset_bytes": self.pool_offset_bytes}

    def where(self) -> str:
        """``mem1 DPA 0x1000 (64 B) → region0 HPA 0x190001000 → dax0.0 +0x1000 → rank 2 +0x1000``."""
        s = f"{self.memdev} DPA {self.dpa:#x} ({self.length_bytes} B, {self.source})"
        if self.region:
            s += f" → {self.region}" + (f" HPA {self.hpa:#x}" if self.hpa is not None else "")
        if self.dax_device:
            s += f" → {self.dax_device} +{self.dax_offset_bytes:#x}"
        if self.node is not None:
            s += f" → node{self.node}"
        if self.rank is not None:
            s += f" → rank {self.rank}'s pool +{self.pool_offset_bytes:#x}"
        return s


@dataclass(frozen=True)
class MemdevHealth:
    """Everything known about one memdev's health; each ``*_reason`` says why a part is None."""

    memdev: str
    serial: str | None
    media: MediaHealth | None
    media_reason: str
    aer: AerCounters | None
    aer_reason: str
    error_mode: str                      # "os-first", "firmware-first" or "unknown"
    error_mode_evidence: str
    poison: tuple[PoisonRecord, ...] | None   # None: the list was not read
    poison_reason: str

    @property
    def degraded(self) -> bool:
        return bool(self.media and self.media.degraded)

    def to_data(self) -> dict[str, Any]:
        from sactool.records import to_data

        return {"memdev": self.memdev, "serial": self.serial,
                "media": None if self.media is None else {**to_data(self.media), "degraded": self.media.degraded},
                "media_reason": self.media_reason, "aer": to_data(self.aer), "aer_reason": self.aer_reason,
                "error_mode": self.error_mode, "error_mode_evidence": self.error_mode_evidence,
                "poison": None if self.poison is None else [p.to_data() for p in self.poison],
                "poison_reason": self.poison_reason}


# ------------------------------------------------------------------------------------------
# media health: the mailbox
# ------------------------------------------------------------------------------------------

def parse_health_info(payload: bytes, source: str) -> MediaHealth:
    """Decode a Get Health Info reply (:data:`HEALTH_INFO_BYTES` bytes)."""
    if len(payload) < HEALTH_INFO_BYTES:
        raise ValueError(f"Get Health Info reply is {len(payload)} bytes, expected {HEALTH_INFO_BYTES}")
    hs, ms, _ext, life, temp, dirty, vol, pers = struct.unpack_from("<BBBBhIII", payload)
    return MediaHealth(
        source=source,
        health_status=tuple(n for i, n in enumerate(HEALTH_STATUS_BITS) if hs & (1 << i)),
        media_status=MEDIA_STATUS.get(ms, f"reserved({ms})"),
        life_used_percent=None if life == LIFE_USED_UNKNOWN else life,
        temperature_c=None if temp in (TEMPERATURE_UNKNOWN, -1) else temp,
        dirty_shutdowns=dirty, corrected_volatile_errors=vol, corrected_persistent_errors=pers)


def read_media(r: SysfsReader, memdev: str) -> tuple[MediaHealth | None, str]:
    """The Get Health Info reply: live through the mailbox (reply or failure captured for a snapshot),
    from a recording as captured."""
    rel = f"{CAPTURE}/{memdev}/get-health-info"
    if not r.live:
        txt = r.text(rel)
        if txt is None:
            return None, "not in the recording (recorded without the mailbox, or by an older sactool)"
        if txt.startswith("error: "):
            return None, txt[len("error: "):].strip()
        try:
            return parse_health_info(bytes.fromhex(txt.strip()), "recorded reply of Get Health Info (mailbox ioctl)"), ""
        except ValueError as e:
            return None, f"{rel}: {e}"
    payload, why = mailbox_health_info(f"/dev/cxl/{memdev}", GET_HEALTH_INFO, HEALTH_INFO_BYTES)
    if payload is None:
        r.captured[rel] = f"error: {why}\n".encode()
        return None, why
    r.captured[rel] = (payload.hex() + "\n").encode()
    return parse_health_info(payload, f"mailbox ioctl on /dev/cxl/{memdev} (Get Health Info, opcode 4200h)"), ""


# ------------------------------------------------------------------------------------------
# AER and the error-handling mode
# ------------------------------------------------------------------------------------------

def parse_aer(text: str | None) -> tuple[int | None, dict[str, int]]:
    """An ``aer_dev_*`` file: (its TOTAL_ERR_* line, every counter)."""
    if text is None:
        return None, {}
    counts: dict[str, int] = {}
    total = None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            if parts[0].startswith("TOTAL_ERR"):
                total = int(parts[1])
            else:
                counts[parts[0]] = int(parts[1])
    return total, counts


def read_aer(r: SysfsReader, pci_device: str | None) -> tuple[AerCounters | None, str]:
    if not pci_device:
        return None, "the memdev's PCI function is unknown"
    base = f"sys/bus/pci/devices/{pci_device}"
    totals, nonzero = {}, []
    for kind in ("correctable", "nonfatal", "fatal"):
        total, counts = parse_aer(r.text(f"{base}/aer_dev_{kind}"))
        totals[kind] = total
        nonzero += [(f"{kind}.{k}", v) for k, v in counts.items() if v]
    if all(v is None for v in totals.values()):
        return None, f"{base}/aer_dev_* absent (no AER capability, or the AER driver does not own it)"
    return AerCounters(pci_device, totals["correctable"], totals["nonfatal"], totals["fatal"], tuple(nonzero)), ""


_HEST_FIXED = {2: 20, 6: 48, 7: 44, 8: 56, 9: 64, 10: 92}
"""Sizes of HEST error-source structures without banks (ACPI 6.5 §18.3.2; Linux's actbl1.h): NMI 20,
AER root port 48, AER endpoint 44, AER bridge 56, GHES 64, GHESv2 92."""
_HEST_BANKED = {0: 40, 1: 48, 11: 48}
"""IA-32 MCE, corrected machine check, deferred MCE: a fixed part, then 28-byte banks whose count is the
byte at offset 32 (MCE) or 44 (CMC, deferred) of the structure."""
_HEST_BANK_COUNT_AT = {0: 32, 1: 44, 11: 44}


def hest_firmware_first(data: bytes | None) -> bool | None:
    """Whether the ACPI HEST lists a PCIe AER source (types 6 root port, 7 endpoint, 8 bridge) with its
    FIRMWARE_FIRST flag (bit 0 of the byte at offset 6); None when there is no HEST or it cannot be walked."""
    if not data or len(data) < 40:
        return None
    count = struct.unpack_from("<I", data, 36)[0]
    off = 40
    for _ in range(min(count, 4096)):
        if off + 8 > len(data):
            return None
        typ = struct.unpack_from("<H", data, off)[0]
        if typ in (6, 7, 8) and data[off + 6] & 1:
            return True
        if typ in _HEST_FIXED:
            off += _HEST_FIXED[typ]
        elif typ in _HEST_BANKED and off + _HEST_BANK_COUNT_AT[typ] < len(data):
            off += _HEST_BANKED[typ] + 28 * data[off + _HEST_BANK_COUNT_AT[typ]]
        else:
            return None
    return False


def error_mode(r: SysfsReader, root_port: str | None) -> tuple[str, str]:
    """OS-first or firmware-first error handling for the device's root port, with the evidence."""
    ff = hest_firmware_first(_raw(r, "sys/firmware/acpi/tables/HEST"))
    if ff:
        return "firmware-first", "ACPI HEST has a PCIe AER source with FIRMWARE_FIRST: the platform handles errors first (GHES/CPER)"
    if root_port and r.text(f"sys/bus/pci/devices/{root_port}/aer_rootport_total_err_cor") is not None:
        return "os-first", (f"{root_port}/aer_rootport_total_err_* exist: the kernel's AER service owns the root port"
                            + (" (no HEST table)" if ff is None else " (HEST without firmware-first AER sources)"))
    return "unknown", "no HEST with firmware-first AER sources and no AER attributes on the root port"


def _raw(r: SysfsReader, rel: str) -> bytes | None:
    r._touch(rel)
    try:
        return r.tree.read(rel)
    except Exception:   # NotRead and friends: absent
        return None


# ------------------------------------------------------------------------------------------
# poison
# ------------------------------------------------------------------------------------------

POISON_TRACE = f"{CAPTURE}/cxl_poison.trace"
NOT_ASKED = "not read: 'sactool probe --poison' asks each device for its list (root; writes trigger_poison_list)"
_POISON_RE = re.compile(r"cxl_poison:\s+memdev=(?P<memdev>\S+)\s.*?\bregion=(?P<region>\S*)\s.*?"
                        r"\bhpa=(?P<hpa>0x[0-9a-fA-F]+)\s+dpa=(?P<dpa>0x[0-9a-fA-F]+)\s+dpa_len(?:gth)?=(?P<len>0x[0-9a-fA-F]+|\d+)"
                        r"\s+source=(?P<source>\S+)")


def parse_poison_trace(text: str) -> list[dict[str, Any]]:
    """The ``cxl_poison`` events of a trace (``trace_type=List`` lines; other events ignored):
    memdev, region (None when unmapped), hpa (None for all-ones), dpa, length in bytes, source.
    The length is in bytes: 6.12 prints ``dpa_length=0x40`` for one 64-byte record (seen live, QEMU
    Type-3 device, debugfs inject_poison; drivers/cxl/core/trace.h multiplies the record's length by
    CXL_POISON_LEN_MULT); ``dpa_len=`` is read the same way."""
    out = []
    for line in text.splitlines():
        if "trace_type=Inject" in line or "trace_type=Clear" in line:
            continue
        m = _POISON_RE.search(line)
        if not m:
            continue
        hpa = int(m["hpa"], 16)
        out.append({"memdev": m["memdev"], "region": m["region"] or None,
                    "hpa": None if hpa == (1 << 64) - 1 else hpa, "dpa": int(m["dpa"], 16),
                    "length_bytes": int(m["len"], 0), "source": m["source"]})
    return out


def read_poison(r: SysfsReader, memdevs: Sequence[str], ask: bool) -> tuple[list[dict[str, Any]] | None, str]:
    """The poison list of ``memdevs``: live, only when ``ask`` (it writes ``trigger_poison_list``); from a
    recording, the trace it captured."""
    if not r.live:
        txt = r.text(POISON_TRACE)
        if txt is None:
            return None, NOT_ASKED
        return parse_poison_trace(txt), ""
    if not ask:
        return None, NOT_ASKED
    txt, why = read_poison_live(memdevs)
    if txt is None:
        return None, why
    r.captured[POISON_TRACE] = txt.encode()
    return parse_poison_trace(txt), why


# ------------------------------------------------------------------------------------------
# translation: DPA -> HPA -> DAX offset -> node -> rank
# ------------------------------------------------------------------------------------------

def dpa_to_hpa(topo: Any, memdev: str, dpa: int) -> tuple[str | None, int | None, str]:
    """(region, hpa, how) for ``dpa`` of ``memdev``: through its endpoint decoder (``dpa_resource``,
    ``dpa_size``, ``region``) and the region's base, ways, granularity and this device's position in
    its targets (CXL 3.1 §8.2.4.20.13's HPA-to-DPA decode, run backwards)."""
    for d in topo.decoders:
        if d.level != "endpoint" or d.memdev != memdev or d.region is None or d.dpa_resource is None:
            continue
        if not d.dpa_resource <= dpa < d.dpa_resource + (d.dpa_size_bytes or 0):
            continue
        reg = topo.region(d.region)
        if reg is None or reg.resource is None:
            return d.region, None, "the region has no HPA yet"
        ways = reg.interleave_ways or 1
        gran = reg.interleave_granularity_bytes or 256
        try:
            pos = reg.targets.index(d.name)
        except ValueError:
            return d.region, None, f"{d.name} is not among {reg.name}'s targets"
        off = dpa - d.dpa_resource
        hpa_off = ((off // gran) * ways + pos) * gran + off % gran
        return reg.name, reg.resource + hpa_off, f"{d.name} → {reg.name} ({ways}-way, {gran} B, position {pos})"
    return None, None, "no endpoint decoder maps this DPA (not in a region)"


def hpa_to_dax(topo: Any, region: str | None, hpa: int) -> tuple[str | None, int | None, int | None]:
    """(DAX device, offset in it, onlined node) of ``hpa`` in ``region``."""
    for dx in topo.dax_devices:
        if dx.region != region:
            continue
        for mp in dx.mappings:
            start = getattr(mp, "start", None)
            size = getattr(mp, "size_bytes", None)
            page_off = getattr(mp, "page_offset", 0) or 0
            if start is not None and size and start <= hpa < start + size:
                node = dx.target_node if dx.mode == "system-ram" and dx.target_node in topo.node_ids else None
                return dx.name, page_off * 4096 + (hpa - start), node
    return None, None, None


def translate(topo: Any, raw: dict[str, Any]) -> PoisonRecord:
    region, hpa, how = dpa_to_hpa(topo, raw["memdev"], raw["dpa"])
    if raw.get("hpa") is not None:
        src = "the kernel's (cxl_poison hpa)" + ("" if hpa in (None, raw["hpa"]) else f"; computed {hpa:#x} differs")
        hpa = raw["hpa"]
    else:
        src = f"computed: {how}" if hpa is not None else how
    region = raw.get("region") or region
    dax, off, node = hpa_to_dax(topo, region, hpa) if hpa is not None else (None, None, None)
    return PoisonRecord(raw["memdev"], raw["dpa"], raw["length_bytes"], raw["source"], region, hpa, src, dax, off, node)


def locate(records: Sequence[PoisonRecord], slots: Sequence[Any]) -> tuple[PoisonRecord, ...]:
    """Each record with the rank whose devdax slice holds it (``slots``: the rank plan's slots —
    ``rank``, ``target``, ``offset_bytes``, ``size_bytes``) and the offset inside that rank's pool."""
    out = []
    for p in records:
        hit = None
        if p.dax_device is not None and p.dax_offset_bytes is not None:
            for s in slots:
                lo, size = getattr(s, "offset_bytes", None), getattr(s, "size_bytes", None)
                if s.target == p.dax_device and lo is not None and size and lo <= p.dax_offset_bytes < lo + size:
                    hit = s
                    break
        out.append(replace(p, rank=hit.rank, pool_target=hit.target, pool_offset_bytes=p.dax_offset_bytes - hit.offset_bytes)
                   if hit is not None else p)
    return tuple(out)


def read_health(r: SysfsReader, topo: Any, *, poison: bool = False) -> tuple[MemdevHealth, ...]:
    """The health of every memdev of ``topo`` (``poison``: live, ask the devices for their poison lists)."""
    raw, preason = read_poison(r, [m.name for m in topo.memdevs], poison) if topo.memdevs else (None, "")
    out = []
    for m in topo.memdevs:
        media, mwhy = read_media(r, m.name)
        aer, awhy = read_aer(r, m.pci_device)
        root_port = next((lk.pci_device for lk in reversed(m.path_links) if lk.pci_device), None)
        mode, ev = error_mode(r, root_port)
        recs = None if raw is None else tuple(translate(topo, x) for x in raw if x["memdev"] == m.name)
        out.append(MemdevHealth(m.name, m.serial, media, mwhy, aer, awhy, mode, ev, recs, preason))
    return tuple(out)


def health_warnings(health: Sequence[MemdevHealth]) -> list[Any]:
    """``media-degraded``, ``poison``, ``aer-errors`` warnings for what the devices report."""
    from sactool.records import Warning

    out = []
    for h in health:
        if h.media is not None and h.media.degraded:
            out.append(Warning("media-degraded", f"{h.memdev} reports media {h.media.media_status}"
                               + (f", {', '.join(h.media.health_status)}" if h.media.health_status else ""),
                               "do not place a KV pool on it (serve --dry-run refuses it with pool.strict); "
                               "check 'cxl list -H' and the vendor's tools"))
        for p in h.poison or ():
            out.append(Warning("poison", f"known poison: {p.where()}",
                               "'sactool probe --poison --profile P' names the rank and pool offset; sactool serve "
                               "carves devdax slices around it; once the data is rewritten the kernel's "
                               "debugfs cxl/memX/clear_poison (or the device vendor's tools) clears it"))
        if h.aer is not None and (h.aer.fatal or h.aer.nonfatal):
            out.append(Warning("aer-errors", f"{h.memdev} ({h.aer.pci_device}): {h.aer.fatal or 0} fatal, "
                               f"{h.aer.nonfatal or 0} non-fatal uncorrectable AER errors since boot",
                               "check dmesg for the AER reports and the link (lspci -vv)"))
    return out
