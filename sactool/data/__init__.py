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



def platform_names() -> list[str]:
    """Names of the packaged platform files (``sac-paper`` …), for ``simulate --platform NAME``."""
    return sorted(p.name[:-5] for p in data_path("platforms").iterdir() if p.name.endswith(".yaml"))


def resolve_platform(arg: str | Path) -> tuple[Path, str]:
    """``simulate --platform``'s value as a file, and a note when it is the packaged one: an existing
    path as given; a bare name (``sac-paper``) or the repository's spelling of a packaged file
    (``sactool/data/platforms/sac-paper.yaml``, which the README uses and which does not exist outside
    the checkout after ``pip install .``) → the installed package's copy; anything else as given (the
    loader then says it is missing)."""
    p = Path(arg)
    if p.exists():
        return p, ""
    name = None
    if len(p.parts) == 1 and not p.suffix:
        name = p.name
    elif not p.is_absolute() and p.parts[:3] == ("sactool", "data", "platforms") and len(p.parts) == 4:
        name = p.stem
    if name is not None and name in platform_names():
        return data_path("platforms", f"{name}.yaml"), f"--platform {arg}: the packaged {name}.yaml ({data_path('platforms', name + '.yaml')})"
    if name is not None and len(p.parts) == 1:
        from sactool.errors import UsageError

        raise UsageError(f"--platform {arg}: no such file and no packaged platform of that name",
                         f"give a platform file, or one of: {', '.join(platform_names())}")
    return p, ""
