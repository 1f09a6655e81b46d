"""The one sysfs/procfs reader, with an injectable root (hwloc's ``HWLOC_FSROOT`` idea).

Paths are given relative to the root, kernel-style: ``"sys/devices/system/node/node0/meminfo"``,
``"proc/meminfo"``. The live system is root ``/``; a recorded machine (a snapshot or one of the
QEMU captures) is any directory holding ``sys/`` (and optionally ``proc/``).

A missing, unreadable or unparsable attribute never raises: the typed getters return ``None`` and
the reason is kept in :attr:`SysfsReader.reasons` (``reader.why(path)``), so callers can report
"absent because permission denied" instead of guessing a value. Every path touched is recorded in
:attr:`SysfsReader.touched` so ``probe --snapshot`` can archive exactly what the prober read.
"""

from __future__ import annotations

import builtins
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, TypeVar

from sactool.errors import TopologyError
from sactool.host.files import NotRead, Tree
from sactool.units import expand_int_list, suffix_bytes

SYSFS_ROOT_ENV = "SACTOOL_SYSFS_ROOT"
"""Environment variable naming the root directory, like ``--sysfs-root``."""

T = TypeVar("T")


@dataclass(frozen=True)
class Attr(Generic[T]):
    """One attribute read: ``value`` or ``None`` with ``reason`` ("missing", "permission denied", …)."""

    path: str
    value: T | None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.value is not None


# --------------------------------------------------------------------------------------------
# Parsers: pure functions, raise ValueError on garbage (the reader turns that into a reason).
# --------------------------------------------------------------------------------------------

def parse_int(text: str) -> int:
    """Decimal integer attribute (``interleave_ways``, ``numa_node``…); ``-1`` allowed.

    Also accepts a ``0x`` prefix, since a few decimal-documented attributes print hex on some kernels.
    """
    s = text.strip()
    if not s:
        raise ValueError("empty")
    return int(s, 0) if s.lower().startswith(("0x", "-0x")) else int(s, 10)


def parse_hex(text: str) -> int:
    """Hex attribute printed with ``%#llx`` (CXL sizes, serials, resources); bare hex accepted."""
    s = text.strip()
    if not s:
        raise ValueError("empty")
    return int(s, 16)


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Kernel range list (``0-3,8,10-11``) → sorted tuple; an empty line (CPU-less node) → ``()``."""
    return tuple(sorted(set(expand_int_list(text))))


def format_cpulist(ids: tuple[int, ...] | list[int]) -> str:
    """Inverse of :func:`parse_cpulist`: ``(0,1,2,5)`` → ``"0-2,5"``."""
    ids = sorted(set(ids))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def parse_kv(text: str) -> dict[str, int]:
    """``meminfo``-style ``Key: value [kB]`` lines → ``{key: bytes-or-count}``.

    Handles ``/proc/meminfo`` (``MemTotal: 123 kB``) and per-node meminfo
    (``Node 0 MemTotal: 123 kB``); ``kB`` values are converted to bytes, unitless values
    (``HugePages_Total``) are kept as counts. Lines that do not parse are skipped;
    a file with no parsable line raises ValueError.
    """
    out: dict[str, int] = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, _, rest = line.partition(":")
        key = key.split()[-1] if key.split() else ""
        fields = rest.split()
        if not key or not fields:
            continue
        try:
            num = int(fields[0])
        except ValueError:
            continue
        try:
            mult = suffix_bytes(fields[1], kernel=True) if len(fields) > 1 else 1
        except ValueError:
            mult = 1  # not a size unit: a count
        out[key] = num * mult
    if not out:
        raise ValueError("no 'key: value' line")
    return out


def parse_bool(text: str) -> bool:
    """``true``/``false``, ``1``/``0``, ``Y``/``N`` (kstrtobool forms)."""
    s = text.strip().lower()
    if s in ("1", "y", "yes", "true", "on"):
        return True
    if s in ("0", "n", "no", "false", "off"):
        return False
    raise ValueError(f"not a boolean: {text.strip()!r}")


# --------------------------------------------------------------------------------------------


class SysfsReader:
    """Reads attributes under ``root`` (default ``/``, or ``$SACTOOL_SYSFS_ROOT``).

    ``live`` is True only for the running system; topology read from any other root is a
    recording and nothing may bind memory to it.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None, *, check: bool = True):
        if root is None:
            root = os.environ.get(SYSFS_ROOT_ENV) or "/"
        self.root = Path(root).resolve() if str(root) != "/" else Path("/")
        self.live = self.root == Path("/")
        self.reasons: dict[str, str] = {}
        self.touched: set[str] = set()
        self.seen: dict[str, bytes] = {}       # live: what each file held when it was read, so a snapshot
        # stores the very bytes the answer came from (free memory moves between the probe and the archive)
        self.captured: dict[str, bytes] = {}   # facts read by other means than a file (a mailbox
        # reply, a trace), kept under the path a recording holds them at (sactool/capture/…), so that
        # ``probe --snapshot`` stores them and a replay reads them back (sactool.topology.health)
        self._tree: Tree | None = None
        if check and not self.live:
            self._check_root(root)

    def _check_root(self, root) -> None:
        try:
            if not self.root.exists():
                raise TopologyError(
                    f"sysfs root {str(root)!r} does not exist",
                    "pass a directory that holds sys/ (an unpacked 'sactool probe --snapshot' archive)",
                )
            if not self.root.is_dir():
                raise TopologyError(f"sysfs root {str(root)!r} is not a directory",
                                    "unpack the snapshot archive first (tar xzf …) and pass the directory")
            try:
                self.tree.listdir("sys")   # beneath the root: a sys/ linked outside it is no sys/
            except NotRead as e:
                if e.reason == "permission denied":
                    raise PermissionError from None
                raise TopologyError(
                    f"sysfs root {str(root)!r} has no sys/ directory ({e.reason})",
                    "the root must mirror / (contain sys/devices/system/node …)",
                ) from None
        except PermissionError:
            raise TopologyError(f"sysfs root {str(root)!r} cannot be read (permission denied)",
                                "make the directory readable to you (chmod -R a+rX, or unpack it yourself)") from None

    # ---- paths ---------------------------------------------------------------------------
    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def _touch(self, rel: str) -> None:
        self.touched.add(rel.lstrip("/"))

    def _miss(self, rel: str, reason: str) -> None:
        self.reasons[rel.lstrip("/")] = reason

    def why(self, rel: str) -> str | None:
        """Why the last read of ``rel`` gave nothing (``None`` if it was read fine)."""
        return self.reasons.get(rel.lstrip("/"))

    @property
    def tree(self) -> Tree:
        """The root as a :class:`~sactool.host.files.Tree` (a recording: every path resolved
        beneath its root descriptor, links included, whatever is renamed meanwhile)."""
        if self._tree is None:
            self._tree = Tree(None if self.live else self.root)
        return self._tree

    def inside(self, rel: str) -> bool:
        """Whether ``rel`` (links followed) exists under the root; a recorded tree is never read outside."""
        try:
            self.tree.stat(rel)
            return True
        except NotRead:
            return False

    def exists(self, rel: str) -> bool:
        """Whether the entry exists (a link counts, even dangling) in a directory under the root."""
        self._touch(rel)
        try:
            return self.tree.lstat(rel) is not None
        except NotRead:
            return False

    def is_dir(self, rel: str) -> bool:
        self._touch(rel)
        try:
            return stat.S_ISDIR(self.tree.stat(rel).st_mode)
        except NotRead as e:
            if e.reason != "missing":
                self._miss(rel, e.reason)
        return False

    # ---- raw reads -----------------------------------------------------------------------
    def text(self, rel: str) -> str | None:
        """The file's content (stripped of the trailing newline) or None with a reason.

        Only regular files under the root are read (see :class:`~sactool.host.files.Tree`): a
        FIFO, a device, a hard link, or a link leading outside a recorded tree gives None with
        that reason, never a hang or someone else's file.
        """
        self._touch(rel)
        try:
            data = self.tree.read(rel)
        except NotRead as e:
            self._miss(rel, e.reason)
            return None
        if self.live:
            self.seen[rel.lstrip("/")] = data
        try:
            s = data.decode("utf-8")
        except UnicodeDecodeError:
            s = data.decode("latin-1")
        return s.rstrip("\n")

    def attr(self, rel: str, parser: Callable[[str], T]) -> Attr[T]:
        """Read and parse; garbage gives ``Attr(value=None, reason="unparsable: …")``."""
        s = self.text(rel)
        if s is None:
            return Attr(rel, None, self.why(rel))
        try:
            return Attr(rel, parser(s))
        except (ValueError, IndexError) as e:
            reason = f"unparsable {s.strip()[:40]!r}: {e}"
            self._miss(rel, reason)
            return Attr(rel, None, reason)

    # The readers below are named after the types they return; from here on, inside the class,
    # ``str``/``int``/``bool`` name these methods, so annotations spell the types ``builtins.*``.
    def int(self, rel: builtins.str) -> builtins.int | None:
        return self.attr(rel, parse_int).value

    def hex(self, rel: builtins.str) -> builtins.int | None:
        return self.attr(rel, parse_hex).value

    def cpulist(self, rel: builtins.str) -> tuple[builtins.int, ...] | None:
        return self.attr(rel, parse_cpulist).value

    def kv(self, rel: builtins.str) -> dict[builtins.str, builtins.int] | None:
        return self.attr(rel, parse_kv).value

    def bool(self, rel: builtins.str) -> builtins.bool | None:
        return self.attr(rel, parse_bool).value

    def str(self, rel: builtins.str) -> builtins.str | None:
        s = self.text(rel)
        return None if s is None else s.strip()

    # ---- directories and links -----------------------------------------------------------
    def listdir(self, rel: builtins.str) -> list[builtins.str]:
        """Sorted entry names ([] with a reason when missing/unreadable)."""
        self._touch(rel)
        try:
            return self.tree.listdir(rel)
        except NotRead as e:
            self._miss(rel, e.reason)
        return []

    def readlink(self, rel: builtins.str) -> builtins.str | None:
        """The raw link target, or None (not a link / missing)."""
        self._touch(rel)
        try:
            return self.tree.readlink(rel)
        except NotRead as e:
            self._miss(rel, e.reason)
        return None

    def resolve(self, rel: builtins.str) -> builtins.str | None:
        """Follow symlinks and return the canonical path *relative to the root*.

        Every link on the way is recorded as touched (a snapshot must keep them). Returns None
        when the path does not exist or resolves outside the root (a dangling recording link).
        """
        self._touch(rel)
        try:
            out, links = self.tree.canonical(rel)
        except NotRead as e:
            self._miss(rel, e.reason)
            return None
        for link in links:
            self._touch(link)
        self._touch(out)
        return out

    def basename_of_link(self, rel: builtins.str) -> builtins.str | None:
        """Name of the directory a link points at (e.g. a dax device's ``driver`` → ``kmem``)."""
        target = self.readlink(rel)
        return None if target is None else os.path.basename(target.rstrip("/"))
