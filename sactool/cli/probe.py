"""``sactool probe``: probe, optionally snapshot, render.

Light on purpose: :func:`run_probe` is also the typer-free fast path of the console script
(:mod:`sactool.entry`), so this module imports neither typer nor the app at import time;
:func:`register` adds the typer command to the app.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def run_probe(fmt: str = "table", sysfs_root: Optional[Path] = None, snapshot: Optional[Path] = None,
              force: bool = False) -> None:
    """``sactool probe``: probe, optionally snapshot, render (table) or emit data (json/yaml)."""
    from sactool.host.sysfs import SysfsReader
    from sactool.records import refuse_existing
    from sactool.render import check_format
    from sactool.topology import probe

    check_format(fmt)
    from sactool.fleet.mpi import detect

    fleet = detect()  # under mpirun: every rank probes, rank 0 writes the fleet record
    if fleet is not None:
        from sactool.cli.fleet import probe_fleet

        return probe_fleet(fleet, fmt, sysfs_root, snapshot)
    refuse_existing(snapshot, force, "pass --force to overwrite it, or choose another name")
    reader = SysfsReader(sysfs_root)
    topo = probe(reader)
    if snapshot is not None:
        from sactool.topology.snapshot import write_snapshot

        path = write_snapshot(reader, snapshot, force=force)
        from sactool.render import note

        note(f"snapshot: {path} ({len(reader.touched)} paths read); "
             f"to replay: mkdir DIR && tar xzf {path} -C DIR && sactool probe --sysfs-root DIR")
    if fmt == "table":
        from sactool.render.probe import render_probe

        render_probe(topo)
    else:
        from sactool.render import emit_data

        emit_data(topo, fmt)


def register(app) -> None:
    """Add ``probe`` to the typer ``app`` (options as the fast path parses them)."""
    import typer

    from sactool.cli.common import FormatOpt, QuietOpt, SysfsRootOpt, check_format, example, flag

    @app.command(epilog=example("sactool probe", "sactool probe --format json",
                                "sactool probe --snapshot mybox.tar.gz"))
    def probe(
        fmt=FormatOpt,
        sysfs_root: Optional[Path] = SysfsRootOpt,
        snapshot: Optional[Path] = typer.Option(
            None, "--snapshot", help="Also write the files the prober read to this .tar.gz (for bug reports)."),
        force: bool = flag("--force", help="Overwrite an existing --snapshot file."),
        quiet: bool = QuietOpt,
    ) -> None:
        """What memory do I have: NUMA nodes, which is CXL and why, CXL devices, regions, DAX, HMAT, tiers."""
        run_probe(check_format(fmt), sysfs_root, snapshot, force)
