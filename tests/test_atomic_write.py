"""Issue 11 items 7 and 22: one atomic-write implementation, written with the user's umask,
fsyncing the file and its directory, never clobbering a file another process created meanwhile."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from sactool import records
from sactool.errors import ExistsError, ExitCode


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_file_follows_the_umask(tmp_path, umask, mode):
    """A real process with its own umask (the umask is per process), as sactool runs."""
    out = tmp_path / "p.yaml"
    code = (f"import os; os.umask({umask:#o}); from sactool.records import atomic_write; "
            f"atomic_write({str(out)!r}, 'x: 1\\n')")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert stat.S_IMODE(out.stat().st_mode) == mode
    assert out.read_text() == "x: 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["p.yaml"]  # no temporary left


def test_fsyncs_file_and_directory(tmp_path, monkeypatch):
    kinds = []
    real = os.fsync

    def spy(fd):
        kinds.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        return real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    records.atomic_write(tmp_path / "a.json", "{}")
    assert kinds == ["file", "dir"]


def test_refuses_a_file_created_meanwhile(tmp_path, monkeypatch):
    """Two concurrent writers without --force: the second does not replace the first."""
    out = tmp_path / "same.json"
    real_fsync = os.fsync

    def other_writer_finishes_first(fd):
        real_fsync(fd)
        if not out.exists():
            out.write_text("first\n")

    monkeypatch.setattr(os, "fsync", other_writer_finishes_first)
    with pytest.raises(ExistsError) as ei:
        records.atomic_write(out, "second\n")
    assert ei.value.exit_code == ExitCode.EXISTS
    assert out.read_text() == "first\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.json"]


def test_force_replaces(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("old")
    records.atomic_write(out, "new", force=True)
    assert out.read_text() == "new"


def test_one_atomic_write_in_the_package():
    """No second copy: nothing outside records.py renames temporaries or makes mkstemp files
    (gathergen had its own, without fsync)."""
    import re
    from pathlib import Path

    root = Path(records.__file__).resolve().parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py") if p.name != "records.py"
                 and re.search(r"os\.replace\(|os\.rename\(|mkstemp\(|\.write_text\(|\.write_bytes\(", p.read_text())]
    assert offenders == []


def test_generated_kernel_written_with_umask(tmp_path, monkeypatch):
    from sactool.bench import gathergen

    monkeypatch.setenv("SACTOOL_CACHE_DIR", str(tmp_path))
    old = os.umask(0o027)
    try:
        gathergen.gather_kernel(24, 3)
    finally:
        os.umask(old)
    (mod,) = (tmp_path / "kernels").glob("sactool_gather_r24_d3_*.py")
    assert stat.S_IMODE(mod.stat().st_mode) == 0o640
    assert not list((tmp_path / "kernels").glob("*.tmp"))
