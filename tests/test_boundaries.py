"""Package boundaries (issue 9), checked on the source so that adding a forbidden import fails here:

* library packages never import typer, click or rich, nor the command line or the renderers
  (only ``sactool/cli/`` and ``sactool/render/`` present things);
* ``/sys`` and ``/proc`` are read only through ``sactool/host/`` (everything else goes through a
  :class:`sactool.host.sysfs.SysfsReader`, so a recorded tree can stand in for the machine);
* ``tune/``, ``serve/`` and ``simulate/`` use ``hisparse/`` and ``pool/`` and never each other's modules;
* ``pool/`` (the KV host pool, engine-neutral) never imports an engine (SGLang, vLLM, torch), nor
  serve, tune, simulate, fleet, the plug-ins or the UI — deferred imports counted;
* ``plugins/`` (one module per engine) import of sactool only ``pool``, ``profile``, each other
  and the leaves (errors, units, records, inputfile, textsafe) — the engine's own modules, of course;
* no import cycle between modules, counting every import — those inside functions too (a deferred
  import still ties the two modules together: neither can be read, tested or moved alone) — and
  none between packages (``sactool.X`` and the top-level modules, each one node);
* the ``sactool_cxl`` entry point, imported and registered in a fresh interpreter with the
  stand-in SGLang of tests/standins/site, loads only the plug-in, pool, profile, hisparse, memory and host (plus
  errors, records, units, and the topology memory's free check reads) — no sactool.serve, no
  sactool.cli, no typer, no rich, no subprocess; and everything the plug-in module could ever
  import, deferred imports followed, stays clear of the same list.

Each rule's checker is also run on a small module that breaks it, so the checks can fail.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "sactool"
SITE = Path(__file__).resolve().parent / "standins" / "site"

PRESENTATION = ("cli", "render", "entry")   # entry.py is the console script: it hands over to cli/
UI_MODULES = ("typer", "click", "rich", "sactool.cli", "sactool.render")
CONSUMERS = ("tune", "serve", "simulate")
OS_READERS = {"open", "io.open", "os.open", "os.listdir", "os.scandir", "os.readlink", "os.stat", "os.lstat",
              "os.path.exists", "os.path.isdir", "os.path.isfile", "os.path.islink", "os.walk", "Path",
              "pathlib.Path", "glob.glob", "glob.iglob"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(source: str, module: str, *, top_level_only: bool = False, package: bool = False) -> set[str]:
    """Absolute names of every module ``source`` imports (relative imports resolved; ``package``:
    ``source`` is the package's ``__init__.py``, so ``from . import x`` is relative to itself)."""
    tree = ast.parse(source)
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if package else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return out


def _matches(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def ui_violations(source: str, module: str, package: bool = False) -> list[str]:
    return sorted(n for n in imports(source, module, package=package) if _matches(n, UI_MODULES))


def _call_name(func: ast.AST) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return f"{_call_name(func.value)}.{func.attr}"
    return ""


def _literal_prefix(arg: ast.AST) -> str | None:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value)
    return None


def kernel_path_violations(source: str) -> list[str]:
    """Calls that open or list an absolute /sys or /proc path directly."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _call_name(node.func) in OS_READERS and node.args:
            text = _literal_prefix(node.args[0])
            if text is not None and text.startswith(("/sys", "/proc")):
                out.append(f"line {node.lineno}: {_call_name(node.func)}({text!r}…)")
    return out


def consumer_violations(source: str, module: str, package: bool = False) -> list[str]:
    own = module.split(".")[1]
    others = [f"sactool.{c}" for c in CONSUMERS if c != own]
    return sorted(n for n in imports(source, module, package=package) if _matches(n, others))


# ---- the checkers fail on a module that breaks each rule -----------------------------------------

POOL_FORBIDDEN = ("sglang", "vllm", "torch", "sactool.serve", "sactool.tune", "sactool.simulate", "sactool.fleet",
                  "sactool.plugins", "sactool.sglang_plugin", "sactool.cli", "sactool.render")
PLUGIN_ALLOWED = ("sactool.pool", "sactool.profile", "sactool.plugins", "sactool.sglang_plugin", "sactool.errors",
                  "sactool.units", "sactool.records", "sactool.inputfile", "sactool.textsafe")


def pool_violations(source: str, module: str, package: bool = False) -> list[str]:
    """What a ``sactool.pool`` module imports that the pool must not (an engine, a consumer, the UI)."""
    return sorted(n for n in imports(source, module, package=package) if _matches(n, POOL_FORBIDDEN))


def plugin_violations(source: str, module: str, package: bool = False) -> list[str]:
    """sactool modules a plug-in module imports beyond pool, profile, the plug-ins and the leaves."""
    return sorted(n for n in imports(source, module, package=package)
                  if _matches(n, ("sactool",)) and n != "sactool" and not _matches(n, PLUGIN_ALLOWED))


def test_checkers_catch_what_they_forbid():
    assert pool_violations("def f():\n    from sglang.srt.plugins import hook_registry\n", "sactool.pool.placer")
    assert pool_violations("from sactool.serve.argv import PLUGIN_NAME\n", "sactool.pool.contract")
    assert pool_violations("from ..tune import pool\n", "sactool.pool.discover")
    assert not pool_violations("from sactool.profile import PoolSettings\nfrom sactool.memory import allocate\n",
                               "sactool.pool.placer")
    assert plugin_violations("from sactool.memory import allocate\n", "sactool.plugins.sglang") == \
        ["sactool.memory", "sactool.memory.allocate"]
    assert plugin_violations("def f():\n    from sactool.hisparse import layout\n", "sactool.plugins.sglang")
    assert not plugin_violations("from sactool.pool.placer import HostPoolPlacer\nfrom sactool import errors\n"
                                 "import sglang.srt\n", "sactool.plugins.sglang")
    assert ui_violations("def f():\n    import typer\n", "sactool.tune.run") == ["typer"]
    assert ui_violations("from rich.console import Console\n", "sactool.bench.api") == ["rich.console",
                                                                                       "rich.console.Console"]
    assert ui_violations("from ..render import emit_data\n", "sactool.bench.api")
    assert kernel_path_violations("open('/proc/meminfo').read()\n")
    assert kernel_path_violations("n = 2\nos.listdir(f'/sys/devices/system/node/node{n}')\n")
    assert not kernel_path_violations("raise ValueError('see /sys/bus/cxl')\nreader.text('proc/meminfo')\n")
    assert consumer_violations("from sactool.serve.argv import build_command\n", "sactool.tune.build")
    assert not consumer_violations("from sactool.hisparse import cost\n", "sactool.simulate.engine")


# ---- the package keeps the rules --------------------------------------------------------------------

@pytest.mark.parametrize("module", [m for m in _modules() if m.split(".")[1:2] and m.split(".")[1] not in PRESENTATION
                                    or m == "sactool"])
def test_library_never_imports_the_ui(module):
    path = _modules()[module]
    assert ui_violations(path.read_text(), module, path.name == "__init__.py") == [], f"{path.relative_to(REPO)} imports the command line or rich"


def test_sys_and_proc_only_through_host():
    bad = {str(p.relative_to(REPO)): v for m, p in _modules().items()
           if not m.startswith("sactool.host") and (v := kernel_path_violations(p.read_text()))}
    assert bad == {}, "read /sys and /proc through sactool.host.sysfs.SysfsReader"


def test_consumers_of_hisparse_do_not_import_each_other():
    bad = {m: v for m, p in _modules().items()
           if m.split(".")[1:2] and m.split(".")[1] in CONSUMERS and (v := consumer_violations(p.read_text(), m, p.name == "__init__.py"))}
    assert bad == {}


def test_pool_never_imports_an_engine_serve_tune_or_simulate():
    mods = {m: p for m, p in _modules().items() if _matches(m, ("sactool.pool",))}
    assert "sactool.pool.placer" in mods and "sactool.pool.rankplan" in mods
    bad = {m: v for m, p in mods.items() if (v := pool_violations(p.read_text(), m, p.name == "__init__.py"))}
    assert bad == {}


def test_plugins_import_only_pool_profile_and_the_leaves():
    mods = {m: p for m, p in _modules().items() if _matches(m, ("sactool.plugins", "sactool.sglang_plugin"))}
    assert "sactool.plugins.sglang" in mods and "sactool.plugins.hooks" in mods
    bad = {m: v for m, p in mods.items() if (v := plugin_violations(p.read_text(), m, p.name == "__init__.py"))}
    assert bad == {}


def import_graph(mods: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """module -> the sactool modules it imports anywhere in its source (functions included)."""
    mods = _modules() if mods is None else mods
    graph = {m: {n for n in imports(p.read_text(), m, package=p.name == "__init__.py") if n in mods and n != m}
             for m, p in mods.items()}
    # a package's __init__ imported by its own submodules is not a cycle worth breaking
    return {m: {n for n in deps if not m.startswith(n + ".")} for m, deps in graph.items()}


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The same edges between packages: ``sactool.X`` for everything under ``sactool/X/``, each
    top-level module its own node."""
    def pkg(m: str) -> str:
        return ".".join(m.split(".")[:2])

    out: dict[str, set[str]] = {}
    for m, deps in graph.items():
        out.setdefault(pkg(m), set()).update(pkg(n) for n in deps if pkg(n) != pkg(m))
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_cycle_finder_finds_deferred_and_package_cycles(tmp_path):
    pkg = tmp_path / "sactool"
    for rel, text in {"__init__.py": "", "a/__init__.py": "", "a/x.py": "def f():\n    from sactool.b import y\n",
                      "b/__init__.py": "", "b/y.py": "from ..a import x\n", "b/z.py": "from . import y\n",
                      "c.py": "import sactool.b.z\n"}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    mods = {".".join(p.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted(pkg.rglob("*.py"))}
    graph = import_graph(mods)
    assert graph["sactool.b.z"] == {"sactool.b.y"}            # ``from . import y`` inside the package
    assert cycles(graph) == [["sactool.a.x", "sactool.b.y"]]  # one edge is a deferred import
    assert cycles(package_graph(graph)) == [["sactool.a", "sactool.b"]]
    assert cycles({"p": {"q"}, "q": set()}) == []


def test_no_module_import_cycles_even_through_deferred_imports():
    assert cycles(import_graph()) == []


def test_no_package_import_cycles():
    assert cycles(package_graph(import_graph())) == []


def test_the_plugin_could_never_import_the_launcher_or_the_ui():
    """Every module the plug-in could import, deferred imports followed (the run below sees one path)."""
    mods = _modules()
    seen: set[str] = set()
    todo = ["sactool.sglang_plugin", "sactool.plugins.sglang"]
    outside: set[str] = set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        parts = m.split(".")
        todo += [".".join(parts[:k]) for k in range(1, len(parts))]   # a submodule runs its packages' __init__
        names = imports(mods[m].read_text(), m, package=mods[m].name == "__init__.py")
        todo += [n for n in names if n in mods]
        outside |= {n for n in names if not n.startswith("sactool")}
    forbidden = ("sactool.serve", "sactool.cli", "sactool.render", "sactool.tune", "sactool.simulate",
                 "sactool.fleet", "typer", "click", "rich", "subprocess")
    assert [m for m in sorted(seen | outside) if _matches(m, forbidden)] == []
    assert "sactool.memory.alloc" in seen   # the walk does reach what the plug-in uses


# ---- the plug-in's import set, in a fresh interpreter -------------------------------------------------

_PLUGIN_RUN = r"""
import json, sys
from importlib.metadata import entry_points
(ep,) = [e for e in entry_points(group="sglang.srt.plugins") if e.name == "sactool_cxl"]
register = ep.load()
assert register() is True, "hooks not registered"
from sglang.srt.plugins.hook_registry import HookRegistry
HookRegistry.apply_hooks()
from sglang.srt.managers.hisparse_coordinator import HiSparseCoordinator
HiSparseCoordinator(None, None, top_k=2048, device_buffer_size=2048, device="cuda", tp_group=None,
                    host_to_device_ratio=1)
print(json.dumps(sorted(sys.modules)))
"""


def test_plugin_loads_only_profile_hisparse_memory_host(node0_profile_file):
    prof = node0_profile_file(prefault_threads=1)
    env = dict(os.environ, PYTHONPATH=str(SITE), SACTOOL_PROFILE=str(prof), SACTOOL_RANK="0")
    run = subprocess.run([sys.executable, "-c", _PLUGIN_RUN], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    loaded = json.loads(run.stdout.splitlines()[-1])
    forbidden = [m for m in loaded if _matches(m, ("sactool.serve", "sactool.cli", "sactool.render", "sactool.tune",
                                                    "sactool.simulate", "typer", "click", "rich", "subprocess"))]
    assert forbidden == []
    # topology comes with memory: allocate(check_free=True) reads node free memory from the probed
    # topology (through host/), the same rule the launcher's capacity check applies
    allowed = ("sactool.sglang_plugin", "sactool.plugins", "sactool.pool", "sactool.profile", "sactool.hisparse",
               "sactool.memory", "sactool.host",
               "sactool.topology", "sactool.errors", "sactool.records", "sactool.units",
               "sactool.inputfile")   # the profile read with its size bound and YAML budget (issue 22)
    ours = [m for m in loaded if m.startswith("sactool.")]
    assert "sactool.memory.alloc" in ours and "sactool.pool.placer" in ours   # it did place the pool
    assert [m for m in ours if not _matches(m, allowed)] == []


# ---- citations ----------------------------------------------------------------------------------

_OUTSIDE = ("shared/reference", "shared/DESIGN", "sglang-integration.md", "paper-sac.md", "cxl-anchors.md",
            "field-notes-2026-12.md", "numba-memory-kernels.md", "DESIGN.md", "STYLE.md")


def test_comments_cite_the_repository_or_public_urls():
    """Notes that are not in the repository are cited through docs/sources.md (public sources)."""
    paths = [*PKG.rglob("*.py"), *(REPO / "scripts").iterdir(), *(PKG / "data").rglob("*.json"),
             *(PKG / "data").rglob("*.yaml"), REPO / "README.md", *(REPO / "docs").rglob("*.md")]
    bad = [f"{p.relative_to(REPO)}: {name}" for p in paths if p.is_file() and p.suffix not in (".c", ".tar", ".gz")
           for name in _OUTSIDE if name in p.read_text(errors="replace")]
    assert bad == []
    assert (REPO / "docs" / "sources.md").is_file()
