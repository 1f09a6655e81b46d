"""``sactool probe --snapshot out.tar.gz``: archive exactly the files the prober read.

Every path in ``reader.touched`` is stored at its canonical location (symlinks resolved), and every
symlink met on the way is stored as a symlink with its original relative target, so that
``sactool probe --sysfs-root DIR`` on the unpacked archive reads the same values through the same
links and gives the same result. Directories the prober listed keep their sub-directories and
links (as empty directories / links), so listings match too. A ``SNAPSHOT.json`` at the top says
where and when it was recorded. Written atomically (temporary name, then rename).
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import tarfile
import time
from pathlib import Path

from sactool.errors import SactoolError
from sactool.host.files import MAX_READ_BYTES, NotRead, read_regular
from sactool.host.sysfs import SysfsReader

MAX_FILE_BYTES = MAX_READ_BYTES  # what SysfsReader.text reads; store the same


class _Collector:
    def __init__(self, root: Path):
        self.root = root
        self.files: set[str] = set()
        self.dirs: set[str] = set()
        self.links: dict[str, str] = {}
        self._seen: set[str] = set()

    def canonical(self, rel: str) -> str | None:
        """Walk ``rel`` component by component, recording links; return the canonical rel path."""
        if rel in self._seen:
            return None
        self._seen.add(rel)
        cur = ""
        parts = [p for p in rel.split("/") if p and p != "."]
        i = 0
        while i < len(parts):
            part = parts[i]
            nxt = posixpath.normpath(f"{cur}/{part}") if cur else part
            if nxt.startswith(".."):
                return None
            full = self.root / nxt
            if os.path.islink(full):
                target = os.readlink(full)
                joined = posixpath.normpath(posixpath.join(posixpath.dirname(nxt), target))
                if os.path.isabs(target) or joined == ".." or joined.startswith("../"):
                    # leads outside the tree (or is absolute, which would escape the archive):
                    # neither followed nor archived
                    return None
                self.links[nxt] = target
                rest = parts[i + 1:]
                # restart from the link's target (it may contain links itself)
                parts = [p for p in joined.split("/") if p] + rest
                cur, i = "", 0
                continue
            cur = nxt
            i += 1
        return cur or None

    def add(self, rel: str) -> None:
        canon = self.canonical(rel)
        if canon is None:
            return
        full = self.root / canon
        if full.is_dir():
            self.dirs.add(canon)
        elif full.is_file():
            self.files.add(canon)


def collect(reader: SysfsReader) -> _Collector:
    col = _Collector(reader.root)
    for rel in sorted(reader.touched):
        col.add(rel)
    # listed directories: keep their sub-directories and links so listings stay the same
    for d in sorted(col.dirs):
        try:
            names = os.listdir(col.root / d)
        except OSError:
            continue
        for name in names:
            child = f"{d}/{name}"
            full = col.root / child
            if os.path.islink(full):
                target = os.readlink(full)
                if not os.path.isabs(target) and not posixpath.normpath(
                        posixpath.join(d, target)).startswith(".."):
                    col.links.setdefault(child, target)
            elif full.is_dir():
                col.dirs.add(child)
    return col


def _parents(path: str) -> list[str]:
    out = []
    while "/" in path:
        path = path.rsplit("/", 1)[0]
        out.append(path)
    return out


def build_archive(reader: SysfsReader) -> bytes:
    """The .tar.gz bytes of what ``reader`` touched."""
    from sactool import __version__

    col = collect(reader)
    now = int(time.time())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        manifest = {
            "kind": "sysfs-snapshot",
            "sactool_version": __version__,
            "recorded_from": "the live system" if reader.live else "a recording",
            "files": len(col.files), "links": len(col.links),
            "usage": "mkdir DIR && tar xzf THIS -C DIR && sactool probe --sysfs-root DIR",
        }
        data = json.dumps(manifest, indent=2).encode()
        _add_bytes(tar, "SNAPSHOT.json", data, now)
        dirs = set(col.dirs)
        for p in list(col.files) + list(col.links) + list(col.dirs):
            dirs.update(_parents(p))
        for d in sorted(dirs):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, now
            tar.addfile(ti)
        for link, target in sorted(col.links.items()):
            if link in col.dirs or link in col.files:
                continue
            ti = tarfile.TarInfo(link)
            ti.type, ti.linkname, ti.mode, ti.mtime = tarfile.SYMTYPE, target, 0o777, now
            tar.addfile(ti)
        fence = None if reader.live else reader.root
        for f in sorted(col.files):
            try:
                content = read_regular(col.root / f, fence, MAX_FILE_BYTES)
            except NotRead:
                continue  # unreadable, not a regular file, or outside: absent in the snapshot too
            _add_bytes(tar, f, content, now)
    return buf.getvalue()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = len(data), 0o644, mtime
    tar.addfile(ti, io.BytesIO(data))


def write_snapshot(reader: SysfsReader, path: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Write the archive atomically; refuses to overwrite without ``force`` (ExistsError)."""
    from sactool.records import atomic_write, refuse_existing

    p = Path(path)
    refuse_existing(p, force, "pass --force to overwrite it, or choose another name")
    if not reader.touched:
        raise SactoolError("nothing was read, so there is nothing to snapshot", "run the probe first")
    return atomic_write(p, build_archive(reader), force=force)
