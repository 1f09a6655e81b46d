"""The type checker passes on sactool/ (issue 19): the same run as ``.ci/run``'s mypy step, so a
change that breaks it fails here too, where the suite runs, not only in CI. Settings, and the
modules written before the checker ran, are in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_mypy_passes_on_sactool(tmp_path):
    run = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "Success: no issues found" in run.stdout
