"""Reading an input file as untrusted: a regular file, at most a size that fits its kind, and
(for JSON and YAML) a budget on what parsing it may build.

Every loader (profiles, bench and fleet records, platform files, model configs, traces, the
plug-in's profile) goes through :func:`read_input`: ``/dev/zero``, a FIFO or a socket is refused
as "not a regular file" before a byte is read (opened ``O_NONBLOCK``, so a FIFO cannot block the
open), and a file larger than its kind's bound is refused with its size instead of being read
into memory until the OOM killer comes (22.7 GB for ``bench gather --trace /dev/zero``). A YAML
document may not expand past :data:`MAX_YAML_NODES` nodes through its aliases (a
"billion laughs" of nine nested aliases is a few hundred bytes that ``json.dumps`` would expand to
10⁹ strings), and no JSON or YAML document may nest deeper than :data:`MAX_DEPTH`.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from sactool.errors import RecordError

MiB = 1 << 20

LIMITS = {
    "profile": 8 * MiB,            # sactool writes a few KiB to a few hundred KiB
    "bench record": 256 * MiB,     # raw samples of every configuration and round; a fleet's ranks
    "fleet record": 256 * MiB,
    "platform file": 4 * MiB,      # a few hundred lines
    "model config": 16 * MiB,      # a Hugging Face config.json: kilobytes
    "trace": 4096 * MiB,
    "points file": 256 * MiB,      # tune's journal: one JSON line per simulated or measured point           # top-k indices: steps x topk x 4 bytes (bench gather --trace)
}
"""The largest file of each kind sactool reads; larger is refused (exit 4) with its size."""

MAX_DEPTH = 64
"""Nesting of JSON/YAML collections; sactool's deepest record nests under ten."""

MAX_YAML_NODES = 1_000_000
"""Nodes a YAML document may stand for once its aliases are expanded (a profile: a few thousand)."""


def _fmt(n: int) -> str:
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n} bytes"


def read_input(path: str | os.PathLike[str], *, what: str, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` (default: :data:`LIMITS` of
    ``what``); RecordError (4) for anything else, one line naming the file and why."""
    p = Path(path)
    limit = LIMITS.get(what, 64 * MiB) if limit is None else limit
    fd = _open_regular(p, what, limit, "sactool reads a {what} whole, and a pipe or device may never end")
    try:
        chunks, left = [], limit + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
    except OSError as e:
        raise RecordError(f"{what} {p} cannot be read: {e.strerror}", "check the file") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:   # it grew while being read
        raise RecordError(f"{what} {p} is more than a {what} can be ({_fmt(limit)})", f"check that this is a {what}")
    return data


def open_input(path: str | os.PathLike[str], *, what: str, limit: int | None = None):
    """A binary file object of the regular file ``path`` (checked as :func:`read_input` checks it:
    a regular file no larger than its kind's bound), for readers that parse a file themselves
    (``numpy.load``); the caller closes it."""
    p = Path(path)
    limit = LIMITS.get(what, 64 * MiB) if limit is None else limit
    fd = _open_regular(p, what, limit, "a pipe or device may never end")
    return os.fdopen(fd, "rb")


def _open_regular(p: Path, what: str, limit: int, why: str) -> int:
    """A descriptor of ``p`` opened without blocking on a FIFO, checked to be a regular file of at
    most ``limit`` bytes (closed again and RecordError otherwise); ``why`` ends the not-regular hint."""
    from sactool.host.files import kind

    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise RecordError(f"{what} {p} does not exist", "check the path") from None
    except IsADirectoryError:
        raise RecordError(f"{what} {p} is a directory, not a file", "pass the file itself") from None
    except OSError as e:
        raise RecordError(f"{what} {p} cannot be read: {e.strerror}", "check the path and its permissions") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(f"{what} {p} is a {kind(st.st_mode)}, not a regular file",
                              f"pass a regular file ({why.format(what=what)})")
        if st.st_size > limit:
            raise RecordError(f"{what} {p} is {_fmt(st.st_size)}, more than a {what} can be ({_fmt(limit)})",
                              f"check that this is a {what}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_depth(data: Any, where: str) -> None:
    """RecordError when ``data`` nests collections deeper than :data:`MAX_DEPTH` (iterative)."""
    stack = [(data, 1)]
    while stack:
        obj, depth = stack.pop()
        if isinstance(obj, (dict, list)):
            if depth > MAX_DEPTH:
                raise RecordError(f"{where} nests deeper than {MAX_DEPTH} levels", "re-create it with sactool")
            stack.extend((v, depth + 1) for v in (obj.values() if isinstance(obj, dict) else obj))


def _yaml_loader():
    import yaml

    class BudgetLoader(yaml.SafeLoader):
        """``yaml.SafeLoader`` that refuses a document standing for more than MAX_YAML_NODES
        nodes once aliases are expanded, or nesting deeper than MAX_DEPTH, before constructing it."""

        def compose_document(self):
            node = super().compose_document()
            _expanded_size(node)
            return node

    return BudgetLoader


def _expanded_size(root) -> int:
    """Nodes ``root`` stands for with aliases expanded (each shared node counted once per use),
    computed without expanding (memoised per node, depth first); ValueError past the budget, the
    depth, or for a node that contains itself."""
    import yaml

    size: dict[int, int] = {}
    started: set[int] = set()
    stack = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        kids = []
        if isinstance(node, yaml.SequenceNode):
            kids = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            kids = [n for kv in node.value for n in kv]
        if done:
            total = 1 + sum(size[id(k)] for k in kids)
            if total > MAX_YAML_NODES:
                raise ValueError(f"stands for more than {MAX_YAML_NODES:,} nodes once its aliases are expanded "
                                 "(a 'billion laughs')")
            size[id(node)] = total
            continue
        if id(node) in size:
            continue
        if id(node) in started:   # reached again from inside itself
            raise ValueError("holds an alias to a collection that contains it")
        if depth > MAX_DEPTH:
            raise ValueError(f"nests deeper than {MAX_DEPTH} levels")
        started.add(id(node))
        stack.append((node, depth, True))
        unique = {id(k): k for k in kids if id(k) not in size}
        stack.extend((k, depth + 1, False) for k in unique.values())
    return size[id(root)]


def parse_structured(text: str, *, json_format: bool, where: str) -> Any:
    """Parse JSON or YAML (safe, with the budgets above); RecordError naming ``where``."""
    import yaml

    try:
        if json_format:
            data = json.loads(text)
        else:
            data = yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise RecordError(f"{where} nests too deep to read", "re-create it with sactool") from None
    except ValueError as e:   # the budget (also json.JSONDecodeError, a ValueError)
        if isinstance(e, json.JSONDecodeError):
            raise RecordError(f"{where} is corrupt: {e}", "re-create it with sactool") from None
        raise RecordError(f"{where} {e}", "re-create it with sactool") from None
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise RecordError(f"{where} is corrupt: {first}", "re-create it with sactool") from None
    check_depth(data, where)
    return data
