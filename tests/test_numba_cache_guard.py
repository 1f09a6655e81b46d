"""Issue 22: a corrupted numba cache index (a truncated or garbled ``.nbi``: a full disk, a crash
mid-write) made the next run's first kernel call raise ``UnpicklingError`` (a traceback, exit 1,
e141ef7); now it is a cache miss: said once, compiled and cached again. numba's real cache, in a
fresh interpreter each time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

KERNEL = """
from numba import njit

@njit(cache=True)
def add_one(x):
    return x + 1
"""
RUN = "import sactool.cachedir, k; print(k.add_one(41))"


def _run(d: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SACTOOL_CACHE_DIR": str(d / "cache"), "PYTHONPATH": os.pathsep.join([str(d), *sys.path])}
    env.pop("NUMBA_CACHE_DIR", None)
    return subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, timeout=300, env=env, cwd=d)


def test_a_corrupt_cache_index_is_a_miss_not_a_traceback(tmp_path):
    (tmp_path / "k.py").write_text(KERNEL)
    first = _run(tmp_path)
    assert first.returncode == 0 and first.stdout.strip() == "42", first.stderr
    index = list((tmp_path / "cache").rglob("*.nbi"))
    assert index, "numba cached nothing"
    for f in index:
        f.write_bytes(os.urandom(24))
    second = _run(tmp_path)
    assert second.returncode == 0 and second.stdout.strip() == "42", second.stderr
    assert "Traceback" not in second.stderr and "was unreadable" in second.stderr
    third = _run(tmp_path)   # cached again: quiet
    assert third.returncode == 0 and "unreadable" not in third.stderr, third.stderr
