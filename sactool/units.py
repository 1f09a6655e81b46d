"""Parsing and printing of sizes, counts and context lengths — the one module for units.

Two size conventions, one suffix table:

* **user input** (``--size 2GiB``): binary suffixes (KiB, MiB, GiB, TiB; also K/M/G/T and k) are
  powers of 1024; decimal ones (kB, MB, GB, TB) powers of 1000, as numactl/MLC users expect;
* **kernel text** (``/proc/meminfo``'s ``kB``, a cache's ``size`` ``32768K``): every suffix is a
  power of 1024, as the kernel prints them (``Documentation/filesystems/proc.rst``: "kB" is KiB).

Context lengths (``16k``) are tokens: ``k`` = 1024 tokens, matching how 16K/32K/64K/128K contexts
are named. Integer lists (``1,2,4``, CPU lists ``0-3,8``) have one parser, :func:`expand_int_list`.

**The one unit rule for what people read** (data keeps base units with the unit in the key):

* memory sizes in IEC units — :func:`format_bytes` (``3.12 GiB``, ``256.00 MiB``); a size given by a
  user must carry its unit (``30GiB``; ``4096B`` for bytes): a bare number is refused, since
  ``--gpu-kv-budget 30`` read as 30 bytes helps nobody;
* rates in SI GB/s — :func:`format_rate`, as MLC and STREAM print them;
* rates of hits (hit rates, shares) as percentages — :func:`format_percent` (``98.50%``);
* a value the kernel prints as all ones (``0xffffffffffffffff``, "no value"), or anything at or
  above 2**64 - 1 bytes (beyond a 64-bit address space), is ``unknown``, never a size.
"""

from __future__ import annotations

import re

from sactool.errors import UsageError

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_BIN = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
        "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40}
_DEC = {"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def suffix_bytes(unit: str, *, kernel: bool = False) -> int:
    """Bytes per ``unit`` (``"GiB"`` → 2**30, ``"GB"`` → 10**9; with ``kernel`` ``"kB"`` → 1024).

    Raises ValueError for an unknown suffix.
    """
    key = unit.strip().lower()
    if key in _DEC:
        return 1 << (10 * (1 + ("kb", "mb", "gb", "tb").index(key))) if kernel else _DEC[key]
    if key in _BIN:
        return _BIN[key]
    raise ValueError(f"unknown size unit {unit!r}")


def parse_kernel_size(text: str) -> int:
    """A size as the kernel prints it: ``"32768K"``, ``"1024 kB"``, ``"4096"`` → bytes (ValueError on garbage)."""
    m = _SIZE_RE.match(str(text))
    if not m or "." in m.group(1):
        raise ValueError(f"not a kernel size: {str(text).strip()!r}")
    return int(m.group(1)) * suffix_bytes(m.group(2), kernel=True)


MAX_LIST_IDS = 1 << 16
"""Most ids a range list may expand to: 8x the kernel's largest CPU count (``CONFIG_NR_CPUS`` is at
most 8192, ``MAXSMP``); NUMA nodes are at most 1024 (``NODES_SHIFT`` 10). A recorded tree's
``cpulist`` of ``0-4000000000`` is refused as unparsable instead of filling memory."""


def expand_int_list(text: str, *, ranges: bool = True) -> list[int]:
    """``"0-3,8,10-11"`` → [0, 1, 2, 3, 8, 10, 11] in the order written (ValueError on garbage).

    The kernel's range-list form (``bitmap_parselist``: ``lo-hi`` and ``lo-hi:stride``) when
    ``ranges``; plain comma-separated integers otherwise. Blank text gives ``[]``; negative ids,
    empty elements and reversed ranges are refused.
    """
    s = str(text).strip()
    if not s:
        return []
    out: list[int] = []
    for part in s.split(","):
        part = part.strip()
        if not part:
            raise ValueError(f"empty element in list {s!r}")
        if ranges and "-" in part[1:]:
            lo_s, hi_s = part.split("-", 1)
            stride = 1
            if ":" in hi_s:  # "0-15:2" stride form (bitmap_parselist)
                hi_s, stride_s = hi_s.split(":", 1)
                stride = int(stride_s)
            lo, hi = int(lo_s), int(hi_s)
            if hi < lo or lo < 0 or stride < 1:
                raise ValueError(f"bad range {part!r}")
            if len(out) + (hi - lo) // stride + 1 > MAX_LIST_IDS:   # a recorded "0-4000000000"
                raise ValueError(f"range {part!r} expands to more than {MAX_LIST_IDS} ids")
            out.extend(range(lo, hi + 1, stride))
        else:
            v = int(part)
            if v < 0:
                raise ValueError(f"negative value {part!r}")
            out.append(v)
    return out


def parse_int_list(text: str, *, what: str, ranges: bool = False, minimum: int = 0) -> tuple[int, ...]:
    """User-given comma-separated integers (``--threads 1,2,4``) → tuple, or a UsageError with a hint."""
    example = "0-3,8" if ranges else "1,2,4"
    try:
        vals = expand_int_list(",".join(p for p in str(text).split(",") if p.strip()), ranges=ranges)
    except ValueError as e:
        raise UsageError(f"{what} {text!r} is not a list of integers ({e})", f"write it like {what} {example}") from None
    if not vals:
        raise UsageError(f"{what} {text!r} is empty", "give one or more comma-separated values")
    low = [v for v in vals if v < minimum]
    if low:
        raise UsageError(f"{what} {text!r}: {low[0]} is below {minimum}", f"give values of at least {minimum}")
    return tuple(vals)


def parse_size(text: str, *, what: str = "size") -> int:
    """``"2GiB"`` → 2147483648; ``"512M"`` → 536870912; ``"1.5GB"`` → 1500000000."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise UsageError(f"{what} {text!r} is not a size", "write it like 2GiB, 512MiB, 64k or 1.5GB")
    num, unit = float(m.group(1)), m.group(2)
    if not unit:
        raise UsageError(f"{what} {text!r} has no unit",
                         f"write it with one, e.g. {m.group(1)}GiB or {m.group(1)}MiB ({m.group(1)}B for bytes)")
    try:
        mult = suffix_bytes(unit)
    except ValueError:
        raise UsageError(f"{what} {text!r} has unknown unit {unit!r}",
                         "use B, KiB, MiB, GiB, TiB (or kB, MB, GB)") from None
    value = int(round(num * mult))
    if value <= 0:
        raise UsageError(f"{what} {text!r} must be positive", "give a size above zero")
    return value


def parse_tokens(text: str, *, what: str = "context") -> int:
    """``"16k"`` → 16384 tokens, ``"128K"`` → 131072, ``"5000"`` → 5000."""
    s = str(text).strip().lower()
    m = re.match(r"^(\d+)\s*(k|m)?$", s)
    if not m:
        raise UsageError(f"{what} {text!r} is not a token count", "write it like 16k, 128k or 32768")
    n = int(m.group(1)) * {None: 1, "k": 1024, "m": 1024 * 1024}[m.group(2)]
    if n <= 0:
        raise UsageError(f"{what} {text!r} must be positive", "give a token count above zero")
    return n


def parse_list(text: str, parse, *, what: str) -> list:
    """Comma-separated list through ``parse``: ``"16k,32k"`` → [16384, 32768]."""
    items = [p for p in str(text).split(",") if p.strip()]
    if not items:
        raise UsageError(f"{what} list {text!r} is empty", "give one or more comma-separated values")
    return [parse(p, what=what) for p in items]


UNKNOWN_SIZE_BYTES = (1 << 64) - 1
"""The kernel's all-ones "no value" for 64-bit sizes; at or above it a figure is not a memory size."""


def known_size(n: float | int | None) -> float | int | None:
    """``n`` if it can be a memory size, else None (all-ones / beyond 64 bits / not finite)."""
    if n is None or isinstance(n, bool):
        return None
    if isinstance(n, int):
        return None if abs(n) >= UNKNOWN_SIZE_BYTES else n
    try:
        f = float(n)
    except (TypeError, ValueError):
        return None
    if f != f or abs(f) >= float(1 << 64):  # NaN, inf, and a float all-ones (it rounds to 2**64)
        return None
    return n


def format_bytes(n: float | int | None) -> str:
    """Memory size in IEC units: 2147483648 → ``"2.00 GiB"``; None → ``"-"``; all-ones → ``"unknown"``."""
    if n is None:
        return "-"
    if known_size(n) is None:
        return "unknown"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(n) < 1024 or unit == "EiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} EiB"  # pragma: no cover


def format_size_arg(n: int) -> str:
    """A size as one types it for ``--size``: ``268435456`` → ``"256MiB"`` (whole MiB, rounded up;
    GiB when it is a whole number of GiB)."""
    mib = -(-int(n) // (1 << 20))
    return f"{mib // 1024}GiB" if mib and mib % 1024 == 0 else f"{mib}MiB"


def format_rate(bytes_per_s: float | None) -> str:
    """Bandwidth in decimal GB/s, as MLC and STREAM print it."""
    if bytes_per_s is None:
        return "-"
    if known_size(bytes_per_s) is None:
        return "unknown"
    return f"{bytes_per_s / 1e9:.2f} GB/s"


def format_percent(fraction: float | None, digits: int = 2) -> str:
    """A rate of hits or a share, 0..1 → ``"98.50%"``; None → ``"-"``."""
    if fraction is None or fraction != fraction:
        return "-"
    return f"{fraction * 100:.{digits}f}%"


def format_tokens(n: int) -> str:
    """16384 → ``"16K"``; 5000 → ``"5000"``."""
    return f"{n // 1024}K" if n % 1024 == 0 and n >= 1024 else str(n)


_NODE_NAME_RE = re.compile(r"^node(\d+)$")


def node_number(value: object) -> int | None:
    """A NUMA node as records hold it (docs/reference/units.md: the kernel's integer, ``2``) from
    either spelling: ``2`` or the ``"node2"`` of records written before that rule. None for
    anything else (None, a DAX device name, a bool)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    if isinstance(value, str):
        m = _NODE_NAME_RE.match(value)
        if m:
            return int(m.group(1))
    return None


def node_name(value: object, unknown: str = "?") -> str:
    """A NUMA node as people read it: ``node2`` (from ``2`` or ``"node2"``); another string (a pool
    target such as ``dax0.0``) unchanged; ``unknown`` for None."""
    n = node_number(value)
    if n is not None:
        return f"node{n}"
    if value is None or value == "":
        return unknown
    return str(value)
