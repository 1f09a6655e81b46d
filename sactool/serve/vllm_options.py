"""The extras after ``serve --engine vllm … --`` read as ``vllm serve``'s own parser reads them, so
the conflict checks see what vLLM will act on.

``vllm serve`` parses with vLLM's ``FlexibleArgumentParser`` (``vllm/utils/argparse_utils.py``), an
argparse parser (abbreviations allowed) that first rewrites the command line
(``FlexibleArgumentParser.parse_args``, vLLM 0.34.0):

* ``--model X`` is moved to the positional model (and warned about);
* ``--config FILE`` pulls options from a YAML file — sactool cannot see them, so it is refused here;
* underscores in an option's name become dashes (``--max_model_len`` is ``--max-model-len``);
* ``-O3`` / ``-O=3`` / ``-O 3`` become ``--optimization-level 3``;
* a dotted option (``--attention-config.hisparse_config.device_buffer_size 6144``) is one key of the
  JSON of its option; all dotted keys of one option are merged into one JSON value appended after
  the other arguments (so they win over that option given whole).

:func:`resolve` applies those rewrites, then argparse's rules over the option table of vLLM's
parser (:func:`sactool.serve.sglang_options.resolve`, with the vLLM table), and returns the extras
spelled in full, dotted keys folded into their option's JSON. The table: where the target Python's
vLLM is another version than the shipped one, its own parser (asked there with
:func:`options_probe`); otherwise ``sactool/data/vllm/options-<version>.json``, written from the
real parser by ``scripts/vllm-options`` (which also checks the shipped table against it).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any, Sequence

from sactool.errors import UsageError
from sactool.hisparse.vllm import VLLM_SHIPPED
from sactool.serve.sglang_options import OptionTable
from sactool.serve.sglang_options import resolve as resolve_argparse

HELP = "vllm serve --help=all"


def option_entries(parser) -> dict:
    """``{option: [dest, nargs, type, choices]}`` of vLLM's serve parser. ``type`` names a callable
    as ``module.qualname``; vLLM's ``optional_type(T)`` wrapper is recorded as ``optional(T)`` (it
    maps "" and "None" to None, else applies T) and a config dataclass parser as
    ``dataclass(module.qualname)``. Standard library only: it also runs in a target Python
    (:func:`options_probe`)."""
    def name(f):
        return f"{getattr(f, '__module__', '') or ''}.{getattr(f, '__qualname__', repr(f))}"

    def kind(ty):
        if ty is None:
            return None
        q = getattr(ty, "__qualname__", "")
        if q.endswith("optional_type.<locals>._optional_type") and ty.__closure__:
            inner = [c.cell_contents for c in ty.__closure__ if callable(c.cell_contents)]
            return f"optional({kind(inner[0])})" if inner else name(ty)
        if q.endswith("parse_dataclass") and ty.__defaults__:
            return f"dataclass({name(ty.__defaults__[0])})"
        return name(ty)

    out = {}
    for s, a in sorted(parser._option_string_actions.items()):
        if s in ("-h", "--help"):
            continue
        ch = list(a.choices) if a.choices is not None else None
        if ch is not None and not isinstance(a.choices, (list, tuple)):
            ch = sorted(ch, key=str)
        if ch is not None and not all(isinstance(c, (str, int, float)) and not isinstance(c, bool) for c in ch):
            ch = None
        out[s] = [a.dest, a.nargs, kind(a.type), ch]
    return out


def table_from(d: dict, source: str) -> OptionTable:
    opts = {str(k): (str(v[0]), v[1]) for k, v in d["options"].items()}
    kinds = {}
    for k, v in d["options"].items():
        kind = v[2] if isinstance(v[2], str) else None
        m = re.fullmatch(r"optional\((.+)\)", kind or "")
        # optional(T): "" and "None" are None, other values go through T (checked as T where sactool applies T)
        kinds[str(k)] = (m.group(1) if m else kind, tuple(v[3]) if isinstance(v[3], list) else None)
    return OptionTable(str(d["vllm"]), opts, source, kinds, engine="vLLM", help_command=HELP)


@lru_cache(maxsize=1)
def shipped_table() -> OptionTable:
    from sactool.data import data_path

    path = data_path("vllm", f"options-{VLLM_SHIPPED}.json")
    return table_from(json.loads(path.read_text(encoding="utf-8")), str(path))


def options_probe() -> str:
    """The program run in a target Python whose vLLM is another version than the shipped table's:
    its serve parser's options as :func:`option_entries` records them (one JSON line)."""
    import inspect
    import textwrap

    return ("import json, importlib.metadata as md\n" + textwrap.dedent(inspect.getsource(option_entries)) +
            "from vllm import platforms\n"
            "if platforms.current_platform.is_unspecified():\n"
            "    from vllm.platforms.cpu import CpuPlatform\n"
            "    platforms.current_platform = CpuPlatform()\n"
            "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
            "from vllm.entrypoints.cli.serve import ServeSubcommand\n"
            "top = FlexibleArgumentParser(prog='vllm')\n"
            "p = ServeSubcommand().subparser_init(top.add_subparsers(dest='subparser'))\n"
            "print(json.dumps({'vllm': md.version('vllm'), 'options': option_entries(p)}))\n")


def table_of(answer: str, source: str) -> OptionTable | None:
    """The table :func:`options_probe` printed (its last line), or None."""
    try:
        d = json.loads(answer.strip().splitlines()[-1])
        return table_from(d, source) if isinstance(d, dict) and isinstance(d.get("options"), dict) else None
    except (ValueError, IndexError, TypeError, AttributeError, KeyError):
        return None


_NAME = re.compile(r"(?<=--)[^.]*")


def _dashes(arg: str) -> str:
    """vLLM's rewrite of an option's name: underscores to dashes up to the first '.' (values kept)."""
    if "=" in arg:
        key, value = arg.split("=", 1)
        return _NAME.sub(lambda m: m.group(0).replace("_", "-"), key, count=1) + "=" + value
    return _NAME.sub(lambda m: m.group(0).replace("_", "-"), arg, count=1)


def _dotted_value(text: str) -> Any:
    """A dotted option's value as vLLM reads it: JSON, else a human-readable integer, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text.strip())
    if m:
        number, suffix = m.groups()
        if suffix.islower():
            return int(float(number) * {"k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "t": 10 ** 12}[suffix])
        if "." not in number:         # vLLM refuses decimals with binary suffixes: the text stays
            return int(number) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[suffix]
    return text


def _merge(into: dict, keys: list[str], value: Any) -> None:
    for k in keys[:-1]:
        nxt = into.get(k)
        if not isinstance(nxt, dict):
            nxt = into[k] = {}
        into = nxt
    last = keys[-1]
    if isinstance(value, list) and isinstance(into.get(last), list):
        into[last] = into[last] + value
    else:
        into[last] = value


def rewrite(extra: Sequence[str]) -> list[str]:
    """The rewrites ``FlexibleArgumentParser.parse_args`` makes before argparse sees the extras
    (module docstring), dotted options folded into JSON and appended last, as vLLM does."""
    out: list[str] = []
    for i, arg in enumerate(extra):
        if arg == "--config" or arg.startswith("--config="):
            raise UsageError("--config after --: sactool cannot see the options a vLLM config file sets",
                             "give those options after -- one by one, so the checks see them")
        if arg.startswith("--"):
            out.append(_dashes(arg))
        elif arg.startswith("-O") and arg != "-O":
            out += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(extra) and extra[i + 1] in {"0", "1", "2", "3"}:
            out.append("--optimization-level")
        else:
            out.append(arg)
    folded: dict[str, dict] = {}
    rest: list[str] = []
    skip = False
    for i, arg in enumerate(out):
        if skip:
            skip = False
            continue
        if arg.startswith("-") and "." in arg.partition("=")[0]:
            key, eq, text = arg.partition("=")
            if not eq:
                if i + 1 >= len(out):
                    raise UsageError(f"{arg} expects a value (vLLM)", f"give it one ({arg} VALUE), or drop it")
                text, skip = out[i + 1], True
            if key.endswith("+"):
                key, value = key[:-1], text.split(",")
            else:
                value = _dotted_value(text)
            head, *keys = key.split(".")
            if not all(keys):
                raise UsageError(f"{key} after --: an empty key", "write --option.key VALUE")
            _merge(folded.setdefault(head, {}), keys, value)
            continue
        rest.append(arg)
    for head, whole in folded.items():
        rest += [head, json.dumps(whole, separators=(",", ":"))]
    return rest


def resolve(extra: Sequence[str], t: OptionTable | None = None) -> list[str]:
    """``extra`` as vLLM's serve parser reads it, every option spelled in full (``-tp 4`` stays
    ``-tp 4``: a short option is a name of its own), dotted keys folded into their option's JSON;
    refuses (exit 2) what vLLM's parser would refuse: an unknown or ambiguous option, a missing
    value, a value given to a flag, a stray word, a value its type or choices refuse."""
    t = t or shipped_table()
    return resolve_argparse(rewrite(extra), t)


def model_of(extra: Sequence[str]) -> str | None:
    """The model given after -- as ``--model X`` (vLLM moves it to the positional)."""
    for i, a in enumerate(extra):
        if a == "--model" and i + 1 < len(extra):
            return extra[i + 1]
        if a.startswith("--model="):
            return a.split("=", 1)[1]
    return None


def json_value(extra: Sequence[str], name: str) -> list[Any]:
    """Every value of ``name`` in resolved extras, parsed as JSON where it is JSON."""
    out: list[Any] = []
    for i, a in enumerate(extra):
        text = None
        if a == name and i + 1 < len(extra):
            text = extra[i + 1]
        elif a.startswith(name + "="):
            text = a.split("=", 1)[1]
        if text is not None:
            try:
                out.append(json.loads(text))
            except ValueError:
                out.append(text)
    return out


__all__ = ["HELP", "json_value", "model_of", "option_entries", "options_probe", "resolve", "rewrite",
           "shipped_table", "table_from", "table_of"]
