"""The README's two lines, in the order shown, on a fresh clone (issue 27, N1, N2, N13).

Line 1 (``sactool tune --model deepseek-v3.2`` in the checkout) leaves
``profiles/deepseek-v3.2/<hostname>.yaml`` there; line 2 (the suite) then failed: the docs-example
working directory linked the checkout's ``profiles/``, so tune's default output already existed
(exit 5, not the page's 6), and a recording's profile was named after this machine. The README's
walk unpacks ``sac2s/`` (a sysfs recording full of link loops) in the checkout; setuptools' package
discovery (PEP 420 namespaces, following links) then walked it forever in ``pip install .``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sactool.cli import main
from sactool.profile import default_profile_path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "tests" / "fixtures" / "bench" / "node0-gather.json"


def test_the_suite_runs_outside_the_checkout():
    """conftest's working directory: a command given no --out writes there, never into the checkout."""
    assert REPO not in Path.cwd().resolve().parents and Path.cwd().resolve() != REPO


def test_the_docs_examples_see_only_the_shipped_profiles(tmp_path):
    from test_docs_examples import workdir_for

    wd = workdir_for(tmp_path)
    try:
        assert not (wd / "profiles").is_symlink()
        assert [p.name for p in (wd / "profiles").iterdir()] == ["examples"]
        assert (wd / "profiles" / "examples").resolve() == REPO / "profiles" / "examples"
    finally:
        import shutil

        shutil.rmtree(wd)


def test_a_recordings_profile_is_named_after_the_recording(machine):
    """A recording without a hostname (every sac2s phase): its directory's name; one with a recorded
    hostname (this-machine: ``vm``): that name — this machine's own never."""
    sac2s = machine("sac2s__20-devdax")
    assert default_profile_path("deepseek-v3.2", sysfs_root=sac2s) == Path("profiles/deepseek-v3.2") / f"{sac2s.name}.yaml"
    vm = machine("this-machine")
    assert vm.name != "vm" and default_profile_path("deepseek-v3.2", sysfs_root=vm).name == "vm.yaml"


@pytest.mark.parametrize("name,want", [("(none)", "localhost"), ("", "localhost"), ("db 7/x", "db_7_x"),
                                        ("node-3.example.org", "node-3.example.org")])
def test_a_host_without_a_usable_name_gets_a_sane_file_name(monkeypatch, name, want):
    import socket

    monkeypatch.setattr(socket, "gethostname", lambda: name)
    assert default_profile_path("glm-5") == Path("profiles/glm-5") / f"{want}.yaml"


def test_readme_line_one_leaves_what_the_tune_page_does_not_trip_over(machine, tmp_path, monkeypatch, capsys):
    """The tune page's refusal example (rc 6) after the README's tune left this host's profile in the
    working directory: still 6 — the recording's profile has its own name; and its own name taken
    is the refusal it should be (5, naming that file)."""
    import socket

    monkeypatch.chdir(tmp_path)
    tree = machine("sac2s__20-devdax")
    left = tmp_path / "profiles" / "deepseek-v3.2" / f"{socket.gethostname()}.yaml"
    left.parent.mkdir(parents=True)
    left.write_text("the README's profile\n")
    args = ["tune", "--model", "deepseek-v3.2", "--sysfs-root", str(tree), "--bench", str(BENCH)]
    assert main(args) == 6, capsys.readouterr().err
    assert "not one request of 16384 tokens fits" in capsys.readouterr().err
    (left.parent / f"{tree.name}.yaml").write_text("an earlier tune of the recording\n")
    assert main(args) == 5
    assert f"profiles/deepseek-v3.2/{tree.name}.yaml already exists" in capsys.readouterr().err
    assert left.read_text() == "the README's profile\n"


FIND = textwrap.dedent("""
    import sys
    from setuptools.config.pyprojecttoml import read_configuration
    conf = read_configuration(sys.argv[1], expand=True)
    print(" ".join(sorted(conf["tool"]["setuptools"]["packages"])))
""")


def test_package_discovery_never_walks_into_an_unpacked_recording(tmp_path):
    """pyproject.toml's package discovery on a checkout holding a directory of link loops (the
    README walk's ``sac2s/``): regular packages only (``namespaces = false``), so it never descends
    where no ``__init__.py`` is. With PEP 420 discovery this walked the loops until killed."""
    pytest.importorskip("setuptools.config.pyprojecttoml", reason="setuptools is not installed in this environment")
    proj = tmp_path / "checkout"
    proj.mkdir()
    text = (REPO / "pyproject.toml").read_text()
    find = "[tool.setuptools.packages.find]" + text.split("[tool.setuptools.packages.find]", 1)[1].split("\n[", 1)[0]
    # the discovery table as it is; the metadata cut to what any setuptools validates
    (proj / "pyproject.toml").write_text(f'[project]\nname = "sactool"\nversion = "0"\n\n{find}\n')
    (proj / "sactool").symlink_to(REPO / "sactool")
    loops = proj / "sac2s" / "sys" / "devices"
    loops.mkdir(parents=True)
    for i in range(8):   # each link leads back up: a walk that follows links never ends
        (loops / f"l{i}").symlink_to("..")
    r = subprocess.run([sys.executable, "-c", FIND, str(proj / "pyproject.toml")], capture_output=True, text=True,
                       timeout=60, cwd=proj)
    assert r.returncode == 0, r.stderr[-2000:]
    found = r.stdout.split()
    pkgs = sorted(".".join(p.relative_to(REPO).parts[:-1]) for p in (REPO / "sactool").rglob("__init__.py")
                  if "__pycache__" not in p.parts)
    assert found == pkgs
    assert not any(p.startswith("sac2s") for p in found)
