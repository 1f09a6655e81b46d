"""What every record (bench result, tune result, profile, probe output) shares.

* a header: ``schema_version``, ``sactool_version``, ``created_at`` (UTC, ISO 8601), ``kind``;
* step-by-step upgrades of older records and refusal of newer ones (pyperf/asv style);
* atomic writes: a temporary file in the same directory, fsync, rename; ``--force`` to overwrite;
* JSON-lines appends for sweeps that must survive Ctrl-C;
* one :class:`Warning` type: every warning a record carries (probe, bench, tune, fleet) is a
  ``code`` (stable, for scripts), a one-line ``message`` and an optional ``hint``.

A change to a record's fields bumps its version and adds an upgrade step ``n -> n+1`` next to its
reader. Each kind's history is one line per version beside its ``SCHEMA_VERSION`` (``topology``:
sactool/topology/records.py; ``bench``: sactool/bench/record.py; ``profile``:
sactool/profile/__init__.py; ``simulation``: sactool/simulate/api.py; ``platform``:
sactool/simulate/platform.py; ``fleet_topology``: sactool/fleet/probe.py; ``watch``:
sactool/watch/api.py; ``serve_run``: sactool/runfile.py); the manual's page
docs/reference/records.md tells it whole and is tested against those versions.
"""

from __future__ import annotations

import datetime as _dt
import errno
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from sactool import __version__
from sactool.errors import ExistsError, RecordError, SactoolError, UsageError


@dataclass(frozen=True)
class Warning:  # noqa: A001  (records.Warning, not the builtin category)
    """Something a record's reader should know: ``code`` (stable), ``message`` (one line) and
    what to do about it (``hint``, optional). Records hold them as ``to_data()`` mappings."""

    code: str
    message: str
    hint: str | None = None

    def to_data(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "hint": self.hint}


def warning(code: str, message: str, hint: str | None = None) -> dict[str, Any]:
    """A :class:`Warning` as the mapping bench, tune and fleet records carry."""
    return Warning(code, message, hint).to_data()


class WarningLine(str):
    """A warning among a report's lines (``serve``'s checks): the line as it reads (``warning: message
    (hint)``), carrying its :class:`Warning` (``.warning``) so a renderer can print it on stderr as every
    command prints warnings, and JSON can list it with its code."""

    warning: Warning

    def __new__(cls, code: str, message: str, hint: str | None = None) -> "WarningLine":
        line = super().__new__(cls, f"warning: {message}" + (f" ({hint})" if hint else ""))
        line.warning = Warning(code, message, hint)
        return line


def utc_now() -> str:
    """Current UTC time as ``2026-11-29T09:50:05Z``."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def header(kind: str, schema_version: int) -> dict[str, Any]:
    """The provenance header every record starts with."""
    return {
        "kind": kind,
        "schema_version": schema_version,
        "sactool_version": __version__,
        "created_at": utc_now(),
    }


def upgrade(record: dict[str, Any], *, kind: str, current: int,
            steps: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
            source: str = "record") -> dict[str, Any]:
    """Bring ``record`` to schema ``current``.

    ``steps[n]`` upgrades a version-``n`` record to ``n+1``. A newer record is refused
    ("upgrade sactool"); a record of another kind or without a version is refused as corrupt.
    """
    if not isinstance(record, dict):
        raise RecordError(f"{source} is not a mapping", "is this a sactool record?")
    if record.get("kind", kind) != kind:
        raise RecordError(f"{source} is a {record.get('kind')!r} record, expected {kind!r}",
                          "pass the right file")
    v = record.get("schema_version")
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise RecordError(f"{source} has no valid schema_version (got {v!r})", "is this a sactool record?")
    if v > current:
        raise RecordError(
            f"{source} has schema_version {v}, newer than this sactool understands ({current})",
            "upgrade sactool (pip install -U from a newer checkout of its repository) to read it",
        )
    steps = steps or {}
    while v < current:
        if v not in steps:
            raise RecordError(f"{source} has schema_version {v}, which cannot be upgraded to {current}",
                              "re-create the record with this sactool version")
        record = steps[v](dict(record))
        v += 1
        record["schema_version"] = v
    return record


def digest(data: bytes | str) -> str:
    """``sha256:<hex>`` of a record's bytes, for provenance links between records."""
    if isinstance(data, str):
        data = data.encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _fsync_dir(d: Path) -> None:
    """Make a rename in ``d`` durable (POSIX: the directory entry lives in the directory)."""
    try:
        fd = os.open(d, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # EINVAL on file systems that cannot sync a directory
        pass
    finally:
        os.close(fd)


def _create_temp(d: Path, name: str) -> tuple[int, Path]:
    """A new temporary file next to the target, created with mode 0666 so the umask applies
    (``mkstemp`` would make it 0600 whatever the umask, and SGLang running as another user
    could not read a profile)."""
    import secrets

    for _ in range(100):
        tmp = d / f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {d}")  # pragma: no cover


_PATH_ERRORS = {
    errno.ENAMETOOLONG: "a name in it is too long (at most 255 bytes a name, 4096 the path)",
    errno.EACCES: "a directory on the way cannot be searched (permission denied)",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.ELOOP: "too many symbolic links on the way",
}


def _path_error(p: Path, e: OSError, hint: str = "choose another output path") -> SactoolError:
    why = _PATH_ERRORS.get(e.errno or 0, e.strerror or str(e))
    return SactoolError(f"cannot write {p}: {why}", hint)


def _lstat(p: Path) -> os.stat_result | None:
    """The output's own entry (a link not followed); None when there is none. Any other error
    (a parent the user cannot search, a 300-character name) is a one-line SactoolError."""
    try:
        return os.lstat(p)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _path_error(p, e) from None


def refuse_existing(path: str | os.PathLike[str] | None, force: bool,
                    hint: str = "pass --force to overwrite it, or choose another --out") -> None:
    """An output that exists is not overwritten without ``force`` (ExistsError, 5); ``force``
    replaces only a regular file (a device node, a FIFO, ``/dev/null``, a link: ExistsError), and a
    directory is never an output (UsageError, 2). Commands call it before any work, so a refused
    run costs nothing; :func:`atomic_write` checks again."""
    if path is None:
        return
    p = Path(path)
    st = _lstat(p)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{p} is a directory, not a file to write", f"give a file name (inside it: {p}/<name>)")
    if not stat.S_ISREG(st.st_mode):
        from sactool.host.files import kind

        raise ExistsError(f"{p} exists and is a {kind(st.st_mode)}, not a regular file",
                          "--force replaces only a regular file; choose another output path")
    if not force:
        raise ExistsError(f"{p} already exists", hint)


MIN_FREE_BYTES = 1 << 20
"""Free space an output's file system must have before sactool starts work that ends in a write
(records and profiles are kilobytes to a few hundred KiB; a plot well under 1 MiB)."""


def _parent(p: Path, make_parents: bool) -> Path:
    """The directory ``p`` goes in; missing ones are created only when ``make_parents`` (a
    default path such as ``profiles/<model>/``), else refused with a hint — a typo in ``--out``
    must not create ``/nonexistent`` as root."""
    d = p.parent
    if make_parents:
        while _lstat(d) is None and d != d.parent:
            d = d.parent
        return d
    st = _lstat(d)
    if st is None:
        raise SactoolError(f"cannot write {p}: the directory {d} does not exist",
                           f"create it first (mkdir -p {d}), or choose another output path")
    return d


def check_writable(path: str | os.PathLike[str], *, make_parents: bool = False) -> None:
    """Raise SactoolError now, before any work, when ``path`` could not be written later: its
    directory is missing (unless ``make_parents``: then its nearest existing ancestor is checked)
    or not a directory, a file cannot be created there (permissions, read-only file system,
    ``/proc``), or its file system has less than :data:`MIN_FREE_BYTES` free."""
    p = Path(path)
    d = _parent(p, make_parents)
    if not d.is_dir():
        raise SactoolError(f"cannot write {p}: {d} is not a directory", "choose another output path")
    try:
        fd, probe = _create_temp(d, p.name)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        if e.errno == errno.ENOENT:   # an existing directory that takes no new file: /proc, /sys
            raise SactoolError(f"cannot write {p}: no file can be created in {d} (a kernel file system?)",
                               "choose an output path on a disk") from None
        raise _path_error(p, e, "choose a writable output path") from None
    try:
        st = os.statvfs(d)
    except OSError:
        return
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_BYTES:
        raise SactoolError(f"cannot write {p}: only {free} bytes free on the file system of {d}",
                           "free some space or choose another output path")


def atomic_write(path: str | os.PathLike[str], data: str | bytes, *, force: bool = False,
                 make_parents: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically: a temporary file in the same directory, fsync, rename,
    fsync of the directory. The one implementation for every file sactool writes.

    The file gets the user's umask (mode 0666 & ~umask, like ``open()``). Refuses to overwrite an
    existing file unless ``force`` — also when another process creates it meanwhile (the final
    step is a ``link()``, which fails if the name exists, instead of a rename that would replace
    it) — and ``force`` replaces only a regular file. Missing parent directories are created only
    with ``make_parents``. A failure leaves any previous file untouched and no temporary file behind.
    """
    p = Path(path)
    refuse_existing(p, force)
    if _lstat(p.parent) is None and not make_parents:
        _parent(p, False)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _create_temp(p.parent, p.name)
    except OSError as e:
        raise _path_error(p, e, "choose a writable output path") from e
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        if force:
            refuse_existing(p, True)   # still a regular file (or nothing) now, at the rename
            os.replace(tmp, p)
        else:
            try:
                os.link(tmp, p)  # fails with EEXIST if someone else wrote p meanwhile
            except FileExistsError:
                raise ExistsError(f"{p} was created by someone else while sactool was writing it",
                                  "pass --force to overwrite it, or choose another --out") from None
            except OSError:  # file systems without hard links: check, then rename
                if p.exists():
                    raise ExistsError(f"{p} already exists",
                                      "pass --force to overwrite it, or choose another --out") from None
                os.replace(tmp, p)
            else:
                os.unlink(tmp)
        _fsync_dir(p.parent)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise _path_error(p, e, "choose a writable output path") from e
        raise
    return p


_SAVED: list[Path] = []


def saved_paths() -> list[Path]:
    """Every file :func:`save_result` wrote in this process, in order (fallbacks included): what
    the exit line names when a signal came after the work had finished."""
    return list(_SAVED)


def forget_saved() -> None:
    """A command starts: :func:`saved_paths` counts only its own files (tests run many in one process)."""
    _SAVED.clear()


def save_result(path: str | os.PathLike[str], data: str | bytes, *, force: bool, kind: str, suffix: str,
                make_parents: bool = False) -> tuple[Path | None, SactoolError | None]:
    """Write a finished result with :func:`atomic_write`; when that fails (a full disk, out of
    inodes, the file created meanwhile by another run, the directory gone) save it under the
    temporary directory as ``sactool-<kind>-<time>-<pid><suffix>`` instead. Returns (where it
    is, None) or (the fallback file or None, the error — its hint naming the fallback file):
    every writer (bench, tune, fleet, simulate, probe's snapshot) uses it, so finished work is
    never lost to a failed last step, and the caller decides what to raise."""
    import tempfile

    try:
        written = atomic_write(path, data, force=force, make_parents=make_parents)
        _SAVED.append(written)
        return written, None
    except SactoolError as e:
        stamp = utc_now().replace(":", "").replace("-", "")
        saved = None
        for i in range(100):
            name = Path(tempfile.gettempdir()) / f"sactool-{kind}-{stamp}-{os.getpid()}{'-' + str(i) if i else ''}{suffix}"
            try:
                saved = atomic_write(name, data, force=False)
                break
            except ExistsError:
                continue
            except SactoolError:
                break
        if saved is not None:
            _SAVED.append(saved)
            e.hint = f"the result was saved as {saved} instead; move it where you want it"
        return saved, e


def append_jsonl(path: str | os.PathLike[str], obj: dict[str, Any], *, new: bool = False) -> None:
    """Append one JSON line and flush it to disk (a finished sweep point survives Ctrl-C).

    The file is opened without following a symbolic link (``O_NOFOLLOW``: a planted link is
    refused, its target never created or appended to) and, when ``new``, created afresh
    (``O_EXCL``: a file that appeared meanwhile is refused, not appended to); only a regular file
    is written. A last line cut off by a crash or a full disk (no newline at the end) is dropped
    before the append, so the new line never lands on the torn one — :func:`read_jsonl` drops such
    a line too, and the journal stays readable whatever the moment it was cut."""
    p = Path(path)
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)   # read: the torn tail
    try:
        fd = os.open(p, flags | (os.O_EXCL if new else 0), 0o666)
    except FileExistsError:
        raise ExistsError(f"{p} was created by someone else while sactool was starting it",
                          "another run may use the same --out: choose another, or pass --force to start over") from None
    except OSError as e:
        if e.errno == errno.ELOOP and os.path.islink(p):
            raise ExistsError(f"{p} is a symbolic link; sactool does not write through one",
                              "remove the link, or choose another --out") from None
        raise _path_error(p, e, "free some space or choose a writable --out") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            from sactool.host.files import kind

            raise ExistsError(f"{p} is a {kind(st.st_mode)}, not a regular file", "choose another --out")
        _drop_torn_tail(fd, st.st_size)
        line = (json.dumps(obj, sort_keys=True) + "\n").encode()
        while line:
            line = line[os.write(fd, line):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _drop_torn_tail(fd: int, size: int) -> None:
    """Cut the file back to the end of its last complete line when its last byte is not a newline."""
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    end = size
    while end > 0:
        start = max(0, end - (1 << 16))
        nl = os.pread(fd, end - start, start).rfind(b"\n")
        if nl >= 0:
            os.ftruncate(fd, start + nl + 1)
            return
        end = start
    os.ftruncate(fd, 0)


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a JSON-lines file; a torn last line (killed mid-write) is dropped, others must parse."""
    from sactool.inputfile import read_input

    out: list[dict[str, Any]] = []
    if not os.path.lexists(path):
        return out
    try:
        lines = read_input(path, what="points file").decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise RecordError(f"{path} is not UTF-8 text ({e.reason})", "delete the file to start over") from None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                break
            raise RecordError(f"{path}:{i + 1} is not valid JSON ({e.msg})",
                              "delete the file to start over") from e
    return out


def load_structured(path: str | os.PathLike[str], *, what: str) -> dict[str, Any]:
    """Load a JSON or YAML file as a mapping, with clear errors: read with :mod:`sactool.inputfile`'s
    bounds (a regular file, at most the size its kind can be), YAML with ``SafeLoader`` and an
    alias budget, neither nesting deeper than the budget."""
    from sactool.inputfile import parse_structured, read_input

    p = Path(path)
    raw = read_input(p, what=what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecordError(f"{what} {p} cannot be read: {e}", "check the file's encoding (UTF-8)") from None
    data = parse_structured(text, json_format=p.suffix == ".json", where=f"{what} {p}")
    if not isinstance(data, dict):
        raise RecordError(f"{what} {p} is not a mapping", "re-create it with sactool")
    return data


def to_data(obj: Any) -> Any:
    """Frozen dataclasses (nested), enums, tuples and paths → plain JSON/YAML-able data.

    Dataclass fields whose name starts with ``_`` are left out; a dataclass may define
    ``to_data()`` to control its own form.
    """
    import dataclasses
    import enum

    if hasattr(obj, "to_data") and callable(obj.to_data) and not isinstance(obj, type):
        return obj.to_data()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj) if not f.name.startswith("_")}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = [to_data(v) for v in obj]
        return sorted(items) if isinstance(obj, (set, frozenset)) else items
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if type(obj).__module__ == "numpy":  # numpy scalars/arrays without importing numpy here
        return obj.tolist()
    return obj


_JSON_CONTROLS = {c: f"\\u{c:04x}" for c in (0x7F, *range(0x80, 0xA0))}


def dumps(data: Any, fmt: str) -> str:
    """Serialize record data as ``json`` (indented, stable key order as built) or ``yaml``."""
    data = to_data(data)
    if fmt == "json":   # json escapes C0 controls; DEL and C1 (CSI is 0x9b) too, for a terminal
        return json.dumps(data, indent=2).translate(_JSON_CONTROLS) + "\n"
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
    raise ValueError(f"unknown format {fmt!r}")
