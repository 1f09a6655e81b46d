"""Parsing and printing of sizes, counts and context lengths given by users.

Binary suffixes (KiB, MiB, GiB, TiB; also K/M/G/T and k) are powers of 1024; decimal
ones (kB, MB, GB, TB) powers of 1000, as numactl/MLC users expect. Context lengths
(``16k``) are tokens: ``k`` = 1024 tokens, matching how 16K/32K/64K/128K contexts are named.
"""

from __future__ import annotations

import re

from sactool.errors import UsageError

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_BIN = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
        "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40}
_DEC = {"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_size(text: str, *, what: str = "size") -> int:
    """``"2GiB"`` → 2147483648; ``"512M"`` → 536870912; ``"1.5GB"`` → 1500000000."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise UsageError(f"{what} {text!r} is not a size", "write it like 2GiB, 512MiB, 64k or 1.5GB")
    num, unit = float(m.group(1)), m.group(2)
    key = unit.lower()
    if key in _DEC:
        mult = _DEC[key]
    elif key in _BIN:
        mult = _BIN[key]
    else:
        raise UsageError(f"{what} {text!r} has unknown unit {unit!r}", "use B, KiB, MiB, GiB, TiB (or kB, MB, GB)")
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
