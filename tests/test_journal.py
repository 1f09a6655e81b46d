"""tune's journal ``<out>.points.jsonl`` (issue 27, R2, R3).

R2: it was opened with ``open(path, "a")``: a planted dangling link made tune create the link's
target, and with ``--resume`` it appended to whatever file a link named. R3: a last line cut off by a
crash or a full disk was dropped when read, but the next ``--resume`` appended right after it, so
the line after that was garbage in the middle of the file and the next run exited 4 ("delete the
file to start over")."""

from __future__ import annotations

import os

import pytest

from sactool.cli import main
from sactool.errors import ExistsError, RecordError
from sactool.records import append_jsonl, read_jsonl


def test_a_planted_link_is_never_written_through(tmp_path):
    target = tmp_path / "elsewhere" / "victim"
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "p.yaml.points.jsonl"
    link.symlink_to(target)                       # dangling: open(…, "a") created the target
    with pytest.raises(ExistsError, match="symbolic link"):
        append_jsonl(link, {"kind": "gather"})
    assert not target.exists()
    target.write_text('{"kind": "theirs"}\n')      # --resume appended to whatever it named
    with pytest.raises(ExistsError, match="symbolic link"):
        append_jsonl(link, {"kind": "gather"})
    assert target.read_text() == '{"kind": "theirs"}\n'


def test_a_new_journal_is_created_afresh(tmp_path):
    path = tmp_path / "j.jsonl"
    append_jsonl(path, {"n": 1}, new=True)
    with pytest.raises(ExistsError, match="created by someone else"):
        append_jsonl(path, {"n": 2}, new=True)   # appeared meanwhile: not ours to append to
    append_jsonl(path, {"n": 2})
    assert read_jsonl(path) == [{"n": 1}, {"n": 2}]


def test_a_torn_last_line_is_dropped_before_the_next_append(tmp_path):
    path = tmp_path / "j.jsonl"
    for n in (1, 2):
        append_jsonl(path, {"n": n})
    with open(path, "ab") as f:
        f.write(b'{"n": 3, "ban')                 # killed mid-write, or a full disk
    assert read_jsonl(path) == [{"n": 1}, {"n": 2}]
    append_jsonl(path, {"n": 4})                  # the next --resume
    append_jsonl(path, {"n": 5})
    assert read_jsonl(path) == [{"n": 1}, {"n": 2}, {"n": 4}, {"n": 5}]   # the run after that reads it too
    assert path.read_bytes().endswith(b'{"n": 5}\n')


def test_a_journal_torn_inside_its_first_line(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"n": 1, "x"')
    append_jsonl(path, {"n": 2})
    assert read_jsonl(path) == [{"n": 2}]


def test_garbage_before_the_last_line_is_still_refused(tmp_path):
    """Only the last line can be torn by a crash; a broken line before it is corruption (exit 4)."""
    path = tmp_path / "j.jsonl"
    path.write_text('{"n": 1}\n{"n": 2, "x\n{"n": 3}\n')
    with pytest.raises(RecordError, match="not valid JSON"):
        read_jsonl(path)


def test_tune_refuses_a_link_where_its_journal_goes_before_any_work(tmp_path, machine, capsys, fast_bench_record):
    target = tmp_path / "victim"
    out = tmp_path / "p.yaml"
    (tmp_path / "p.yaml.points.jsonl").symlink_to(target)
    args = ["tune", "--context", "4k", "--steps", "4", "--replicates", "1", "--out", str(out),
            "--bench", str(fast_bench_record), "--sysfs-root", str(machine("this-machine"))]
    for extra in ([], ["--resume"], ["--force"]):
        assert main(args + extra) == 5
        err = capsys.readouterr().err
        assert "p.yaml.points.jsonl exists and is a symbolic link, not a regular file" in err, err
        assert not target.exists() and not out.exists()
    assert os.path.islink(tmp_path / "p.yaml.points.jsonl")
