"""``sactool probe --snapshot out.tar.gz``: archive exactly the files the prober read.

Every path in ``reader.touched`` is stored at its canonical location (symlinks resolved), and every
symlink met on the way is stored as a symlink with its original relative target, so that
``sactool probe --sysfs-root DIR`` on the unpacked archive reads the same values through the same
links and gives the same result. Directories the prober listed keep their sub-directories and
links (as empty directories / links), so listings match too. A ``SNAPSHOT.json`` at the top says
where and when it was recorded. Written atomically (temporary name, then rename).

Everything is read through the reader's :class:`~sactool.host.files.Tree`, so a snapshot of a
recording never archives a file from outside it (a link out, a hard link, a FIFO are left out),
and of ``/proc/iomem`` only the lines probe uses are kept (:func:`shareable_iomem`).
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import stat
import tarfile
import time
from pathlib import Path

from sactool.errors import SactoolError
from sactool.host.files import MAX_READ_BYTES, NotRead
from sactool.host.iomem import IOMEM
from sactool.host.sysfs import SysfsReader
from sactool.topology.origin import read_origin

MAX_FILE_BYTES = MAX_READ_BYTES  # what SysfsReader.text reads; store the same


def _escapes(d: str, target: str) -> bool:
    """Whether a link at ``d/…`` to ``target`` would leave the archive (absolute, or ``..`` out)."""
    joined = posixpath.normpath(posixpath.join(d, target))
    return os.path.isabs(target) or joined == ".." or joined.startswith("../")


class _Collector:
    """What to archive, found through the reader's :class:`~sactool.host.files.Tree` (a
    recording: every path resolved beneath its root, so nothing outside it is archived)."""

    def __init__(self, reader: SysfsReader):
        self.tree = reader.tree
        self.files: set[str] = set()
        self.dirs: set[str] = set()
        self.links: dict[str, str] = {}
        self._seen: set[str] = set()

    def canonical(self, rel: str) -> str | None:
        """``rel`` with its links resolved (recorded in :attr:`links`); None when it leaves the
        tree, or meets a link the archive cannot hold (absolute, or climbing out)."""
        if rel in self._seen:
            return None
        self._seen.add(rel)
        try:
            canon, links = self.tree.canonical(rel)
        except NotRead:
            return None
        if any(_escapes(posixpath.dirname(link), target) for link, target in links.items()):
            return None
        self.links.update(links)
        return canon or None

    def add(self, rel: str) -> None:
        canon = self.canonical(rel)
        if canon is None:
            return
        try:
            st = self.tree.lstat(canon)
        except NotRead:
            return
        if st is not None and stat.S_ISDIR(st.st_mode):
            self.dirs.add(canon)
        elif st is not None and stat.S_ISREG(st.st_mode):
            self.files.add(canon)


def collect(reader: SysfsReader) -> _Collector:
    col = _Collector(reader)
    for rel in sorted(reader.touched):
        col.add(rel)
    # listed directories: keep their sub-directories and links so listings stay the same
    for d in sorted(col.dirs):
        try:
            names = col.tree.listdir(d)
        except NotRead:
            continue
        for name in names:
            child = f"{d}/{name}"
            try:
                st = col.tree.lstat(child)
                if st is not None and stat.S_ISLNK(st.st_mode):
                    target = col.tree.readlink(child)
                    if not _escapes(d, target):
                        col.links.setdefault(child, target)
                elif st is not None and stat.S_ISDIR(st.st_mode):
                    col.dirs.add(child)
            except NotRead:
                continue
    return col


def shareable_iomem(text: str) -> str:
    """The lines of ``/proc/iomem`` probe uses — ``CXL Window N``, ``Soft Reserved`` and the
    entries enclosing a Soft Reserved one (their nesting is what the parser reads) — and no
    other: as root the whole file shows where the kernel's code and data lie in physical memory,
    which a snapshot made to be mailed around must not carry."""
    from sactool.host.iomem import _LINE_RE
    from sactool.topology.classify import _CXL_WINDOW_RE, SOFT_RESERVED

    lines = [ln for ln in text.splitlines() if _LINE_RE.match(ln.rstrip())]
    keep: set[int] = set()
    for i, ln in enumerate(lines):
        m = _LINE_RE.match(ln.rstrip())
        assert m is not None   # kept above: every line matches
        name, depth = m.group(4).strip(), len(m.group(1)) // 2
        if (depth == 0 and _CXL_WINDOW_RE.match(name)) or name == SOFT_RESERVED:
            keep.add(i)
            for j in range(i - 1, -1, -1):   # the enclosing entries: the nearest line one level up, …
                mj = _LINE_RE.match(lines[j].rstrip())
                assert mj is not None
                dj = len(mj.group(1)) // 2
                if dj < depth:
                    keep.add(j)
                    depth = dj
                if depth == 0:
                    break
    return "".join(lines[i] + "\n" for i in sorted(keep))


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
    origin = read_origin(reader)   # a snapshot of a generated tree still says it was generated
    now = int(time.time())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        manifest = {
            "kind": "sysfs-snapshot",
            "sactool_version": __version__,
            "recorded_from": "the live system" if reader.live else "a recording",
            **({"recorded_from": origin.note, "generated": True} if origin.kind == "generated" else {}),
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
        seen = {}
        for rel, data in reader.seen.items():   # live: the bytes probe read, not what the file holds now
            try:
                seen[col.tree.canonical(rel)[0]] = data
            except NotRead:
                pass
        for f in sorted(col.files):
            try:
                content = seen[f][:MAX_FILE_BYTES] if f in seen else col.tree.read(f, MAX_FILE_BYTES)
            except NotRead:
                continue  # unreadable, not a regular file, hard-linked or outside: absent in the snapshot too
            if f == IOMEM:
                content = shareable_iomem(content.decode("latin-1")).encode("latin-1")
            _add_bytes(tar, f, content, now)
        for rel, content in sorted(reader.captured.items()):   # mailbox replies, traces (topology/health.py)
            if rel not in col.files:
                for d in _parents(rel):
                    if d not in dirs:
                        dirs.add(d)
                        ti = tarfile.TarInfo(d)
                        ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, 0o755, now
                        tar.addfile(ti)
                _add_bytes(tar, rel, content[:MAX_FILE_BYTES], now)
    return buf.getvalue()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.mtime = len(data), 0o644, mtime
    tar.addfile(ti, io.BytesIO(data))


def write_snapshot(reader: SysfsReader, path: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Write the archive atomically; refuses to overwrite without ``force`` (ExistsError). A failed
    final write saves it under the temporary directory and names it (records.save_result)."""
    from sactool.records import refuse_existing, save_result

    p = Path(path)
    refuse_existing(p, force, "pass --force to overwrite it, or choose another name")
    if not reader.touched:
        raise SactoolError("nothing was read, so there is nothing to snapshot", "run the probe first")
    written, err = save_result(p, build_archive(reader), force=force, kind="snapshot", suffix=".tar.gz")
    if err is not None:
        raise err
    assert written is not None   # no error: the file is where it was asked to be
    return written
