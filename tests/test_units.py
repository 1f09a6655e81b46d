"""units.py: user-given sizes and token counts."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from sactool.errors import ExitCode, UsageError
from sactool.units import format_bytes, format_tokens, parse_list, parse_size, parse_tokens


@pytest.mark.parametrize("text,expected", [
    ("2GiB", 2 << 30), ("2G", 2 << 30), ("2g", 2 << 30), ("512MiB", 512 << 20), ("512M", 512 << 20),
    ("64k", 64 << 10), ("64KiB", 64 << 10), ("4096B", 4096), ("1.5GiB", 3 << 29),
    ("1GB", 10**9), ("1.5GB", 1_500_000_000), ("10MB", 10**7), ("3kB", 3000), (" 1 TiB ", 1 << 40),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "2 GiBs", "-1G", "0", "0GiB", "1.2.3G", "2 parsecs", "1e9",
                                  "4096", "30"])  # a bare number has no unit (issue 11 item 17)
def test_parse_size_rejects(text):
    with pytest.raises(UsageError) as ei:
        parse_size(text, what="--size")
    assert ei.value.exit_code == ExitCode.USAGE and ei.value.hint


@pytest.mark.parametrize("text,expected", [("16k", 16384), ("128K", 131072), ("5000", 5000), ("1m", 1 << 20)])
def test_parse_tokens(text, expected):
    assert parse_tokens(text) == expected


@pytest.mark.parametrize("text", ["", "16kb", "0", "-5", "1.5k", "k"])
def test_parse_tokens_rejects(text):
    with pytest.raises(UsageError):
        parse_tokens(text)


def test_parse_list():
    assert parse_list("16k,32k, 64k", parse_tokens, what="context") == [16384, 32768, 65536]
    with pytest.raises(UsageError, match="empty"):
        parse_list(" , ", parse_tokens, what="context")


@given(st.integers(min_value=1, max_value=1 << 50))
def test_format_bytes_roundtrip_order_of_magnitude(n):
    s = format_bytes(n)
    num, unit = s.split()
    mult = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50}[unit]
    assert abs(float(num) * mult - n) <= max(0.005 * mult, 0.5) + 1e-9 * n


def test_format_tokens():
    assert format_tokens(16384) == "16K" and format_tokens(5000) == "5000"
