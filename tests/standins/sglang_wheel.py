"""The real ``sglang==0.5.23`` source for tests, obtained without its dependencies and cached.

``pip download --no-deps sglang==0.5.23`` (the ordinary client, by name) into
``$SACTOOL_CACHE/sglang-0.5.23`` (default ``~/.cache/sactool/sglang-0.5.23``), reused between runs;
the wheel is unpacked next to it. Nothing is imported from it here: tests parse it with ``ast``,
except ``hook_registry.py``, which is stdlib-only and is loaded as a file by the hook tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

VERSION = "0.5.23"
# The 0.5.23 wheel is published for CPython 3.11 on manylinux_2_34 x86_64 (seen on PyPI);
# asking for exactly that file lets any Python on any machine download the same source.
PIP_TARGET = ["--python-version", "3.11", "--platform", "manylinux_2_34_x86_64", "--only-binary=:all:",
              "--implementation", "cp"]


def cache_dir() -> Path:
    base = os.environ.get("SACTOOL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "sactool")
    return Path(base) / f"sglang-{VERSION}"


def _wheel(d: Path) -> Path | None:
    found = sorted(d.glob(f"sglang-{VERSION}-*.whl"))
    return found[0] if found else None


def source_root(*, download: bool = True) -> tuple[Path | None, str]:
    """(directory holding ``sglang/``, "") or (None, why it could not be had)."""
    d = cache_dir()
    src = d / "src"
    if (src / "sglang" / "srt").is_dir():
        return src, ""
    whl = _wheel(d) if d.is_dir() else None
    if whl is None:
        if not download:
            return None, f"no cached wheel in {d}"
        d.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
               "-d", str(d), *PIP_TARGET, f"sglang=={VERSION}"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, f"pip download failed to run: {e}"
        whl = _wheel(d)
        if r.returncode != 0 or whl is None:
            tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
            net = any(k in r.stderr for k in ("NewConnectionError", "ConnectionError", "Connection refused",
                                              "Temporary failure in name resolution", "Network is unreachable",
                                              "Read timed out", "ConnectTimeoutError"))
            return None, (("package index unreachable: " if net else "")
                          + f"pip download sglang=={VERSION} failed (exit {r.returncode}): {tail}")
    tmp = d / "src.partial"
    with zipfile.ZipFile(whl) as z:
        names = [n for n in z.namelist() if n.startswith("sglang/") and n.endswith(".py")]
        z.extractall(tmp, members=names)
    if not src.exists():
        os.replace(tmp, src)
    return src, ""


def registry_unreachable(why: str) -> bool:
    """True when ``why`` says the package index could not be reached (the only reason to skip)."""
    return why.startswith("package index unreachable") or why.startswith("pip download failed to run")
