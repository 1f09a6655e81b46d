"""What the CLI's probe and bench hooks call in fleet mode: output checks agreed by all ranks before
any work, rank 0 writing, every rank returning the same exit code. No typer, no rich."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from sactool import records
from sactool.errors import SactoolError, UsageError
from sactool.fleet.mpi import Fleet


def check_output(fleet: Fleet, out: Path | None, force: bool) -> None:
    """Rank 0's ``--out`` must be new (or ``--force``) and writable; checked before measuring."""

    def check() -> None:
        if not fleet.is_root or out is None:
            return
        records.refuse_existing(out, force)
        records.check_writable(out)   # a missing parent is refused, not created

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
    where: dict[str, Any] = {"path": out, "error": None}

    def write(data: dict) -> None:
        """Rewrite the record after every round (never raising mid-sweep: the other ranks wait in
        the next round); when a write fails, the record goes under the temporary directory and
        later rounds rewrite that file; :func:`bench` raises the error, naming it, at the end."""
        text = records.dumps(data, fmt)
        if where["error"] is not None:
            if where["path"] is not None:
                try:
                    records.atomic_write(where["path"], text, force=True)
                except SactoolError:
                    pass
            return
        saved, err = records.save_result(out, text, force=True, kind="fleet-bench", suffix=out.suffix or ".json")
        if err is not None:
            where.update(path=saved, error=err)

    write.where = where   # type: ignore[attr-defined]
    return write


def probe(fleet: Fleet, sysfs_root: Path | None, snapshot: Path | None) -> dict[str, Any] | None:
    """The fleet record on rank 0, None elsewhere."""
    from sactool.fleet.probe import fleet_probe
    from sactool.host.sysfs import SysfsReader

    if snapshot is not None:
        fleet.agree(lambda: _refuse(UsageError(
            "--snapshot is for one host", "run 'sactool probe --snapshot FILE' without mpirun on each host")))
    return fleet_probe(fleet, SysfsReader(sysfs_root))


def bench(fleet: Fleet, opts, out: Path | None, force: bool, progress=None, notify=None) -> dict[str, Any] | None:
    from sactool.fleet.bench import run_fleet_bench

    check_output(fleet, out, force)
    write = writer(out)
    rec = run_fleet_bench(fleet, opts, write=write, progress=progress, notify=notify)
    err = write.where["error"] if write is not None else None   # type: ignore[attr-defined]
    if err is not None:   # after the sweep, on rank 0 only: its hint names the file it went to
        raise err
    return rec
