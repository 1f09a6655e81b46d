"""cli.main: exit codes, error/hint on stderr, nothing but data on stdout."""

from __future__ import annotations

from sactool import __version__
from sactool.cli import main


def test_version(capsys):
    assert main(["--version"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == __version__ and err == ""


def test_unknown_command_is_usage_error(capsys):
    assert main(["frobnicate"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "frobnicate" in err


def test_bad_format_is_usage_error(capsys):
    assert main(["probe", "--format", "xml"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: ") and "'xml' is not one of 'table', 'json', 'yaml'" in err and "hint:" in err


def test_missing_sysfs_root_exit_code(tmp_path, capsys):
    assert main(["probe", "--sysfs-root", str(tmp_path / "nope")]) == 3
    out, err = capsys.readouterr()
    assert out == "" and "does not exist" in err and "hint:" in err and "Traceback" not in err
