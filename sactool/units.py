"""Parsing and printing of sizes, counts and context lengths — the one module for units.

Two size conventions, one suffix table:

* **user input** (``--size 2GiB``): binary suffixes (KiB, MiB, GiB, TiB; also K/M/G/T and k) are
  powers of 1024; decimal ones (kB, MB, GB, TB) powers of 1000, as numactl/MLC users expect;
* **kernel text** (``/proc/meminfo``'s ``kB``, a cache's ``size`` ``32768K``): every suffix is a
  power of 1024, as the kernel prints them (``Documentation/filesystems/proc.rst``: "kB" is KiB).

Context lengths (``16k``) are tokens: ``k`` = 1024 tokens, matching how 16K/32K/64K/128K contexts
are named. Integer lists (``1,2,4``, CPU lists ``0-3,8``) have one parser, :func:`expand_int_list`.
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


def format_bytes(n: float | int | None) -> str:
    """Human binary size: 2147483648 → ``"2.00 GiB"``."""
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} PiB"  # pragma: no cover


def format_rate(bytes_per_s: float | None) -> str:
    """Bandwidth in decimal GB/s, as MLC and STREAM print it."""
    if bytes_per_s is None:
        return "-"
    return f"{bytes_per_s / 1e9:.2f} GB/s"


def format_tokens(n: int) -> str:
    """16384 → ``"16K"``; 5000 → ``"5000"``."""
    return f"{n // 1024}K" if n % 1024 == 0 and n >= 1024 else str(n)
