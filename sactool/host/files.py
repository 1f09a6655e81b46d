"""Reading a recorded sysfs tree as untrusted input: never outside its root, even under a race.

A recorded tree (``--sysfs-root``) is any directory a user hands sactool — often someone else's
tarball from a bug report: it may hold a symlink to ``/etc/shadow``, a hard link to it, a FIFO, or
a link that another process swaps in while sactool reads. :class:`Tree` holds a descriptor of the
root directory and resolves every path *relative to it, by the kernel, in one step*:

* ``openat2(2)`` with ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`` where the kernel has it (Linux
  5.6+; refused with ``EXDEV`` when a ``..`` or a link — absolute, or relative and climbing out —
  would leave the root, whatever is renamed meanwhile);
* otherwise a component walk: each name opened with ``O_NOFOLLOW`` relative to the descriptor of
  its parent, links read with ``readlinkat`` and resolved by sactool inside the root (a link
  swapped in between two steps is seen as a link, never followed by the kernel).

Only regular files are read (a FIFO, socket or device is refused, opened ``O_NONBLOCK`` so one
swapped in cannot block), at most ``limit`` bytes, and a regular file with more than one name
(``st_nlink > 1``: a hard link, which can point anywhere on the same file system) is refused —
sysfs and procfs attributes never have one. The live system (root ``/``) is read as before:
its links all stay inside ``/sys`` and ``/proc``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import weakref
from pathlib import Path


MAX_READ_BYTES = 1 << 20
"""At most this much of one file is read (and archived by ``probe --snapshot``)."""

MAX_LINKS = 40
"""Links followed in one path before giving up (the kernel's own MAXSYMLINKS)."""

OUTSIDE = "resolves outside the sysfs root"
HARD_LINK = "hard-linked (a sysfs attribute has one name; this one may be a file from outside the tree)"


class NotRead(Exception):
    """A file was not read; ``reason`` says why ("missing", "not a regular file (fifo)", …)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


_KINDS = ((stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
          (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symbolic link"))


def kind(mode: int) -> str:
    """``"fifo"``, ``"character device"``, … for a ``st_mode`` that is not a regular file."""
    return next((name for test, name in _KINDS if test(mode)), "special file")


def _reason(e: OSError) -> str:
    if e.errno == errno.ENOENT:
        return "missing"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if e.errno == errno.EXDEV:
        return OUTSIDE
    if e.errno == errno.ELOOP:
        return "too many levels of symbolic links"
    if e.errno == errno.ENOTDIR:
        return "not a directory"
    return f"unreadable ({errno.errorcode.get(e.errno or 0, e.errno)})"


# ---- openat2(2) through ctypes --------------------------------------------------------------

RESOLVE_NO_MAGICLINKS = 0x02   # include/uapi/linux/openat2.h
RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = {"alpha": 547}.get(platform.machine(), 437)   # one number on every other arch (5.6+)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_OPENAT2: dict[str, object] = {"syscall": None, "checked": False}


def _openat2_syscall():
    """libc's ``syscall`` when ``openat2`` works here (kernel 5.6+, not filtered), else None."""
    if not _OPENAT2["checked"]:
        _OPENAT2["checked"] = True
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.syscall
            fn.restype = ctypes.c_long
            how = _OpenHow(os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, 0, RESOLVE_BENEATH)
            fd = fn(_SYS_OPENAT2, ctypes.c_int(-100), b"/", ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
            if fd >= 0 or ctypes.get_errno() == errno.EXDEV:   # "/" is not beneath the cwd: it works
                if fd >= 0:
                    os.close(fd)
                _OPENAT2["syscall"] = fn
        except (OSError, AttributeError):  # pragma: no cover - no libc syscall()
            pass
    return _OPENAT2["syscall"]


def use_openat2(on: bool | None) -> None:
    """Tests: force the component walk (``False``), or go back to detecting ``openat2`` (``None``)."""
    _OPENAT2["checked"] = on is False
    _OPENAT2["syscall"] = None


def _openat2(fn, dirfd: int, rel: str, flags: int) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, 0, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
    for _ in range(8):   # EAGAIN: a rename raced the lookup; the kernel asks to retry
        fd = fn(_SYS_OPENAT2, ctypes.c_int(dirfd), os.fsencode(rel), ctypes.byref(how),
                ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err not in (errno.EAGAIN, errno.EINTR):
            raise OSError(err, os.strerror(err), rel)
    raise NotRead("changed while being read")


# ---- the tree -------------------------------------------------------------------------------

def _parts(rel: str) -> list[str]:
    return [p for p in rel.split("/") if p and p != "."]


class Tree:
    """A directory read as untrusted input; ``rel`` paths are relative to it (``sys/…``, ``proc/…``).

    ``Tree(None)`` is the live system: paths are opened from ``/`` as they are (no fence)."""

    def __init__(self, root: str | os.PathLike[str] | None):
        self.fenced = root is not None
        self.root = Path(root) if root is not None else Path("/")
        self.fd = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        weakref.finalize(self, os.close, self.fd)

    # ---- resolution ------------------------------------------------------------------------
    def _open(self, rel: str, flags: int) -> int:
        """A descriptor of ``rel`` (links followed inside the root) opened with ``flags``."""
        rel = rel.lstrip("/") or "."
        if not self.fenced:
            return os.open(rel, flags | os.O_CLOEXEC, dir_fd=self.fd)
        fn = _openat2_syscall()
        if fn is not None:
            return _openat2(fn, self.fd, rel, flags)
        return self.walk(rel, flags)[0]

    def walk(self, rel: str, flags: int = os.O_PATH, *, follow: bool = True) -> tuple[int, list[str], dict[str, str]]:
        """Resolve ``rel`` one component at a time (``O_NOFOLLOW`` each, links read and resolved
        here, inside the root): (descriptor opened with ``flags``, canonical components, links met
        as {path of the link: its target}). ``follow=False`` leaves a final link unresolved.
        Raises OSError (EXDEV: leaves the root, absolute links included)."""
        stack = [os.dup(self.fd)]
        names: list[str] = []
        links: dict[str, str] = {}
        hops = 0
        todo = _parts(rel)
        try:
            while todo:
                part = todo.pop(0)
                if part == "..":
                    if not names:
                        if self.fenced:
                            raise OSError(errno.EXDEV, "outside the root", rel)
                        continue
                    os.close(stack.pop())
                    names.pop()
                    continue
                last = not todo
                f = (flags if last else os.O_PATH | os.O_DIRECTORY) | os.O_NOFOLLOW | os.O_CLOEXEC
                try:
                    fd = os.open(part, f, dir_fd=stack[-1])
                    is_link = bool(f & os.O_PATH) and stat.S_ISLNK(os.fstat(fd).st_mode)
                    if is_link:
                        os.close(fd)
                except OSError as e:
                    if e.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        raise
                    is_link = True
                    fd = -1
                if not is_link or (last and not follow):
                    if fd < 0:   # a final link asked for as itself: its parent holds it
                        fd = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=stack[-1])
                    if last:
                        return fd, names + [part], links
                    stack.append(fd)
                    names.append(part)
                    continue
                hops += 1
                if hops > MAX_LINKS:
                    raise OSError(errno.ELOOP, "too many links", rel)
                try:
                    target = os.readlink(part, dir_fd=stack[-1])
                except OSError as e2:
                    if e2.errno != errno.EINVAL:
                        raise
                    if not last and not stat.S_ISDIR(os.stat(part, dir_fd=stack[-1], follow_symlinks=False).st_mode):
                        raise OSError(errno.ENOTDIR, "not a directory", rel) from None
                    todo.insert(0, part)   # a link no more: renamed meanwhile, look again
                    continue
                links["/".join(names + [part])] = target
                if target.startswith("/"):
                    if self.fenced:
                        raise OSError(errno.EXDEV, "absolute link", rel)
                    for fd_ in stack[1:]:
                        os.close(fd_)
                    del stack[1:]
                    names = []
                todo = _parts(target) + todo
            return os.dup(stack[-1]), list(names), links
        finally:
            for fd_ in stack:
                os.close(fd_)

    # ---- reads -----------------------------------------------------------------------------
    def read(self, rel: str, limit: int = MAX_READ_BYTES) -> bytes:
        """The bytes of the regular file ``rel`` (at most ``limit``); raises :class:`NotRead`."""
        try:
            fd = self._open(rel, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as e:
            raise NotRead("dangling link" if e.errno == errno.ENOENT and self._is_link(rel) else _reason(e)) from None
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise NotRead("is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise NotRead(f"not a regular file ({kind(st.st_mode)})")
            if self.fenced and st.st_nlink > 1:
                raise NotRead(HARD_LINK)
            return read_fd(fd, limit)
        finally:
            os.close(fd)

    def _is_link(self, rel: str) -> bool:
        try:
            st = self.lstat(rel)
        except NotRead:
            return False
        return st is not None and stat.S_ISLNK(st.st_mode)

    def stat(self, rel: str) -> os.stat_result:
        """``stat`` with links followed inside the root; raises :class:`NotRead`."""
        try:
            fd = self._open(rel, os.O_PATH)
        except OSError as e:
            raise NotRead(_reason(e)) from None
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def _parent(self, rel: str) -> tuple[int, str]:
        parts = _parts(rel)
        if not parts or parts[-1] == "..":
            raise NotRead("not a file name")
        try:
            return self._open("/".join(parts[:-1]) or ".", os.O_PATH | os.O_DIRECTORY), parts[-1]
        except OSError as e:
            raise NotRead(_reason(e)) from None

    def lstat(self, rel: str) -> os.stat_result | None:
        """``lstat`` of the entry itself (a link is not followed) in a directory under the root;
        None when it does not exist; raises :class:`NotRead` when its directory is not reachable."""
        pfd, name = self._parent(rel)
        try:
            return os.stat(name, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise NotRead(_reason(e)) from None
        finally:
            os.close(pfd)

    def readlink(self, rel: str) -> str:
        """The raw target of the link ``rel`` (its directory resolved inside the root)."""
        pfd, name = self._parent(rel)
        try:
            return os.readlink(name, dir_fd=pfd)
        except OSError as e:
            raise NotRead("not a symlink" if e.errno == errno.EINVAL else _reason(e)) from None
        finally:
            os.close(pfd)

    def listdir(self, rel: str) -> list[str]:
        """Sorted names in the directory ``rel``; raises :class:`NotRead`."""
        try:
            fd = self._open(rel, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as e:
            raise NotRead(_reason(e)) from None
        try:
            return sorted(os.listdir(fd))
        except OSError as e:
            raise NotRead(_reason(e)) from None
        finally:
            os.close(fd)

    def canonical(self, rel: str) -> tuple[str, dict[str, str]]:
        """(``rel`` with every link resolved, inside the root; the links met on the way).
        Raises :class:`NotRead` ("resolves outside the sysfs root", "dangling link", …)."""
        try:
            fd, names, links = self.walk(rel)
        except OSError as e:
            raise NotRead("dangling link" if e.errno == errno.ENOENT and _parts(rel) else _reason(e)) from None
        os.close(fd)
        return "/".join(names), links


def read_fd(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from ``fd`` (NotRead on a read error)."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        try:
            b = os.read(fd, min(left, 1 << 16))
        except OSError as e:
            raise NotRead(_reason(e)) from None
        if not b:
            break
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


def read_regular(path: str | os.PathLike[str], root: Path | None = None, limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (absolute, or relative to the working directory),
    read inside ``root`` the way :class:`Tree` reads (None: the live system); raises
    :class:`NotRead`."""
    if root is None:
        return Tree(None).read(os.path.abspath(path), limit)
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    if rel == ".." or rel.startswith("../"):
        raise NotRead(OUTSIDE)
    return Tree(root).read(rel, limit)
