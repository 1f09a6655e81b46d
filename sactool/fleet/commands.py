"""What the CLI's probe and bench hooks call in fleet mode: output checks agreed by all ranks before
any work, rank 0 writing, every rank returning the same exit code. No typer, no rich."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from sactool import records
from sactool.errors import UsageError
from sactool.fleet.mpi import Fleet


def check_output(fleet: Fleet, out: Path | None, force: bool) -> None:
    """Rank 0's ``--out`` must be new (or ``--force``) and writable; checked before measuring."""

    def check() -> None:
        if not fleet.is_root or out is None:
            return
        records.refuse_existing(out, force)
        parent = out.parent if str(out.parent) else Path(".")
        while not parent.exists():
            parent = parent.parent
        import os

        if not parent.is_dir() or not os.access(parent, os.W_OK):
            from sactool.errors import SactoolError

            raise SactoolError(f"cannot write {out}: {parent} is not a writable directory", "choose another --out")

    fleet.agree(check)


def _refuse(e: Exception) -> None:
    raise e


def refuse(fleet: Fleet, e: Exception) -> None:
    """Raise ``e`` on every rank (rank 0 reports it)."""
    fleet.agree(lambda: _refuse(e))


def writer(out: Path | None) -> Callable[[dict], None] | None:
    if out is None:
        return None
    fmt = "yaml" if out.suffix in (".yaml", ".yml") else "json"
    return lambda data: records.atomic_write(out, records.dumps(data, fmt), force=True)


def probe(fleet: Fleet, sysfs_root: Path | None, snapshot: Path | None) -> dict[str, Any] | None:
    """The fleet record on rank 0, None elsewhere."""
    from sactool.fleet.probe import fleet_probe
    from sactool.host.sysfs import SysfsReader

    if snapshot is not None:
        fleet.agree(lambda: _refuse(UsageError(
            "--snapshot is for one host", "run 'sactool probe --snapshot FILE' without mpirun on each host")))
    return fleet_probe(fleet, SysfsReader(sysfs_root))


def bench(fleet: Fleet, opts, out: Path | None, force: bool, progress=None) -> dict[str, Any] | None:
    from sactool.fleet.bench import run_fleet_bench

    check_output(fleet, out, force)
    return run_fleet_bench(fleet, opts, write=writer(out), progress=progress)
