"""``sactool serve`` command building: argv/env goldens for the example profiles, where each flag
came from, conflicting extras, model checks, the SGLang version range and the engine checks."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from sactool.errors import ExitCode, RecordError
from sactool.profile import load_profile
from sactool.serve.argv import build_command
from sactool.serve.checks import EngineInfo, check_conflicts, check_engine, check_model, version_in
from sactool.pool.plan import PoolSpec, rank_target
from sactool.profile.sizing import host_sizing, row_bytes

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = [p for p in sorted((REPO / "profiles" / "examples").glob("*.yaml"))
            if "\nengine: vllm\n" not in p.read_text()]      # SGLang's (vLLM's: tests/test_vllm_serve.py)
GOLDEN = Path(__file__).parent / "golden" / "serve"
UPDATE = os.environ.get("SACTOOL_UPDATE_GOLDEN") == "1"


def _cmd(path: Path, extra=(), environ=None, **kw):
    return build_command(load_profile(path), profile_path=str(path), extra_args=list(extra), python="python3",
                         environ=environ or {}, **kw)


def _record(cmd) -> dict:
    repo = str(REPO)
    return {
        "argv": list(cmd.argv),
        "env_delta": {k: v.replace(repo, "<repo>") for k, v in cmd.env_delta.items()},
        "sources": [[" ".join(f.args), f.source] for f in (*cmd.prefix, *cmd.flags)]
                   + [[e.name, e.source] for e in cmd.env],
        "notes": list(cmd.notes),
    }


def test_examples_cover_the_required_cases():
    profs = {p.stem: load_profile(p) for p in EXAMPLES}
    assert any(len(p.pool.nodes) == 1 and p.pool.placement == "plugin" for p in profs.values())
    assert any(len(set(rank_target(PoolSpec.of(p), r) for r in range(p.world_size))) == 2 and p.pool.mode == "numa"
               for p in profs.values())
    assert any(p.pool.mode == "devdax" for p in profs.values())
    assert {p.pool.placement for p in profs.values()} == {"plugin", "numactl", "none"}
    assert any(p.sglang.role == "prefill" for p in profs.values())


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_golden(path):
    data = _record(_cmd(path, ["--model-path", "deepseek-ai/DeepSeek-V3.2"]))
    g = GOLDEN / f"{path.stem}.json"
    if UPDATE:
        g.parent.mkdir(parents=True, exist_ok=True)
        g.write_text(json.dumps(data, indent=2) + "\n")
    assert data == json.loads(g.read_text()), f"argv/env for {path.name} changed; SACTOOL_UPDATE_GOLDEN=1 if intended"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_argv_element_is_explained(path):
    cmd = _cmd(path)
    explained = [a for f in (*cmd.prefix, *cmd.flags) for a in f.args]
    assert tuple(explained) == cmd.argv
    for f in (*cmd.prefix, *cmd.flags):
        assert f.source and f.why
    assert all(isinstance(a, str) for a in cmd.argv)          # an argv list, never a shell string


def test_user_extras_come_last_and_model_path_is_not_doubled():
    path = REPO / "profiles/examples/cxl-one-node.yaml"
    cmd = _cmd(path, ["--model-path", "deepseek-ai/DeepSeek-V3.2", "--port", "30001"])
    assert cmd.argv[-4:] == ("--model-path", "deepseek-ai/DeepSeek-V3.2", "--port", "30001")
    assert cmd.argv.count("--model-path") == 1
    assert _cmd(path).argv[3:5] == ("--model-path", "deepseek-ai/DeepSeek-V3.2")


def test_plugins_env_is_appended_and_profile_path_absolute(tmp_path):
    path = REPO / "profiles/examples/cxl-one-node.yaml"
    cmd = _cmd(path, environ={"SGLANG_PLUGINS": "other_plugin"})
    assert cmd.env_delta["SGLANG_PLUGINS"] == "other_plugin,sactool_cxl"
    # unset stays unset: SGLang then loads every installed plug-in (ours and smg-grpc-servicer's)
    for unset in ({}, {"SGLANG_PLUGINS": ""}, {"SGLANG_PLUGINS": " , "}):
        cmd = _cmd(path, environ=unset)
        assert "SGLANG_PLUGINS" not in cmd.env_delta and any("stays so" in n for n in cmd.notes), unset
    assert "SGLANG_PLUGINS" not in _cmd(path, environ={"SGLANG_PLUGINS": "a,sactool_cxl"}).env_delta
    rel = os.path.relpath(path)
    cmd = build_command(load_profile(path), profile_path=rel, python="python3", environ={})
    assert os.path.isabs(cmd.env_delta["SACTOOL_PROFILE"]) and cmd.env_delta["SACTOOL_PROFILE"] == str(path)


def test_modes():
    numactl = _cmd(REPO / "profiles/examples/cxl-numactl.yaml")
    assert numactl.argv[:3] == ("numactl", "--cpunodebind=0,1", "--preferred=2")
    assert numactl.env_delta["SGLANG_AUTO_NUMA_BIND"] == "0" and "--numa-node" not in numactl.argv
    assert "SGLANG_PLUGINS" not in numactl.env_delta
    none = _cmd(REPO / "profiles/examples/dram-baseline.yaml")
    one = _cmd(REPO / "profiles/examples/cxl-one-node.yaml")
    hs = lambda c: c.argv[c.argv.index("--hisparse-config") + 1]  # noqa: E731
    assert "SGLANG_PLUGINS" not in none.env_delta and "SGLANG_AUTO_NUMA_BIND" not in none.env_delta
    assert "--enable-hisparse" in none.argv and hs(none) == hs(one)      # same HiSparse settings for A/B
    pre = _cmd(REPO / "profiles/examples/prefill.yaml")
    assert "--enable-hisparse" not in pre.argv and "--disable-radix-cache" not in pre.argv
    assert pre.argv[pre.argv.index("--disaggregation-mode") + 1] == "prefill" and not pre.env_delta.get("SGLANG_PLUGINS")
    serve = _cmd(REPO / "profiles/examples/cxl-one-node.yaml", entrypoint="serve")
    assert serve.argv[:2] == ("sglang", "serve")


# ---- conflicts ---------------------------------------------------------------------------

ONE = REPO / "profiles/examples/cxl-one-node.yaml"


@pytest.mark.parametrize("extra, says", [
    (["--enable-hierarchical-cache"], "--enable-hierarchical-cache"),
    (["--enable-hicache"], "--enable-hierarchical-cache"),
    (["--hisparse-config", '{"top_k":2048}'], "hisparse.device_buffer_size"),
    (["--hierarchical-sparse-attention-extra-config={}"], "hisparse."),
    (["--enable-mixed-chunk"], "mixed-chunk"),
    (["--dcp-size", "2"], "--dcp-size"),
    (["--speculative-eagle-topk", "4"], "topk 1"),
    (["--speculative-adaptive"], "speculative-adaptive"),
    (["--tp-size", "4"], "sglang.tp_size"),
    (["--tensor-parallel-size=4"], "sglang.tp_size"),
    (["--kv-cache-dtype", "bfloat16"], "sglang.kv_cache_dtype"),
    (["--numa-node", "0"], "pool.gpu_local_nodes"),
    (["--enable-dp-attention"], "sglang.attn_dp_size"),
    (["--attention-backend", "fa3"], "dsa"),
    (["--max-running-requests", "64"], "sglang.max_running_requests"),
])
def test_conflicting_extras_are_refused(extra, says):
    with pytest.raises(Exception) as ei:
        check_conflicts(load_profile(ONE), extra)
    e = ei.value
    assert e.exit_code == ExitCode.CONFLICT
    assert says in e.message + " " + (e.hint or "")


def test_compatible_extras_pass():
    prof = load_profile(ONE)
    ok = ["--port", "30001", "--tp-size", "8", "--speculative-eagle-topk", "1", "--dcp-size", "1",
          "--attention-backend", "dsa", "--context-length", "65536"]
    assert check_conflicts(prof, ok) == ok
    pre = load_profile(REPO / "profiles/examples/prefill.yaml")
    assert check_conflicts(pre, ["--enable-hierarchical-cache"])        # prefill side has no HiSparse


# SGLang's parser takes unique prefixes (argparse, allow_abbrev): each of these passed as exit 0
@pytest.mark.parametrize("extra,full", [
    (["--tp", "4"], "--tp-size 4"),
    (["--context-len", "200000"], "--context-length 200000"),
    (["--max-running", "100"], "--max-running-requests 100"),
    (["--kv-cache-dt", "bf16"], "--kv-cache-dtype bf16"),
    (["--enable-hierarchical"], "--enable-hierarchical-cache"),
    (["--hisparse={}"], "--hisparse-config"),
    (["--numa", "0"], "--numa-node"),
])
def test_abbreviated_extras_are_checked_as_the_option_sglang_reads(extra, full):
    with pytest.raises(Exception) as ei:
        check_conflicts(load_profile(REPO / "profiles/examples/cxl-two-nodes.yaml"), extra)
    assert ei.value.exit_code == ExitCode.CONFLICT and full.split()[0] in ei.value.message


@pytest.mark.parametrize("extra,says,hint", [
    (["--tp-sizee", "4"], "has no option --tp-sizee", "did you mean --tp-size?"),
    (["--model-path"], "--model-path expects a value", "--model-path VALUE"),
    (["--model-path", "--port", "3"], "--model-path expects a value", "--model-path VALUE"),
    (["--page", "64"], "could be --page-size, --paged-experts-num-resident", "--page-size"),
    (["--disable-radix-cache=yes"], "--disable-radix-cache takes no value", "alone"),
    (["--port", "3", "stray"], "'stray' after -- is not an option of SGLang", "options only"),
])
def test_what_sglangs_parser_refuses_is_refused_with_the_full_name(extra, says, hint):
    with pytest.raises(Exception) as ei:
        check_conflicts(load_profile(ONE), extra)
    e = ei.value
    assert e.exit_code == ExitCode.USAGE and says in e.message and hint in e.hint


def test_abbreviations_are_passed_to_sglang_in_full(capsys):
    from sactool.cli import main

    rc = main(["serve", "--profile", str(ONE), "--dry-run", "--format", "json", "--",
               "--model-p", "deepseek-ai/DeepSeek-V3.2", "--por=30001", "--log-level", "debug"])
    out = json.loads(capsys.readouterr().out)
    assert rc in (0, 3, 8) and out["argv"][-5:] == ["--model-path", "deepseek-ai/DeepSeek-V3.2", "--port=30001",
                                                 "--log-level", "debug"]
    assert out["argv"].count("--model-path") == 1        # the profile's is not added beside the user's


# ---- model -------------------------------------------------------------------------------

def _config(tmp_path, **over):
    cfg = {"architectures": ["DeepseekV32ForCausalLM"], "num_hidden_layers": 61, "kv_lora_rank": 512,
           "qk_rope_head_dim": 64, "index_topk": 2048, "max_position_embeddings": 163840}
    cfg.update(over)
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def test_model_checks(tmp_path):
    prof = load_profile(ONE)
    assert "from the profile" in check_model(prof, [])
    assert "matches" in check_model(prof, ["--model-path", "deepseek-ai/DeepSeek-V3.2"])
    with pytest.raises(Exception) as ei:
        check_model(prof, ["--model-path", "zai-org/GLM-5"])
    assert ei.value.exit_code == ExitCode.MODEL_MISMATCH and "DeepSeek-V3.2" in ei.value.message
    assert "config.json matches" in check_model(prof, ["--model-path", _config(tmp_path)])
    with pytest.raises(Exception) as ei:
        check_model(prof, [f"--model-path={_config(tmp_path, num_hidden_layers=78)}"])
    assert ei.value.exit_code == ExitCode.MODEL_MISMATCH and "num_hidden_layers 78 != 61" in ei.value.message
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(Exception) as ei:
        check_model(prof, ["--model-path", str(empty)])
    assert ei.value.exit_code == ExitCode.MODEL_MISMATCH and "config.json" in ei.value.message


@pytest.mark.parametrize("archs", [7, "DeepseekV32ForCausalLM", [1, 2], {"a": 1}])
def test_a_config_whose_architectures_is_not_a_list_of_names_is_a_record_error(tmp_path, archs):
    # a number was a TypeError traceback; a string compared only its first character ("D")
    with pytest.raises(Exception) as ei:
        check_model(load_profile(ONE), ["--model-path", _config(tmp_path, architectures=archs)])
    assert ei.value.exit_code == ExitCode.RECORD and "not a list of class names" in ei.value.message


# ---- SGLang version and entry points ------------------------------------------------------

@pytest.mark.parametrize("v, spec, ok", [
    ("0.5.23", ">=0.5.23,<0.6", True), ("0.5.22", ">=0.5.23,<0.6", False), ("0.6.0", ">=0.5.23,<0.6", False),
    ("0.5.23.post1", ">=0.5.23,<0.6", True), ("0.5.30", ">=0.5.23, <0.6", True), ("0.5.23", "==0.5.23", True),
    ("0.5.24", "!=0.5.24", False), ("1.0", ">0.5", True),
])
def test_version_in(v, spec, ok):
    assert version_in(v, spec) is ok


def test_bad_version_spec_is_a_profile_error():
    with pytest.raises(RecordError):
        version_in("0.5.23", "~0.5")


def _info(**kw):
    base = dict(python="/env/bin/python", python_version="3.11.7", sglang="0.5.23", launch_server=True,
                console_script="/env/bin/sglang", plugins=("sactool_cxl=sactool.sglang_plugin:register",))
    base.update(kw)
    return EngineInfo(**base)


def test_engine_checks():
    prof = load_profile(ONE)
    assert check_engine(prof, _info(), entrypoint="launch_server", plugin=True)
    cases = [(_info(sglang=None), "launch_server", ExitCode.ENGINE_MISSING, "not installed"),
             (_info(sglang="0.5.22"), "launch_server", ExitCode.ENGINE_VERSION, ">=0.5.23,<0.6"),
             (_info(launch_server=False), "launch_server", ExitCode.ENGINE_MISSING, "launch_server"),
             (_info(console_script=None), "serve", ExitCode.ENGINE_MISSING, "console script"),
             (_info(plugins=()), "launch_server", ExitCode.ENGINE_MISSING, "sactool_cxl")]
    for info, ep, code, says in cases:
        with pytest.raises(Exception) as ei:
            check_engine(prof, info, entrypoint=ep, plugin=True)
        assert ei.value.exit_code == code and says in ei.value.message + (ei.value.hint or ""), info
    lines = check_engine(prof, _info(sglang="0.6.1"), entrypoint="launch_server", plugin=True, allow_untested=True)
    assert any(line.startswith("warning:") for line in lines)
    assert check_engine(prof, _info(plugins=()), entrypoint="launch_server", plugin=False)


def test_exit_codes_are_distinct():
    # an IntEnum member with a value already used becomes an alias, not a member: none may exist
    assert len(ExitCode.__members__) == len(list(ExitCode))
    assert {ExitCode.MODEL_MISMATCH, ExitCode.ENGINE_MISSING, ExitCode.ENGINE_VERSION, ExitCode.CONFLICT} == {7, 8, 9, 10}


# ---- sizing (§2.5) ------------------------------------------------------------------------

def test_host_sizing_formula():
    prof = load_profile(ONE)
    assert row_bytes(prof) == 656                                          # 512 + 16 + 128
    assert row_bytes(replace(prof, sglang=replace(prof.sglang, kv_cache_dtype="bfloat16"))) == 1152
    s = host_sizing(prof)
    assert s.device_token_slots == 32 * 4096 and "max_running_requests" in s.source
    assert s.bytes_per_rank == (32 * 4096 * 8 + 64) * 61 * 656
    tuned = replace(prof, predictions={"device_token_slots": 100_000})
    assert host_sizing(tuned).bytes_per_rank == (100_000 * 8 + 64) * 61 * 656
    unknown = replace(prof, sglang=replace(prof.sglang, max_running_requests=None), request={})
    assert host_sizing(unknown).bytes_per_rank is None and "unknown" in host_sizing(unknown).source


@pytest.mark.parametrize("flag", ["--dsa-decode-backend", "--dsa-prefill-backend"])
def test_dsa_backends_sglangs_validator_refuses_are_refused_with_its_reason(flag, capsys, tmp_path):
    """SGLang 0.5.23's hisparse_hook.py (HISPARSE_CUDA_DSA_BACKENDS_BY_DTYPE): fp8_e4m3 takes flashmla_kv or
    flashinfer_sparse_mla, bfloat16 flashmla_sparse only; anything else is a ValueError at its start-up."""
    from sactool.cli import main

    fp8 = load_profile(ONE)
    assert fp8.sglang.kv_cache_dtype == "fp8_e4m3"
    with pytest.raises(Exception) as ei:
        check_conflicts(fp8, [flag, "flashmla_sparse"])
    e = ei.value
    label = flag.split("-")[3]
    assert e.exit_code == ExitCode.CONFLICT and "SGLang would refuse" in e.message
    assert (f"HiSparse supports DSA {label} backend(s) ['flashinfer_sparse_mla', 'flashmla_kv'] on this platform "
            f"with --kv-cache-dtype=fp8_e4m3, but got {flag}=flashmla_sparse") in e.message
    assert f"use {flag} flashinfer_sparse_mla or flashmla_kv with fp8_e4m3" in e.hint
    assert check_conflicts(fp8, [flag, "flashmla_kv"]) == [flag, "flashmla_kv"]
    bf16 = replace(fp8, sglang=replace(fp8.sglang, kv_cache_dtype="bfloat16"))
    assert check_conflicts(bf16, [flag, "flashmla_sparse"])
    with pytest.raises(Exception, match="flashmla_sparse"):
        check_conflicts(bf16, [f"{flag}=flashmla_kv"])
    # the dry-run says so and exits with the code the launch would give
    assert main(["serve", "--dry-run", "--profile", str(ONE), "--", flag, "flashmla_sparse"]) == 10
    assert "SGLang would refuse" in capsys.readouterr().err


def test_a_profile_whose_own_decode_backend_sglang_refuses_is_refused():
    fp8 = load_profile(ONE)
    bad = replace(fp8, sglang=replace(fp8.sglang, dsa_decode_backend="flashmla_sparse"))
    with pytest.raises(Exception, match="the profile's sglang.dsa_decode_backend"):
        check_conflicts(bad, [])


def test_engine_probe_leaves_nothing_of_the_target_interpreter_running(tmp_path):
    # a --python that leaves a child behind (a wrapper starting a helper): serve waited on the pipe the
    # child held until it ended (here 120 s), and a child that never ends kept serve forever
    import sys
    import time

    from sactool.serve.checks import probe_engine

    pidfile = tmp_path / "child.pid"
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\nsleep 120 &\necho $! > {pidfile}\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    t0 = time.monotonic()
    info = probe_engine(str(wrapper), timeout_s=60)
    took = time.monotonic() - t0
    assert info.python_version and took < 60
    child = int(pidfile.read_text())
    for _ in range(100):   # killed with the probe's process group (a zombie until init reaps it)
        try:
            state = Path(f"/proc/{child}/stat").read_text().split(")")[-1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the interpreter's child {child} is still running")


def _standin_sglang(tmp_path, version: str, options: str) -> Path:
    """A stand-in SGLang ``version`` (tests/standins/site, not SGLang) whose server_args defines ``options``."""
    import shutil

    site = tmp_path / "site"
    shutil.copytree(Path(__file__).parent / "standins" / "site", site)
    info = site / f"sglang-{version}.dist-info"
    (site / "sglang-0.5.23.dist-info").rename(info)
    for name in ("METADATA", "RECORD"):
        (info / name).write_text((info / name).read_text().replace("0.5.23", version))
    (site / "sglang" / "srt" / "server_args.py").write_text(
        "class ServerArgs:\n    @staticmethod\n    def add_cli_args(p):\n" + options)
    return site


def test_a_target_sglang_of_another_version_is_read_with_its_own_parser(tmp_path, monkeypatch, capsys):
    import sys

    from sactool.cli import main

    site = _standin_sglang(tmp_path, "0.5.24", "".join(
        f"        p.add_argument({a})\n" for a in ('"--tp-size", type=int', '"--tp-rank", type=int',
                                                   '"--model-path", "--model"', '"--port", type=int',
                                                   '"--new-knob", type=int')))
    monkeypatch.setenv("PYTHONPATH", str(site))
    args = ["serve", "--profile", str(ONE), "--python", sys.executable, "--dry-run", "--format", "json", "--"]
    rc = main([*args, "--new-knob", "3", "--por", "30001"])      # 0.5.23 has no --new-knob
    out = json.loads(capsys.readouterr().out)
    assert rc in (0, 3) and out["argv"][-4:] == ["--new-knob", "3", "--port", "30001"]
    assert any("read with SGLang 0.5.24's own parser (6 options)" in c for c in out["checks"])
    assert main([*args, "--tp", "8"]) == 2                         # --tp-size and --tp-rank: ambiguous there
    assert "could be --tp-rank, --tp-size" in capsys.readouterr().err
    assert main([*args, "--new-knob", "three"]) == 2               # its parser's type, read there
    assert "--new-knob 'three': SGLang 0.5.24 wants an integer" in capsys.readouterr().err


# ---- option values: as SGLang's parser converts and checks them ------------------------------

@pytest.mark.parametrize("extra,says,hint", [
    (["--tp-size", "four"], "--tp-size 'four': SGLang 0.5.23 wants an integer", "an integer"),
    (["--tp=4.5"], "--tp-size '4.5': SGLang 0.5.23 wants an integer", "an integer"),
    (["--kv-cache-dtype", "fp8_e4m4"], "--kv-cache-dtype 'fp8_e4m4' is not one of SGLang 0.5.23's choices",
     "did you mean --kv-cache-dtype fp8_e4m3?"),
    (["--log-level-http=loud"], "", ""),                          # str without choices: any value
    (["--mem-fraction-static", "most"], "wants a number", "a number"),
    (["--preferred-sampling-params", "{not json"], "wants JSON", "JSON"),
])
def test_values_sglangs_parser_refuses_are_refused(extra, says, hint):
    if not says:
        assert check_conflicts(load_profile(ONE), extra)
        return
    with pytest.raises(Exception) as ei:
        check_conflicts(load_profile(ONE), extra)
    e = ei.value
    assert e.exit_code == ExitCode.USAGE and says in e.message and hint in e.hint, (e.message, e.hint)


def test_value_checks_agree_with_argparse_itself():
    """The oracle is argparse: a parser with the kinds of options SGLang defines (int, float, str
    with choices, json.loads, a list of ints, int choices, a type sactool does not apply), read
    through option_entries as the shipped table is, accepts exactly the extras resolve accepts."""
    import argparse
    import contextlib
    import io

    from sactool.errors import UsageError
    from sactool.serve.sglang_options import _table, option_entries, resolve

    def knob(v):        # a type callable of the engine's own (as human_readable_int): not applied
        return int(v.rstrip("K")) * 1000

    p = argparse.ArgumentParser(prog="sglang serve")
    p.add_argument("--tp-size", type=int)
    p.add_argument("--frac", type=float)
    p.add_argument("--dtype", type=str, choices=["auto", "bf16", "fp8_e4m3"])
    p.add_argument("--mode", choices=["a", "b"])
    p.add_argument("--cfg", type=json.loads)
    p.add_argument("--ids", type=int, nargs="+")
    p.add_argument("--level", type=int, choices=[1, 2, 4])
    p.add_argument("--budget", type=knob)
    t = _table("9.9", json.loads(json.dumps(option_entries(p))), "a test parser")
    cases = {"--tp-size": ["4", "four", "4.0", "-2"], "--frac": ["0.8", "1e-3", "most", "nan"],
             "--dtype": ["bf16", "fp8", "BF16"], "--mode": ["a", "c"], "--cfg": ['{"a": 1}', "{a}", "3"],
             "--ids": ["1", "x"], "--level": ["2", "3", "two"], "--budget": ["4K"]}
    checked = 0
    for opt, values in cases.items():
        for v in values:
            for argv in ([opt, v], [f"{opt}={v}"]):
                with contextlib.redirect_stderr(io.StringIO()):
                    try:
                        p.parse_args(argv)
                        ok = True
                    except SystemExit:
                        ok = False
                try:
                    resolve(argv, t)
                    mine = True
                except UsageError:
                    mine = False
                assert mine == ok, (argv, ok)
                checked += 1
    assert checked == 2 * sum(map(len, cases.values()))
    # a list option: each value converted, as argparse does
    assert resolve(["--ids", "1", "2"], t) == ["--ids", "1", "2"] and p.parse_args(["--ids", "1", "2"]).ids == [1, 2]
    with pytest.raises(UsageError, match="--ids 'x'"):
        resolve(["--ids", "1", "x"], t)
    # a value with spaces after '=' is still the option's (argparse reads the option before the space)
    assert resolve(['--cfg={"a": 1}'], t) == ['--cfg={"a": 1}'] and p.parse_args(['--cfg={"a": 1}']).cfg == {"a": 1}


def test_a_table_without_value_kinds_still_resolves():
    """A table written before values were recorded ([dest, nargs] only) resolves names as before
    and checks no value."""
    from sactool.serve.sglang_options import resolve, table_of

    t = table_of('{"--tp-size": ["tp_size", null], "--port": ["port", null]}', "0.5.22", "old")
    assert t is not None and t.kinds == {}
    assert resolve(["--tp", "four"], t) == ["--tp-size", "four"]
