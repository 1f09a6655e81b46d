"""Shared fixtures: recorded machines, a fast bench record, example and node-0 profiles, the
SGLang-wheel helper of tests/standins, and an interpreter with a stand-in vLLM 0.34.0 installed.

No ``sys.path`` edits: pytest puts this directory on the path for the test modules (rootdir
conftest), which is how ``fixtures.trees`` is found; the stand-in helper is loaded from its file.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.trees import unpack

pytest_plugins = ["fixtures.budget"]   # the suite's CPU budget (issue 27): a test over it fails

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EXAMPLES = REPO / "profiles" / "examples"
STANDIN_SITE = HERE / "standins" / "site"


@pytest.fixture(autouse=True, scope="session")
def _session_measurement_lock(tmp_path_factory):
    """The suite's benches take a lock file of their own session (``SACTOOL_MEASURE_LOCK``,
    sactool/bench/lock.py): they serialise among themselves but never wait minutes behind a benchmark
    someone runs on the machine, nor hold one off. A test of the lock sets its own file."""
    if os.environ.get("SACTOOL_MEASURE_LOCK"):
        yield
        return
    os.environ["SACTOOL_MEASURE_LOCK"] = str(tmp_path_factory.mktemp("lock") / "measure.lock")
    try:
        yield
    finally:
        os.environ.pop("SACTOOL_MEASURE_LOCK", None)


def _checkout_profiles() -> dict[str, tuple[int, int]]:
    """Every file under the checkout's ``profiles/`` (size, mtime): what a README run of tune leaves
    there is the user's, and the suite must neither read it nor write beside it."""
    out = {}
    for p in sorted((REPO / "profiles").rglob("*")):
        if p.is_file() or p.is_symlink():
            st = p.lstat()
            out[str(p.relative_to(REPO))] = (st.st_size, st.st_mtime_ns)
    return out


def pytest_collection_modifyitems(config, items):
    """``live_cxl`` tests boot the QEMU CXL machine (scripts/live-cxl: minutes, packages from the Debian
    mirror): they run only when selected (``pytest -m live_cxl``), never in the plain ``pytest -q``."""
    if "live_cxl" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="boots a QEMU machine with CXL devices (scripts/live-cxl): run with -m live_cxl")
    for item in items:
        if "live_cxl" in item.keywords:
            item.add_marker(skip)


def pytest_sessionstart(session):
    session.config._sactool_profiles = _checkout_profiles()


def pytest_sessionfinish(session, exitstatus):
    """The suite wrote into the checkout's ``profiles/`` (issue 27, N1): fail the run, naming what."""
    before = getattr(session.config, "_sactool_profiles", None)
    if before is None:
        return
    after = _checkout_profiles()
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if changed:
        session.config.get_terminal_writer().line(
            "error: the suite changed the checkout's profiles/ (tests must write under their own "
            f"temporary directories): {', '.join(changed[:10])}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session", autouse=True)
def _own_working_directory(tmp_path_factory):
    """Every test runs in a temporary working directory, never the checkout: a command given no
    ``--out`` (tune's ``profiles/<model>/<host>.yaml``) writes there, not into the checkout, and a
    relative path finds nothing a README run left behind (issue 27, N1)."""
    old = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(old)


@pytest.fixture
def machine(tmp_path):
    """``machine(name)``: a recorded sysfs tree (tests/fixtures/sysfs/<name>.tar.gz) unpacked in a
    fresh directory; e.g. ``machine("ram__30-system-ram")`` (CXL node2) or ``machine("this-machine")``
    (node 0 of the dev VM with MemFree as recorded, so capacity does not follow live free memory)."""
    count = iter(range(1 << 30))

    def unpack_tree(name: str) -> Path:
        return unpack(name, tmp_path / f"tree-{next(count)}-{Path(name).name}")

    return unpack_tree


@pytest.fixture
def gpu_root(machine):
    """``gpu_root(n=8)``: the recording of this VM's node 0 (``this-machine``) with ``n`` constructed H100s on
    node 0 (:func:`fixtures.trees.add_gpus`) — for a serve that must get past the GPU check (this VM has no
    GPU: fewer visible NVIDIA GPUs than ranks is exit 3) to test what comes after it."""
    from fixtures.trees import add_gpus

    return lambda n=8: add_gpus(machine("this-machine"), [0] * n)


@pytest.fixture(scope="session")
def fast_bench_record(tmp_path_factory) -> Path:
    """A bench record of one real quick gather on node 0 (656 B records, top-k 2048, a 64 MiB buffer
    rather than the 256 MiB default, so it fits node 0 when other jobs hold most memory), measured once."""
    from sactool.bench import run_quick_gather
    from sactool.records import dumps

    rec = run_quick_gather(0, 656, 2048, size_bytes=64 << 20, seconds=0.2)
    path = tmp_path_factory.mktemp("bench") / "bench.json"
    path.write_text(dumps(rec.data, "json"))
    return path


@pytest.fixture(scope="session")
def dsv32_128k_workload():
    """DeepSeek-V3.2's workload model at 128K (``workload.layers.model_workload``, the one tune and
    simulate use), 1000 decode steps, seed 0, generated once: its per-layer union and its first 16
    steps (the whole 500 MB trace is not kept)."""
    from sactool.workload import DSV32_STEPS, locality_stats
    from sactool.workload.layers import model_workload

    wl = model_workload("deepseek-v3.2", 61, 2048)
    x = wl.generate(131072, DSV32_STEPS, seed=0)
    out = {"workload": wl, "context": 131072, "steps": DSV32_STEPS, "seed": 0,
           "layer_union": locality_stats(x, 131072).layer_union, "head": x[:16].copy()}
    del x
    return out


@pytest.fixture
def example_profile():
    """``example_profile(name)``: a shipped example profile (profiles/examples/<name>.yaml), loaded."""
    from sactool.profile import load_profile

    return lambda name: load_profile(EXAMPLES / f"{name}.yaml")


def node0_profile(tp: int = 1, **pool):
    """The cxl-one-node example resized to fit node 0 of any test machine (node 0 stands in for CXL)."""
    from sactool.profile import Provenance, load_profile, validate

    p = load_profile(EXAMPLES / "cxl-one-node.yaml")
    pool = {"nodes": (0,), "gpu_local_nodes": (), "stand_in": True, **pool}
    # every field set here says so, as a user editing the profile would (the whole-profile check
    # refuses a settings field without provenance)
    set_here = ["sglang.tp_size", "sglang.attn_dp_size", "sglang.max_running_requests",
                "hisparse.device_buffer_size", "hisparse.host_to_device_ratio", *(f"pool.{k}" for k in pool)]
    prov = {**p.provenance, **{k: Provenance("user", "test fixture: node 0 stands in for CXL") for k in set_here}}
    return validate(replace(p, sglang=replace(p.sglang, tp_size=tp, attn_dp_size=1, max_running_requests=1),
                            hisparse=replace(p.hisparse, device_buffer_size=2048, host_to_device_ratio=1),
                            pool=replace(p.pool, **pool), provenance=prov))


@pytest.fixture
def node0_profile_file(tmp_path):
    """``node0_profile_file(name="p.yaml", tp=1, **pool)``: :func:`node0_profile` saved, its path."""
    from sactool.profile import save_profile

    def write(name: str = "p.yaml", tp: int = 1, **pool) -> Path:
        path = tmp_path / name
        save_profile(node0_profile(tp, **pool), path, force=True)
        return path

    return write


@pytest.fixture
def node0_pinned(node0_profile_file):
    """``node0_pinned(name="p.yaml")``: the node-0 profile with ``pool.capacity_bytes`` pinned to the
    bytes one rank needs (:func:`sactool.profile.sizing.host_sizing`), so a check of that pool
    does not follow node 0's momentary free memory. For tests whose subject is not the free-memory
    rule (that rule is tested on recorded trees)."""
    from sactool.profile.sizing import host_sizing

    need = host_sizing(node0_profile()).bytes_per_rank
    return lambda name="p.yaml": node0_profile_file(name, capacity_bytes=need)


def _load_sglang_wheel():
    spec = importlib.util.spec_from_file_location("sglang_wheel", HERE / "standins" / "sglang_wheel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def sglang_wheel():
    """tests/standins/sglang_wheel.py: the cached SGLang 0.5.23 release (source_root, registry_unreachable)."""
    return _load_sglang_wheel()


@pytest.fixture(scope="session")
def vllm_python(tmp_path_factory) -> str:
    """The interpreter of a virtual environment with a stand-in vLLM 0.34.0 *installed*, for
    ``serve --engine vllm`` run as a user runs it (``--python`` that interpreter): the distribution
    ``vllm`` 0.34.0 with its ``vllm`` console script on disk, the modules of tests/standins/vllm034
    (the symbols the plug-in patches, vLLM 0.34.0's names and parameters), and this test
    environment's site directories (sactool and its ``sactool_cxl`` vllm.general_plugins entry
    point). serve's probes run there for real: the engine and plug-in probe, the hook check."""
    import site
    import sys
    import venv

    root = tmp_path_factory.mktemp("vllm-env")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    lib = root / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    mine = [d for d in site.getsitepackages() if Path(d).is_dir()]
    (lib / "zz_sactool_tests.pth").write_text(
        str(HERE / "standins" / "vllm034") + "\n" + "".join(f"import site; site.addsitedir({d!r})\n" for d in mine))
    info = lib / "vllm-0.34.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.34.0\n"
                                   "Summary: Stand-in distribution for sactool's tests (not vLLM)\n")
    (info / "entry_points.txt").write_text("[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n")
    script = root / "bin" / "vllm"
    script.write_text("#!/bin/sh\necho 'stand-in vLLM (sactool tests): not started' >&2\nexit 1\n")
    script.chmod(0o755)
    return str(root / "bin" / "python")


@pytest.fixture
def python_ctrl_c():
    """Python's own Ctrl-C handler for an in-process test that sends itself SIGINT: a suite run
    from a background job starts with SIGINT ignored, and then no KeyboardInterrupt would come."""
    import signal

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.fixture(scope="session")
def server_tree(tmp_path_factory):
    """``server_tree(mode)``: the generated server-scale tree (tests/fixtures/servertree.py: 2 sockets,
    SNC-3, 512 CPUs, 504 MiB L3 per socket, 2 TB DRAM, 4 CXL devices, 8 GPUs) in ``system-ram`` or
    ``devdax`` mode, generated once per session and mode. It is generated, not recorded, and says so."""
    from fixtures.servertree import generate

    made: dict[str, Path] = {}

    def tree(mode: str = "system-ram") -> Path:
        if mode not in made:
            made[mode] = generate(tmp_path_factory.mktemp(f"server-{mode}"), mode)
        return made[mode]

    return tree
