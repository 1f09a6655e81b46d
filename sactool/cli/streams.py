"""Standard output and error, handled in one place for every entry point (:func:`guarded_streams`).

* an output encoding that cannot show sactool's few non-ASCII characters (``PYTHONIOENCODING=ascii``,
  ``LANG=C`` on an old Python): they degrade to ASCII (``—`` → ``-``, ``←`` → ``<-``, ``×`` → ``x``,
  anything else → ``?``) instead of a UnicodeEncodeError after the work is done;
* stdout that cannot be written (``> /dev/full``, a closed descriptor, an I/O error): an
  :class:`~sactool.errors.OutputError` — one line ``error: cannot write to standard output: …``,
  exit 1 — instead of a traceback; a closed pipe (``| head``) stays a quiet BrokenPipeError;
* stderr closed (``2>&-``): messages are dropped, the exit code stays what the error says.

Control characters in text from a file are escaped by :func:`sactool.render.printable`.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import sys
import unicodedata
from typing import NoReturn

ASCII_FALLBACK = {
    "\u2014": "-", "\u2013": "-", "\u2012": "-", "\u2212": "-", "\u2026": "...", "\u2190": "<-",
    "\u2192": "->", "\u2194": "<->", "\u00d7": "x", "\u2265": ">=", "\u2264": "<=", "\u2248": "~",
    "\u00b1": "+/-", "\u00b5": "u", "\u03bc": "u", "\u00b7": ".", "\u2022": "*", "\u2018": "'", "\u2019": "'",
    "\u201c": '"', "\u201d": '"', "\u00a0": " ", "\u2009": " ", "\u202f": " ", "\u2713": "ok", "\u2717": "x",
}
"""The characters sactool prints and the ASCII a reader understands in their place."""

ERRORS = "sactool-ascii"


def _to_ascii(ch: str) -> str:
    if ch in ASCII_FALLBACK:
        return ASCII_FALLBACK[ch]
    plain = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
    return plain or "?"


def _handler(err: UnicodeError):
    if not isinstance(err, UnicodeEncodeError):
        raise err
    return "".join(_to_ascii(c) for c in err.object[err.start:err.end]), err.end


codecs.register_error(ERRORS, _handler)


def _degrade_encoding(stream) -> None:
    """Make ``stream`` write ASCII stand-ins for characters its encoding lacks."""
    enc = getattr(stream, "encoding", None) or "ascii"
    try:
        "\u2014\u2190\u00d7".encode(enc)
        return
    except (UnicodeEncodeError, LookupError):
        pass
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        try:
            reconfigure(errors=ERRORS)
        except (ValueError, OSError):
            pass


class _Wrapped:
    """A standard stream that may be closed (``None``); other attributes pass through."""

    def __init__(self, inner):
        self._inner = inner

    def isatty(self) -> bool:
        return bool(self._inner is not None and self._inner.isatty())

    def __getattr__(self, name):
        if self._inner is None:
            raise AttributeError(name)
        return getattr(self._inner, name)


class _Out(_Wrapped):
    """stdout as sactool writes it: write failures other than a closed pipe become OutputError."""

    def _fail(self, e: OSError | None) -> NoReturn:
        from sactool.errors import OutputError

        _silence(1)
        why = "it is closed" if e is None else (e.strerror or str(e))
        raise OutputError(f"cannot write to standard output: {why}",
                          "send the output to a writable place (a file on a disk with free space, or a pipe)")

    def write(self, s: str) -> int:
        if self._inner is None:
            self._fail(None)
        try:
            return self._inner.write(s)
        except BrokenPipeError:
            raise
        except OSError as e:
            self._fail(e)

    def flush(self) -> None:
        if self._inner is None:
            return
        try:
            self._inner.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            self._fail(e)


class _Err(_Wrapped):
    """stderr that may be closed: messages are dropped rather than turning an exit code into 1."""

    def write(self, s: str) -> int:
        if self._inner is not None:
            try:
                return self._inner.write(s)
            except (OSError, ValueError):
                self._inner = None
        return len(s)

    def flush(self) -> None:
        if self._inner is not None:
            try:
                self._inner.flush()
            except (OSError, ValueError):
                self._inner = None


def _silence(fd: int) -> None:
    """Point ``fd`` at /dev/null so Python's final flush of what is still buffered cannot fail
    (it would print "Exception ignored …" and exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:
        pass


def quiet_closed_pipe() -> None:
    """After a BrokenPipeError on stdout: drop what is buffered, quietly."""
    _silence(1)


@contextlib.contextmanager
def guarded_streams():
    """Install the stdout/stderr handling above for the duration of one command."""
    out, err = sys.stdout, sys.stderr
    for s in (out, err):
        if s is not None and not isinstance(s, (_Out, _Err)):
            _degrade_encoding(s)
    sys.stdout = out if isinstance(out, _Out) else _Out(out)
    sys.stderr = err if isinstance(err, _Err) else _Err(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
