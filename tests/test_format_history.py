"""Each record's format history lives beside its ``SCHEMA_VERSION``, one line per version (issue 27:
sactool/records.py's own table was wrong in five of seven rows; docs/reference/records.md, tested
in test_docs_reference.py, tells the history whole)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "sactool"
VERSIONED = {"topology": "topology/records.py", "bench": "bench/record.py", "profile": "profile/__init__.py",
             "simulation": "simulate/api.py", "platform": "simulate/platform.py", "fleet_topology": "fleet/probe.py"}


def _version_and_history(path: Path) -> tuple[int, str]:
    body = ast.parse(path.read_text()).body
    for i, node in enumerate(body):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["SCHEMA_VERSION"]:
            doc = body[i + 1] if i + 1 < len(body) else None
            assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), f"{path}: no history beside it"
            return node.value.value, doc.value.value  # type: ignore[attr-defined]
    raise AssertionError(f"{path}: no SCHEMA_VERSION")


@pytest.mark.parametrize("kind", sorted(VERSIONED))
def test_one_line_per_version_beside_schema_version(kind):
    version, history = _version_and_history(PKG / VERSIONED[kind])
    lines = re.findall(r"^(\d+) — \S", history, re.M)
    assert [int(n) for n in lines] == list(range(1, version + 1)), (kind, history)


def test_records_py_keeps_no_history_of_its_own():
    import sactool.records as records

    assert not re.search(r"\d — the first format", records.__doc__ or "")
