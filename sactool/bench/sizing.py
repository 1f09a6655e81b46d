"""Buffer sizes derived from the machine that measures: the last-level cache of the CPUs that run the
kernels, and the free memory of the node the buffer goes on.

A random gather over a buffer of B bytes, read by CPUs sharing C bytes of last-level cache (C < B),
finds a record's lines in the cache with probability about C / B once the cache is warm (each line is
as likely to be any of the buffer's; the cache holds C of them) — so a bandwidth measured over the
buffer is *overstated* by up to that share of reads served from the cache. The rule:

- **default**: :data:`CACHE_MULTIPLE` × the cache (at most 1/8 = 12.5 % of reads from the cache), and
  never less than :data:`FLOOR_BYTES`; where the node cannot hold that, the largest buffer it holds,
  with a warning that states the cache's share. A default is never refused.
- **explicit** (``--gather-size``/``--size``): a buffer that fits in the cache would measure the cache,
  not the memory (tune refuses it: :func:`check_given`); one under the multiple is measured and
  warned with the cache's share.

The rule and the figures it used (cache size and where it was read, free memory) go into the
record and the profile (:meth:`BufferRule.to_data`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sactool.host.sysfs import SysfsReader
from sactool.memory.nodes import process_room  # noqa: F401  (the free-memory rule's process part, re-exported)
from sactool.units import format_bytes, format_size_arg, parse_kernel_size

CPU_DIR = "sys/devices/system/cpu"

CACHE_MULTIPLE = 8
"""Default buffer in units of the gathering CPUs' last-level cache: a uniform random gather then finds at
most 1/8 of its reads in the cache (policy; STREAM asks for arrays of at least 4× the caches)."""

FLOOR_BYTES = 256 << 20
"""The smallest default buffer: 256 MiB, what bench and tune used before sizes followed the cache,
kept so hosts with small caches measure as before (random 656 B reads over it also miss the TLB's
reach with 4 KiB pages)."""

ALIGN_BYTES = 2 << 20
"""Sizes are whole 2 MiB (transparent huge) pages."""


@dataclass(frozen=True)
class Cache:
    """The last-level cache the CPUs ``cpus`` share: ``bytes`` summed over its ``instances`` distinct
    caches (``cpuN/cache/indexI/{level,size,shared_cpu_list}``); ``source`` names the attribute read."""

    bytes: int
    level: int
    instances: int
    source: str

    def to_data(self) -> dict:
        return {"bytes": self.bytes, "level": self.level, "instances": self.instances, "source": self.source}


def last_level_cache(reader: SysfsReader, cpus) -> Cache | None:
    """The highest-level cache of ``cpus``, summed over the distinct instances they use (CPUs of two
    L3 slices, e.g. two CCDs or two sub-NUMA clusters, have twice the cache); None when unreported."""
    best_level, source = -1, ""
    found: dict[tuple[int, ...], int] = {}   # the CPUs sharing one cache instance -> its size
    covered: set[int] = set()
    for cpu in cpus:
        if cpu in covered:
            continue
        base = f"{CPU_DIR}/cpu{cpu}/cache"
        for name in sorted(reader.listdir(base)):
            if not name.startswith("index"):
                continue
            level = reader.int(f"{base}/{name}/level")
            text = reader.str(f"{base}/{name}/size")
            if level is None or not text or (reader.str(f"{base}/{name}/type") or "Unified") == "Instruction":
                continue
            try:
                size = parse_kernel_size(text)
            except ValueError:
                continue
            if level < best_level:
                continue
            if level > best_level:
                best_level, found = level, {}
            shared = tuple(reader.cpulist(f"{base}/{name}/shared_cpu_list") or (cpu,))
            found[shared] = size
            covered.update(shared)
            source = f"{base}/{name}/size"
    if not found:
        return None
    return Cache(sum(found.values()), best_level, len(found), source)


@dataclass(frozen=True)
class BufferRule:
    """A buffer size and why: ``given`` (the user's value) or derived; ``cache`` (None: unreported);
    ``room_bytes``: what the node (and this process's address-space limit) holds, None when unknown."""

    size_bytes: int
    given: bool
    cache: Cache | None
    room_bytes: int | None
    rule: str
    warnings: tuple[dict, ...] = field(default_factory=tuple)

    @property
    def cache_share(self) -> float | None:
        """Upper bound of the share of a uniform random gather's reads the cache serves (C / B)."""
        return None if self.cache is None else min(1.0, self.cache.bytes / self.size_bytes)

    def to_data(self) -> dict:
        return {"size_bytes": self.size_bytes, "given": self.given,
                "llc": self.cache.to_data() if self.cache else None, "room_bytes": self.room_bytes,
                "cache_multiple": CACHE_MULTIPLE, "floor_bytes": FLOOR_BYTES,
                "cache_share": None if self.cache_share is None else round(self.cache_share, 4), "rule": self.rule}


def wanted(cache: Cache) -> int:
    """The buffer the rule asks for: :data:`CACHE_MULTIPLE` × the cache and one more 2 MiB page, so the
    whole records of any size up to 2 MiB that it holds (a gather's working set) reach the multiple too
    (3.75 GiB of 656 B records would fall 240 B short of 8 × 480 MiB)."""
    return CACHE_MULTIPLE * cache.bytes + ALIGN_BYTES


def _down(n: int) -> int:
    return max(ALIGN_BYTES, n // ALIGN_BYTES * ALIGN_BYTES)


def share_text(cache: Cache, size: int) -> str:
    share = min(1.0, cache.bytes / size)
    return (f"the {format_bytes(cache.bytes)} last-level cache holds {share:.0%} of the {format_bytes(size)} buffer: "
            f"up to {share:.0%} of random reads may come from the cache, so the bandwidth may be overstated")


def derive(cache: Cache | None, room: int | None, *, where: str, floor: int = FLOOR_BYTES,
           code: str = "gather_size_cache", option: str = "--gather-size") -> BufferRule:
    """The default buffer (never refused): :data:`CACHE_MULTIPLE` × ``cache``, at least ``floor``, cut
    to ``room`` (whole 2 MiB pages) where the node holds less, with a warning saying the cache's share."""
    from sactool.records import warning

    want = max(floor, wanted(cache)) if cache else floor
    basis = (f"{CACHE_MULTIPLE}x the {format_bytes(cache.bytes)} last-level cache of {where} ({cache.source}"
             f"{f', {cache.instances} caches' if cache.instances > 1 else ''})" if cache else
             f"the {format_bytes(floor)} floor, as the last-level cache of {where} is not reported")
    if cache and want == floor and wanted(cache) < floor:
        basis += f"; at least {format_bytes(floor)}"
    if room is None or want <= room:
        return BufferRule(want, False, cache, room, f"{format_bytes(want)}: {basis}")
    size = _down(room)
    rule = (f"{format_bytes(size)}: the most the node holds ({format_bytes(room)} free after the margin), "
            f"less than the {format_bytes(want)} wanted ({basis})")
    warns: tuple[dict, ...] = ()
    if cache:
        warns = (warning(code, f"{rule}; {share_text(cache, size)}",
                         f"free memory on the node, or measure elsewhere and pass the record ({option} "
                         f"{format_size_arg(want)} needs that much)"),)
    return BufferRule(size, False, cache, room, rule, warns)


def check_given(size: int, cache: Cache | None, room: int | None, *, where: str, refuse_in_cache: bool,
                code: str = "gather_size_cache", option: str = "--gather-size", what: str = "pool") -> BufferRule:
    """A size the user gave. Inside the cache it would measure the cache: refused (exit 3, the hardware
    makes it meaningless) where ``refuse_in_cache``, else warned; under the multiple: warned with the share."""
    from sactool.errors import CapacityError, TopologyError
    from sactool.records import warning

    if room is not None and size > room and refuse_in_cache:   # tune: refused before any work, with its option
        raise CapacityError(f"{option} {format_bytes(size)} does not fit: {format_bytes(room)} can be placed "
                            "(the pool node's free memory after the margin, and this process's ulimit -v/-d "
                            "minus what it maps)", f"use {option} {room >> 20}MiB or less, or drop {option}")
    if cache is None:
        return BufferRule(size, True, None, room, f"{format_bytes(size)}: {option} (the last-level cache of "
                          f"{where} is not reported: its share cannot be told)")
    want = max(FLOOR_BYTES, wanted(cache))
    hint_size = want if room is None or want <= room else _down(room)
    if size <= cache.bytes and refuse_in_cache:
        raise TopologyError(f"{option} {format_bytes(size)} fits in the {format_bytes(cache.bytes)} last-level cache "
                            f"of {where}: the measurement would read the cache, not the {what}",
                            f"drop {option}: the default is sized from this machine, "
                            f"{format_size_arg(hint_size)} here; or give more than {format_size_arg(cache.bytes)}")
    rule = f"{format_bytes(size)}: {option}; {CACHE_MULTIPLE}x the last-level cache of {where} is {format_bytes(want)}"
    warns: tuple[dict, ...] = ()
    if size < CACHE_MULTIPLE * cache.bytes:
        warns = (warning(code, f"{option} {format_bytes(size)} is under {CACHE_MULTIPLE}x the "
                         f"{format_bytes(cache.bytes)} last-level cache of {where}: {share_text(cache, size)}",
                         f"drop {option}: the default is sized from this machine, {format_size_arg(hint_size)} here"),)
    return BufferRule(size, True, cache, room, rule, warns)
