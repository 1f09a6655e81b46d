"""Issue 11 item 9: a user without a writable HOME can still compile and cache numba kernels.

Real subprocesses as uid 65534 (nobody) with HOME unset, the repository read-only to them: numba's
own locators (``__pycache__`` next to the source, ``~/.cache/numba``) are both unusable there.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

SETPRIV = shutil.which("setpriv")
needs_root = pytest.mark.skipif(os.geteuid() != 0 or SETPRIV is None,
                                reason="switching to uid 65534 needs root and setpriv")


@pytest.fixture
def shared_tmp():
    """A temporary directory uid 65534 can write (pytest's tmp_path is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="sactool-nobody-"))
    d.chmod(0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _as_nobody(argv, tmpdir: Path, **env):
    # no HOME; a measurement lock of this test's own (sactool/bench/lock.py): the machine-wide one
    # made these runs wait minutes behind whatever anyone else measured (300 s timeouts under load)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": str(tmpdir),
            "SACTOOL_MEASURE_LOCK": str(tmpdir / "measure.lock"), **env}
    if "PYTHONPATH" in os.environ:
        base["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.run([SETPRIV, "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
                          env=base, capture_output=True, text=True, timeout=300, cwd=tmpdir)


@needs_root
def test_bench_as_nobody_without_home_compiles_and_caches(shared_tmp):
    sactool = str(Path(sys.executable).with_name("sactool"))
    r = _as_nobody([sactool, "bench", "latency", "--size", "16MiB", "--preset", "fast", "-f", "json"], shared_tmp)
    assert r.returncode == 0, r.stderr
    assert "no locator available" not in r.stderr
    cache = shared_tmp / "sactool-65534"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700 and cache.stat().st_uid == 65534
    assert list((cache / "numba").rglob("*.nbi")), "numba wrote no cache index"


@needs_root
def test_tune_and_simulate_kernels_import_as_nobody(shared_tmp):
    # the modules tune and simulate load decorate their kernels with cache=True at import
    code = ("import sactool.hisparse.hotbuffer, sactool.workload.generator, sactool.workload.stats\n"
            "from sactool.bench.gathergen import gather_kernel, cache_dir\n"
            "gather_kernel(64, 0); print(cache_dir())")
    r = _as_nobody([sys.executable, "-c", code], shared_tmp)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(shared_tmp / "sactool-65534" / "kernels")


@needs_root
def test_users_numba_cache_dir_is_respected(shared_tmp):
    mine = shared_tmp / "mine"
    r = _as_nobody([sys.executable, "-c", "import os, sactool.workload.stats; print(os.environ['NUMBA_CACHE_DIR'])"],
                   shared_tmp, NUMBA_CACHE_DIR=str(mine))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(mine)


def test_shared_tmp_dir_owned_by_someone_else_is_not_used(tmp_path, monkeypatch):
    """<tempdir>/sactool-<uid> planted by another user (or world-writable) is refused."""
    from sactool import cachedir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    planted = tmp_path / f"sactool-{os.getuid()}"
    planted.mkdir()
    planted.chmod(0o777)
    assert cachedir._private_tmp() is None
    planted.chmod(0o700)
    assert cachedir._private_tmp() == planted


def test_cache_root_order(tmp_path, monkeypatch):
    from sactool import cachedir

    monkeypatch.setenv("SACTOOL_CACHE_DIR", str(tmp_path / "a"))
    assert cachedir.cache_root() == tmp_path / "a"
    monkeypatch.delenv("SACTOOL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cachedir.cache_root() == tmp_path / "xdg" / "sactool"


def test_every_numba_importer_sets_the_cache_first():
    """Any module importing numba imports sactool.cachedir before it (else the fallback is too late)."""
    import ast

    root = Path(__file__).resolve().parents[1] / "sactool"
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        seen_cache = False
        for node in tree.body:  # module level only: function-level imports run after it
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            if "sactool.cachedir" in names:
                seen_cache = True
            if any(n == "numba" or n.startswith("numba.") for n in names):
                assert seen_cache, f"{path.relative_to(root.parent)} imports numba before sactool.cachedir"


_COMPILE = ("import sactool, numba\n"
            "f = numba.njit(lambda x: x + 1)\n"
            "f(1)\n"
            "import sys; sys.stdout.write('{}'); sys.stdout.flush()\n")


def test_a_compile_writes_no_terminal_escape_to_stdout(tmp_path):
    """numba colours its messages through colorama when it is importable, and then writes ESC[0m to a
    terminal stdout at every compile: `sactool bench --format json` on a terminal (and under mpirun,
    a pty) ended its JSON with it. A stand-in colorama module (its real API: init, reinit, deinit,
    Fore, Style) makes the test independent of whether colorama is installed; stdout is a real pty."""
    import pty

    fake = tmp_path / "site"
    fake.mkdir()
    (fake / "colorama.py").write_text(
        "__version__ = '0.4.6'\n"
        "def init(*a, **k): pass\nreinit = deinit = init\n"
        "class Fore: RED = BLUE = GREEN = YELLOW = MAGENTA = CYAN = WHITE = RESET = ''\n"
        "class Style: BRIGHT = DIM = NORMAL = ''; RESET_ALL = '\\x1b[0m'\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING"}
    env.update(PYTHONPATH=os.pathsep.join([str(fake), *filter(None, [os.environ.get("PYTHONPATH")])]),
               NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    main, child = pty.openpty()
    p = subprocess.Popen([sys.executable, "-c", _COMPILE], stdout=child, stderr=subprocess.DEVNULL, env=env)
    os.close(child)
    out = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:   # EIO: the child closed the pty
            break
        if not chunk:
            break
        out += chunk
    assert p.wait(timeout=300) == 0
    os.close(main)
    assert out.endswith(b"{}") and b"\x1b" not in out, out
