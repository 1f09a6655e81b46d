"""``sactool serve`` for a vLLM profile: the exact ``vllm serve`` argv with every flag's source,
extras read as vLLM 0.34.0's parser reads them (its recorded option table; scripts/vllm-options
--check parses the built commands with the real parser), conflicts refused, and the pool checked
from the argv vLLM receives — including where vLLM's own preflight would refuse falsely."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sactool.cli import main
from sactool.errors import CapacityError, UsageError
from sactool.host.sysfs import SysfsReader
from sactool.profile import load_profile, save_profile
from sactool.serve.errors import ConflictError
from sactool.serve.vllm_argv import build_command
from sactool.serve.vllm_launch import check_conflicts
from sactool.serve.vllm_options import resolve

REPO = Path(__file__).resolve().parent.parent
TP8 = REPO / "profiles" / "examples" / "vllm-tp8-one-node.yaml"
DP2 = REPO / "profiles" / "examples" / "vllm-dp2-devdax.yaml"


def _cmd(path: Path, extra=(), **kw):
    p = load_profile(path)
    extra, user_attention = check_conflicts(p, resolve(list(extra)))
    return build_command(p, profile_path=str(path), extra_args=extra, python="/opt/vllm/bin/python", environ={},
                         user_attention=user_attention, **kw)


def test_the_tp8_profile_builds_vllm_serve_with_one_shared_pool():
    cmd = _cmd(TP8)
    argv = list(cmd.argv)
    assert argv[:3] == ["/opt/vllm/bin/vllm", "serve", "deepseek-ai/DeepSeek-V3.2"]
    i = argv.index("--kv-transfer-config")
    assert json.loads(argv[i + 1]) == {"kv_connector": "HiSparseConnector", "kv_role": "kv_both",
                                       "kv_connector_extra_config": {"host_pool_gib": 39.1298828125}}
    j = argv.index("--attention-config")
    assert json.loads(argv[j + 1]) == {"hisparse_config": {"device_buffer_size": 4096, "eager_host_mirror": True}}
    for flag, value in (("--tensor-parallel-size", "8"), ("--distributed-executor-backend", "mp"),
                        ("--kv-cache-dtype", "fp8_ds_mla"), ("--block-size", "64"), ("--max-model-len", "32768"),
                        ("--max-num-seqs", "32")):
        assert argv[argv.index(flag) + 1] == value, flag
    assert "--data-parallel-size" not in argv and "--enable-expert-parallel" not in argv
    assert cmd.env_delta["SACTOOL_PROFILE"] == str(TP8) and "SACTOOL_STRICT" not in cmd.env_delta
    # every element is explained, with a source
    assert tuple(a for f in (*cmd.prefix, *cmd.flags) for a in f.args) == cmd.argv
    assert all(f.source and f.why for f in (*cmd.prefix, *cmd.flags))
    # the built command reads back through vLLM's own option table (no unknown option, no stray word)
    assert resolve(argv[3:]) == argv[3:]


def test_the_dp2_profile_builds_two_replicas_with_expert_parallel():
    argv = list(_cmd(DP2).argv)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"
    assert argv[argv.index("--data-parallel-size") + 1] == "2" and "--enable-expert-parallel" in argv
    assert load_profile(DP2).world_size == 2          # one pool per DP replica


def test_extras_are_passed_as_vllm_reads_them_and_attention_keys_merge():
    cmd = _cmd(TP8, ["--port", "8001", "--attention-config.backend", "FLASHMLA_SPARSE", "--max_num_batched_tokens",
                     "8192"])
    argv = list(cmd.argv)
    att = json.loads(argv[argv.index("--attention-config") + 1])
    assert att["backend"] == "FLASHMLA_SPARSE" and att["hisparse_config"]["device_buffer_size"] == 4096
    assert argv.count("--attention-config") == 1
    assert argv[-4:] == ["--port", "8001", "--max-num-batched-tokens", "8192"]


@pytest.mark.parametrize("extra, words", [
    (["-tp", "4"], "--tensor-parallel-size 4 contradicts the profile's vllm.tp_size (8)"),
    (["--tensor_parallel_size=4"], "contradicts the profile's vllm.tp_size"),
    (["--block-size", "16"], "vllm.block_size (64)"),
    (["--kv-transfer-config", "{}"], "set by the profile"),
    (["--attention-config.hisparse_config.device_buffer_size", "6144"], "hisparse_config is set by the profile"),
    (["-pp", "2"], "pipeline parallelism"),
    (["--no-scheduler-reserve-full-isl"], "requires --scheduler-reserve-full-isl"),
    (["--compilation-config", '{"cudagraph_mode": "FULL"}'], "cudagraph_mode FULL"),
    (["--kv-offloading-size", "10"], "beside HiSparse"),
    (["--enable-expert-parallel"], "vllm.enable_expert_parallel (False)"),
])
def test_conflicting_extras_are_refused(extra, words):
    with pytest.raises(ConflictError) as e:
        _cmd(TP8, extra)
    assert words in e.value.message


def test_same_values_as_the_profile_pass():
    argv = list(_cmd(TP8, ["-tp", "8", "--max-model-len", "32768"]).argv)
    assert argv[-4:] == ["-tp", "8", "--max-model-len", "32768"]


def test_engine_option_must_be_the_profiles(capsys):
    assert main(["serve", "--profile", str(TP8), "--engine", "sglang", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "is a profile for vllm" in err and "tune --engine sglang" in err


def _node0_profile(tmp_path, name="v", **kw) -> Path:
    p = load_profile(TP8)
    v = dataclasses.replace(p.vllm, **{k: kw.pop(k) for k in list(kw) if hasattr(p.vllm, k)})
    q = dataclasses.replace(p.pool, nodes=(0,), rank_targets=("node0",) * v.pool_owners, stand_in=True, **kw)
    return save_profile(dataclasses.replace(p, pool=q, vllm=v), tmp_path / f"{name}.yaml")


def test_capacity_counts_one_shared_pool_and_names_vllms_false_refusals(tmp_path, machine):
    from sactool.serve.vllm_capacity import check_pool

    tree = machine("this-machine")
    # 2 GiB shared by 8 TP ranks: one pool on node0, not eight
    p = load_profile(_node0_profile(tmp_path, host_pool_gib=2.0, max_num_seqs=1, max_model_len=16384))
    cap = check_pool(p, SysfsReader(tree), live_shm=False)
    assert [o.ranks for o in cap.owners] == [tuple(range(8))] and cap.pool_bytes == p.vllm.host_pool(p.model).allocated_bytes
    assert any("node0: DP replica(s) 0 (GPU ranks 0,1,2,3,4,5,6,7) need" in line for line in cap.lines)
    # private pools of 8 ranks: vLLM's own preflight, each rank after the others, runs short
    meminfo = SysfsReader(tree).kv("proc/meminfo") or {}
    avail = meminfo["MemAvailable"]
    gib = round(avail / 3 / 2 ** 30, 3)
    q = load_profile(_node0_profile(tmp_path, "q", host_pool_gib=gib, tp_size=1, dp_size=8, shared_host_pool=False,
                                    distributed_executor_backend=None, max_num_seqs=1, max_model_len=4096))
    with pytest.raises(CapacityError):        # 8 pools of a third of the memory do not fit the node
        check_pool(q, SysfsReader(tree), live_shm=False)
    # 4 private pools of a quarter of MemAvailable on a target that holds all four (pinned: a CXL node
    # MemAvailable counts): the 4th rank's check sees a quarter left and vLLM would refuse it
    s = round(avail * 0.25 / 2 ** 30, 3)
    r = load_profile(_node0_profile(tmp_path, "r", host_pool_gib=s, tp_size=1, dp_size=4, shared_host_pool=False,
                                    distributed_executor_backend=None, max_num_seqs=1, max_model_len=4096,
                                    capacity_bytes=int(avail * 1.1)))
    cap = check_pool(r, SysfsReader(tree), live_shm=False)
    assert any("TP race" in line for line in cap.preflight), cap.preflight


def test_hugepage_pools_are_checked_against_free_huge_pages(tmp_path, machine):
    from sactool.serve.vllm_capacity import check_pool

    p = load_profile(_node0_profile(tmp_path, host_pool_gib=1.0, max_num_seqs=1, max_model_len=16384, hugepages="2MB"))
    with pytest.raises(CapacityError) as e:   # the recording reserves no 2 MiB pages on node0
        check_pool(p, SysfsReader(machine("this-machine")), live_shm=False)
    assert "free 2MB huge pages" in e.value.message


def test_dry_run_json_names_the_engine_and_one_plan_row_per_pool(tmp_path, gpu_root, monkeypatch, capsys):
    path = _node0_profile(tmp_path, host_pool_gib=1.0, max_num_seqs=1, max_model_len=16384)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rc = main(["serve", "--profile", str(path), "--dry-run", "--format", "json", "--sysfs-root",
               str(gpu_root(8))])            # 8 GPUs for TP 8: past the GPU check
    assert rc == 8                            # vLLM is not installed in the interpreter running the tests
    out = json.loads(capsys.readouterr().out)
    assert out["engine"] == "vllm" and out["argv"][1] == "serve"
    assert len(out["plan"]) == 1 and out["plan"][0]["target"] == "node0"
    assert out["pool"]["shared"] is True and out["pool"]["pools"][0]["ranks"] == list(range(8))
    assert out["problems"][0]["message"].startswith("vLLM is not installed")


def test_a_config_file_after_dashes_is_refused():
    with pytest.raises(UsageError, match="config file"):
        _cmd(TP8, ["--config", "x.yaml"])


def test_the_hook_check_runs_in_the_target_python_before_the_launch():
    """serve asks the target Python's plug-in to check vLLM's hook table (the probe SGLang's check
    uses, sactool/serve/checks.py) against that vLLM; here no vLLM is installed, so every symbol is
    missing and the launch is refused (exit 9) before it starts, naming the symbol and the version."""
    import sys

    from sactool.serve import checks
    from sactool.serve.errors import EngineVersionError

    found = checks.probe_hooks(sys.executable, engine="vllm")
    assert found["engine"] == "vLLM" and found["version"] is None and "error" not in found
    found = {**found, "version": "0.35.0", "problems": [
        {"role": "kv_caches", "target": "vllm.v1.hisparse.binding.allocate_hisparse_kv_caches",
         "why": "is missing: vllm.v1.hisparse.binding: no module vllm"}], "table": ">=0.34.0,<0.35"}
    p = load_profile(TP8)
    with pytest.raises(EngineVersionError) as e:
        checks.check_hooks(p, found, python=sys.executable)
    assert e.value.message.startswith("hook target vllm.v1.hisparse.binding.allocate_hisparse_kv_caches is missing")
    assert "in vLLM 0.35.0" in e.value.message and int(e.value.exit_code) == 9
    assert "--allow-untested-engine" in e.value.hint and "vllm>=0.34.0,<0.35" in e.value.hint
    lines = checks.check_hooks(p, found, python=sys.executable, allow_untested=True)
    assert lines[-1].startswith("warning: hook target vllm.v1.hisparse.binding.allocate_hisparse_kv_caches")


def test_a_vllm_launch_leaves_the_run_file_watch_finds_it_by(tmp_path, machine, monkeypatch):
    """serve records a vLLM launch for sactool watch (sactool/runfile.py) with engine "vllm" and vLLM's
    metrics endpoint (its HTTP port, 8000 unless --port; vLLM always serves /metrics), and watch reads
    the engine, the profile and the endpoint back from it (issue 31)."""
    from sactool import runfile
    from sactool.cli.serve import _run_file
    from sactool.serve.launch import build_launch
    from sactool.watch.api import WatchOptions, Watcher

    monkeypatch.setenv("SACTOOL_RUN_DIR", str(tmp_path / "run"))
    path = _node0_profile(tmp_path, host_pool_gib=1.0, max_num_seqs=1, max_model_len=16384)
    for extra, port in (([], "8000"), (["--port", "8123"], "8123")):
        launch = build_launch(str(path), extra, python="/opt/vllm/bin/python", dry_run=True,
                              sysfs_root=str(machine("this-machine")))
        _run_file(launch)
        run = runfile.read(runfile.latest())
        assert (run["engine"], run["profile"]) == ("vllm", str(path))
        assert run["argv"][1] == "serve" and run["metrics_url"] == f"http://127.0.0.1:{port}/metrics"
    w = Watcher(WatchOptions(interval_s=0.1))   # nothing named: the newest run file of a live process
    try:
        assert w.url == "http://127.0.0.1:8123/metrics" and w.profile_path == str(path)
        assert any(n.endswith("(vllm)") for n in w.notes)
    finally:
        w.close()


def test_profile_show_lists_vllms_settings_not_sglangs(capsys):
    assert main(["profile", "show", str(TP8)]) == 0
    out = capsys.readouterr().out
    assert "vllm.host_pool_gib" in out and "vllm.shared_host_pool" in out and "hisparse.device_buffer_size" in out
    assert "sglang.tp_size" not in out and "hisparse.host_to_device_ratio" not in out


def test_simulate_refuses_a_vllm_profile(tmp_path, capsys):
    """simulate models SGLang's HiSparse: a vLLM profile is refused, not run with SGLang's defaults."""
    p = load_profile(TP8)
    path = save_profile(dataclasses.replace(p, bench={"source": "test"}), tmp_path / "v.yaml")
    assert main(["simulate", "--profile", str(path), "--context", "16k", "--concurrency", "8"]) == 4
    assert "is for vllm: simulate models SGLang 0.5.23's HiSparse" in capsys.readouterr().err
