"""``sactool serve``: check everything, then ``os.execvpe`` SGLang so signals reach it directly.

:func:`build_launch` is the library entry (notebook-friendly): it loads the profile, runs the
checks of :mod:`sactool.serve.checks` and :mod:`sactool.pool.capacity`, builds the command
(:mod:`sactool.serve.argv`) and returns a frozen :class:`Launch`. :func:`exec_launch` replaces the
current process with SGLang: no child process, no signal relay to get wrong — SIGTERM/SIGINT go
to SGLang and its exit status is the exit status of ``sactool serve``.

With ``dry_run`` the checks that depend on the host or the target Python (SGLang installed and in
range, plug-in installed, numactl, pool nodes and their free memory) are reported as
``problems`` instead of raised, so a command can be prepared for another machine; checks of the
inputs themselves (profile, model, conflicting extras) still fail.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from sactool.errors import SactoolError, UsageError
from sactool.host.sysfs import SysfsReader
from sactool.profile import Profile, load_profile
from sactool.pool import capacity
from sactool.serve import checks
from sactool.serve.argv import Command, build_command, with_poison_env
from sactool.serve.errors import EngineMissingError
from sactool.serve.gpus import resolve_gpus
from sactool.serve.here import pool_here
from sactool.serve.sglang_options import resolve as resolve_options
from sactool.serve.sglang_options import table as options_table
from sactool.units import format_bytes


@dataclass(frozen=True)
class Problem:
    exit_code: int
    message: str
    hint: str | None


@dataclass(frozen=True)
class Launch:
    profile_path: str
    profile: Profile
    command: Command
    checks: tuple[str, ...]
    pool: capacity.PoolCheck | None
    problems: tuple[Problem, ...] = field(default_factory=tuple)
    dry_run: bool = False
    vllm_pool: Any = None                 # engine vllm: sactool.serve.vllm_capacity.VllmPoolCheck

    @property
    def engine(self) -> str:
        return self.profile.engine

    @property
    def warnings(self) -> tuple[Any, ...]:
        """The checks that are warnings (:class:`sactool.records.Warning`: code, message, hint)."""
        from sactool.records import WarningLine

        return tuple(line.warning for line in self.checks if isinstance(line, WarningLine))

    def to_data(self) -> dict[str, Any]:
        c = self.command
        pool = None
        if self.pool is not None:
            s = self.pool.sizing
            pool = {"bytes_per_rank": s.bytes_per_rank, "bytes_per_rank_source": s.source,
                    "device_token_slots": s.device_token_slots, "host_to_device_ratio": s.host_to_device_ratio,
                    "num_layers": s.num_layers, "row_bytes": s.row_bytes, "page_size": s.page_size,
                    "formula": "(S*R + page) * L * row_bytes per rank",
                    "targets": [{"target": t.target, "ranks": list(t.ranks), "need_bytes": t.need_bytes,
                                 "available_bytes": t.available_bytes, "available_source": t.available_source,
                                 "ok": t.ok} for t in self.pool.targets],
                    "note": self.pool.note}
        plan = self.pool.plan if self.pool is not None else None
        if plan is None and self.vllm_pool is not None:
            plan = self.vllm_pool.plan
            pool = self.vllm_pool.to_data()
        return {
            "engine": self.profile.engine,
            "argv": list(c.argv),
            "env_delta": dict(c.env_delta),
            "placement": c.placement,
            "flags": [{"args": list(f.args), "source": f.source, "why": f.why} for f in (*c.prefix, *c.flags)],
            "env": [{"name": e.name, "value": e.value, "source": e.source, "why": e.why} for e in c.env],
            "checks": [str(line) for line in self.checks],
            "warnings": [w.to_data() for w in self.warnings],
            "pool": pool,
            "plan": plan.to_data() if plan is not None else None,
            "plan_rule": plan.rule if plan is not None else None,
            "plan_total_bytes": plan.total_bytes if plan is not None else None,
            "plan_notes": list(plan.notes) if plan is not None else [],
            "plan_carved": [{"target": n, "size_bytes": c.size_bytes, "offsets": list(c.offsets),
                             "plain_size_bytes": c.plain_bytes, "skipped": [list(x) for x in c.skipped],
                             "poison": [list(x) for x in c.poison], "line": c.describe(n)}
                            for n, c in plan.carved] if plan is not None else [],
            "plan_targets": [{"target": t.name, "kind": t.kind, "capacity_bytes": t.capacity_bytes,
                              "capacity_source": t.capacity_source, "align_bytes": t.align_bytes,
                              "cpu_node": t.cpu_node, "cpu_node_evidence": t.cpu_node_evidence,
                              "poison": None if t.poison is None else [list(x) for x in t.poison]}
                             for t in self.pool.facts] if self.pool is not None else [],
            # engine vllm: "plan" has one slot per pool owner (a DP replica when shared, a rank when private)
            "notes": list(c.notes),
            "problems": [{"exit_code": int(p.exit_code), "message": p.message, "hint": p.hint} for p in self.problems],
            "dry_run": self.dry_run,
        }


def build_launch(profile_path: str, extra_args: Sequence[str] = (), *, python: str | None = None,
                 entrypoint: str | None = None, dry_run: bool = False, allow_untested: bool = False,
                 sysfs_root: str | None = None, environ: Mapping[str, str] | None = None,
                 placement: str | None = None, engine: str | None = None, strict: bool = False) -> Launch:
    """Validate profile, model, extras, the engine and pool; build argv and env delta.

    ``placement`` overrides ``pool.placement`` (e.g. ``none`` for the DRAM half of an A/B run with
    otherwise identical settings). ``engine`` (``--engine``) must be the profile's: the settings
    were tuned for one engine. ``strict`` refuses a profile tuned on another machine (else a warning)."""
    profile = load_profile(profile_path)
    if engine is not None and engine != profile.engine:
        raise UsageError(f"--engine {engine}: {profile_path} is a profile for {profile.engine}",
                         f"tune one for {engine}: sactool tune --engine {engine} …, or drop --engine")
    overridden = placement is not None and placement != profile.pool.placement
    profile = _with_placement(profile, placement)
    if profile.engine == "vllm":
        return _vllm(profile, profile_path, extra_args, python=python, dry_run=dry_run, allow_untested=allow_untested,
                     sysfs_root=sysfs_root, environ=environ, strict=strict,
                     override=f"--placement {placement} overrides the profile's pool.placement" if overridden else "")
    python = python or sys.executable
    ep = entrypoint or profile.sglang.entrypoint
    lines = [f"profile {os.path.abspath(profile_path)}: {profile.model.name}, schema {profile.schema_version}"]
    if overridden:
        lines.append(f"--placement {placement} overrides the profile's pool.placement")
    info, extra = _read_extras(profile, extra_args, python, lines)
    problems: list[Problem] = []

    def attempt(fn):
        try:
            return fn()
        except SactoolError as e:
            if not dry_run:
                raise
            problems.append(Problem(int(e.exit_code), e.message, e.hint))
            return None

    env_now = os.environ if environ is None else environ
    gpus = attempt(lambda: resolve_gpus(profile, SysfsReader(sysfs_root), env_now))
    extra_env: tuple = ()
    if gpus is not None:
        profile, extra_env = gpus.profile, gpus.env
        lines.extend(gpus.lines)
    cmd = build_command(profile, profile_path=profile_path, extra_args=extra, python=python,
                        entrypoint=entrypoint, environ=environ, extra_env=extra_env)

    found: dict[str, str] = {}

    def engine_lines() -> list[str]:
        nonlocal info
        info = info or checks.probe_engine(python)   # asked again where it could not answer: the error
        out = checks.check_engine(profile, info, entrypoint=ep, plugin=cmd.placement == "plugin",
                                  allow_untested=allow_untested)
        if info.console_script and not info.console_script.startswith("declared"):
            found["script"] = info.console_script
        return out

    engine_ok = attempt(engine_lines)
    lines.extend(engine_ok or [])
    if engine_ok is not None and cmd.placement == "plugin" and profile.sglang.role != "prefill":
        lines.extend(attempt(lambda: checks.check_hooks(profile, checks.probe_hooks(python), python=python,
                                                        allow_untested=allow_untested)) or [])
    if ep == "serve" and "script" in found:
        cmd = build_command(profile, profile_path=profile_path, extra_args=extra, python=python,
                            entrypoint=entrypoint, environ=environ, sglang_script=found["script"],
                            extra_env=extra_env)
    if cmd.placement == "numactl":
        lines.extend(attempt(_numactl_lines) or [])
    lines.extend(attempt(lambda: pool_here(profile, sysfs_root, strict)) or [])
    pool = attempt(lambda: _check_pool(profile, SysfsReader(sysfs_root)))
    if pool is not None:
        lines.extend(_pool_lines(pool) + _health_lines(profile, pool, attempt, sysfs_root))
        if cmd.placement == "plugin":
            cmd = with_poison_env(cmd, profile, pool.facts)
    if cmd.placement == "plugin":
        lines.extend(attempt(lambda: _plugin_lines(profile, pool)) or [])
    if profile.pool.stand_in and cmd.placement != "none":
        lines.append("pool.stand_in: the profile's pool node is a DRAM node standing in for CXL")
    return Launch(os.path.abspath(profile_path), profile, cmd, tuple(lines), pool, tuple(problems), dry_run)


def _numactl_lines() -> list[str]:
    """Placement numactl: the numactl the launch will run."""
    path = shutil.which("numactl")
    if not path:
        raise EngineMissingError("numactl is not installed (placement numactl)",
                                 "apt-get install numactl, or use pool.placement plugin")
    return [f"numactl: {path}"]


def _pool_lines(pool) -> list[str]:
    """The dry-run's lines for the pool check: bytes per rank and where that came from, each target's need."""
    out = []
    s = pool.sizing
    if s.bytes_per_rank is not None:
        out.append(f"host pool per rank: {format_bytes(s.bytes_per_rank)} from {s.source}"
                   + (f" (S={s.device_token_slots}, R={s.host_to_device_ratio}, page={s.page_size}, "
                      f"L={s.num_layers}, row={s.row_bytes} B)" if s.device_token_slots else ""))
    for t in pool.targets:
        out.append(f"{t.target}: ranks {','.join(map(str, t.ranks))} need {format_bytes(t.need_bytes)}, "
                   f"{format_bytes(t.available_bytes)} available")
    if pool.note:
        out.append(pool.note)
    if pool.plan is not None:
        out.extend(f"slices carved: {line}" for line in pool.plan.carve_lines())
    return out


def _health_lines(profile: Profile, pool: Any, attempt: Any, sysfs_root: str | None) -> list[str]:
    """The devices behind the planned targets (:func:`sactool.serve.health.check_health`)."""
    if pool.plan is None or profile.pool.placement == "none":
        return []
    from sactool.serve.health import check_health

    return attempt(lambda: check_health(profile, SysfsReader(sysfs_root), pool.plan)) or []


def _vllm(profile: Profile, profile_path: str, extra_args: Sequence[str], *, override: str, **kw: Any) -> Launch:
    """The launch of a vLLM profile (:mod:`sactool.serve.vllm_launch`)."""
    from sactool.serve import vllm_launch

    head = [f"profile {os.path.abspath(profile_path)}: {profile.model.name}, schema {profile.schema_version}, engine vllm"]
    head += [override] if override else []
    profile, cmd, lines, problems, cap = vllm_launch.build_launch(profile, profile_path, extra_args, lines=head, **kw)
    return Launch(os.path.abspath(profile_path), profile, cmd, tuple(lines), None,
                  tuple(Problem(c, m, h) for c, m, h in problems), kw["dry_run"], vllm_pool=cap)


def _read_extras(profile: Profile, extra_args: Sequence[str], python: str, lines: list[str]):
    """(what the target Python has or None, the extras as SGLang's parser reads them — full names —
    checked against the model and the profile)."""
    info = _engine_info(python)
    table = _option_table(python, info, lines)
    extra = resolve_options(list(extra_args), table)
    lines.append(checks.check_model(profile, extra))
    checks.check_conflicts(profile, extra, table)
    return info, extra


def _engine_info(python: str):
    """What the target Python has (None where it cannot answer: the engine check says why)."""
    try:
        return checks.probe_engine(python)
    except SactoolError:
        return None


def _option_table(python: str, info, lines: list[str]):
    """The option table the extras after ``--`` are read with: the shipped one, or — where the
    target Python's SGLang is another version — that SGLang's own parser, asked there (a line says
    which; where it cannot be asked, the shipped table stands and the line says why)."""
    t = options_table()
    if info is None or not info.sglang or info.sglang == t.version:
        return t
    live, why = checks.probe_options(python, info.sglang)
    if live is None:
        lines.append(f"SGLang {info.sglang}'s parser could not be asked ({why}); the extras after -- are read "
                     f"with SGLang {t.version}'s options")
        return t
    lines.append(f"the extras after -- are read with SGLang {info.sglang}'s own parser ({len(live.options)} options)")
    return live


def _with_placement(profile: Profile, placement: str | None) -> Profile:
    """The profile with ``--placement`` in place of ``pool.placement`` (validated again)."""
    if placement is None:
        return profile
    from dataclasses import replace

    from sactool.profile import PLACEMENTS, validate

    if placement not in PLACEMENTS:
        raise UsageError(f"unknown --placement {placement!r}", f"use one of: {', '.join(PLACEMENTS)}")
    return validate(replace(profile, pool=replace(profile.pool, placement=placement)))


def _check_pool(profile: Profile, reader: SysfsReader) -> capacity.PoolCheck:
    """The pool's capacity check (:func:`sactool.pool.capacity.check_pool`) for the pool SGLang
    builds from this profile; a prefill rank builds none, and placement none leaves it in the DRAM
    SGLang binds each rank to."""
    from sactool.pool.plan import PoolSpec

    spec = PoolSpec.of(profile)
    if profile.sglang.role == "prefill":
        return capacity.PoolCheck(spec.sizing, (), "role prefill: no HiSparse host pool")
    if profile.pool.placement == "none":
        return capacity.PoolCheck(spec.sizing, (), "placement none: the pool stays in the GPU-local DRAM SGLang "
                                  "binds each rank to")
    return capacity.check_pool(spec, reader)


def _plugin_lines(profile: Profile, pool: capacity.PoolCheck | None) -> list[str]:
    """What the plug-in will do in each rank: the rank plan's row when the pool was checked."""
    from sactool.pool.plan import PoolSpec, plan_for_rank

    spec = PoolSpec.of(profile)
    if pool is None or pool.plan is None:
        return ["plug-in: " + plan_for_rank(spec, r).describe() for r in range(profile.world_size)]
    out = ["plug-in: " + plan_for_rank(spec, r, pool.facts, pool.plan).describe() for r in range(profile.world_size)]
    return out + [f"rank plan ({pool.plan.rule}): {n}" for n in pool.plan.notes]


def exec_launch(launch: Launch, environ: Mapping[str, str] | None = None) -> None:
    """Replace this process with SGLang (``os.execvpe``); returns only by raising."""
    if launch.problems:
        p = launch.problems[0]
        raise SactoolError(p.message, p.hint)
    env = dict(os.environ if environ is None else environ)
    env.update(launch.command.env_delta)
    argv = list(launch.command.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        raise EngineMissingError(f"{argv[0]} does not exist", f"pass --python {_engine_name(launch)}'s interpreter") from None
    except PermissionError:
        raise EngineMissingError(f"{argv[0]} is not executable", f"pass --python {_engine_name(launch)}'s interpreter") from None


def _engine_name(launch: Launch) -> str:
    return "vLLM" if launch.profile.engine == "vllm" else "SGLang"
