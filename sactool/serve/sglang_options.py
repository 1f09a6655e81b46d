"""The extras after ``serve … --`` read as SGLang's own parser reads them, so the conflict check
(:mod:`sactool.serve.checks`) sees what SGLang will act on.

SGLang 0.5.23 parses its command line with ``argparse.ArgumentParser(prog="sglang serve")``
(``sglang.srt.server_args.prepare_server_args``), abbreviations allowed: ``--tp 4`` is
``--tp-size 4``, ``--enable-hierarchical`` is ``--enable-hierarchical-cache``, an ambiguous prefix
(``--page``) and an unknown option stop the server. :func:`resolve` applies argparse's rules
(exact name, ``--name=value``, a unique prefix, the number of values each option takes) over the
option table of that parser and spells every option in full; it refuses what SGLang would refuse
(exit 2), naming the candidates or the nearest option. Values are checked as argparse converts
them, where the parser's ``type`` is one sactool can apply exactly (``int``, ``float``, ``str``,
``json.loads``) and against the option's ``choices``: ``--tp-size four`` or ``--kv-cache-dtype fp9``
is refused here, not by SGLang after the launch. Other ``type`` callables of SGLang's
(``human_readable_int``, ``json_list_type``, …) are recorded by name and not applied.

The table: SGLang's parser itself where an SGLang of another version than the shipped table's
is installed — in the target Python of ``serve --python`` (asked with :func:`options_probe`) or
in the interpreter running sactool; otherwise ``sactool/data/sglang/options-<version>.json``,
written from the real parser by ``scripts/sglang-options`` (tests/test_serve_argv.py checks it
against the real parser where SGLang is importable).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Sequence

from sactool.errors import UsageError

SHIPPED = "0.5.23"
"""The SGLang version whose option table ships (the profiles' ``sglang.tested`` floor)."""


@dataclass(frozen=True)
class OptionTable:
    version: str
    options: dict[str, tuple[str, Any]]      # option string -> (dest, argparse nargs; 0 for flags)
    source: str
    kinds: dict[str, tuple[str | None, tuple | None]] = field(default_factory=dict)
    """option string -> (its ``type`` as ``module.name``, or None; its ``choices``, or None); a
    table written before values were recorded has none (values then go unchecked)."""
    engine: str = "SGLang"
    """Whose parser the table is (named in every refusal)."""
    help_command: str = "python -m sglang.launch_server --help"
    """Where a user reads that engine's options."""

    def values_of(self, name: str) -> Any:
        return self.options[name][1]


def option_entries(parser) -> dict:
    """``{option: [dest, nargs, type, choices]}`` of an argparse parser, as the table records them:
    ``nargs`` 0 for a flag, ``type`` as ``module.qualname`` (None: strings), ``choices`` when every
    one is a plain string or number (else None). Its source is also what :func:`options_probe`
    runs in a target Python, so both readings agree."""
    out = {}
    for s, a in sorted(parser._option_string_actions.items()):
        if s in ("-h", "--help"):
            continue
        ty = a.type
        kind = None if ty is None else f"{getattr(ty, '__module__', '') or ''}.{getattr(ty, '__qualname__', repr(ty))}"
        ch = list(a.choices) if a.choices is not None else None
        if ch is not None and not isinstance(a.choices, (list, tuple)):   # a set: no order of its own
            ch = sorted(ch, key=str)
        if ch is not None and not all(isinstance(c, (str, int, float)) and not isinstance(c, bool) for c in ch):
            ch = None
        out[s] = [a.dest, a.nargs, kind, ch]
    return out


def _table(version: str, entries: dict, source: str) -> OptionTable:
    opts = {str(k): (str(v[0]), v[1]) for k, v in entries.items()}
    kinds = {str(k): (v[2] if isinstance(v[2], str) else None, tuple(v[3]) if isinstance(v[3], list) else None)
             for k, v in entries.items() if len(v) >= 4}
    return OptionTable(version, opts, source, kinds)


@lru_cache(maxsize=1)
def shipped_table() -> OptionTable:
    from sactool.data import data_path

    path = data_path("sglang", f"options-{SHIPPED}.json")
    d = json.loads(path.read_text(encoding="utf-8"))
    return _table(d["sglang"], d["options"], str(path))


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
    return _table(version, option_entries(p), f"SGLang {version}'s parser (sglang.srt.server_args)")


def options_probe() -> str:
    """The program run in the target Python (``serve --python``) whose SGLang is of another version
    than the shipped table: its own parser's options, as ``scripts/sglang-options`` records them
    (:func:`option_entries`' own source, so nothing of sactool need be importable there)."""
    import inspect
    import textwrap

    return ("import argparse, json\n" + textwrap.dedent(inspect.getsource(option_entries)) +
            "from sglang.srt.server_args import ServerArgs\n"
            "p = argparse.ArgumentParser(prog='sglang serve')\n"
            "ServerArgs.add_cli_args(p)\n"
            "print(json.dumps(option_entries(p)))\n")


def table_of(answer: str, version: str, source: str) -> OptionTable | None:
    """The table :func:`options_probe` printed (its last line), or None when it printed none."""
    try:
        d = json.loads(answer.strip().splitlines()[-1])
        return _table(version, d, source) if isinstance(d, dict) else None
    except (ValueError, IndexError, TypeError, AttributeError, KeyError):
        return None


_APPLIED: dict[str, Callable[[str], Any]] = {"builtins.int": int, "builtins.float": float, "builtins.str": str,
                                             "json.loads": json.loads}
"""The ``type`` callables applied to a value as SGLang's parser would; others are not applied."""


def check_value(name: str, value: str, t: OptionTable) -> None:
    """Refuse (exit 2) a value SGLang's parser would refuse for ``name``: one its ``type`` cannot
    convert, or one outside its ``choices`` (compared after the conversion, as argparse does)."""
    kind, choices = t.kinds.get(name, (None, None))
    if kind is not None and kind not in _APPLIED:
        return                                    # a callable of SGLang's own: not applied here
    conv = _APPLIED[kind] if kind is not None else str
    try:
        v = conv(value)
    except (ValueError, TypeError):
        what = {"builtins.int": "an integer", "builtins.float": "a number", "json.loads": "JSON"}.get(str(kind), str(kind))
        raise UsageError(f"{name} {value!r}: {t.engine} {t.version} wants {what} there (after --)",
                         f"give {name} {what}, as '{t.help_command}' lists it") from None
    if choices is not None and v not in choices:
        shown = ", ".join(map(str, choices[:12])) + (f" (+{len(choices) - 12} more)" if len(choices) > 12 else "")
        near = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
        raise UsageError(f"{name} {value!r} is not one of {t.engine} {t.version}'s choices: {shown} (after --)",
                         f"did you mean {name} {near[0]}?" if near else f"pick one of them for {name}")


def table() -> OptionTable:
    return _live_table() or shipped_table()


def _is_option(arg: str, t: OptionTable) -> bool:
    """Whether argparse reads ``arg`` as an option (``_parse_optional``): it starts with '-' and is
    an option, ``--option=value`` or a prefix of one (a value may hold spaces then); else it is not
    one when it is a negative number or holds a space."""
    if not arg.startswith("-") or arg == "-":
        return False
    head = arg.partition("=")[0]
    if arg in t.options or head in t.options or (head.startswith("--") and any(s.startswith(head) for s in t.options)):
        return True
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
        raise UsageError(f"{head} after -- is ambiguous for {t.engine} {t.version}: it could be {shown}",
                         f"spell the option in full, e.g. {hits[0]}")
    near = difflib.get_close_matches(head, list(t.options), n=1, cutoff=0.6)
    raise UsageError(f"{t.engine} {t.version} has no option {head} (after --)",
                     f"did you mean {near[0]}?" if near else
                     f"see {t.help_command} for {t.engine}'s options")


def resolve(extra: Sequence[str], t: OptionTable | None = None) -> list[str]:
    """``extra`` with every option spelled in full, values as given (``--tp 4`` -> ``--tp-size 4``,
    ``--tp=4`` -> ``--tp-size=4``); refuses (exit 2) an unknown or ambiguous option, a missing value,
    a value given to a flag and a stray word, as SGLang's parser would at start-up."""
    t = t or table()
    out: list[str] = []
    i = 0
    while i < len(extra):
        arg = extra[i]
        if not _is_option(arg, t):
            raise UsageError(f"{arg!r} after -- is not an option of {t.engine} nor the value of one",
                             f"{t.engine} takes options only after -- (--name value); quote a value with spaces as one word")
        name, inline = _name_of(arg, t)
        nargs = t.values_of(name)
        i += 1
        if inline is not None:
            if nargs == 0:
                raise UsageError(f"{name} takes no value ({t.engine} {t.version}), {arg} gives one", f"write {name} alone")
            check_value(name, inline, t)
            out.append(f"{name}={inline}")
            continue
        out.append(name)
        taken = 0
        most = {0: 0, None: 1, "?": 1}.get(nargs, nargs if isinstance(nargs, int) else len(extra))
        while taken < most and i < len(extra) and not _is_option(extra[i], t):
            check_value(name, extra[i], t)
            out.append(extra[i])
            i += 1
            taken += 1
        least = {None: 1, "+": 1}.get(nargs, nargs if isinstance(nargs, int) else 0)
        if taken < least:
            raise UsageError(f"{name} expects a value ({t.engine} {t.version})" + (f": {arg} is its prefix" if arg != name else ""),
                             f"give it one ({name} VALUE), or drop it")
    return out


__all__ = ["OptionTable", "SHIPPED", "check_value", "option_entries", "options_probe", "resolve", "shipped_table",
           "table", "table_of"]
