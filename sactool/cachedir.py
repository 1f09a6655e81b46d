"""Where sactool (and numba, for sactool's kernels) keep compiled code between runs.

numba's ``cache=True`` needs a writable directory: it tries ``__pycache__`` next to the source
(read-only in a system install), then ``~/.cache/numba``. A user without a writable HOME (a
service account, ``nobody``, a container with HOME unset) gets "cannot cache function …: no
locator available" at import. Importing this module, before numba is imported, points
``NUMBA_CACHE_DIR`` at a usable directory unless the user set it:

1. ``$SACTOOL_CACHE_DIR``, else ``$XDG_CACHE_HOME/sactool``, else ``~/.cache/sactool``
   (the XDG base-directory rule);
2. otherwise ``<tempdir>/sactool-<uid>``.

Every candidate, and its ``numba``/``kernels`` subdirectory, is created mode 0700 and used only if
it is a real directory (not a symbolic link) owned by this user that nobody else can write (group
write only for the user's private group, as a umask of 002 leaves it): numba
loads pickled index files and compiled code from it and sactool imports the generated gather
kernels from it, so a directory another user can write is code they choose (issue 27: the rule
held for the temporary-directory fallback only). A candidate that exists and fails the rule is
skipped, said once on stderr.

numba's cache lives in ``<cache>/numba``, the generated gather modules in ``<cache>/kernels``.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def _usable(d: Path) -> bool:
    """Writable by this process (the matplotlib config directory: no code is loaded from it)."""
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return d.is_dir() and os.access(d, os.W_OK | os.X_OK)


_SKIPPED: list[str] = []


def _refusal(d: Path) -> str | None:
    """Why ``d`` may not hold code sactool loads (None: it may): created 0700 when missing; then a
    real directory, this user's, that nobody else can write."""
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(d)
    except OSError as e:
        return f"cannot be created ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.getuid():
        return f"is owned by uid {st.st_uid}, not {os.getuid()}"
    if st.st_mode & 0o002 or (st.st_mode & 0o020 and not _private_group(st.st_gid)):
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    if not os.access(d, os.W_OK | os.X_OK):
        return "is not writable"
    return None


def _private_group(gid: int) -> bool:
    """Whether ``gid`` is this user's private group (Debian's and Ubuntu's user groups: the user's
    primary group, nobody else in it), whose write bit a umask of 002 leaves on every directory."""
    import grp
    import pwd

    try:
        g, me = grp.getgrgid(gid), pwd.getpwuid(os.getuid())
    except KeyError:
        return False
    return gid == me.pw_gid and set(g.gr_mem) <= {me.pw_name} and not any(
        p.pw_gid == gid and p.pw_uid != me.pw_uid for p in pwd.getpwall())


def _private(d: Path, *, say: bool = True) -> bool:
    """Whether ``d`` passes :func:`_refusal`; an existing directory that does not is said once."""
    why = _refusal(d)
    if why is not None and say and not why.startswith("cannot be created") and str(d) not in _SKIPPED:
        import sys

        _SKIPPED.append(str(d))
        sys.stderr.write(f"note: cache directory {d} not used: it {why} (compiled code is loaded from it)\n")
    return why is None


def _private_tmp() -> Path | None:
    d = Path(tempfile.gettempdir()) / f"sactool-{os.getuid()}"
    return d if _private(d, say=False) else None


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
        if cand is not None and _private(cand):
            return cand
    d = _private_tmp()
    if d is None:
        from sactool.errors import SactoolError

        raise SactoolError("no writable cache directory for compiled kernels",
                           "set SACTOOL_CACHE_DIR (or HOME / XDG_CACHE_HOME) to a directory you can write")
    return d


def cache_subdir(name: str) -> Path:
    """``<cache>/<name>``, created 0700 and held to the same rule as the cache (:func:`_refusal`)."""
    d = cache_root() / name
    why = _refusal(d)
    if why is not None:
        from sactool.errors import SactoolError

        raise SactoolError(f"cache directory {d} {why}: compiled code is loaded from it",
                           "remove it (sactool makes it again) or set SACTOOL_CACHE_DIR to a directory of your own")
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
