"""Findings of the reliability review (issue 27): R4 mistyped bench-record fields, R6 both outputs
failing, R7 the engine probes' import path, and the cache directories' owner/mode rule. Each test
failed on the code before its fix."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import faults
from fixtures.progress import default_sigint
from sactool.cli import main
from sactool.errors import RecordError

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "tests" / "fixtures" / "bench" / "node0-gather.json"
SMALL_GATHER = ["--size", "16MiB", "--preset", "fast", "--record-bytes", "656", "--threads", "1", "--topk", "64"]


# ---- R4: a mistyped field is exit 4 with one error line, not a traceback (exit 1) -------------------
def _mutated(tmp_path: Path, change) -> Path:
    d = json.loads(BENCH.read_text())
    change(d)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    return p


MISTYPED = pytest.mark.parametrize("change,says", [
    (lambda d: d.__setitem__("warnings", 5), "warnings is 5, not a list of {code, message, hint} mappings"),
    (lambda d: d.__setitem__("warnings", [{"code": 1, "message": "m"}]), "warnings is [{'code': 1"),
    (lambda d: d.__setitem__("buffer", 7), "buffer is 7, not a mapping"),
    (lambda d: d["results"][0].__setitem__("on_cpu_fraction", "x"), "on_cpu_fraction is 'x', not a number >= 0"),
], ids=["warnings", "warning-code", "buffer", "on_cpu_fraction"])


@MISTYPED
def test_a_mistyped_bench_record_field_is_a_record_error(tmp_path, change, says):
    from sactool.bench import load_bench

    with pytest.raises(RecordError) as e:
        load_bench(_mutated(tmp_path, change))
    assert says in e.value.message


@MISTYPED
def test_tune_given_a_mistyped_bench_record_exits_4(tmp_path, machine, capsys, change, says):
    """Each field the issue names crashed the CLI with a traceback and exit 1 (tune reads the record
    through load_bench): here each is exit 4, one error line naming the file and the field, no output."""
    bad = _mutated(tmp_path, change)
    rc = main(["tune", "--model", "deepseek-v3.2", "--sysfs-root", str(machine("this-machine")), "--bench", str(bad),
               "--context", "4k", "--out", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err
    assert rc == 4 and "Traceback" not in err, err
    errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: bench record {bad}: ") and says in errors[0], err
    assert not (tmp_path / "p.yaml").exists()


def test_the_shipped_bench_records_still_load():
    from sactool.bench import load_bench

    for p in sorted((REPO / "tests" / "fixtures" / "bench").glob("*.json")):
        load_bench(p)


# ---- R6: when the record and the plot both fail, both fallbacks are named ---------------------------
def test_record_and_plot_failing_name_both_fallback_files(tmp_path):
    out, plot = tmp_path / "g.json", tmp_path / "g.png"
    r = subprocess.run([*faults.full_disk_at_fsync_cli([out.name, plot.name]), "bench", "gather", *SMALL_GATHER,
                        "--out", str(out), "--plot", str(plot)],
                       capture_output=True, text=True, timeout=300, preexec_fn=default_sigint)
    saved = [Path(p) for p in re.findall(r"saved as (\S+) instead", r.stderr)]
    try:
        assert r.returncode == 1, r.stderr
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
        assert len(errors) == 1 and str(out) in errors[0] and str(plot) in errors[0], r.stderr
        assert len(saved) == 2 and {p.suffix for p in saved} == {".json", ".png"}, r.stderr
        assert json.loads(next(p for p in saved if p.suffix == ".json").read_text())["complete"] is True
        assert next(p for p in saved if p.suffix == ".png").read_bytes()[:4] == b"\x89PNG"
        assert not out.exists() and not plot.exists()
    finally:
        for p in saved:
            p.unlink(missing_ok=True)


# ---- R7: the engine probes import nothing from the working directory --------------------------------
def test_serve_probes_do_not_run_a_json_py_in_the_working_directory(tmp_path, monkeypatch):
    from sactool.serve.checks import probe_engine, probe_options

    marker = tmp_path / "ran"
    for name in ("json.py", "argparse.py", "sysconfig.py"):
        (tmp_path / name).write_text(f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\nraise SystemExit(3)\n")
    monkeypatch.chdir(tmp_path)
    info = probe_engine(sys.executable)
    assert info.python and info.sglang is None       # it answered, from its own standard library
    probe_options(sys.executable, "0.5.23")           # no SGLang here: no table, but nothing of cwd ran
    assert not marker.exists(), marker.read_text()


def test_vllm_serve_probes_and_both_hook_probes_do_not_run_a_json_py_in_the_working_directory(tmp_path, monkeypatch):
    """R7 for vLLM's serve path too (its engine and options probes ran ``python -c`` with the working
    directory first on the import path until they took :func:`probe_argv`), and for the hook probe of
    each engine: a ``json.py`` in the directory serve is started from never runs."""
    from sactool.serve import vllm_launch
    from sactool.serve.checks import probe_hooks

    marker = tmp_path / "ran"
    for name in ("json.py", "argparse.py", "sysconfig.py", "importlib.py", "inspect.py"):
        (tmp_path / name).write_text(f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\nraise SystemExit(3)\n")
    monkeypatch.chdir(tmp_path)
    info = vllm_launch.probe_engine(sys.executable)
    assert info.python                                # it answered, from its own standard library
    vllm_launch._probe_options(sys.executable, "0.34.0")   # no vLLM here: no table, but nothing of cwd ran
    for engine in ("sglang", "vllm"):
        probe_hooks(sys.executable, engine=engine, timeout_s=120.0)
    assert not marker.exists(), marker.read_text()


# ---- cache directories: one owner/mode rule for every candidate -------------------------------------
CACHE_OF = "import os, sactool.cachedir; print(os.environ['NUMBA_CACHE_DIR'])"


def _numba_cache_dir(env: dict) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "SACTOOL_CACHE_DIR", "XDG_CACHE_HOME")}
    return subprocess.run([sys.executable, "-c", CACHE_OF], capture_output=True, text=True, timeout=120,
                          env={**base, **env})


BAD_CACHES = pytest.mark.parametrize("make", ["world-writable", "group-writable-shared-group", "symlink", "other-owner"])


def _plant_bad_cache(bad: Path, make: str) -> None:
    """A directory at ``bad`` that someone else could write into (or a link to one of ours)."""
    bad.parent.mkdir(parents=True, exist_ok=True)
    if make == "world-writable":
        bad.mkdir()
        bad.chmod(0o777)
    elif make == "group-writable-shared-group":
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another group needs root")
        bad.mkdir()
        os.chown(bad, os.getuid(), 65534)   # nogroup: nobody's primary group, not this user's own
        bad.chmod(0o770)
    elif make == "symlink":
        real = bad.parent / (bad.name + "-real")
        real.mkdir(mode=0o700)
        bad.symlink_to(real)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another user needs root")
        bad.mkdir(mode=0o700)
        os.chown(bad, 65534, 65534)


@BAD_CACHES
def test_a_cache_candidate_others_could_write_is_not_loaded_from(tmp_path, make):
    bad = tmp_path / "shared"
    _plant_bad_cache(bad, make)
    r = _numba_cache_dir({"SACTOOL_CACHE_DIR": str(bad), "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "xdg" / "sactool" / "numba")
    assert f"note: cache directory {bad} not used" in r.stderr


@BAD_CACHES
@pytest.mark.parametrize("where", ["xdg", "home"])
def test_the_xdg_and_home_cache_candidates_are_held_to_the_same_rule(tmp_path, make, where):
    """`$XDG_CACHE_HOME/sactool` (when XDG_CACHE_HOME is set) or else `~/.cache/sactool`, planted bad, is
    refused with a note and the next candidate, `<tmp>/sactool-<uid>`, is used (TMPDIR points into
    tmp_path, so the machine's own fallback is never touched). Before 640ae9d only the tmp fallback was
    checked: numba would have been pointed at the planted directory and this would fail."""
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    tmp.mkdir()
    env = {"HOME": str(home), "TMPDIR": str(tmp)}
    if where == "xdg":
        env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
        bad = tmp_path / "xdg" / "sactool"
    else:
        bad = home / ".cache" / "sactool"
    _plant_bad_cache(bad, make)
    r = _numba_cache_dir(env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp / f"sactool-{os.getuid()}" / "numba"), r.stderr
    assert f"note: cache directory {bad} not used" in r.stderr


def test_a_group_writable_cache_of_the_users_private_group_is_used(tmp_path):
    """A umask of 002 (Debian's user private groups) left an older sactool's cache 0775: still the user's."""
    import grp
    import pwd

    me = pwd.getpwuid(os.getuid())
    g = grp.getgrgid(me.pw_gid)
    if set(g.gr_mem) - {me.pw_name} or any(p.pw_gid == me.pw_gid and p.pw_uid != me.pw_uid for p in pwd.getpwall()):
        pytest.skip(f"this user's primary group {g.gr_name} is shared")
    mine = tmp_path / "mine"
    mine.mkdir()
    mine.chmod(0o775)
    r = _numba_cache_dir({"SACTOOL_CACHE_DIR": str(mine)})
    assert r.returncode == 0 and r.stdout.strip() == str(mine / "numba") and "note:" not in r.stderr, r.stderr


def test_a_private_cache_candidate_is_used_and_made_private(tmp_path):
    r = _numba_cache_dir({"SACTOOL_CACHE_DIR": str(tmp_path / "mine")})
    assert r.returncode == 0 and r.stdout.strip() == str(tmp_path / "mine" / "numba"), r.stderr
    assert "note:" not in r.stderr
    assert (tmp_path / "mine").stat().st_mode & 0o077 == 0 and (tmp_path / "mine" / "numba").stat().st_mode & 0o077 == 0
