"""Checks ``sactool serve`` runs before it starts SGLang: model, conflicting extras, the installed
SGLang (in the target Python), and the pool's nodes / DAX devices and their free memory.

Each failure is a one-line error with a hint and its own exit code (sactool/serve/errors.py).
Conflicts follow SGLang 0.5.23's own validation (arg_groups/hisparse_hook.py,
model_overrides/deepseek_v2.py; docs/sources.md, SGLang §2.2, §6.4).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Sequence

from sactool.errors import RecordError
from sactool.hisparse.layout import CONFIG_FIELDS
from sactool.profile import ModelRef, Profile, version_in  # noqa: F401 (version_in: one grammar, re-exported)
from sactool.serve.errors import ConflictError, EngineMissingError, EngineVersionError, ModelMismatchError

# ------------------------------------------------------------------------------------------
# model
# ------------------------------------------------------------------------------------------


def model_path_of(extra: Sequence[str]) -> str | None:
    for i, a in enumerate(extra):
        if a in ("--model-path", "--model") and i + 1 < len(extra):
            return extra[i + 1]
        if a.startswith(("--model-path=", "--model=")):
            return a.split("=", 1)[1]
    return None


# config.json fields compared with the profile: those of the one table the profile's model block keeps
_CONFIG_FIELDS = tuple((k, a) for k, a in CONFIG_FIELDS.items() if a in {f.name for f in fields(ModelRef)})


def check_model(profile: Profile, extra: Sequence[str]) -> str:
    """The model SGLang will load must be the profile's; a local path's config.json is compared."""
    m = profile.model
    path = model_path_of(extra)
    if path is None:
        return f"model {m.hf_id} (from the profile)"
    if os.path.isdir(path):
        cfg_path = Path(path) / "config.json"
        from sactool.inputfile import parse_structured, read_input

        if not os.path.lexists(cfg_path):
            raise ModelMismatchError(f"{path} has no config.json", "point --model-path at a Hugging Face model directory")
        try:   # bounded, a regular file (RecordError otherwise)
            cfg = parse_structured(read_input(cfg_path, what="model config").decode("utf-8"), json_format=True,
                                   where=str(cfg_path))
        except (OSError, ValueError) as e:   # unreadable or corrupt: a record problem (exit 4), not another model
            raise RecordError(f"{cfg_path} cannot be read: {e}", "check the model directory") from None
        if not isinstance(cfg, dict):
            raise RecordError(f"{cfg_path} is not a JSON object", "check the model directory")
        tc = cfg.get("text_config")
        text = tc if isinstance(tc, dict) else cfg
        archs = cfg.get("architectures")
        if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
            raise RecordError(f"{cfg_path}: architectures is {str(archs)[:60]!r}, not a list of class names",
                              "check the model directory (Hugging Face writes e.g. [\"DeepseekV32ForCausalLM\"])")
        arch = (archs or [None])[0]
        diffs = [f"architecture {arch} != {m.architecture}"] if arch != m.architecture else []
        for key, attr in _CONFIG_FIELDS:
            if key in text and text[key] != getattr(m, attr):
                diffs.append(f"{key} {text[key]} != {getattr(m, attr)}")
        if diffs:
            raise ModelMismatchError(f"the profile is for {m.name} ({m.hf_id}) but {cfg_path} differs: "
                                     + "; ".join(diffs), f"tune a profile for this model: sactool tune --model {cfg_path}")
        return f"model {path}: config.json matches the profile ({m.architecture}, {m.num_layers} layers)"
    if path.rstrip("/").lower() != m.hf_id.rstrip("/").lower():
        raise ModelMismatchError(f"the profile is for {m.hf_id}, not {path}",
                                 f"drop --model-path (the profile gives {m.hf_id}), or tune a profile for {path}")
    return f"model {path} matches the profile"


# ------------------------------------------------------------------------------------------
# conflicting extras
# ------------------------------------------------------------------------------------------


def _values(extra: Sequence[str], names: tuple[str, ...]) -> list[str | None]:
    """Values given for any of ``names`` (None for a bare flag)."""
    out: list[str | None] = []
    for i, a in enumerate(extra):
        if a in names:
            nxt = extra[i + 1] if i + 1 < len(extra) else None
            out.append(None if nxt is None or nxt.startswith("--") else nxt)
        elif any(a.startswith(n + "=") for n in names):
            out.append(a.split("=", 1)[1])
    return out


# flag (and its 0.5.23 aliases) -> the profile field that owns it
OWNED = {
    ("--tp-size", "--tensor-parallel-size"): ("sglang.tp_size", lambda p: str(p.sglang.tp_size)),
    ("--attn-dp-size", "--attention-data-parallel-size"): ("sglang.attn_dp_size", lambda p: str(p.sglang.attn_dp_size)),
    ("--kv-cache-dtype",): ("sglang.kv_cache_dtype", lambda p: p.sglang.kv_cache_dtype),
    ("--page-size",): ("sglang.page_size", lambda p: str(p.sglang.page_size)),
    ("--dsa-decode-backend",): ("sglang.dsa_decode_backend", lambda p: p.sglang.dsa_decode_backend),
    ("--disaggregation-mode",): ("sglang.role", lambda p: "null" if p.sglang.role == "colocated" else p.sglang.role),
    ("--mem-fraction-static",): ("sglang.mem_fraction_static", lambda p: p.sglang.mem_fraction_static),
    ("--max-running-requests",): ("sglang.max_running_requests", lambda p: p.sglang.max_running_requests),
    ("--context-length",): ("sglang.context_length", lambda p: p.sglang.context_length),
    ("--max-total-tokens",): ("sglang.max_total_tokens", lambda p: p.sglang.max_total_tokens),
    ("--base-gpu-id",): ("sglang.base_gpu_id", lambda p: p.sglang.base_gpu_id),
}


def check_conflicts(profile: Profile, extra: Sequence[str], table=None) -> list[str]:
    """Refuse extras that contradict the profile or HiSparse; returns the extras accepted, each
    option spelled in full as SGLang's parser resolves it (an abbreviation is checked as the option
    it stands for; unknown or ambiguous ones are refused: :mod:`sactool.serve.sglang_options`)."""
    from sactool.serve.sglang_options import resolve

    extra = resolve(extra, table)
    hisparse = profile.sglang.role != "prefill"

    def refuse(msg: str, hint: str) -> None:
        raise ConflictError(msg, hint)

    if _values(extra, ("--hisparse-config", "--hierarchical-sparse-attention-extra-config")):
        refuse("--hisparse-config is set by the profile (hisparse.*)",
               "change hisparse.device_buffer_size / host_to_device_ratio / swap_in_block_size in the profile "
               "(or re-run sactool tune) instead of passing --hisparse-config")
    if _values(extra, ("--numa-node",)):
        refuse("--numa-node is set by the profile (pool.gpu_local_nodes)",
               "change pool.gpu_local_nodes in the profile")
    if _values(extra, ("--enable-dp-attention",)):
        refuse("--enable-dp-attention is the deprecated spelling of attention DP",
               "set sglang.attn_dp_size in the profile (sactool emits --attn-dp-size)")
    for names, (fld, get) in OWNED.items():
        for v in _values(extra, names):
            mine = get(profile)
            if mine is not None and (v is None or str(v) != str(mine)):
                refuse(f"{names[0]} {v} contradicts the profile's {fld} ({mine})",
                       f"change {fld} in the profile (the host pool was sized with it), then drop {names[0]}")
    if not hisparse:
        if _values(extra, ("--enable-hisparse",)):
            refuse("--enable-hisparse with a prefill-role profile", "set sglang.role to colocated or decode")
        return list(extra)
    if _values(extra, ("--enable-hierarchical-cache", "--enable-hicache")):
        refuse("--enable-hierarchical-cache cannot run with HiSparse in SGLang 0.5.23 (HiCache needs the radix "
               "cache, HiSparse needs it off)", "drop it, or set sglang.role to prefill in a profile for the prefill side")
    if _values(extra, ("--enable-mixed-chunk",)):
        refuse("--enable-mixed-chunk is not supported with HiSparse (hisparse_hook.py)", "drop --enable-mixed-chunk")
    for v in _values(extra, ("--dcp-size", "--decode-context-parallel-size")):
        if v is None or v != "1":
            refuse(f"--dcp-size {v} is rejected with HiSparse (model_overrides/deepseek_v2.py)", "drop --dcp-size")
    for v in _values(extra, ("--speculative-eagle-topk",)):
        if v != "1":
            refuse(f"--speculative-eagle-topk {v}: HiSparse supports linear speculation only",
                   "use --speculative-eagle-topk 1")
    if _values(extra, ("--speculative-adaptive",)):
        refuse("--speculative-adaptive is not supported with HiSparse (statically sized swap state)",
               "drop --speculative-adaptive")
    for v in _values(extra, ("--attention-backend",)):
        if v not in ("dsa", "nsa"):
            refuse(f"--attention-backend {v}: HiSparse runs on the DSA backend", "drop --attention-backend (dsa is automatic)")
    _check_dsa_backends(profile, extra, refuse)
    return list(extra)


def _check_dsa_backends(profile: Profile, extra: Sequence[str], refuse) -> None:
    """The DSA backend / KV dtype pairs SGLang 0.5.23's HiSparse validator refuses at start-up
    (:mod:`sactool.hisparse.backends`), from the profile's ``sglang.dsa_decode_backend`` or an extra."""
    from sactool.hisparse.backends import CUDA_BACKENDS_BY_DTYPE, FLAGS, refusal

    dtype = profile.sglang.kv_cache_dtype
    for flag, label in FLAGS:
        given = _values(extra, (flag,))
        if flag == "--dsa-decode-backend" and profile.sglang.dsa_decode_backend and not given:
            given, where = [profile.sglang.dsa_decode_backend], "the profile's sglang.dsa_decode_backend"
        else:
            where = f"{flag} after --"
        for v in given:
            why = refusal(dtype, label, v or "")
            if why is not None:
                ok = ", ".join(CUDA_BACKENDS_BY_DTYPE.get(dtype, ()))
                refuse(f"SGLang would refuse {where} at start-up: {why}",
                       (f"use {flag} {ok.replace(', ', ' or ')} with {dtype}" if ok else f"drop {flag}")
                       + ", or omit it to let SGLang pick")


# ------------------------------------------------------------------------------------------
# the installed SGLang, asked in the target Python
# ------------------------------------------------------------------------------------------

ENGINE_PROBE = r"""
import json, os, sys, sysconfig
from importlib import metadata as md
out = {"python": sys.executable, "python_version": sys.version.split()[0], "sglang": None,
       "launch_server": False, "console_script": None, "plugins": []}
try:
    d = md.distribution("sglang")
    out["sglang"] = d.version
    out["launch_server"] = any(str(f) == "sglang/launch_server.py" for f in (d.files or ()))
    for ep in d.entry_points:
        if ep.group == "console_scripts" and ep.name == "sglang":
            p = os.path.join(sysconfig.get_path("scripts"), "sglang")
            out["console_script"] = p if os.path.exists(p) else "declared, not on disk: " + p
except md.PackageNotFoundError:
    pass
out["plugins"] = sorted("%s=%s" % (ep.name, ep.value) for ep in md.entry_points(group="sglang.srt.plugins"))
print(json.dumps(out))
"""


@dataclass(frozen=True)
class EngineInfo:
    python: str
    python_version: str
    sglang: str | None
    launch_server: bool
    console_script: str | None
    plugins: tuple[str, ...]


PROBE_OUTPUT_BYTES = 1 << 20
"""The most of the probe's stdout/stderr read back (its answer is one JSON line of a few hundred bytes)."""


SAFE_PATH = "import sys\nif sys.path and sys.path[0] == '':\n    del sys.path[0]\n"
"""The first lines of every program serve runs in the target Python with ``-c``: ``python -P``'s
"no unsafe path first" for any Python version (``-P`` is 3.11+, and ``-I`` would also drop
PYTHONPATH and the user site, where SGLang may live). ``-c`` puts the working directory first on
the import path, so a ``json.py`` there ran inside the probe (issue 27, R7). ``sys`` is built in
and cannot be shadowed."""


def probe_argv(python: str, code: str) -> list[str]:
    """``[python, "-c", code]`` that imports nothing from the working directory (:data:`SAFE_PATH`)."""
    return [python, "-c", SAFE_PATH + code]


def _run_probe(argv: list[str], timeout_s: float) -> tuple[str, str]:
    """(stdout, stderr) of ``argv`` run in a session of its own, its output in temporary files:
    whatever the interpreter leaves behind (a wrapper script's background helper, a ``.pth`` that
    forks) is killed with its process group once it answered, timed out or was interrupted — with
    pipes, a leftover child holding them kept serve waiting until it ended and then kept running."""
    import signal
    import tempfile

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            _wait_unreaped(p.pid, timeout_s, argv)   # the group id stays this process's until it is reaped
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read(PROBE_OUTPUT_BYTES).decode("utf-8", "replace"))
    return texts[0], texts[1]


def _wait_unreaped(pid: int, timeout_s: float, argv) -> None:
    """Wait for ``pid`` to exit without reaping it (``waitid(WNOWAIT)``), so killing its process
    group afterwards cannot reach a group that reused the id."""
    import time

    deadline = time.monotonic() + timeout_s
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(argv, timeout_s)
        time.sleep(0.01)


def probe_options(python: str, version: str, *, timeout_s: float = 120.0):
    """The option table of the SGLang ``python`` has (its own parser, imported there: seconds, as
    it imports torch), or (None, why) where it cannot be asked."""
    from sactool.serve.sglang_options import options_probe, table_of

    try:
        out, err = _run_probe(probe_argv(python, options_probe()), timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    t = table_of(out, version, f"SGLang {version}'s parser in {python}")
    return t, None if t is not None else ((err.strip().splitlines() or ["no output"])[-1])


def probe_engine(python: str, *, timeout_s: float = 60.0) -> EngineInfo:
    """Ask ``python`` (argv list, no shell) what SGLang and plug-ins it has; imports no SGLang code.
    Nothing it starts outlives the question (:func:`_run_probe`)."""
    try:
        stdout, stderr = _run_probe(probe_argv(python, ENGINE_PROBE), timeout_s)
    except FileNotFoundError:
        raise EngineMissingError(f"Python {python} does not exist", "pass --python the interpreter of SGLang's environment") from None
    except PermissionError:
        raise EngineMissingError(f"{python} is not executable", "pass --python the interpreter of SGLang's environment") from None
    except subprocess.TimeoutExpired:
        raise EngineMissingError(f"{python} did not answer within {timeout_s:.0f} s", "check the interpreter") from None
    try:
        d = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        first = (stderr.strip().splitlines() or ["no output"])[-1]
        raise EngineMissingError(f"{python} could not report its packages ({first})",
                                 "pass --python a Python 3.10+ interpreter") from None
    return EngineInfo(d["python"], d["python_version"], d["sglang"], bool(d["launch_server"]),
                      d["console_script"], tuple(d["plugins"]))


def check_engine(profile: Profile, info: EngineInfo, *, entrypoint: str, plugin: bool,
                 allow_untested: bool = False) -> list[str]:
    """SGLang installed, in range, its entry point present, and the plug-in visible to it."""
    tested = profile.sglang.tested
    if info.sglang is None:
        raise EngineMissingError(f"SGLang is not installed in {info.python}",
                                 f"pip install 'sglang{tested}' there, or pass --python SGLang's interpreter")
    lines = [f"SGLang {info.sglang} in {info.python} (Python {info.python_version})"]
    if not version_in(info.sglang, tested):
        msg = f"SGLang {info.sglang} is outside the profile's tested range {tested}"
        if not allow_untested:
            raise EngineVersionError(msg, f"install a tested version (pip install 'sglang{tested}'), or check it with "
                                          "tests/test_sglang_compat.py and widen sglang.tested in the profile, "
                                          "or pass --allow-untested-sglang")
        from sactool.records import WarningLine

        lines.append(WarningLine("sglang-untested", msg, "--allow-untested-sglang"))
    if entrypoint == "launch_server" and not info.launch_server:
        raise EngineMissingError(f"sglang.launch_server is missing from SGLang {info.sglang}",
                                 "use --entrypoint serve, or reinstall SGLang")
    if entrypoint == "serve" and (not info.console_script or info.console_script.startswith("declared")):
        raise EngineMissingError(f"the 'sglang' console script is not installed ({info.console_script or 'not declared'})",
                                 "use --entrypoint launch_server, or reinstall SGLang")
    if plugin:
        mine = [p for p in info.plugins if p.startswith("sactool_cxl=")]
        if not mine:
            raise EngineMissingError(f"the sactool_cxl plug-in is not installed in {info.python}",
                                     f"install sactool into SGLang's environment: {info.python} -m pip install <sactool checkout>")
        lines.append(f"plug-in {mine[0]}")
    return lines


_HOOK_PROBE = r"""
import json, sys
try:
    from sactool.plugins.ENGINE import check_engine
except Exception as e:
    print(json.dumps({"error": "%s: %s" % (type(e).__name__, e)}))
    sys.exit(0)
print(json.dumps(check_engine().to_data()))
"""
HOOK_PROBES = {engine: _HOOK_PROBE.replace("ENGINE", engine) for engine in ("sglang", "vllm")}
"""Run in the target Python: the installed plug-in's hook table checked against the installed engine
(``sactool.plugins.<engine>.check_engine``: :func:`sactool.plugins.hooks.check_hooks` over
``hooks.TABLES[engine]``), the same check the plug-in runs when the engine loads it."""
HOOK_PROBE = HOOK_PROBES["sglang"]


def probe_hooks(python: str, *, engine: str = "sglang", timeout_s: float = 300.0) -> dict:
    """What :data:`HOOK_PROBES` ``[engine]`` reports in ``python`` (it imports the engine's modules
    there: seconds to a minute, as it imports torch), or ``{"error": why}`` where it cannot be asked."""
    try:
        out, err = _run_probe(probe_argv(python, HOOK_PROBES[engine]), timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"{type(e).__name__}: {e}"}
    try:
        d = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (err.strip().splitlines() or ["no output"])[-1]}
    return d if isinstance(d, dict) else {"error": f"unexpected answer {str(d)[:80]}"}


def check_hooks(profile: Profile, found: dict, *, python: str, allow_untested: bool = False) -> list[str]:
    """The plug-in's hook targets in the installed engine (``found``: :func:`probe_hooks`, SGLang or
    vLLM by the profile's engine): every symbol the plug-in patches or calls, resolved and its
    signature checked, before the launch. A missing or changed one is refused (EngineVersionError):
    the plug-in would place nothing — a strict rank stops, any other starts with the pool in DRAM;
    ``--allow-untested-sglang`` / ``--allow-untested-engine`` lets it launch with a warning line."""
    vllm = profile.engine == "vllm" and profile.vllm is not None
    name, dist = ("vLLM", "vllm") if vllm else ("SGLang", "sglang")
    tested = profile.vllm.tested if vllm and profile.vllm is not None else profile.sglang.tested
    if "error" in found:
        if "ModuleNotFoundError" in found["error"] and "sactool.plugins" in found["error"]:
            raise EngineMissingError(f"the sactool installed in {python} has no sactool.plugins (an older sactool): "
                                     f"{found['error']}", f"reinstall sactool there: {python} -m pip install <sactool checkout>")
        return [f"warning: the plug-in's hook targets were not checked in {python} ({found['error']}); the plug-in "
                f"checks them when {name} loads it"]
    problems = found.get("problems") or []
    if found.get("version") is None:
        problems = [{"role": "-", "target": dist, "why": "is not installed (importlib.metadata finds no distribution)"}]
    head = (f"hook targets: {name} {found.get('version')}, the {found.get('table')} table: "
            + ("every symbol resolved, signatures as the plug-in relies on" if not problems else
               f"{len(problems)} missing or changed"))
    lines = [head] + ([f"warning: {found['note']}"] if found.get("note") else [])
    if not problems:
        return lines
    first = problems[0]
    msg = (f"hook target {first['target']} {first['why']} in {name} {found.get('version')}"
           + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
           + ": the sactool_cxl plug-in cannot place the pool ("
           + ("pool.strict: every rank would stop" if profile.pool.strict else "each rank would start with it in DRAM")
           + ")")
    flag = "--allow-untested-engine" if vllm else "--allow-untested-sglang"
    if not allow_untested:
        raise EngineVersionError(msg, f"install a {name} the plug-in's hook table covers (pip install '{dist}{tested}'), "
                                      f"use --placement none{'' if vllm else ' or numactl'}, or pass {flag} to launch "
                                      "anyway")
    return lines + [f"warning: {msg} ({flag})"] + \
        [f"warning: {p['role']}: {p['target']} {p['why']}" for p in problems[1:]]
