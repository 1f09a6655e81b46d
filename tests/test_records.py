"""records.py: headers, upgrades and refusals, atomic writes, JSON-lines resumption, to_data."""

from __future__ import annotations

import dataclasses
import enum
import json
import os

import pytest

from sactool import __version__
from sactool.errors import SactoolError, ExistsError, ExitCode, RecordError
from sactool.records import (append_jsonl, atomic_write, digest, dumps, header, load_structured,
                             read_jsonl, to_data, upgrade)


def test_header_has_provenance_fields():
    h = header("bench", 3)
    assert h["kind"] == "bench" and h["schema_version"] == 3
    assert h["sactool_version"] == __version__
    assert h["created_at"].endswith("Z") and "T" in h["created_at"]


def test_upgrade_steps_in_order():
    steps = {1: lambda r: {**r, "b": r["a"] * 2}, 2: lambda r: {**r, "c": r["b"] + 1}}
    out = upgrade({"kind": "x", "schema_version": 1, "a": 5}, kind="x", current=3, steps=steps)
    assert out == {"kind": "x", "schema_version": 3, "a": 5, "b": 10, "c": 11}


@pytest.mark.parametrize("rec,needle", [
    ({"kind": "x", "schema_version": 9}, "newer"),
    ({"kind": "y", "schema_version": 1}, "'y' record"),
    ({"kind": "x"}, "no valid schema_version"),
    ({"kind": "x", "schema_version": True}, "no valid schema_version"),
    ({"kind": "x", "schema_version": 1}, "cannot be upgraded"),
    ([1, 2], "not a mapping"),
])
def test_upgrade_refusals(rec, needle):
    with pytest.raises(RecordError) as ei:
        upgrade(rec, kind="x", current=2, steps={})
    assert needle in ei.value.message
    assert ei.value.exit_code == ExitCode.RECORD
    if needle == "newer":
        assert "upgrade sactool" in ei.value.hint


def test_atomic_write_refuses_overwrite_and_keeps_old(tmp_path):
    p = tmp_path / "sub" / "f.yaml"
    with pytest.raises(SactoolError, match="sub does not exist"):   # a missing parent is not created silently
        atomic_write(p, "one")
    atomic_write(p, "one", make_parents=True)
    with pytest.raises(ExistsError):
        atomic_write(p, "two")
    assert p.read_text() == "one"
    atomic_write(p, "three", force=True)
    assert p.read_text() == "three"
    assert [x.name for x in p.parent.iterdir()] == ["f.yaml"]  # no temp files left


def test_atomic_write_unwritable_dir(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        if os.access(d, os.W_OK):  # running as root: permissions do not bind
            target = tmp_path / "file-not-dir"
            target.write_text("x")
            with pytest.raises(Exception) as ei:
                atomic_write(target / "f", "x")
            assert "cannot write" in str(ei.value)
        else:
            with pytest.raises(Exception) as ei:
                atomic_write(d / "f", "x")
            assert "cannot write" in str(ei.value)
    finally:
        d.chmod(0o700)


def test_jsonl_roundtrip_and_torn_last_line(tmp_path):
    p = tmp_path / "pts.jsonl"
    append_jsonl(p, {"a": 1})
    append_jsonl(p, {"a": 2})
    with open(p, "a") as f:
        f.write('{"a": 3')  # killed mid-write
    assert read_jsonl(p) == [{"a": 1}, {"a": 2}]
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_jsonl_corrupt_middle_line_is_an_error(tmp_path):
    p = tmp_path / "pts.jsonl"
    p.write_text('{"a": 1}\nnot json\n{"a": 2}\n')
    with pytest.raises(RecordError) as ei:
        read_jsonl(p)
    assert ":2" in ei.value.message


def test_load_structured_errors(tmp_path):
    with pytest.raises(RecordError, match="does not exist"):
        load_structured(tmp_path / "nope.yaml", what="profile")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(RecordError, match="corrupt"):
        load_structured(bad, what="profile")
    lst = tmp_path / "list.json"
    lst.write_text("[1, 2]")
    with pytest.raises(RecordError, match="not a mapping"):
        load_structured(lst, what="bench record")
    # safe_load: python tags are refused, not executed
    evil = tmp_path / "evil.yaml"
    evil.write_text("a: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(RecordError, match="corrupt"):
        load_structured(evil, what="profile")


class Color(enum.Enum):
    RED = "red"


@dataclasses.dataclass(frozen=True)
class Inner:
    xs: tuple[int, ...]
    c: Color
    _private: int = 0


@dataclasses.dataclass(frozen=True)
class Outer:
    inner: Inner
    tags: frozenset
    m: dict


def test_to_data_and_dumps():
    o = Outer(Inner((1, 2), Color.RED, 7), frozenset({"b", "a"}), {1: Inner((), Color.RED)})
    d = to_data(o)
    assert d == {"inner": {"xs": [1, 2], "c": "red"}, "tags": ["a", "b"], "m": {"1": {"xs": [], "c": "red"}}}
    assert json.loads(dumps(o, "json")) == d
    import yaml

    assert yaml.safe_load(dumps(o, "yaml")) == d


def test_digest_is_stable():
    assert digest("abc") == digest(b"abc")
    assert digest("abc").startswith("sha256:") and digest("abc") != digest("abd")
