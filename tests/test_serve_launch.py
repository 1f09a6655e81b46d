"""``sactool serve`` end to end with a stand-in SGLang (tests/standins/site: a distribution named
sglang 0.5.23 whose ``sglang.launch_server`` records its argv/env and waits for a signal):
exec (same pid), signal delivery, exit-code propagation, dry-run output, and one exit code per
kind of bad input with nothing launched.

The pool these tests launch with is pinned (``pool.capacity_bytes``) to exactly the bytes one rank
needs, computed from the profile: the stand-in allocates nothing, and the launch must not hinge on
node 0's momentary free memory (the live free-memory rule is tested on recorded trees in
test_serve_capacity; the ``huge`` case below still meets it on this machine, with a pool larger than
any node holds)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sactool.cli import main
from sactool.errors import ExitCode

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SITE = HERE / "standins" / "site"


@pytest.fixture
def standin_env(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(SITE))
    rec = tmp_path / "record.json"
    monkeypatch.setenv("STANDIN_RECORD", str(rec))
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.setenv("SACTOOL_RUN_DIR", str(tmp_path / "run"))   # serve's run file for sactool watch
    return rec


def _serve(args, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.Popen([sys.executable, "-m", "sactool.cli", "serve", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc, timeout=300.0):
    t0 = time.monotonic()
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"serve exited {proc.returncode} before the stand-in started:\n{err}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            pytest.fail("stand-in server did not start")
        time.sleep(0.05)
    return json.loads(path.read_text())


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 17)])
def test_exec_signal_and_exit_code(node0_pinned, tmp_path, standin_env, gpu_root, sig, code):
    prof = node0_pinned()
    proc = _serve(["--profile", str(prof), "--python", sys.executable, "--sysfs-root", str(gpu_root(1)), "--",
                   "--model-path", "deepseek-ai/DeepSeek-V3.2", "--port", "30123"],
                  {"STANDIN_SIGNAL_EXIT": str(code)})
    rec = _wait_for(standin_env, proc)
    assert rec["pid"] == proc.pid                       # execvpe: SGLang *is* the serve process
    assert rec["argv"][-4:] == ["--model-path", "deepseek-ai/DeepSeek-V3.2", "--port", "30123"]
    assert "--enable-hisparse" in rec["argv"]
    assert "SGLANG_PLUGINS" not in rec["env"] and rec["env"]["SACTOOL_PROFILE"] == str(prof)  # unset stays unset
    run = json.loads((tmp_path / "run" / f"serve-{proc.pid}.json").read_text())   # for sactool watch
    assert (run["kind"], run["pid"], run["profile"], run["engine"]) == ("serve_run", proc.pid, str(prof), "sglang")
    assert run["metrics_url"] is None                  # SGLang serves /metrics only with --enable-metrics
    if sig == signal.SIGTERM:                           # watch finds the engine through it, with no argument
        w = subprocess.run([sys.executable, "-m", "sactool.cli", "watch", "--once", "--format", "json"],
                           capture_output=True, text=True, timeout=300)
        data = json.loads(w.stdout)
        assert w.returncode == 0 and data["profile"] == str(prof), w.stderr
        assert data["ranks"][0]["pid"] == proc.pid and f"serve-{proc.pid}.json" in data["notes"][0]
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == code, err
    assert f"got signal {int(sig)}" in err
    assert "sactool serve: exec" in err and out == ""


def test_immediate_exit_code_propagates(node0_pinned, tmp_path, standin_env, gpu_root):
    proc = _serve(["--profile", str(node0_pinned()), "--python", sys.executable, "--sysfs-root", str(gpu_root(1))],
                  {"STANDIN_EXIT": "3"})
    proc.communicate(timeout=300)
    assert proc.returncode == 3 and standin_env.exists()


def test_dry_run_json(node0_pinned, tmp_path, standin_env, gpu_root, capsys):
    prof = node0_pinned()
    rc = main(["serve", "--profile", str(prof), "--dry-run", "--python", sys.executable, "--format", "json",
               "--sysfs-root", str(gpu_root(1)),
               "--", "--model-path", "deepseek-ai/DeepSeek-V3.2"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["problems"] == [] and not standin_env.exists()
    assert out["argv"][:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert out["env_delta"]["SACTOOL_PROFILE"] == str(prof)
    assert {f["source"] for f in out["flags"]} >= {"sglang.tp_size", "hisparse.top_k, hisparse.device_buffer_size, "
                                                   "hisparse.host_to_device_ratio, hisparse.swap_in_block_size"}
    assert out["pool"]["bytes_per_rank"] == (2048 + 64) * 61 * 656
    t = out["pool"]["targets"][0]
    assert t["target"] == "node0" and t["ok"] and t["need_bytes"] == out["pool"]["bytes_per_rank"]
    assert (t["available_bytes"], t["available_source"]) == (t["need_bytes"], "pool.capacity_bytes")
    assert any("SGLang 0.5.23" in c for c in out["checks"])


def test_dry_run_reports_host_problems_with_the_launch_exit_code(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("PYTHONPATH", raising=False)       # no SGLang in this Python
    rc = main(["serve", "--profile", str(REPO / "profiles/examples/cxl-one-node.yaml"), "--dry-run",
               "--python", sys.executable, "-f", "json"])
    out = json.loads(capsys.readouterr().out)
    # every problem is reported, and the exit code is the one the real launch would give
    assert ExitCode.ENGINE_MISSING in [p["exit_code"] for p in out["problems"]]
    assert rc == out["problems"][0]["exit_code"]


def _site_with_version(tmp_path, version):
    site = tmp_path / "site"
    shutil.copytree(SITE, site)
    info = site / "sglang-0.5.23.dist-info"
    meta = info / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.5.23", f"Version: {version}"))
    info.rename(site / f"sglang-{version}.dist-info")
    return site


def test_bad_inputs_have_distinct_exit_codes_and_launch_nothing(node0_pinned, node0_profile_file, tmp_path, standin_env, monkeypatch,
                                                               gpu_root, capsys):
    good = node0_pinned()
    tree = ("--sysfs-root", str(gpu_root(1)))             # one GPU: past the GPU check (this VM has none)
    corrupt = tmp_path / "corrupt.yaml"
    corrupt.write_text("kind: profile\nschema_version: [\n")
    newer = tmp_path / "newer.yaml"
    newer.write_text(re.sub(r"(?m)^schema_version: \d+$", "schema_version: 99", good.read_text()))
    assert "schema_version: 99" in newer.read_text()      # a no-op rewrite would launch the stand-in
    absent = node0_pinned("absent.yaml")
    absent.write_text(absent.read_text().replace("nodes:\n  - 0", "nodes:\n  - 7"))
    huge = node0_profile_file("huge.yaml")                # unpinned: this machine's free-memory rule
    huge.write_text(huge.read_text().replace("host_to_device_ratio: 1", "host_to_device_ratio: 100000"))
    cases = [
        ([f"--profile={tmp_path / 'missing.yaml'}"], ExitCode.RECORD, "does not exist"),
        ([f"--profile={corrupt}"], ExitCode.RECORD, "corrupt"),
        ([f"--profile={newer}"], ExitCode.RECORD, "upgrade sactool"),
        ([f"--profile={good}", "--", "--model-path", "zai-org/GLM-5"], ExitCode.MODEL_MISMATCH, "GLM-5"),
        ([f"--profile={good}", "--", "--enable-mixed-chunk"], ExitCode.CONFLICT, "mixed-chunk"),
        ([f"--profile={absent}"], ExitCode.UNAVAILABLE, "7"),
        ([f"--profile={huge}"], ExitCode.CAPACITY, "short of memory"),
        ([f"--profile={good}", "--entrypoint", "nope"], ExitCode.USAGE, "entrypoint"),
    ]
    for args, code, says in cases:
        rc = main(["serve", *args[:1], "--python", sys.executable, *tree, *args[1:]])
        err = capsys.readouterr().err
        assert rc == code, (args, err)
        assert err.startswith("error:") and says in err and "Traceback" not in err, err
    monkeypatch.setenv("PYTHONPATH", str(_site_with_version(tmp_path, "0.5.22")))
    rc = main(["serve", f"--profile={good}", "--python", sys.executable, *tree])
    err = capsys.readouterr().err
    assert rc == ExitCode.ENGINE_VERSION and ">=0.5.23,<0.6" in err and "--allow-untested-sglang" in err
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "nowhere"))
    rc = main(["serve", f"--profile={good}", "--python", sys.executable, *tree])
    assert rc == ExitCode.ENGINE_MISSING and "not installed" in capsys.readouterr().err
    rc = main(["serve", f"--profile={good}", "--python", str(tmp_path / "no-python"), *tree])
    assert rc == ExitCode.ENGINE_MISSING
    assert not standin_env.exists()                       # nothing was launched


def test_placement_override_for_ab_runs(node0_pinned, tmp_path, standin_env, gpu_root, capsys):
    prof = node0_pinned()
    runs = {}
    for placement in ("plugin", "none"):
        rc = main(["serve", "--profile", str(prof), "--dry-run", "--python", sys.executable, "-f", "json",
                   "--sysfs-root", str(gpu_root(1)),
                   "--placement", placement])
        assert rc == 0
        runs[placement] = json.loads(capsys.readouterr().out)
    a, b = runs["plugin"], runs["none"]
    assert a["argv"] == b["argv"]                              # same SGLang settings
    assert "SACTOOL_PROFILE" in a["env_delta"] and "SACTOOL_PROFILE" not in b["env_delta"]
    assert b["placement"] == "none" and any("--placement none" in c for c in b["checks"])


def test_serve_entrypoint_needs_the_console_script(node0_pinned, tmp_path, standin_env, gpu_root, capsys):
    rc = main(["serve", "--profile", str(node0_pinned()), "--python", sys.executable, "--entrypoint", "serve",
               "--sysfs-root", str(gpu_root(1))])
    err = capsys.readouterr().err
    assert rc == ExitCode.ENGINE_MISSING and "console script" in err and not standin_env.exists()


def _site_without(tmp_path, rel: str, old: str, new: str):
    """The stand-in SGLang with one hook target changed in its source (``old`` -> ``new`` in ``rel``)."""
    site = tmp_path / "site-moved"
    shutil.copytree(SITE, site)
    f = site / rel
    text = f.read_text()
    assert old in text
    f.write_text(text.replace(old, new))
    return site


def test_dry_run_checks_the_plugins_hook_targets_in_sglangs_python(node0_pinned, tmp_path, standin_env, gpu_root,
                                                                    monkeypatch, capsys):
    """serve asks SGLang's Python (the plug-in's own check, sactool.plugins.sglang.check_engine) before
    the launch: all there -> a check line; a hook target gone -> refused (exit 9) naming the symbol and
    the version, even for a non-strict profile; --allow-untested-sglang -> launched with a warning line."""
    prof = node0_pinned()
    args = ["serve", "--profile", str(prof), "--dry-run", "--python", sys.executable, "--format", "json",
            "--sysfs-root", str(gpu_root(1))]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c for c in out["checks"] if c.startswith("hook targets:")] == [
        "hook targets: SGLang 0.5.23, the >=0.5.23,<0.6 table: every symbol resolved, signatures as the plug-in "
        "relies on"]
    monkeypatch.setenv("PYTHONPATH", str(_site_without(tmp_path, "sglang/srt/model_executor/model_runner.py",
                                                       "def maybe_init_hisparse_coordinator(self)",
                                                       "def maybe_init_hisparse_coordinator_v2(self)")))
    rc = main(args)
    out = json.loads(capsys.readouterr().out)
    (p,) = [q for q in out["problems"] if "hook target" in q["message"]]
    assert rc == p["exit_code"] == ExitCode.ENGINE_VERSION
    assert p["message"].startswith("hook target sglang.srt.model_executor.model_runner.ModelRunner."
                                   "maybe_init_hisparse_coordinator is missing: ") and "in SGLang 0.5.23" in p["message"]
    assert "--allow-untested-sglang" in p["hint"]
    assert main([*args, "--allow-untested-sglang"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any(c.startswith("warning: hook target sglang.srt.model_executor") for c in out["checks"])


def test_dry_run_refuses_a_changed_signature(node0_pinned, tmp_path, standin_env, gpu_root, monkeypatch, capsys):
    monkeypatch.setenv("PYTHONPATH", str(_site_without(tmp_path, "sglang/srt/mem_cache/pool_host/common.py",
                                                       "def allocate(self, dims: tuple, dtype, device: str):",
                                                       "def allocate(self, shape: tuple, dtype, device: str):")))
    rc = main(["serve", "--profile", str(node0_pinned()), "--dry-run", "--python", sys.executable, "--format", "json",
               "--sysfs-root", str(gpu_root(1))])
    out = json.loads(capsys.readouterr().out)
    assert rc == ExitCode.ENGINE_VERSION
    assert any("allocate changed: has parameters (self, shape, dtype, device)" in q["message"] for q in out["problems"])
