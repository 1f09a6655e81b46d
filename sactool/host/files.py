"""Reading one file of a sysfs tree without leaving it and without blocking.

A recorded tree (``--sysfs-root``) is any directory a user hands sactool: it may hold a symlink to
``/etc/shadow`` or a FIFO. :func:`read_regular` follows links, checks the result is still under
the root, and opens only regular files, so neither :class:`~sactool.host.sysfs.SysfsReader` nor
``probe --snapshot`` (which uses the same function) can print or archive a file from outside the
tree or hang on a pipe. Real sysfs is full of links that stay inside ``/sys``; those are followed
as before.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


MAX_READ_BYTES = 1 << 20
"""At most this much of one file is read (and archived by ``probe --snapshot``)."""


class NotRead(Exception):
    """A file was not read; ``reason`` says why ("missing", "not a regular file (fifo)", …)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def inside(root: Path | None, path: str | os.PathLike[str]) -> bool:
    """Whether ``path``, with every symlink followed, stays under ``root`` (None: the live ``/``)."""
    if root is None:
        return True
    real = os.path.realpath(path)
    r = os.fspath(root)
    return real == r or real.startswith(r.rstrip(os.sep) + os.sep)


_KINDS = ((stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
          (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "directory"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "special file")


def read_regular(path: str | os.PathLike[str], root: Path | None = None, limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of a regular file at ``path`` (at most ``limit``); raises :class:`NotRead`.

    Never leaves ``root`` (symlinks are followed, then containment is checked), never opens a
    FIFO, socket or device (``stat`` first, then ``O_NONBLOCK`` so a FIFO swapped in meanwhile
    cannot block, then ``fstat`` must show the same regular file).
    """
    if not inside(root, path):
        raise NotRead("resolves outside the sysfs root")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise NotRead("dangling link" if os.path.islink(path) else "missing") from None
    except PermissionError:
        raise NotRead("permission denied") from None
    except OSError as e:
        raise NotRead(f"unreadable ({errno.errorcode.get(e.errno or 0, e.errno)})") from None
    if stat.S_ISDIR(st.st_mode):
        raise NotRead("is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise NotRead(f"not a regular file ({_kind(st.st_mode)})")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotRead("missing") from None
    except PermissionError:
        raise NotRead("permission denied") from None
    except OSError as e:  # EIO, EINVAL, ENXIO: attributes that refuse reads
        raise NotRead(f"unreadable ({errno.errorcode.get(e.errno or 0, e.errno)})") from None
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            raise NotRead("changed while being opened")
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            try:
                b = os.read(fd, min(left, 1 << 16))
            except OSError as e:
                raise NotRead(f"unreadable ({errno.errorcode.get(e.errno or 0, e.errno)})") from None
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)
    finally:
        os.close(fd)
