"""The console script's typer-free fast path for ``sactool probe``: same output and exit codes as
the typer command, and it imports neither numpy/numba nor typer/pydantic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.trees import unpack
from sactool import cli, entry
from sactool.entry import parse_fast_probe

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("argv,want", [
    (["probe"], {}),
    (["--debug", "probe", "-f", "json"], {"debug": True, "fmt": "json"}),
    (["probe", "--format=yaml", "--sysfs-root", "/x", "--snapshot=s.tgz", "--force"],
     {"fmt": "yaml", "sysfs_root": Path("/x"), "snapshot": Path("s.tgz"), "force": True}),
])
def test_fast_parse(argv, want):
    assert parse_fast_probe(argv) == {"debug": False, **want}


@pytest.mark.parametrize("argv", [
    [], ["--version"], ["probe", "--help"], ["probe", "-h"], ["probe", "--format"], ["probe", "-f", "json", "-f", "yaml"],
    ["probe", "--bogus"], ["probe", "extra"], ["bench"], ["probe", "--format="], ["probe", "-f=json"],
])
def test_fast_parse_declines(argv):
    assert parse_fast_probe(argv) is None


@pytest.mark.parametrize("extra", [["--format", "json"], ["-f", "yaml"], [], ["--format", "xml"]])
def test_same_as_typer(tmp_path, capsys, monkeypatch, extra):
    monkeypatch.setenv("COLUMNS", "200")
    root = str(unpack("ram__30-system-ram", tmp_path / "r"))
    outs = []
    for fn in (entry.main, cli.main):
        code = fn(["probe", "--sysfs-root", root, *extra])
        out, err = capsys.readouterr()
        if "json" in extra:
            d = json.loads(out)
            d.pop("created_at")
            out = d
        elif "yaml" in extra:
            out = "\n".join(line for line in out.splitlines() if not line.startswith("created_at"))
        outs.append((code, out, err))
    assert outs[0] == outs[1]


def test_same_errors(tmp_path, capsys):
    for argv in (["probe", "--sysfs-root", str(tmp_path / "nope")], ["probe", "--sysfs-root", str(tmp_path)]):
        a = (entry.main(argv), capsys.readouterr())
        b = (cli.main(argv), capsys.readouterr())
        assert a == b and a[0] == 3


def test_falls_back_to_typer(capsys):
    assert entry.main(["--version"]) == 0
    assert capsys.readouterr().out.strip()


def test_probe_imports_no_numpy_numba_typer():
    code = ("import sys; from sactool.entry import main\n"
            "for fmt in ('json', 'table'): main(['probe', '--format', fmt])\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'numba', 'typer', 'pydantic'))\n"
            "sys.stderr.write('MODULES=' + ','.join(bad) + '\\n')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    line = [ln for ln in res.stderr.splitlines() if ln.startswith("MODULES=")][0]
    assert line == "MODULES=", line


def test_typer_command_imports_no_numpy_numba():
    code = ("import sys; from sactool.cli import main; main(['probe', '--format', 'json'])\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'numba'))\n"
            "sys.stderr.write('MODULES=' + ','.join(bad) + '\\n')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    line = [ln for ln in res.stderr.splitlines() if ln.startswith("MODULES=")][0]
    assert line == "MODULES=", line
