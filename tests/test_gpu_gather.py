"""``bench gpu-gather``: the HiSparse-shaped swap-in kernel, checked under numba's CUDA simulator.

No GPU exists on the development machine or in CI, so the kernel runs in numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``). numba reads that variable when it is first imported, so every
simulator test runs in a child process with the variable set in *its* environment only; this
process (and every other test) keeps the real ``numba.cuda``. The simulator runs each GPU thread
as a Python thread: sizes stay tiny. What the simulator cannot show — cuMemHostRegister, real
timings, the GPU's PCIe link — is not claimed here; ``scripts/gpu-check`` measures it on a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sactool.bench.gpugather import GpuGatherOptions, validate
from sactool.errors import UsageError

REPO = Path(__file__).resolve().parents[1]


def _child(code: str, *, simulator: bool, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    if simulator:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests"), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=str(REPO))


def _sim_json(code: str) -> dict:
    p = _child(code, simulator=True)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


KERNEL_CHECK = r"""
import json, sys, tempfile
from pathlib import Path
import numpy as np
from numba import cuda
from numba.core import config
assert config.ENABLE_CUDASIM
from sactool.bench.gpukernel import swap_in, load_bytes_for, word_dtype
from sactool.bench.gpugather import index_stream, region_bases, fill_pattern, expected_records

tmp = Path(tempfile.mkdtemp())
from sactool.workload import generate_topk, save_trace
CTX, K, REQ, STEPS = 40, 7, 3, 2
npz = tmp / "t.npz"
save_trace(npz, generate_topk(CTX, STEPS, 2, K, seed=5), CTX, meta={"model": "test", "source": "generated"})
txt = tmp / "t.txt"
txt.write_text("\n".join(" ".join(str(v) for v in np.random.default_rng(s).permutation(CTX)[:K]) for s in range(4)))
sources = {"uniform": ("uniform", None), "clustered": ("clustered", None), "trace-model": ("trace", None),
           "trace-npz": ("trace", str(npz)), "trace-text": ("trace", str(txt))}
out, widths = {}, {}
for rb in (656, 1152, 100, 130, 37):
    lb = load_bytes_for(rb); dt = word_dtype(lb); words = rb // lb; widths[rb] = lb
    region = CTX + STEPS
    host = np.zeros(((REQ * region + 5) * rb + 7) // 8, dtype=np.uint64)
    fill_pattern(host)
    u8 = host.view(np.uint8)
    src = u8[: (u8.size // lb) * lb].view(dt)
    for name, (pat, trace) in sources.items():
        idx, _ = index_stream(pat, requests=REQ, topk=K, steps=STEPS, context=CTX, seed=rb, trace=trace)
        bases = region_bases(STEPS, REQ, region, u8.size // rb)
        ok = True
        for threads in ((32, 64) if rb == 656 else (32,)):  # 64: two warps share 7 records
            dst = cuda.device_array((REQ, K * words), dtype=dt)
            for s in range(STEPS):
                swap_in[REQ, threads](src, cuda.to_device(idx), cuda.to_device(bases), dst, s, 1, words)
                got = dst.copy_to_host().view(np.uint8).reshape(REQ, K, rb)
                for b in range(REQ):
                    ok &= np.array_equal(got[b], expected_records(u8, rb, idx[s, b], int(bases[s, b])))
            # one launch walking steps 1, 0 (mod 2) leaves step 0's records in the hot buffer
            swap_in[REQ, threads](src, cuda.to_device(idx), cuda.to_device(bases), dst, 1, 2, words)
            got = dst.copy_to_host().view(np.uint8).reshape(REQ, K, rb)
            ok &= all(np.array_equal(got[b], expected_records(u8, rb, idx[0, b], int(bases[0, b]))) for b in range(REQ))
        out[f"{rb}/{name}"] = bool(ok)
        # the comparison can fail: the records one slot over are different bytes
        out[f"{rb}/{name}/control"] = not np.array_equal(got[0], expected_records(u8, rb, idx[0, 0], int(bases[0, 0]) + 1))
print(json.dumps({"results": out, "widths": widths, "impl": str(getattr(cuda, "implementation", "?"))}))
"""


def test_kernel_gathers_exactly_the_source_records_for_every_size_and_pattern():
    got = _sim_json(KERNEL_CHECK)
    bad = [k for k, v in got["results"].items() if not v]
    assert not bad, bad
    assert len(got["results"]) == 5 * 5 * 2
    # 8-byte lanes for the MLA rows (as HiSparse's ld.global.nc.b64); narrower ones where the size asks
    assert got["widths"] == {"656": 8, "1152": 8, "100": 4, "130": 2, "37": 1}


RUN_CHECK = r"""
import json, sys, tempfile
from pathlib import Path
from sactool.bench.gpugather import GpuGatherOptions, run_gpu_gather
from sactool.bench.protocol import Protocol
from sactool.bench import load_bench
from sactool import records
o = GpuGatherOptions(node=0, blocks=(1, 3), threads=(32,), record_bytes=(656,), topk=(8,), context_tokens=48,
                     steps=3, size_bytes=4 << 20, protocol=Protocol("test", 0.0, 2, warmup=0, max_reps=1))
rec = run_gpu_gather(o)
p = Path(tempfile.mkdtemp()) / "gpu.json"
records.atomic_write(p, records.dumps(rec.data, "json"))
back = load_bench(p)
print(json.dumps({"complete": back.complete, "results": back.results, "gpu": back.data["gpu"],
                  "warnings": [w["code"] for w in back.warnings], "buffer": back.buffer,
                  "registration": back.data["registration"], "tests": back.data["tests"], "record": rec.data}))
"""


def test_sweep_record_under_the_simulator(tmp_path):
    got = _sim_json(RUN_CHECK)
    assert got["complete"] and got["gpu"]["simulator"] is True
    assert "simulated" in got["warnings"]
    assert got["tests"] == ["gpu_gather", "gpu_prefix_copy"]
    gathers = [r for r in got["results"] if r["test"] == "gpu_gather"]
    prefixes = [r for r in got["results"] if r["test"] == "gpu_prefix_copy"]
    assert sorted((r["params"]["index_pattern"], r["params"]["blocks"]) for r in gathers) == sorted(
        (p, b) for p in ("uniform", "clustered", "trace") for b in (1, 3))
    assert sorted(r["params"]["blocks"] for r in prefixes) == [1, 3]
    for r in gathers:
        assert r["check"]["equal"] is True and r["check"]["requests"] == sorted({0, r["params"]["blocks"] - 1})
        d = r["derived"]
        assert d["topk_step_us"] > 0 and d["bandwidth_bytes_per_s"] > 0
        assert d["lines_in_flight"] == r["params"]["blocks"] * 1 * 4   # 1 warp × 32 lanes × 8 B = 4 lines
        assert d["full_prefix_us"] > 0 and d["full_prefix_over_topk"] == pytest.approx(d["full_prefix_us"] / d["topk_step_us"])
        assert r["timing"].startswith("simulator")
        assert r["params"]["load_bytes"] == 8 and r["kernel"]["words_per_record"] == 82
    assert "trace" in {r["params"]["index_pattern"] for r in gathers}
    assert any("workload model" in r["params"]["index_source"] for r in gathers)
    assert got["buffer"]["placement"]["method"] == "mbind" and got["buffer"]["verified_fraction"] == 1.0
    assert got["registration"]["method"].startswith("simulator")
    # one spelling for a NUMA node (docs/reference/units.md): numbers, not "node0"
    from fixtures.nodespelling import bare_node_names

    rec = got["record"]
    assert rec["memory_node"] == 0 and {r["memory_node"] for r in rec["results"]} == {0}
    assert bare_node_names(rec) == set(), bare_node_names(rec)


def test_no_gpu_is_one_line_and_exit_3():
    """On a machine without a CUDA GPU (this one, CI) the real numba.cuda says so."""
    p = _child("import sys\nfrom sactool.bench.gpuplace import gpu_runtime\nfrom sactool.errors import SactoolError\n"
               "try:\n    gpu_runtime()\nexcept SactoolError as e:\n    print(int(e.exit_code)); print(e.message); "
               "print(e.hint)\nelse:\n    print('gpu')", simulator=False, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    if lines[0] == "gpu":  # pragma: no cover - a machine with a GPU has nothing to refuse
        pytest.skip("a CUDA GPU is present here")
    # issue 18: the refusal is one error line plus a hint (what to install, where to run, the simulator)
    assert lines[0] == "3" and "GPU" in lines[1] and "sactool[gpu]" in lines[2] and "NUMBA_ENABLE_CUDASIM=1" in lines[2]


@pytest.mark.parametrize("kw, word", [
    ({"threads": (48,)}, "multiple of 32"), ({"threads": (2048,)}, "at most 1024"),
    ({"blocks": (0,)}, "positive"), ({"topk": (4096,), "context_tokens": 1024}, "longer --context"),
    ({"patterns": ("zipf",)}, "unknown index pattern"), ({"placement": "loose"}, "unknown placement"),
    ({"record_bytes": ()}, "empty"),
])
def test_bad_options_fail_before_any_gpu_work(kw, word):
    with pytest.raises(UsageError) as e:
        validate(GpuGatherOptions(**kw))
    assert word in e.value.message + (e.value.hint or "")


def test_path_ceiling_on_a_recorded_cxl_node(machine):
    """The CXL side comes from a real recording (QEMU CXL memdev mem0, 32 GT/s x16). No recording
    of a GPU's PCI entry exists (QEMU has no GPU), so the GPU side is a hand-written directory
    with the same attributes the kernel exposes for any PCIe function; it says x8."""
    from sactool.bench.gpuplace import GpuInfo, path_ceiling
    from sactool.host.sysfs import SysfsReader
    from sactool.memory.nodes import topology

    root = machine("ram__30-system-ram")
    gpu_dir = root / "sys/bus/pci/devices/0000:17:00.0"
    gpu_dir.mkdir(parents=True)
    for name, text in (("current_link_speed", "32.0 GT/s PCIe"), ("current_link_width", "8"),
                       ("max_link_speed", "32.0 GT/s PCIe"), ("max_link_width", "16")):
        (gpu_dir / name).write_text(text + "\n")
    r = SysfsReader(root)
    topo = topology(r)
    gpu = GpuInfo(0, "H200", (9, 0), 132, 50 << 20, "0000:17:00.0", 0, False, "NVIDIA", None)
    c = path_ceiling(gpu, topo, 2, None, r)
    x16 = int(round(32e9 * 16 * 128 / 130 / 8))
    assert c["memory_links"][0]["memdev"] == "mem0" and c["memory_links"][0]["link"]["ceiling_bytes_per_s"] == x16
    assert c["ceiling_bytes_per_s"] == int(round(32e9 * 8 * 128 / 130 / 8)) and c["limited_by"] == "gpu_link"
    dram = path_ceiling(gpu, topo, 0, None, r)
    assert dram["memory_links"] == [] and dram["limited_by"] == "gpu_link"
    unknown = path_ceiling(GpuInfo(0, "x", None, None, None, None, None, False, "NVIDIA", None), topo, 2, None, r)
    assert unknown["ceiling_bytes_per_s"] == x16 and unknown["limited_by"] == "memory_links"
    assert any("GPU link unknown" in n for n in unknown["notes"])


def test_cli_without_a_gpu_says_so_in_one_line_and_writes_nothing(tmp_path, capsys):
    """This machine (and CI) has no CUDA GPU: exit 3, one stderr line, empty stdout, no --out file."""
    from sactool.bench.gpuplace import gpu_runtime
    from sactool.cli import main
    from sactool.errors import TopologyError

    try:
        gpu_runtime()
    except TopologyError:
        pass
    else:  # pragma: no cover
        pytest.skip("a CUDA GPU is present here")
    out = tmp_path / "g.json"
    code = main(["bench", "gpu-gather", "--node", "0", "--out", str(out), "--format", "json"])
    cap = capsys.readouterr()
    assert code == 3 and cap.out == "" and not out.exists()
    err = cap.err.strip().splitlines()   # one error line and, since issue 18, its hint line
    assert len(err) == 2 and err[0].startswith("error: no CUDA GPU") and err[1].startswith("hint: ")


def test_cli_simulated_run_writes_a_loadable_record(tmp_path):
    out = tmp_path / "g.json"
    p = _child("from sactool.cli import main\nraise SystemExit(main(['bench', 'gpu-gather', '--node', '0', '--blocks', "
               "'2', '--threads', '32', '--record-bytes', '1152', '--topk', '4', '--context', '16', '--size', '2MiB', "
               f"'--pattern', 'clustered', '--preset', 'fast', '--format', 'json', '--out', {str(out)!r}]))",
               simulator=True)
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads(p.stdout)
    from sactool.bench import load_bench

    rec = load_bench(out)
    assert rec.data["command"] == "gpu-gather" and data["results"] == list(rec.results)
    assert [r["test"] for r in rec.results] == ["gpu_gather", "gpu_prefix_copy"]
    assert "simulated" in p.stderr  # warnings on stderr, data on stdout


def test_gpu_check_script_runs_end_to_end_in_the_simulator(tmp_path):
    """scripts/gpu-check --smoke: the same code path as on a GPU, at simulator sizes."""
    code = ("import runpy, sys\nsys.argv = ['gpu-check', '--smoke', '--out', %r]\n"
            "runpy.run_path('scripts/gpu-check', run_name='__main__')" % str(tmp_path))
    p = _child(code, simulator=True)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "authors' shape" in p.stdout and "placement mbind, verified: 100.0%" in p.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [r["topk"] for r in summary["authors_shape"]] == [8, 16]
    assert [r["blocks"] for r in summary["blocks"]] == [1, 2] and summary["warnings"] == ["simulated"]
    assert (tmp_path / "gpu-gather-sweep.json").exists() and (tmp_path / "gpu-gather-authors.json").exists()


def test_best_effort_placement_without_a_node_is_first_touch_and_says_so():
    """What gpu-check meets under gVisor when no NUMA node can be read: a first-touch buffer,
    marked unverified (the syscalls themselves are not faked: no node is asked for)."""
    from sactool.bench.gpuplace import place
    from sactool.errors import TopologyError
    from sactool.host.sysfs import SysfsReader

    with pytest.raises(TopologyError) as e:
        place(1 << 20, node=None, dax=None, cpus=[0], topo=None, reader=SysfsReader(), placement="strict")
    assert "best-effort" in e.value.hint
    buf, pl = place(1 << 20, node=None, dax=None, cpus=[0], topo=None, reader=SysfsReader(), placement="best-effort")
    try:
        assert pl["method"] == "first-touch" and pl["verified"] is False
        assert any("topology unreadable" in n for n in pl["notes"]) and any("not verified" in n for n in pl["notes"])
        assert buf.describe()["policy"] == "first-touch" and buf.array("uint8")[::4096].min() == 1  # pre-faulted
    finally:
        buf.close()


def test_gpu_check_without_a_gpu_exits_3(tmp_path):
    code = ("import runpy, sys\nsys.argv = ['gpu-check', '--out', %r]\n"
            "runpy.run_path('scripts/gpu-check', run_name='__main__')" % str(tmp_path))
    p = _child(code, simulator=False, timeout=120)
    if p.returncode == 0:  # pragma: no cover - a machine with a GPU measures instead
        pytest.skip("a CUDA GPU is present here")
    assert p.returncode == 3 and p.stdout == "" and p.stderr.startswith("error: no CUDA GPU")
