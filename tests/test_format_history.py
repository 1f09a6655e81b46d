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


def _page_histories() -> dict[str, dict[int, str]]:
    """docs/reference/records.md's format-history table: kind → {version: what the page says changed}."""
    page = (PKG.parent / "docs" / "reference" / "records.md").read_text()
    table = page.split("## Format history", 1)[1].split("\n## ", 1)[0]
    out = {}
    for row in re.findall(r"^\| `(\w+)` \|[^|]*\|(.*)\|\s*$", table, re.M):
        parts = re.split(r"(?:^|;)\s*(\d+) — ", row[1].strip())
        out[row[0]] = {int(n): text for n, text in zip(parts[1::2], parts[2::2])}
    return out


def _outside_parentheses(text: str) -> str:
    while True:
        shorter = re.sub(r"\([^()]*\)", " ", text)
        if shorter == text:
            return text
        text = shorter


@pytest.mark.parametrize("module", VERSIONED)
def test_the_history_beside_schema_version_is_the_pages(module):
    """Each version line beside SCHEMA_VERSION has its entry in docs/reference/records.md's table, row
    of the same kind, same version numbers; and its gist is there: every ``name`` the line says changed
    (outside its parenthesised details, which the page may word otherwise) is named in that version's
    entry, and "the first format" is the first format there too. A version bumped in the code only, or
    a page entry that describes another change, fails here."""
    version, history = _version_and_history(PKG / module)
    kind = re.match(r"Version of the (?:``(\w+)``|(\w+))", history)
    assert kind, f"{module}: the history's first line names its record kind (Version of the ``kind`` …)"
    kind_name = kind.group(1) or kind.group(2)
    page = _page_histories()
    assert kind_name in page, f"docs/reference/records.md has no format-history row for `{kind_name}` ({module})"
    assert sorted(page[kind_name]) == list(range(1, version + 1)), (kind_name, page[kind_name])
    for n, line in re.findall(r"^(\d+) — (.*)$", history, re.M):
        entry = page[kind_name][int(n)]
        if line.startswith("the first format"):
            assert entry.startswith("the first format"), (kind_name, n, entry)
        names = re.findall(r"``([^`]+)``", _outside_parentheses(line))
        missing = [x for x in names if f"`{x}`" not in entry]
        assert missing == [], f"{kind_name} {n}: the page's entry does not name {missing}: {entry}"
