"""``sactool serve`` for a vLLM profile: the extras read as ``vllm serve``'s parser reads them and
checked against the profile, the installed vLLM and its plug-in asked in the target Python, the
pool checked where it goes, then the ``vllm serve`` command (:mod:`sactool.serve.vllm_argv`).

Conflicts follow vLLM 0.34.0's own refusals of HiSparse (``VllmConfig.__post_init__``,
``config/vllm.py:1805-1841, 2131-2141, 2214-2224``): no pipeline or decode-context parallelism, no
``cudagraph_mode`` FULL, ``--scheduler-reserve-full-isl`` kept, the hybrid KV-cache manager kept, no
``--kv-offloading-size`` beside the HiSparseConnector. The capacity check is :mod:`sactool.serve.vllm_capacity`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Mapping, NoReturn, Sequence

from sactool.errors import SactoolError
from sactool.profile import Profile
from sactool.serve.errors import ConflictError, EngineMissingError, EngineVersionError, ModelMismatchError
from sactool.serve.vllm_options import json_value, model_of

ENGINE_PROBE = r"""
import json, os, sys, sysconfig
from importlib import metadata as md
out = {"python": sys.executable, "python_version": sys.version.split()[0], "vllm": None, "console_script": None,
       "plugins": []}
try:
    d = md.distribution("vllm")
    out["vllm"] = d.version
    for ep in d.entry_points:
        if ep.group == "console_scripts" and ep.name == "vllm":
            p = os.path.join(sysconfig.get_path("scripts"), "vllm")
            out["console_script"] = p if os.path.exists(p) else "declared, not on disk: " + p
except md.PackageNotFoundError:
    pass
out["plugins"] = sorted("%s=%s" % (ep.name, ep.value) for ep in md.entry_points(group="vllm.general_plugins"))
print(json.dumps(out))
"""


@dataclass(frozen=True)
class VllmInfo:
    python: str
    python_version: str
    vllm: str | None
    console_script: str | None
    plugins: tuple[str, ...]


def probe_engine(python: str, *, timeout_s: float = 60.0) -> VllmInfo:
    """Ask ``python`` (argv list, no shell) which vLLM and vLLM plug-ins it has; imports no vLLM code."""
    from sactool.serve.checks import _run_probe, probe_argv

    try:
        stdout, stderr = _run_probe(probe_argv(python, ENGINE_PROBE), timeout_s)
    except FileNotFoundError:
        raise EngineMissingError(f"Python {python} does not exist", "pass --python the interpreter of vLLM's environment") from None
    except PermissionError:
        raise EngineMissingError(f"{python} is not executable", "pass --python the interpreter of vLLM's environment") from None
    except subprocess.TimeoutExpired:
        raise EngineMissingError(f"{python} did not answer within {timeout_s:.0f} s", "check the interpreter") from None
    try:
        d = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        first = (stderr.strip().splitlines() or ["no output"])[-1]
        raise EngineMissingError(f"{python} could not report its packages ({first})",
                                 "pass --python a Python 3.10+ interpreter") from None
    return VllmInfo(d["python"], d["python_version"], d["vllm"], d["console_script"], tuple(d["plugins"]))


def check_engine(profile: Profile, info: VllmInfo, *, plugin: bool, allow_untested: bool = False) -> list[str]:
    """vLLM installed, in the profile's tested range, its console script there, the plug-in visible."""
    from sactool.serve.checks import version_in

    v = profile.vllm
    assert v is not None
    tested = v.tested
    if info.vllm is None:
        raise EngineMissingError(f"vLLM is not installed in {info.python}",
                                 f"pip install 'vllm{tested}' there, or pass --python vLLM's interpreter")
    lines = [f"vLLM {info.vllm} in {info.python} (Python {info.python_version})"]
    if not version_in(info.vllm, tested):
        msg = (f"vLLM {info.vllm} is outside the profile's tested range {tested}: the plug-in's hooks "
               "(allocate_pinned_host_pool, check_hisparse_host_memory, …) are verified for that range only")
        if not allow_untested:
            raise EngineVersionError(msg, f"install a tested version (pip install 'vllm{tested}'), or run "
                                          "scripts/vllm-integration against it and widen vllm.tested, or pass "
                                          "--allow-untested-engine")
        lines.append("warning: " + msg + " (--allow-untested-engine)")
    if not info.console_script or info.console_script.startswith("declared"):
        raise EngineMissingError(f"the 'vllm' console script is not installed ({info.console_script or 'not declared'})",
                                 "reinstall vLLM in that environment")
    if plugin:
        mine = [p for p in info.plugins if p.startswith("sactool_cxl=")]
        if not mine:
            raise EngineMissingError(f"the sactool_cxl vLLM plug-in is not installed in {info.python}",
                                     f"install sactool into vLLM's environment: {info.python} -m pip install "
                                     "<sactool checkout>")
        lines.append(f"plug-in {mine[0]} (group vllm.general_plugins)")
    return lines


# ------------------------------------------------------------------------------------------
# conflicting extras
# ------------------------------------------------------------------------------------------

def _values(extra: Sequence[str], names: tuple[str, ...]) -> list[str | None]:
    from sactool.serve.checks import _values as values

    return values(extra, names)


OWNED = {
    ("--tensor-parallel-size", "-tp"): ("vllm.tp_size", lambda v: v.tp_size),
    ("--data-parallel-size", "-dp"): ("vllm.dp_size", lambda v: v.dp_size),
    ("--kv-cache-dtype",): ("vllm.kv_cache_dtype", lambda v: v.kv_cache_dtype),
    ("--block-size",): ("vllm.block_size", lambda v: v.block_size),
    ("--max-model-len",): ("vllm.max_model_len", lambda v: v.max_model_len),
    ("--max-num-seqs",): ("vllm.max_num_seqs", lambda v: v.max_num_seqs),
    ("--gpu-memory-utilization",): ("vllm.gpu_memory_utilization", lambda v: v.gpu_memory_utilization),
    ("--distributed-executor-backend",): ("vllm.distributed_executor_backend", lambda v: v.distributed_executor_backend),
}


def _same(text: str, mine: Any) -> bool:
    if isinstance(mine, float):
        try:
            return float(text) == mine
        except ValueError:
            return False
    return text == str(mine)


def check_conflicts(profile: Profile, extra: Sequence[str]) -> tuple[list[str], dict | None]:
    """(the extras to pass, a user ``--attention-config`` to merge into the profile's) — or a
    ConflictError for an extra that contradicts the profile or that vLLM refuses with HiSparse.
    ``extra`` is already resolved (:func:`sactool.serve.vllm_options.resolve`)."""
    v = profile.vllm
    assert v is not None

    def refuse(msg: str, hint: str) -> NoReturn:
        raise ConflictError(msg, hint)

    for names, (fld, get) in OWNED.items():
        mine = get(v)
        for value in _values(extra, names):
            if mine is not None and (value is None or not _same(value, mine)):
                refuse(f"{names[0]} {value} contradicts the profile's {fld} ({mine})",
                       f"change {fld} in the profile (the host pool was sized with it), then drop {names[0]}")
    for flag in ("--enable-expert-parallel", "--no-enable-expert-parallel"):
        if _values(extra, (flag,)) and (flag == "--enable-expert-parallel") != v.enable_expert_parallel:
            refuse(f"{flag} contradicts the profile's vllm.enable_expert_parallel ({v.enable_expert_parallel})",
                   "change vllm.enable_expert_parallel in the profile, then drop it")
    if _values(extra, ("--kv-transfer-config",)):
        refuse("--kv-transfer-config is set by the profile (the HiSparseConnector with vllm.host_pool_gib)",
               "change vllm.host_pool_gib in the profile (or re-run sactool tune --engine vllm) instead")
    for name in ("--kv-offloading-size", "--kv-offloading-backend"):
        if _values(extra, (name,)):
            refuse(f"{name} cannot run beside HiSparse's connector (vLLM: nest both in a MultiConnector instead)",
                   f"drop {name}")
    for value in _values(extra, ("--pipeline-parallel-size", "-pp")):
        if value != "1":
            refuse(f"--pipeline-parallel-size {value}: HiSparse does not support pipeline parallelism (vLLM 0.34)",
                   "drop it")
    for value in _values(extra, ("--decode-context-parallel-size", "-dcp")):
        if value != "1":
            refuse(f"--decode-context-parallel-size {value}: HiSparse does not support decode context parallelism",
                   "drop it")
    if _values(extra, ("--no-scheduler-reserve-full-isl",)):
        refuse("--no-scheduler-reserve-full-isl: vLLM's HiSparse requires --scheduler-reserve-full-isl", "drop it")
    if _values(extra, ("--disable-hybrid-kv-cache-manager",)):
        refuse("--disable-hybrid-kv-cache-manager: vLLM's HiSparse requires the hybrid KV cache manager", "drop it")
    for cc in json_value(extra, "--compilation-config") + json_value(extra, "-cc"):
        if isinstance(cc, dict) and str(cc.get("cudagraph_mode", "")).upper() == "FULL":
            refuse("cudagraph_mode FULL: vLLM's HiSparse refuses it (FULL_AND_PIECEWISE, the default, captures "
                   "FULL graphs for decode batches)", "drop cudagraph_mode from --compilation-config")
    user_attention: dict | None = None
    rest: list[str] = []
    i = 0
    while i < len(extra):
        a = extra[i]
        if a == "--attention-config" or a.startswith("--attention-config="):
            text = a.split("=", 1)[1] if "=" in a else (extra[i + 1] if i + 1 < len(extra) else "")
            i += 1 if "=" in a else 2
            try:
                value = json.loads(text)
            except ValueError:
                refuse(f"--attention-config {text!r} after -- is not JSON sactool can merge with the profile's "
                       "hisparse_config", "give it as a JSON object")
            if not isinstance(value, dict):
                refuse("--attention-config after -- must be a JSON object", "give it as a JSON object")
            if "hisparse_config" in value:
                refuse("--attention-config's hisparse_config is set by the profile (hisparse.device_buffer_size, "
                       "vllm.eager_host_mirror)", "change them in the profile instead")
            user_attention = {**(user_attention or {}), **value}
            continue
        rest.append(a)
        i += 1
    return rest, user_attention


def check_model(profile: Profile, extra: Sequence[str]) -> str:
    """The model vLLM will load must be the profile's (``--model`` after --; a local directory's
    config.json is compared as for SGLang)."""
    from sactool.serve.checks import check_model as compare

    path = model_of(extra)
    if path is None:
        return f"model {profile.model.hf_id} (from the profile)"
    try:
        return compare(profile, ["--model-path", path])
    except ModelMismatchError as e:
        raise ModelMismatchError(e.message.replace("--model-path", "--model"), e.hint.replace("--model-path", "--model")
                                 if e.hint else e.hint) from None


# ------------------------------------------------------------------------------------------
# the launch
# ------------------------------------------------------------------------------------------

def build_launch(profile: Profile, profile_path: str, extra_args: Sequence[str], *, python: str | None,
                 dry_run: bool, allow_untested: bool, sysfs_root: str | None, environ: Mapping[str, str] | None,
                 lines: list[str], strict: bool = False) -> tuple[Profile, Any, list[str],
                                                              list[tuple[int, str, str | None]], Any]:
    """(profile — its GPU sockets as this machine has them —, command, check lines, problems as (exit
    code, message, hint), pool check) of a vLLM profile, for :class:`sactool.serve.launch.Launch`
    (``lines``: checks so far). The checks of this machine are SGLang's: the GPUs the ranks get
    (:func:`sactool.serve.gpus.resolve_gpus`), the pool targets and the machine block
    (:func:`sactool.serve.here.pool_here`; ``strict``: another machine is refused)."""
    from sactool.host.sysfs import SysfsReader
    from sactool.serve.gpus import resolve_gpus
    from sactool.serve.here import pool_here
    from sactool.serve.vllm_argv import build_command

    python = python or sys.executable
    problems: list[tuple[int, str, str | None]] = []

    def attempt(fn):
        try:
            return fn()
        except SactoolError as e:
            if not dry_run:
                raise
            problems.append((int(e.exit_code), e.message, e.hint))
            return None

    info = attempt(lambda: probe_engine(python))
    extra, user_attention = _read_extras(profile, extra_args, python, info, lines)
    gpus = attempt(lambda: resolve_gpus(profile, SysfsReader(sysfs_root), os.environ if environ is None else environ))
    extra_env: tuple = ()
    if gpus is not None:
        profile, extra_env = gpus.profile, gpus.env
        lines.extend(gpus.lines)
    script = _engine_lines(profile, info, python, allow_untested, attempt, lines)
    cmd = build_command(profile, profile_path=profile_path, extra_args=extra, python=python, environ=environ,
                        vllm_script=script, user_attention=user_attention, extra_env=extra_env)
    lines.extend(attempt(lambda: pool_here(profile, sysfs_root, strict)) or [])
    cmd, cap = _pool_lines(profile, cmd, sysfs_root, attempt, lines)
    if profile.pool.stand_in and cmd.placement != "none":
        lines.append("pool.stand_in: the profile's pool node is a DRAM node standing in for CXL")
    return profile, cmd, lines, problems, cap


def _read_extras(profile: Profile, extra_args: Sequence[str], python: str, info: VllmInfo | None,
                 lines: list[str]) -> tuple[list[str], dict | None]:
    """The extras after -- as the target vLLM's parser reads them (the shipped table, or that
    vLLM's own where it is another version), checked against the model and the profile."""
    from sactool.serve.vllm_options import resolve, shipped_table

    table = shipped_table()
    if info is not None and info.vllm and info.vllm != table.version:
        live = _probe_options(python, info.vllm)
        if live is not None:
            table = live
            lines.append(f"the extras after -- are read with vLLM {info.vllm}'s own parser ({len(live.options)} options)")
        else:
            lines.append(f"vLLM {info.vllm}'s parser could not be asked; the extras after -- are read with vLLM "
                         f"{table.version}'s options")
    extra = resolve(list(extra_args), table)
    lines.append(check_model(profile, extra))
    return check_conflicts(profile, extra)


def _engine_lines(profile: Profile, info: VllmInfo | None, python: str, allow_untested: bool, attempt: Any,
                  lines: list[str]) -> str | None:
    """vLLM and the plug-in checked in the target Python, then the plug-in's hook table against that
    vLLM (:func:`sactool.serve.checks.check_hooks`, as for SGLang); the console script found, or None."""
    from sactool.serve import checks

    if info is None:
        return None
    plugin = profile.pool.placement == "plugin"
    got = attempt(lambda: check_engine(profile, info, plugin=plugin, allow_untested=allow_untested))
    lines.extend(got or [])
    if got is not None and plugin:
        found = checks.probe_hooks(python, engine="vllm", timeout_s=600.0)   # imports vLLM: ~1 min under load
        lines.extend(attempt(lambda: checks.check_hooks(profile, found, python=python,
                                                        allow_untested=allow_untested)) or [])
    if info.console_script and not info.console_script.startswith("declared"):
        return info.console_script
    return None


def _pool_lines(profile: Profile, cmd: Any, sysfs_root: str | None, attempt: Any, lines: list[str]) -> tuple[Any, Any]:
    """The pool's capacity check (:mod:`sactool.serve.vllm_capacity`), the known poison handed to the
    plug-in, the devices behind the planned targets: (command, pool check or None)."""
    from sactool.host.sysfs import SysfsReader
    from sactool.serve import vllm_capacity

    cap = attempt(lambda: vllm_capacity.check_pool(profile, SysfsReader(sysfs_root), live_shm=sysfs_root is None))
    if cap is None:
        return cmd, None
    lines.extend(cap.lines)
    if cmd.placement == "plugin":
        from sactool.serve.argv import with_poison_env

        cmd = with_poison_env(cmd, profile, cap.facts)
    if cap.plan is not None:          # the devices behind the targets (one plan row per pool)
        from sactool.serve.health import check_health

        lines.extend(attempt(lambda: check_health(profile, SysfsReader(sysfs_root), cap.plan)) or [])
    return cmd, cap


def _probe_options(python: str, version: str):
    from sactool.serve.checks import _run_probe, probe_argv
    from sactool.serve.vllm_options import options_probe, table_of

    try:
        out, _ = _run_probe(probe_argv(python, options_probe()), 300.0)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return table_of(out, f"vLLM {version}'s parser in {python}")


__all__ = ["VllmInfo", "build_launch", "check_conflicts", "check_engine", "check_model", "probe_engine"]
