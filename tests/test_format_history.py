"""Each record's format history lives beside its ``SCHEMA_VERSION``, one line per version (issue 27:
sactool/records.py's own table was wrong in five of seven rows; docs/reference/records.md, tested
in test_docs_reference.py, tells the history whole)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "sactool"
VERSIONED = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if "\nSCHEMA_VERSION = " in p.read_text())
"""Every module that defines a record's ``SCHEMA_VERSION`` (a new record kind is held to the rule too)."""


def _version_and_history(path: Path) -> tuple[int, str]:
    body = ast.parse(path.read_text()).body
    for i, node in enumerate(body):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["SCHEMA_VERSION"]:
            doc = body[i + 1] if i + 1 < len(body) else None
            assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), f"{path}: no history beside it"
            return node.value.value, doc.value.value  # type: ignore[attr-defined]
    raise AssertionError(f"{path}: no SCHEMA_VERSION")


def test_the_known_record_kinds_are_found():
    assert {"topology/records.py", "bench/record.py", "profile/__init__.py", "simulate/api.py", "simulate/platform.py",
            "fleet/probe.py"} <= set(VERSIONED)


@pytest.mark.parametrize("module", VERSIONED)
def test_one_line_per_version_beside_schema_version(module):
    version, history = _version_and_history(PKG / module)
    lines = re.findall(r"^(\d+) — \S", history, re.M)
    assert [int(n) for n in lines] == list(range(1, version + 1)), (module, history)


def test_records_py_keeps_no_history_of_its_own():
    import sactool.records as records

    assert not re.search(r"\d — the first format", records.__doc__ or "")
