"""sactool against the real SGLang 0.5.23 source (downloaded without dependencies, cached, parsed
with ``ast``, never imported): every flag the launcher can emit exists with the arity and choices
SGLang declares, the --hisparse-config keys are the ones SGLang parses, the env vars exist with a
value their parser accepts, and the plug-in's hook targets exist with the signatures it assumes.

Skips only when the package index cannot be reached (the reason is printed).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
from pathlib import Path

import pytest

from sactool.plugins import sglang as sglang_plugin
from sactool.profile import load_profile
from sactool.serve.argv import build_command

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def src(sglang_wheel) -> Path:
    root, why = sglang_wheel.source_root()
    if root is None:
        if sglang_wheel.registry_unreachable(why):
            print(f"SKIP reason: {why}")
            pytest.skip(why)
        pytest.fail(why)
    return root / "sglang"


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


# ------------------------------------------------------------------------------------------
# SGLang's argument definitions (arg_groups/fields/*.py, add_cli_args_from_dataclass rules)
# ------------------------------------------------------------------------------------------

@dataclasses.dataclass
class SgArg:
    field: str
    names: list[str]
    kind: str                # bool | list | value | action
    type: type
    choices: list | None
    required: bool


def _name(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    return ""


def _inner(tp):
    """Strip Optional[...] / Union[..., None]."""
    if isinstance(tp, ast.Subscript) and _name(tp.value) == "Optional":
        return _inner(tp.slice)
    if isinstance(tp, ast.BinOp) and isinstance(tp.op, ast.BitOr):
        side = tp.right if isinstance(tp.right, ast.Constant) and tp.right.value is None else tp.left
        return _inner(side)
    return tp


def _scalar(name: str) -> type:
    return {"int": int, "float": float, "bool": bool}.get(name, str)


def sglang_args(src: Path) -> dict[str, SgArg]:
    out: dict[str, SgArg] = {}
    for path in sorted((src / "srt" / "arg_groups" / "fields").glob("*.py")):
        for cls in (n for n in _tree(path).body if isinstance(n, ast.ClassDef)):
            for st in cls.body:
                if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                        and isinstance(st.annotation, ast.Subscript) and _name(st.annotation.value) == "A"):
                    continue
                parts = st.annotation.slice.elts if isinstance(st.annotation.slice, ast.Tuple) else [st.annotation.slice]
                tp, metas = parts[0], parts[1:]
                meta: dict = {}
                has_arg = False
                for m in metas:
                    if isinstance(m, ast.Constant) and isinstance(m.value, str):
                        has_arg = True
                    elif isinstance(m, ast.Call) and _name(m.func) == "Arg":
                        has_arg = True
                        meta = {k.arg: k.value for k in m.keywords}
                if not has_arg or (isinstance(meta.get("no_cli"), ast.Constant) and meta["no_cli"].value):
                    continue
                fname = st.target.id
                cli = meta["cli_name"].value if "cli_name" in meta else "--" + fname.replace("_", "-")
                aliases = [a.value for a in meta["aliases"].elts] if "aliases" in meta else []
                inner = _inner(tp)
                choices = None
                if "choices" in meta and isinstance(meta["choices"], ast.List):
                    choices = [e.value for e in meta["choices"].elts if isinstance(e, ast.Constant)]
                if "action" in meta:
                    kind, typ = "action", str
                elif isinstance(inner, ast.Subscript) and _name(inner.value) == "Literal":
                    vals = inner.slice.elts if isinstance(inner.slice, ast.Tuple) else [inner.slice]
                    choices = choices or [v.value for v in vals]
                    kind, typ = "value", type(choices[0]) if choices else str
                elif isinstance(inner, ast.Subscript) and _name(inner.value) in ("List", "list") and "type_parser" not in meta:
                    kind, typ = "list", _scalar(_name(inner.slice))
                elif _name(inner) == "bool":
                    kind, typ = "bool", bool
                else:
                    kind, typ = "value", _scalar(_name(inner))
                req = st.value is None and kind == "value"
                out[fname] = SgArg(fname, [cli, *aliases], kind, typ, choices, req)
    return out


def sglang_parser(args: dict[str, SgArg]) -> argparse.ArgumentParser:
    """An argparse parser built by SGLang's own rules (arg_utils.add_cli_args_from_dataclass)."""
    p = argparse.ArgumentParser(prog="sglang", exit_on_error=False, add_help=False, allow_abbrev=False)
    for a in args.values():
        if a.kind == "bool":
            p.add_argument(*a.names, dest=a.field, action="store_true")
        elif a.kind == "list":
            p.add_argument(*a.names, dest=a.field, nargs="+", type=a.type)
        elif a.kind == "action":
            p.add_argument(*a.names, dest=a.field, nargs="?")
        else:
            p.add_argument(*a.names, dest=a.field, type=a.type, choices=a.choices, required=a.required)
    return p


def profiles() -> list[Path]:
    """Every shipped example profile and the profiles named in ``$SACTOOL_COMPAT_PROFILES``
    (os.pathsep-separated), e.g. one tune wrote: what a user's tune left in the checkout's
    profiles/ is not read (issue 27, N1)."""
    found = sorted(REPO.glob("profiles/examples/**/*.yaml")) + sorted(REPO.glob("profiles/examples/**/*.yml"))
    found += [Path(p) for p in os.environ.get("SACTOOL_COMPAT_PROFILES", "").split(os.pathsep) if p]
    out = []
    for p in found:
        try:
            if load_profile(p).engine == "sglang":    # a vLLM profile builds no SGLang command
                out.append(p)
        except Exception:  # model specs and other records live there too
            continue
    return out


def commands():
    """(name, Command) for every profile x entry point, with and without a user --model-path."""
    for path in profiles():
        prof = load_profile(path)
        for ep in ("launch_server", "serve"):
            for extra in ([], ["--model-path", "deepseek-ai/DeepSeek-V3.2"]):
                yield (f"{path}:{ep}:{len(extra)}", prof,
                       build_command(prof, profile_path=str(path), extra_args=extra, python="python3", entrypoint=ep,
                                     environ={"SGLANG_PLUGINS": "smg-servicer"}))


def test_every_emitted_flag_parses_with_sglang_definitions(src):
    args = sglang_args(src)
    assert {"tp_size", "enable_hisparse", "hisparse_config", "numa_node", "attn_dp_size"} <= set(args)
    parser = sglang_parser(args)
    seen: set[str] = set()
    n = 0
    for name, prof, cmd in commands():
        n += 1
        prog_len = sum(len(f.args) for f in cmd.prefix)
        sg_argv = list(cmd.argv[prog_len:])
        try:
            ns, unknown = parser.parse_known_args(sg_argv)
        except (argparse.ArgumentError, SystemExit) as e:
            pytest.fail(f"{name}: SGLang 0.5.23 rejects {sg_argv}: {e}")
        assert not unknown, f"{name}: flags SGLang 0.5.23 does not define: {unknown}"
        assert ns.tp_size == prof.sglang.tp_size and ns.attn_dp_size == prof.sglang.attn_dp_size, name
        assert ns.page_size == prof.sglang.page_size and ns.kv_cache_dtype == prof.sglang.kv_cache_dtype, name
        if cmd.hisparse:
            assert ns.enable_hisparse and ns.disable_radix_cache, name
        seen.update(a for f in cmd.flags for a in f.args if a.startswith("--"))
    assert n >= 14
    print(f"\n{n} commands from {len(profiles())} profiles parsed by SGLang 0.5.23's definitions; "
          f"{len(seen)} distinct flags: {' '.join(sorted(seen))}")
    # every flag sactool knows how to emit showed up in some profile (the examples cover the builder)
    for flag in ("--numa-node", "--dsa-decode-backend", "--disaggregation-mode", "--context-length",
                 "--max-running-requests", "--mem-fraction-static", "--hisparse-config", "--max-total-tokens"):
        assert flag in seen, f"no example profile exercises {flag}"


def test_shipped_option_table_holds_every_option_sglang_defines(src):
    # serve resolves abbreviations over sactool/data/sglang/options-0.5.23.json (scripts/sglang-options
    # wrote it from SGLang's parser): every option of the source's field definitions is there, flags
    # taking no value, lists one or more
    from sactool.serve.sglang_options import shipped_table

    table = shipped_table().options
    args = sglang_args(src)
    missing = [n for a in args.values() for n in a.names if n not in table]
    assert not missing, missing
    for a in args.values():
        for n in a.names:
            assert table[n][0] == a.field, n
            if a.kind == "bool":
                assert table[n][1] == 0, n
            elif a.kind == "list":
                assert table[n][1] in ("+", "*"), n


def test_hisparse_config_keys_are_the_ones_sglang_parses(src):
    tree = _tree(src / "srt" / "mem_cache" / "sparsity" / "factory.py")
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_parse_sparse_config")
    popped = {c.args[0].value for c in ast.walk(fn) if isinstance(c, ast.Call) and _name(c.func) == "pop"
              and c.args and isinstance(c.args[0], ast.Constant)}
    for _, prof, cmd in commands():
        assert set(prof.hisparse.config_json()) <= popped, popped
    assert {"top_k", "device_buffer_size", "host_to_device_ratio", "swap_in_block_size"} <= popped
    # the range the profile validates swap_in_block_size against is SGLang's
    consts = {c.value for c in ast.walk(fn) if isinstance(c, ast.Constant) and isinstance(c.value, int)}
    from sactool.profile import SWAP_IN_BLOCK_RANGE

    assert SWAP_IN_BLOCK_RANGE[1] in consts


def _env_fields(src: Path) -> dict[str, str]:
    tree = _tree(src / "srt" / "environ.py")
    envs = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Envs")
    return {st.targets[0].id: _name(st.value.func) for st in envs.body
            if isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name) and isinstance(st.value, ast.Call)}


def test_env_vars_exist_with_parseable_values(src):
    fields = _env_fields(src)
    names = set()
    for name, _, cmd in commands():
        for k, v in cmd.env_delta.items():
            if k.startswith("SACTOOL_"):
                continue
            if k == "CUDA_DEVICE_ORDER":   # CUDA's own variable; SGLang checks it for PCI_BUS_ID
                assert v == "PCI_BUS_ID" and 'os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID"' in \
                    (src / "srt" / "platforms" / "cuda.py").read_text(encoding="utf-8")
                continue
            names.add(k)
            assert k in fields, f"{name}: {k} is not an SGLang 0.5.23 environment variable"
            kind = fields[k]
            if kind.startswith("EnvBool"):
                assert v.lower() in ("true", "1", "yes", "y", "false", "0", "no", "n"), (k, v)
            elif kind.startswith("EnvInt"):
                int(v)
    assert {"SGLANG_PLUGINS", "SGLANG_AUTO_NUMA_BIND", "SGLANG_DISABLE_HISPARSE_PREFETCH",
            "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"} <= names, names


def _method(tree: ast.Module, cls: str, meth: str) -> ast.FunctionDef:
    c = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    return next(n for n in c.body if isinstance(n, ast.FunctionDef) and n.name == meth)


def _target_file(src: Path, target: str) -> tuple[Path, str, str]:
    mod, cls, meth = target.rsplit(".", 2)
    return src.parent / (mod.replace(".", "/") + ".py"), cls, meth


def test_hook_targets_exist_with_the_assumed_signatures(src):
    path, cls, meth = _target_file(src, sglang_plugin.COORDINATOR_TARGET)
    init = _method(_tree(path), cls, meth)
    assert not init.decorator_list and init.args.args[0].arg == "self"
    # the premise: the HiSparse host pool (MLATokenToKVPoolHost) is built inside the constructor
    built = {_name(c.func) for c in ast.walk(init) if isinstance(c, ast.Call)}
    assert "MLATokenToKVPoolHost" in built

    path, cls, meth = _target_file(src, sglang_plugin.ALLOCATE_TARGET)
    tree = _tree(path)
    alloc = _method(tree, cls, meth)
    assert [a.arg for a in alloc.args.args] == ["self", "dims", "dtype", "device"]   # _bind_allocate_args
    assert not alloc.decorator_list
    # SGLang calls it as allocator.allocate(dims, dtype=..., device=...) and pins what it returns
    reg = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "alloc_with_host_register")
    calls = [c for c in ast.walk(reg) if isinstance(c, ast.Call) and _name(c.func) == "allocate"]
    assert calls and {k.arg for k in calls[0].keywords} == {"dtype", "device"} and len(calls[0].args) == 1
    assert any(_name(c.func) == "_cuda_host_register" for c in ast.walk(reg) if isinstance(c, ast.Call))
    # the return type the plug-in reproduces: torch.frombuffer(mm, dtype=, count=).reshape(dims)
    mm = _tree(src / "srt" / "mem_cache" / "storage" / "mmap" / "mmap_allocator.py")
    fn = next(n for n in mm.body if isinstance(n, ast.FunctionDef) and n.name == "alloc_mmap")
    rets = [r.value for r in ast.walk(fn) if isinstance(r, ast.Return)]
    assert rets and all(isinstance(r, ast.Call) and _name(r.func) == "reshape"
                        and _name(r.func.value.func) == "frombuffer" for r in rets)
    # the rank function the plug-in asks
    mod, fname = sglang_plugin.RANK_FUNCTION.rsplit(".", 1)
    ps = _tree(src.parent / (mod.replace(".", "/") + ".py"))
    assert any(isinstance(n, ast.FunctionDef) and n.name == fname and not n.args.args for n in ps.body)


def _defined(src: Path, target: str) -> ast.FunctionDef | None:
    """The function or method ``target`` names in the released source (module path found by
    trying each split of the dotted name), None when it is not defined there."""
    parts = target.split(".")
    for i in range(len(parts) - 1, 0, -1):
        path = src.parent / ("/".join(parts[:i]) + ".py")
        if not path.is_file():
            continue
        body: list = _tree(path).body
        for name in parts[i:-1]:                       # classes on the way
            cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == name), None)
            if cls is None:
                return None
            body = cls.body
        return next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and n.name == parts[-1]), None)
    return None


def test_every_symbol_of_the_plugins_hook_table_is_in_the_release(src):
    """The 0.5.23 row of the hook table (sactool/plugins/hooks.py), read against the released source:
    each symbol defined where the table says, undecorated, with the leading parameters the plug-in
    relies on (a ``call`` takes none that is required) — the check the plug-in runs at load and
    ``serve`` before the launch, here on the release itself."""
    from sactool.plugins.hooks import SGLANG_TABLES

    (table,) = [t for t in SGLANG_TABLES if "0.5.23" in t.versions]
    for h in table.hooks:
        fn = _defined(src, h.target)
        assert fn is not None, f"{h.target} is not defined in SGLang 0.5.23"
        assert not fn.decorator_list, h.target
        names = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
        if h.use == "call":
            assert len(fn.args.defaults) >= len(names) and not [
                k for k, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is None], h.target
        else:
            assert names[:len(h.params)] == list(h.params), (h.target, names)


def test_the_caller_hook_is_where_0_5_23_builds_its_only_hisparse_coordinator(src):
    """The premise of the caller hook: ``ModelRunner.maybe_init_hisparse_coordinator`` is the one
    place the release constructs ``HiSparseCoordinator``, and it keeps it as
    ``self.hisparse_coordinator`` — what the hook checks after the call."""
    calls = []
    for path in (src / "srt").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if "HiSparseCoordinator(" not in text:
            continue
        for fn in ast.walk(_tree(path)):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for c in ast.walk(fn):
                    if isinstance(c, ast.Call) and _name(c.func) == "HiSparseCoordinator":
                        calls.append((path.relative_to(src).as_posix(), fn.name))
    assert sorted(set(calls)) == [("srt/model_executor/model_runner.py", "maybe_init_hisparse_coordinator")]
    fn = _defined(src, sglang_plugin.CALLER_TARGET)
    assert fn is not None
    stores = [t for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Attribute) and t.attr == "hisparse_coordinator"]
    assert stores and all(isinstance(t.value, ast.Name) and t.value.id == "self" for t in stores)


def test_plugin_mechanism_matches(src):
    plug = _tree(src / "srt" / "plugins" / "__init__.py")
    consts = {n.value for n in ast.walk(plug) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert "sglang.srt.plugins" in consts
    hooks = _tree(src / "srt" / "plugins" / "hook_registry.py")
    ht = next(n for n in hooks.body if isinstance(n, ast.ClassDef) and n.name == "HookType")
    assert "AROUND" in {t.id for st in ht.body if isinstance(st, ast.Assign) for t in st.targets}
    # pyproject registers the entry point under the group SGLang scans
    text = (REPO / "pyproject.toml").read_text()
    assert '[project.entry-points."sglang.srt.plugins"]' in text
    assert 'sactool_cxl = "sactool.plugins.sglang:register"' in text


def test_budget_hook_target_is_the_check_sglang_runs_before_allocating(src):
    """The plug-in answers ``host_memory_budget_bytes`` (pool_host/base.py): it exists with the
    signature the hook assumes, ``HostKVCache._allocate_host_buffer`` calls it by its module-global
    name (so the HookRegistry patch of the module attribute is what it calls), compares the
    request against it and raises "Not enough host memory", all before ``init_kv_buffer`` (the
    allocation) — and the HiSparse host pool class is a HostKVCache."""
    mod, fname = sglang_plugin.BUDGET_TARGET.rsplit(".", 1)
    path = src.parent / (mod.replace(".", "/") + ".py")
    tree = _tree(path)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == fname)
    assert [a.arg for a in fn.args.args] == ["requested_bytes"] and [a.arg for a in fn.args.kwonlyargs] == ["auto_size"]
    assert not fn.decorator_list
    alloc = _method(tree, "HostKVCache", "_allocate_host_buffer")
    calls = [c for c in ast.walk(alloc) if isinstance(c, ast.Call)]
    budget = [c for c in calls if isinstance(c.func, ast.Name) and c.func.id == fname]
    init = [c for c in calls if _name(c.func) == "init_kv_buffer"]
    assert budget and init and budget[0].lineno < init[0].lineno
    raises = [r for r in ast.walk(alloc) if isinstance(r, ast.Raise)]
    assert any("Not enough host memory" in ast.unparse(r) for r in raises)
    mla = _tree(src / "srt" / "mem_cache" / "pool_host" / "mla.py")
    cls = next(n for n in ast.walk(mla) if isinstance(n, ast.ClassDef) and n.name == "MLATokenToKVPoolHost")
    assert any(_name(b) == "HostKVCache" for b in cls.bases)


def test_apply_hooks_swallows_failures_so_register_must_resolve_targets(src):
    """The premise of strict registration: ``HookRegistry.apply_hooks`` catches any exception of a
    target and only logs "Failed to apply hooks", so a missing target cannot stop a rank there."""
    hooks = _tree(src / "srt" / "plugins" / "hook_registry.py")
    apply = _method(hooks, "HookRegistry", "apply_hooks")
    handlers = [h for h in ast.walk(apply) if isinstance(h, ast.ExceptHandler)]
    assert handlers and any(_name(h.type) == "Exception" for h in handlers)
    assert "Failed to apply hooks" in ast.unparse(apply)
    # it resolves targets with pkgutil.resolve_name of the owner, then getattr — as register() does
    target = _method(hooks, "HookRegistry", "_apply_target")
    assert "pkgutil.resolve_name" in ast.unparse(target) and "getattr(obj, attr_name)" in ast.unparse(target)
    # load_plugins: SGLANG_PLUGINS unset or empty -> no whitelist (every installed plug-in loads)
    plug = _tree(src / "srt" / "plugins" / "__init__.py")
    by_group = next(n for n in plug.body if isinstance(n, ast.FunctionDef) and n.name == "load_plugins_by_group")
    text = ast.unparse(by_group)
    assert "allowed_set: set[str] | None = None" in text and "if allowed_str:" in text

