"""The extras after ``serve … --`` read as SGLang's own parser reads them, so the conflict check
(:mod:`sactool.serve.checks`) sees what SGLang will act on.

SGLang 0.5.23 parses its command line with ``argparse.ArgumentParser(prog="sglang serve")``
(``sglang.srt.server_args.prepare_server_args``), abbreviations allowed: ``--tp 4`` is
``--tp-size 4``, ``--enable-hierarchical`` is ``--enable-hierarchical-cache``, an ambiguous prefix
(``--page``) and an unknown option stop the server. :func:`resolve` applies argparse's rules
(exact name, ``--name=value``, a unique prefix, the number of values each option takes) over the
option table of that parser and spells every option in full; it refuses what SGLang would refuse
(exit 2), naming the candidates or the nearest option.

The table: SGLang's parser itself where an SGLang of another version than the shipped table's
is installed — in the target Python of ``serve --python`` (asked with :data:`OPTIONS_PROBE`) or
in the interpreter running sactool; otherwise ``sactool/data/sglang/options-<version>.json``,
written from the real parser by ``scripts/sglang-options`` (tests/test_serve_argv.py checks it
against the real parser where SGLang is importable).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

from sactool.errors import UsageError

SHIPPED = "0.5.23"
"""The SGLang version whose option table ships (the profiles' ``sglang.tested`` floor)."""


@dataclass(frozen=True)
class OptionTable:
    version: str
    options: dict[str, tuple[str, Any]]      # option string -> (dest, argparse nargs; 0 for flags)
    source: str

    def values_of(self, name: str) -> Any:
        return self.options[name][1]


@lru_cache(maxsize=1)
def shipped_table() -> OptionTable:
    from sactool.data import data_path

    path = data_path("sglang", f"options-{SHIPPED}.json")
    d = json.loads(path.read_text(encoding="utf-8"))
    return OptionTable(d["sglang"], {k: (v[0], v[1]) for k, v in d["options"].items()}, str(path))


def _live_table() -> OptionTable | None:
    """SGLang's parser, where this interpreter imports an SGLang whose version the shipped table
    is not of (None otherwise: the shipped table is that parser's)."""
    import importlib.util

    try:
        if importlib.util.find_spec("sglang") is None:
            return None
        from importlib import metadata

        version = metadata.version("sglang")
    except (ImportError, ValueError, metadata.PackageNotFoundError):
        return None
    if version == SHIPPED:
        return None
    try:
        import argparse

        from sglang.srt.server_args import ServerArgs   # type: ignore[import-not-found]

        p = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(p)
    except Exception:   # an SGLang that does not import here: the shipped table stands
        return None
    opts = {s: (a.dest, a.nargs) for s, a in p._option_string_actions.items() if s not in ("-h", "--help")}
    return OptionTable(version, opts, f"SGLang {version}'s parser (sglang.srt.server_args)")


OPTIONS_PROBE = r"""
import argparse, json
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(p)
print(json.dumps({s: [a.dest, a.nargs] for s, a in p._option_string_actions.items() if s not in ("-h", "--help")}))
"""
"""Run in the target Python (``serve --python``) whose SGLang is of another version than the
shipped table: its own parser's options, as ``scripts/sglang-options`` records them."""


def table_of(answer: str, version: str, source: str) -> OptionTable | None:
    """The table :data:`OPTIONS_PROBE` printed (its last line), or None when it printed none."""
    try:
        d = json.loads(answer.strip().splitlines()[-1])
        return OptionTable(version, {str(k): (str(v[0]), v[1]) for k, v in d.items()}, source)
    except (ValueError, IndexError, TypeError, AttributeError, KeyError):
        return None


def table() -> OptionTable:
    return _live_table() or shipped_table()


def _is_option(arg: str) -> bool:
    """argparse's 'O': starts with '-', is not a negative number and holds no space."""
    if not arg.startswith("-") or arg == "-":
        return False
    try:
        float(arg)
        return False
    except ValueError:
        return " " not in arg


def _name_of(arg: str, t: OptionTable) -> tuple[str, str | None]:
    """(full option, inline value) as argparse resolves ``arg``; refuses an unknown or ambiguous one."""
    if arg in t.options:
        return arg, None
    head, eq, val = arg.partition("=")
    if eq and head in t.options:
        return head, val
    hits = sorted(s for s in t.options if s.startswith(head)) if head.startswith("--") else []
    if len(hits) == 1:
        return hits[0], (val if eq else None)
    if len(hits) > 1:
        shown = ", ".join(hits[:6]) + (f" (+{len(hits) - 6} more)" if len(hits) > 6 else "")
        raise UsageError(f"{head} after -- is ambiguous for SGLang {t.version}: it could be {shown}",
                         f"spell the option in full, e.g. {hits[0]}")
    near = difflib.get_close_matches(head, list(t.options), n=1, cutoff=0.6)
    raise UsageError(f"SGLang {t.version} has no option {head} (after --)",
                     f"did you mean {near[0]}?" if near else
                     "see python -m sglang.launch_server --help for SGLang's options")


def resolve(extra: Sequence[str], t: OptionTable | None = None) -> list[str]:
    """``extra`` with every option spelled in full, values as given (``--tp 4`` -> ``--tp-size 4``,
    ``--tp=4`` -> ``--tp-size=4``); refuses (exit 2) an unknown or ambiguous option, a missing value,
    a value given to a flag and a stray word, as SGLang's parser would at start-up."""
    t = t or table()
    out: list[str] = []
    i = 0
    while i < len(extra):
        arg = extra[i]
        if not _is_option(arg):
            raise UsageError(f"{arg!r} after -- is not an SGLang option nor the value of one",
                             "SGLang takes options only (--name value); quote a value with spaces as one word")
        name, inline = _name_of(arg, t)
        nargs = t.values_of(name)
        i += 1
        if inline is not None:
            if nargs == 0:
                raise UsageError(f"{name} takes no value (SGLang {t.version}), {arg} gives one", f"write {name} alone")
            out.append(f"{name}={inline}")
            continue
        out.append(name)
        taken = 0
        most = {0: 0, None: 1, "?": 1}.get(nargs, nargs if isinstance(nargs, int) else len(extra))
        while taken < most and i < len(extra) and not _is_option(extra[i]):
            out.append(extra[i])
            i += 1
            taken += 1
        least = {None: 1, "+": 1}.get(nargs, nargs if isinstance(nargs, int) else 0)
        if taken < least:
            raise UsageError(f"{name} expects a value (SGLang {t.version})" + (f": {arg} is its prefix" if arg != name else ""),
                             f"give it one ({name} VALUE), or drop it")
    return out


__all__ = ["OPTIONS_PROBE", "OptionTable", "SHIPPED", "resolve", "shipped_table", "table", "table_of"]
