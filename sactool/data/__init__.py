"""Data shipped inside the package (found through the installed package, never the repository):

* ``models/<name>.json`` — model specs: config.json excerpts plus checkpoint sizes, with sources;
* ``platforms/sac-paper.yaml`` — the SAC paper's platform for ``sactool simulate``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_path(*parts: str) -> Path:
    """Filesystem path of a packaged data file (a regular or editable install keeps files on disk)."""
    return Path(str(resources.files("sactool").joinpath("data", *parts)))


def paper_platform() -> Path:
    """The SAC paper's platform file (``sactool/data/platforms/sac-paper.yaml``)."""
    return data_path("platforms", "sac-paper.yaml")
