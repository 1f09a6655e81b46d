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


_CACHE_GUARD = {"installed": False, "said": False}


def _patch_numba_caching(caching) -> None:
    """numba's cache reader treats a missing index as a miss but lets a corrupt one (a truncated
    or garbled ``.nbi``/``.nbc``: a full disk, a crash mid-write, two numba versions) raise
    ``UnpicklingError`` out of the first call of a kernel. Here a file that cannot be read is a
    miss too: the entry is dropped (the index file removed), said once on stderr, and the kernel is
    compiled and cached again."""
    cls = caching.IndexDataCacheFile
    if getattr(cls, "_sactool_guarded", False):
        return
    load_index, load = cls._load_index, cls.load

    def _drop(self, e: Exception) -> None:
        try:
            os.unlink(self._index_path)
        except OSError:
            pass
        if not _CACHE_GUARD["said"]:
            _CACHE_GUARD["said"] = True
            import sys

            sys.stderr.write(f"note: numba cache file {self._index_path} was unreadable ({type(e).__name__}); "
                             "compiling again\n")

    def guarded_index(self):
        try:
            return load_index(self)
        except Exception as e:   # noqa: BLE001 - any unpickling failure is a cache miss
            _drop(self, e)
            return {}

    def guarded_load(self, key):
        try:
            return load(self, key)
        except Exception as e:   # noqa: BLE001
            _drop(self, e)
            return None

    cls._load_index, cls.load = guarded_index, guarded_load
    cls._sactool_guarded = True


class _NumbaCachingHook:
    """A ``sys.meta_path`` finder that patches ``numba.core.caching`` when it is first imported
    (``sactool probe`` never imports numba, so nothing is loaded for it)."""

    def find_spec(self, name, path=None, target=None):
        if name != "numba.core.caching":
            return None
        import importlib.machinery
        import sys

        sys.meta_path.remove(self)
        try:
            spec = importlib.machinery.PathFinder.find_spec(name, path)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        inner = spec.loader

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return inner.create_module(spec)

            def exec_module(self, module):
                inner.exec_module(module)
                _patch_numba_caching(module)

        import importlib.abc  # noqa: F401 - for the class above

        spec.loader = _Loader()
        return spec


def guard_numba_cache() -> None:
    """Install :func:`_patch_numba_caching` now (numba imported) or at numba's import; idempotent."""
    import sys

    if _CACHE_GUARD["installed"]:
        return
    _CACHE_GUARD["installed"] = True
    mod = sys.modules.get("numba.core.caching")
    if mod is not None:
        _patch_numba_caching(mod)
    else:
        sys.meta_path.insert(0, _NumbaCachingHook())


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
guard_numba_cache()
