"""Issue 12 item 5 on the tune side: tune's hot-buffer simulation runs on the same workload model as
simulate — DeepSeek-V3.2's per-layer targets from the authors' CSV, the random layer spread for
models without a per-layer profile (GLM-5/5.1) — picked by one rule, and the profile records which."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from sactool.cli import main
from sactool.models import get_model
from sactool.profile import load_profile
from sactool.tune import run
from sactool.tune.hotbuffer import HotBufferRuns
from sactool.tune.points import PointsStore
from sactool.tune.options import TuneOptions
from sactool.workload.layers import ModelWorkload, layer_targets, model_workload

PKG = Path(__file__).resolve().parents[1] / "sactool"
CTX = 131072


def _rank(v) -> np.ndarray:
    return np.argsort(np.argsort(np.asarray(v)))


def _tune_sims(model: str, steps: int, seed: int = 0):
    """Tune's own hot-buffer stage (workload choice, points key, trace) for ``model`` at 128K."""
    spec = get_model(model)
    job = run.Job(o=TuneOptions(model=model, steps=steps, seed=seed), spec=spec, kv="fp8", attn_dp=8,
                  rec_bytes=656, path=Path("unused.yaml"), points_path=None, progress=None, t0=0.0)
    wl = run._model_workload(job)
    return HotBufferRuns(job, (CTX,), 1, None, PointsStore(job, ["node0"], wl), wl)


def test_one_rule_picks_the_workload_by_model():
    from sactool.data import paper_platform
    from sactool.simulate.api import _layer_targets
    from sactool.simulate.platform import load_platform

    assert model_workload("deepseek-v3.2", 61, 2048).layer_targets == "deepseek-v3.2"
    for name in ("glm-5", "glm-5.1"):                 # no per-layer profile published: random spread
        spec = get_model(name)
        assert model_workload(spec.name, spec.num_layers, spec.index_topk).layer_targets is None
    assert model_workload("deepseek-v3.2", 61, 1024).layer_targets is None    # not the profiled top_k
    assert model_workload("deepseek-v3.2", 4, 2048).layer_targets is None     # not the profiled layers
    # simulate asks the same rule: the paper platform (DeepSeek-V3.2) gets the same targets as tune
    plat = load_platform(paper_platform())
    assert _layer_targets(plat) == _tune_sims(plat.model, 4).model_wl.layer_targets == "deepseek-v3.2"


def test_tune_hot_buffer_follows_the_csv_per_layer(dsv32_128k_workload):
    """Tune's trace at 128K is the start of the 1000-step trace whose per-layer union
    test_workload_layers checks against the CSV (±20% every layer); tune's per-layer misses rank
    the layers as the CSV does. The random spread (no profile) does not, so this can fail."""
    from sactool.hisparse.hotbuffer import simulate_many

    w = dsv32_128k_workload
    sims = _tune_sims("deepseek-v3.2", steps=16, seed=w["seed"])
    x = sims._indices(CTX, 0)
    assert np.array_equal(x, w["head"])
    union = np.asarray(w["layer_union"])
    real = np.array(layer_targets(CTX, 61))
    assert np.all(np.abs(union / real - 1) <= 0.20)
    per_layer = simulate_many(x, [2048], context_tokens=CTX)[0].misses[1:].mean(axis=0)
    assert np.corrcoef(_rank(per_layer), _rank(real))[0, 1] > 0.95
    spread = ModelWorkload("deepseek-v3.2", 61, 2048, None).generate(CTX, 16, seed=0)
    random_misses = simulate_many(spread, [2048], context_tokens=CTX)[0].misses[1:].mean(axis=0)
    assert abs(np.corrcoef(_rank(random_misses), _rank(real))[0, 1]) < 0.6
    # resumed points from a run on another workload are not reused
    other = PointsStore(sims.job, ["node0"], ModelWorkload("deepseek-v3.2", 61, 2048, None))
    assert other.key != sims.points.key


@pytest.fixture
def tune_args(machine, fast_bench_record):
    return ["--context", "4k", "--steps", "4", "--replicates", "1", "--sysfs-root", str(machine("this-machine")),
            "--bench", str(fast_bench_record)]


def test_profile_records_the_per_layer_workload(tmp_path, capsys, tune_args):
    out = tmp_path / "p.yaml"
    assert main(["tune", "--model", "deepseek-v3.2", *tune_args, "--out", str(out)]) == 0
    o, _ = capsys.readouterr()
    assert "hit rates from: workload sharegpt-dsv32: workload model, deepseek-v3.2 per-layer targets" in " ".join(o.split())
    p = load_profile(out)
    assert p.schema_version == 4 and p.engine == "sglang"
    w = p.workload
    assert w["model_profile"] == "deepseek-v3.2" and w["layer_locality"] == "per-layer targets"
    assert w["targets"] == "sactool/data/topk/deepseek-v3.2-summary_by_length_layer.csv"
    assert "dsv32-profile-topk" in w["targets_source"] and w["steps"] == 4 and w["seeds"] == [0]
    assert "per-layer targets" in p.provenance["hisparse.device_buffer_size"].detail
    assert (PKG.parent / w["targets"]).is_file()
    assert main(["profile", "show", str(out)]) == 0
    assert "deepseek-v3.2 per-layer targets" in " ".join(capsys.readouterr().out.split())


def test_model_without_a_profile_tunes_on_the_random_spread(tmp_path, capsys, tune_args):
    out = tmp_path / "g.yaml"
    assert main(["tune", "--model", "glm-5", *tune_args, "--out", str(out), "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    w = d["summary"]["workload"]
    assert w["model_profile"] is None and w["layer_locality"] == "random log-normal spread"
    assert "no per-layer profile fits glm-5" in w["detail"]
    assert load_profile(out).workload == w
    assert 0 < d["summary"]["per_context"][0]["hit_rate"] <= 1


def test_trace_replay_records_the_trace(tmp_path, capsys, machine, fast_bench_record):
    from sactool.workload import save_trace

    tr = tmp_path / "t.npz"
    save_trace(tr, model_workload("deepseek-v3.2", 61, 2048).generate(4096, 4, seed=3), 4096,
               model="deepseek-v3.2", source="test")
    out = tmp_path / "p.yaml"
    assert main(["tune", "--trace", str(tr), "--bench", str(fast_bench_record), "--sysfs-root",
                 str(machine("this-machine")), "--out", str(out)]) == 0
    assert f"hit rates from: trace {tr}" in " ".join(capsys.readouterr().out.split())
    w = load_profile(out).workload
    assert w["source"] == "trace" and w["trace"] == str(tr) and w["trace_source"] == "test"


def _calls(name: str) -> dict[str, list[bool]]:
    """{module: [passes params= …]} for every call of ``name`` in the package."""
    found: dict[str, list[bool]] = {}
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                if (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None) == name:
                    found.setdefault(str(path.relative_to(PKG)), []).append(
                        any(k.arg == "params" for k in node.keywords))
    return found


def test_one_place_decides_which_workload_a_model_gets():
    """Only workload/layers.py maps models to per-layer profiles (the table of them is its data fit's,
    workload/layerfit.py); tune takes its traces from
    model_workload; the remaining generate_topk calls are the workload package's own, simulate's
    (its targets come from the same rule, simulate/api._layer_targets), and gpu-gather's index
    streams (one layer stream per request, no model: the default spread)."""
    users = {str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if "DATASETS" in p.read_text()}
    assert users == {"workload/layers.py", "workload/layerfit.py"}
    calls = _calls("generate_topk")
    assert set(calls) == {"workload/layers.py", "workload/calibrate.py", "simulate/misses.py",
                          "bench/gpustreams.py"}, calls
    assert all(calls["workload/layers.py"]) and all(calls["simulate/misses.py"])
    assert not any(k.startswith("tune/") for k in calls)


def test_tune_says_which_workload_and_shows_each_buffer_size(tmp_path, capsys, tune_args):
    """Default: the real-prompt workload; --workload filler-sac-runs: the paper runs' prompt, recorded
    by name; both show fetch time, misses and GPU memory per candidate buffer size."""
    out = tmp_path / "f.yaml"
    args = [a if a != "4k" else "16k" for a in tune_args]
    assert main(["tune", "--model", "deepseek-v3.2", *args, "--out", str(out), "--workload", "filler-sac-runs",
                 "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    w = d["summary"]["workload"]
    assert w["name"] == "filler-sac-runs" and w["targets"] == "sactool/data/workloads/filler-sac-runs.yaml"
    assert load_profile(out).workload["name"] == "filler-sac-runs"
    rows = d["summary"]["by_buffer"]
    sizes = [r["device_buffer_size"] for r in rows]
    assert 4096 in sizes and 6144 in sizes and sum(r["chosen"] for r in rows) == 1
    m = {r["device_buffer_size"]: r["misses_per_step_per_layer"] for r in rows}
    assert m[4096] > m[6144] > 0
    assert all(r["gpu_bytes_per_rank"] > 0 and r["fetch_time_per_token_s"] > 0 for r in rows)
    assert main(["tune", "--model", "deepseek-v3.2", *args, "--out", str(tmp_path / "g.yaml")]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "hit rates from: workload sharegpt-dsv32: workload model" in text and "by hot-buffer size" in text
    assert main(["tune", "--model", "deepseek-v3.2", *args, "--out", str(tmp_path / "h.yaml"),
                 "--workload", "nope"]) == 2
