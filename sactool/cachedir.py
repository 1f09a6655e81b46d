"""Where sactool (and numba, for sactool's kernels) keep compiled code between runs.

numba's ``cache=True`` needs a writable directory: it tries ``__pycache__`` next to the source
(read-only in a system install), then ``~/.cache/numba``. A user without a writable HOME (a
service account, ``nobody``, a container with HOME unset) gets "cannot cache function …: no
locator available" at import. Importing this module, before numba is imported, points
``NUMBA_CACHE_DIR`` at a usable directory unless the user set it:

1. ``$SACTOOL_CACHE_DIR``, else ``$XDG_CACHE_HOME/sactool``, else ``~/.cache/sactool``
   (the XDG base-directory rule), if it can be created and written;
2. otherwise ``<tempdir>/sactool-<uid>``, created mode 0700 and used only if it is a real
   directory owned by this user that nobody else can write (another user could otherwise plant
   kernel modules there, and sactool imports the generated gather kernels from it).

numba's cache lives in ``<cache>/numba``, the generated gather modules in ``<cache>/kernels``.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def _usable(d: Path) -> bool:
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return d.is_dir() and os.access(d, os.W_OK | os.X_OK)


def _private_tmp() -> Path | None:
    d = Path(tempfile.gettempdir()) / f"sactool-{os.getuid()}"
    try:
        d.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(d)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        return None
    return d


def _home_cache() -> Path | None:
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "sactool"
    try:
        return Path.home() / ".cache" / "sactool"
    except (RuntimeError, KeyError):  # no HOME and no passwd entry
        return None


def cache_root() -> Path:
    """The first usable cache directory of the list in the module docstring."""
    env = os.environ.get("SACTOOL_CACHE_DIR")
    for cand in (Path(env) if env else None, _home_cache()):
        if cand is not None and _usable(cand):
            return cand
    d = _private_tmp()
    if d is None:
        from sactool.errors import SactoolError

        raise SactoolError("no writable cache directory for compiled kernels",
                           "set SACTOOL_CACHE_DIR (or HOME / XDG_CACHE_HOME) to a directory you can write")
    return d


def cache_subdir(name: str) -> Path:
    """``<cache>/<name>``, created."""
    d = cache_root() / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def ensure_numba_cache() -> str:
    """Set ``NUMBA_CACHE_DIR`` (unless the user did) and return it; idempotent.

    If numba is already imported (a notebook), its config is updated too.
    """
    import sys

    d = os.environ.get("NUMBA_CACHE_DIR")
    if not d:
        d = str(cache_subdir("numba"))
        os.environ["NUMBA_CACHE_DIR"] = d
    cfg = sys.modules.get("numba.core.config")
    if cfg is not None and not getattr(cfg, "CACHE_DIR", ""):
        setattr(cfg, "CACHE_DIR", d)
    return d


def ensure_mpl_config() -> str | None:
    """Set ``MPLCONFIGDIR`` (unless the user did) before matplotlib is imported, when matplotlib's own
    default (``$XDG_CONFIG_HOME/matplotlib``, else ``~/.config/matplotlib``) is not writable — a user
    without a writable HOME (``nobody``) — to ``<cache>/matplotlib``: matplotlib then keeps its font
    cache there and says nothing, instead of warning "created a temporary cache directory" on every
    plot (which ``--quiet`` could not silence: it is matplotlib's own log). Returns what is set."""
    if os.environ.get("MPLCONFIGDIR"):
        return os.environ["MPLCONFIGDIR"]
    xdg = os.environ.get("XDG_CONFIG_HOME")
    try:
        default = Path(xdg) / "matplotlib" if xdg and os.path.isabs(xdg) else Path.home() / ".config" / "matplotlib"
    except (RuntimeError, KeyError):
        default = None
    if default is not None and _usable(default):
        return None
    d = str(cache_subdir("matplotlib"))
    os.environ["MPLCONFIGDIR"] = d
    return d


ensure_numba_cache()
