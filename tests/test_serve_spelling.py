"""Issue 22: serve's conflict check on SGLang's own parsing rules. SGLang's argparse takes any
unique prefix of an option, so ``-- --tp 4`` is ``--tp-size 4``: before (e141ef7) ``--tp 4``,
``--context-len 200000``, ``--max-running 100``, ``--kv-cache-dt bf16`` and
``--enable-hierarchical`` passed the check with exit 0, as did a typo (``--tp-sizee 4``) and a
dangling ``--model-path``. Now each is refused (exit 2) naming the full option."""

from __future__ import annotations

from pathlib import Path

import pytest

from sactool.cli import main
from sactool.errors import UsageError
from sactool.profile import load_profile
from sactool.serve.checks import check_conflicts, sglang_options

PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "examples" / "cxl-one-node.yaml"


@pytest.mark.parametrize("extra,full", [
    (["--tp", "4"], "--tp-size"), (["--context-len", "200000"], "--context-length"),
    (["--max-running", "100"], "--max-running-requests"), (["--kv-cache-dt", "bf16"], "--kv-cache-dtype"),
    (["--enable-hierarchical"], "--enable-hierarchical-cache"), (["--tp=4"], "--tp-size"),
])
def test_abbreviations_are_refused_with_the_full_name(extra, full):
    with pytest.raises(UsageError, match="abbreviation") as e:
        check_conflicts(load_profile(PROFILE), extra)
    assert f"read it as {full}" in e.value.message and full in e.value.hint


def test_typo_and_dangling_value_are_refused():
    prof = load_profile(PROFILE)
    with pytest.raises(UsageError, match="not an SGLang 0.5.23 option") as e:
        check_conflicts(prof, ["--tp-sizee", "4"])
    assert "--tp-size" in e.value.hint
    with pytest.raises(UsageError, match="--model-path after -- needs a value"):
        check_conflicts(prof, ["--trust-remote-code", "--model-path"])


def test_full_names_still_pass_and_conflicts_are_still_conflicts():
    prof = load_profile(PROFILE)
    ok = ["--model-path", "deepseek-ai/DeepSeek-V3.2", "--host", "0.0.0.0", "--port", "30000", "--log-level", "info"]
    assert check_conflicts(prof, ok) == ok
    from sactool.serve.errors import ConflictError

    with pytest.raises(ConflictError):
        check_conflicts(prof, ["--tp-size", "1"])


def test_the_option_list_is_sglangs():
    opts = sglang_options()
    assert len(opts) > 400 and opts["--tp-size"]["takes_value"] and not opts["--enable-hisparse"]["takes_value"]
    assert opts["--tensor-parallel-size"]["dest"] == opts["--tp-size"]["dest"]


@pytest.mark.parametrize("extra", [["--tp", "4"], ["--tp-sizee", "4"], ["--model-path"]])
def test_dry_run_refuses(extra, capsys):
    assert main(["serve", "--profile", str(PROFILE), "--dry-run", "--", *extra]) == 2
    err = capsys.readouterr().err
    assert "error: " in err and "hint: " in err and "Traceback" not in err
