"""What a user sees at the command line (issue 11): options before a subcommand, exit codes off the
README's table, output that contradicts itself, help, version, quiet, completion.

Every test drives the console-script entry point in-process (``sactool.entry.main``, the function
``pyproject.toml`` installs as ``sactool``), so none depends on how the CLI is split into modules.
Measurements are small real runs on node 0 (the stand-in here)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sactool.data import paper_platform
import yaml

from fixtures.trees import unpack
from sactool.entry import main

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "profiles" / "examples"

SMALL = ["--size", "64MiB", "--preset", "fast"]


def run(argv, capsys):
    code = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.fixture
def bench_file(fast_bench_record) -> Path:
    return fast_bench_record


@pytest.fixture
def recorded(machine) -> list[str]:
    """Tune's pool sized from a recorded node 0 (MemFree as recorded), not this host's free memory."""
    return ["--sysfs-root", str(machine("this-machine"))]


# ---------------------------------------------------------------------------------------------
# item 1: options before a bench subcommand
# ---------------------------------------------------------------------------------------------
def test_bench_group_node_reaches_the_subcommand(capsys):
    code, out, err = run(["bench", "--node", "5", "latency", *SMALL], capsys)
    assert code == 3, err            # there is no node 5 here: measuring node0 instead is wrong
    assert out == "" and "node5" in err.replace("node 5", "node5")


def test_bench_group_out_and_format_reach_the_subcommand(tmp_path, capsys):
    out_file = tmp_path / "x.json"
    code, out, err = run(["bench", "--out", out_file, "--format", "json", "latency", *SMALL], capsys)
    assert code == 0, err
    assert json.loads(out)["tests"] == ["latency"]          # JSON, not a table
    assert json.loads(out_file.read_text())["command"] == "latency"


def test_bench_group_and_subcommand_disagreeing_is_a_usage_error(capsys):
    code, out, err = run(["bench", "--node", "0", "latency", "--node", "5", *SMALL], capsys)
    assert code == 2 and out == "" and err.startswith("error: ") and "hint: " in err


# ---------------------------------------------------------------------------------------------
# item 5: tune --model DIR (a local Hugging Face checkout)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("as_file", [False, True])
def test_tune_model_dir_serves_the_directory(tmp_path, bench_file, recorded, capsys, as_file):
    ckpt = tmp_path / "DeepSeek-V3.2"
    ckpt.mkdir()
    cfg = json.loads((REPO / "sactool" / "data" / "models" / "deepseek-v3.2.json").read_text())
    (ckpt / "config.json").write_text(json.dumps(cfg))
    prof = tmp_path / "p.yaml"
    model = ckpt / "config.json" if as_file else ckpt
    code, _, err = run(["tune", "--model", model, "--context", "4k", "--steps", "4", "--replicates", "1",
                        "--bench", bench_file, "--out", prof, *recorded], capsys)
    assert code == 0, err
    hf_id = yaml.safe_load(prof.read_text())["model"]["hf_id"]
    assert Path(hf_id) == ckpt.resolve()
    code, out, err = run(["serve", "--profile", prof, "--dry-run", "--format", "json"], capsys)
    argv = json.loads(out)["argv"]
    assert argv[argv.index("--model-path") + 1] == str(ckpt.resolve())


# ---------------------------------------------------------------------------------------------
# item 6: bad input found before measuring; no points file left to trip the next run
# ---------------------------------------------------------------------------------------------
def test_tune_negative_seed_refused_before_any_work(tmp_path, bench_file, recorded, capsys):
    prof = tmp_path / "p.yaml"
    points = tmp_path / "p.yaml.points.jsonl"
    code, out, err = run(["tune", "--context", "4k", "--steps", "4", "--replicates", "1", "--seed", "-1",
                          "--out", prof], capsys)
    assert code == 2 and out == "" and "--seed" in err and "hint: " in err
    assert not points.exists() and not prof.exists()
    code, _, err = run(["tune", "--context", "4k", "--steps", "4", "--replicates", "1", "--bench", bench_file,
                        "--out", prof, *recorded], capsys)
    assert code == 0, err


# ---------------------------------------------------------------------------------------------
# item 12: serve --dry-run exit code, typos, options before --
# ---------------------------------------------------------------------------------------------
def test_serve_dry_run_exits_with_the_code_the_launch_would(capsys):
    prof = EXAMPLES / "cxl-one-node.yaml"
    code, out, err = run(["serve", "--profile", prof, "--dry-run", "--format", "json"], capsys)
    problems = json.loads(out)["problems"]
    assert code == (problems[0]["exit_code"] if problems else 0)
    assert problems, "this machine has no SGLang and no node2: the launch would be refused"
    code2, out2, err2 = run(["serve", "--profile", prof, "--dry-run"], capsys)
    assert code2 == code and "would refuse" in err2


def test_serve_typo_is_refused_not_forwarded(capsys):
    code, out, err = run(["serve", "--profile", EXAMPLES / "cxl-one-node.yaml", "--dryrun"], capsys)
    assert code == 2 and out == ""
    assert "--dryrun" in err and "--dry-run" in err          # names the typo and the likely option


def test_serve_unknown_option_before_double_dash_is_refused(capsys):
    code, out, err = run(["serve", "--profile", EXAMPLES / "cxl-one-node.yaml", "--dry-run", "--port", "30000"],
                         capsys)
    assert code == 2 and out == "" and "--port" in err and "--" in err
    code, out, err = run(["serve", "--profile", EXAMPLES / "cxl-one-node.yaml", "--dry-run", "--format", "json",
                          "--", "--port", "30000"], capsys)
    argv = json.loads(out)["argv"]
    assert argv[-2:] == ["--port", "30000"]


# ---------------------------------------------------------------------------------------------
# item 13: profile validate agrees with serve; --format
# ---------------------------------------------------------------------------------------------
def _edited_profile(tmp_path, edit) -> Path:
    data = yaml.safe_load((EXAMPLES / "cxl-one-node.yaml").read_text())
    edit(data)
    p = tmp_path / "edited.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_profile_validate_refuses_a_bad_tested_range(tmp_path, capsys):
    p = _edited_profile(tmp_path, lambda d: d["sglang"].__setitem__("tested", "not a spec"))
    code, out, err = run(["profile", "validate", p], capsys)
    assert code == 4 and "sglang.tested" in err and "hint: " in err


def test_profile_validate_refuses_an_unknown_top_level_key(tmp_path, capsys):
    p = _edited_profile(tmp_path, lambda d: d.__setitem__("hisparce", {"device_buffer_size": 4096}))
    code, out, err = run(["profile", "validate", p], capsys)
    assert code == 4 and "hisparce" in err


def test_profile_validate_has_format(capsys):
    code, out, err = run(["profile", "validate", EXAMPLES / "cxl-one-node.yaml", "--format", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["valid"] is True


# ---------------------------------------------------------------------------------------------
# item 14: tune's output does not contradict itself
# ---------------------------------------------------------------------------------------------
def test_tune_summary_is_consistent(tmp_path, bench_file, recorded, capsys):
    prof = tmp_path / "p.yaml"
    # the recorded node 0 holds 4K requests but not one 128K request per rank: 128K "does not fit"
    code, out, err = run(["tune", "--context", "4k,128k", "--steps", "4", "--replicates", "1",
                          "--bench", bench_file, "--out", prof, *recorded], capsys)
    assert code == 0, err
    assert "at most 0" not in err and "at most 0" not in out
    summary = yaml.safe_load(prof.read_text())["predictions"]
    for line in out.splitlines():
        if "does not fit" in line:    # a context that does not fit shows no positive concurrency beside it
            assert not re.search(r"\b[1-9]\d*\b\s*$", line.split("does not fit")[0].strip() + " "), line
    free = {m.group(1): m.group(2) for m in re.finditer(r"(node\d+) \((?:DRAM, )?([\d.]+ GiB) free\)", out + err)}
    seen = re.findall(r"(node\d+) \((?:DRAM, )?([\d.]+ GiB) free\)", out + err)
    assert seen and all(free[n] == f for n, f in seen), seen     # one free figure per node
    assert summary


# ---------------------------------------------------------------------------------------------
# item 16: exit codes as the README's table says
# ---------------------------------------------------------------------------------------------
def test_trace_index_out_of_range_is_a_record_error(tmp_path, capsys):
    t = tmp_path / "steps.txt"
    t.write_text("1 2 3 4\n5 6 7 1000000000\n")
    code, out, err = run(["bench", "gather", "--trace", t, "--size", "8MiB", "--record-bytes", "656",
                          "--topk", "4"], capsys)
    assert code == 4 and out == "" and "hint: " in err


def test_serve_corrupt_model_config_is_a_record_error(tmp_path, capsys):
    ckpt = tmp_path / "model"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"architectures": ["DeepseekV32ForCausalLM"], ')
    code, out, err = run(["serve", "--profile", EXAMPLES / "cxl-one-node.yaml", "--dry-run", "--",
                          "--model-path", ckpt], capsys)
    assert code == 4 and "config.json" in err


@pytest.mark.parametrize("conc", ["100000", "1000000", "8,100000"])
def test_simulate_concurrency_that_fits_nowhere_exits_6(conc, capsys):
    # refused before any point is simulated (this ran for minutes, then exited 6), in one line whose
    # hint names the largest concurrency the platform's pool holds: 16k-token requests sharing one prompt,
    # each rank's slice of the 512 GiB CXL pool holding the prefix once and every request's own output
    code, out, err = run(["simulate", "--platform", paper_platform(), "--context", "16k", "--concurrency", conc,
                          "--hotbuffer-steps", "2", "--placements", "sac"], capsys)
    assert code == 6 and out == "" and len(err.splitlines()) == 2
    assert "fits in no placement" in err and "at most 7504 at 16K fit" in err.splitlines()[1]
    # the figure comes from the pool: half the pool, (at most) half as many
    code, out, err = run(["simulate", "--platform", paper_platform(), "--context", "16k", "--concurrency", conc,
                          "--placements", "sac", "--set", "cxl.capacity_bytes=256GiB"], capsys)
    most = int(re.search(r"at most (\d+) at 16K fit", err).group(1))
    assert code == 6 and 3600 < most < 7504 / 2      # each rank still holds one prefix


# ---------------------------------------------------------------------------------------------
# item 18: probe warnings on stderr
# ---------------------------------------------------------------------------------------------
def test_probe_table_warnings_go_to_stderr(tmp_path, capsys):
    root = unpack("ram__10-region", tmp_path / "t")
    code, out, err = run(["probe", "--sysfs-root", root], capsys)
    assert code == 0
    assert "hmat-scale-mismatch" in err and "warning [" not in out and "hmat-scale-mismatch" not in out
    code, out, err = run(["probe", "--sysfs-root", root, "--quiet"], capsys)
    assert code == 0 and err == "" and "KV pool" in out


# ---------------------------------------------------------------------------------------------
# item 20: help, choices, examples, version, quiet, completion
# ---------------------------------------------------------------------------------------------
COMMANDS = [["probe"], ["bench"], ["bench", "gather"], ["bench", "latency"], ["tune"], ["serve"], ["simulate"],
            ["profile", "show"], ["profile", "validate"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_help_shows_choices_and_an_example(cmd, capsys):
    code, out, err = run([*cmd, "--help"], capsys)
    assert code == 0
    assert "<bool>" not in out                       # flags take no value
    assert "table|json|yaml" in out.replace(" ", "")  # --format's choices
    assert "Example" in out and f"sactool {' '.join(cmd)}" in out


@pytest.mark.parametrize("cmd,choices", [(["bench", "gather"], "uniform|clustered|trace"),
                                         (["bench", "gather"], "fast|default|rigorous"),
                                         (["tune"], "fp8|bf16"), (["serve"], "plugin|numactl|none"),
                                         (["simulate"], "cache_hit|cache_populate")])
def test_help_lists_option_choices(cmd, choices, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")   # long choice lists wrap inside the column at 80
    code, out, _ = run([*cmd, "--help"], capsys)
    assert code == 0 and choices in re.sub(r"[\s│]", "", out)


def test_bad_choice_is_a_usage_error(capsys):
    code, out, err = run(["bench", "gather", "--pattern", "zipf", *SMALL], capsys)
    assert code == 2 and out == "" and "zipf" in err


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(flag, capsys):
    from sactool import __version__

    code, out, err = run([flag], capsys)
    assert code == 0 and out.strip() == __version__


def test_quiet_bench_prints_only_data(capsys):
    code, out, err = run(["bench", "latency", "--quiet", "--format", "json", *SMALL], capsys)
    assert code == 0 and err == ""
    assert any(w["code"] == "stand_in" for w in json.loads(out)["warnings"])   # still in the record


def test_shell_completion_offers_format_choices():
    env = dict(os.environ, _SACTOOL_COMPLETE="complete_bash", COMP_WORDS="sactool probe --format ", COMP_CWORD="3")
    r = subprocess.run([sys.executable, "-c", "from sactool.entry import main; main()"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert set(r.stdout.split()) >= {"table", "json", "yaml"}, r.stderr


def test_cli_choice_lists_are_the_library_ones():
    """The CLI lists index patterns without importing numpy; they must stay the library's."""
    from sactool.bench.indices import PATTERNS
    from sactool.cli.bench import Pattern

    assert tuple(p.value for p in Pattern) == PATTERNS
