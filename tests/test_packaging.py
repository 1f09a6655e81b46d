"""Packaged data is found through the installed package, never the repository (issue 9).

The full check — ``pip install .`` into a fresh venv, then ``sactool tune`` and ``sactool simulate
--profile`` from a directory outside the repository — is ``scripts/check-wheel-install`` (about a
minute: it installs the dependencies). Here, fast: the package-data globs of pyproject.toml cover
every data file, the platform and model files resolve inside the package, and no module finds
files relative to its own source location.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "sactool"


def test_package_data_globs_cover_every_data_file():
    text = (REPO / "pyproject.toml").read_text()   # tomllib is 3.11+: read the one table by hand
    table = text.split("[tool.setuptools.package-data]", 1)[1].split("\n[", 1)[0]
    globs = re.findall(r'"([^"]+)"', re.search(r"^sactool\s*=\s*\[(.*?)\]", table, re.M | re.S).group(1))
    files = [str(p.relative_to(PKG)) for p in (PKG / "data").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert "data/platforms/sac-paper.yaml" in files and "data/models/glm-5.json" in files
    missing = [f for f in files if not f.endswith(".py") and not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert missing == []


def test_shipped_files_resolve_inside_the_package():
    from sactool.data import paper_platform
    from sactool.models import known_models

    assert paper_platform().is_file() and PKG in paper_platform().parents
    assert {"deepseek-v3.2", "glm-5", "glm-5.1"} <= set(known_models())


def test_no_module_reads_files_next_to_its_source():
    bad = []
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and node.id == "__file__":
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert bad == [], "use importlib.resources (sactool.data.data_path) for packaged files"
