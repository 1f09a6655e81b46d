"""``sactool probe``: probe, optionally snapshot, render.

Light on purpose: :func:`run_probe` is also the typer-free fast path of the console script
(:mod:`sactool.entry`), so this module imports neither typer nor the app at import time;
:func:`register` adds the typer command to the app.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def run_probe(fmt: str = "table", sysfs_root: Optional[Path] = None, snapshot: Optional[Path] = None,
              force: bool = False, plot: Optional[Path] = None, poison: bool = False,
              profile: Optional[Path] = None) -> None:
    """``sactool probe``: probe, optionally snapshot and draw (``plot``: .svg/.png), render (table)
    or emit data (json/yaml). ``poison``: ask the devices for their poison lists (live, root);
    ``profile``: name the rank and pool offset each poisoned range falls in (its devdax rank plan)."""
    from sactool.host.sysfs import SysfsReader
    from sactool.records import refuse_existing
    from sactool.render import check_format
    from sactool.topology import probe

    check_format(fmt)
    plot_fmt = check_plot(plot, force)
    from sactool.fleet.mpi import detect

    fleet = detect()  # under mpirun: every rank probes, rank 0 writes the fleet record
    if fleet is not None:
        if plot is not None:
            from sactool.errors import UsageError

            raise UsageError("--plot draws one machine; under mpirun each host would draw its own",
                             "run sactool probe --plot on each host (or on its --snapshot) without mpirun")
        from sactool.cli.fleet import probe_fleet

        return probe_fleet(fleet, fmt, sysfs_root, snapshot)
    refuse_existing(snapshot, force, "pass --force to overwrite it, or choose another name")
    if snapshot is not None:
        from sactool.records import check_writable

        check_writable(snapshot)   # a missing directory, /proc, a full disk: before the probe
    prof = None
    if profile is not None:
        from sactool.profile import load_profile

        prof = load_profile(profile)   # a bad profile fails before the probe
    reader = SysfsReader(sysfs_root)
    topo = probe(reader, poison=poison)
    if prof is not None:
        topo = with_ranks(topo, reader, prof)
    if snapshot is not None or plot is not None:
        from sactool.errors import settle

        settle()   # what was read is final: a signal from here on finds it saved (issue 27, R5)
    if plot is not None and plot_fmt is not None:   # check_plot gave a format for every --plot
        write_plot(plot, topo, plot_fmt, force=force)
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
        from sactool.render.probe import render_warnings

        emit_data(topo, fmt)
        render_warnings(topo)      # on stderr, as every command with --format json|yaml (-q: none)


def with_ranks(topo, reader, profile):
    """``topo`` with each poisoned range of its health block placed in the profile's rank plan
    (devdax: the rank whose slice holds it and the offset in its pool); unchanged for a numa pool,
    whose pages the kernel places (a poisoned page there is the kernel's to offline). The plan is
    the one made without the known poison — the slices an engine launched before the poison was
    read maps; the next ``serve`` carves around it."""
    from dataclasses import replace

    from sactool.topology.health import locate

    if profile.pool.mode != "devdax" or not any(h.poison for h in topo.health):
        return topo
    slots = plan_slots(topo, reader, profile)
    return replace(topo, health=tuple(replace(h, poison=locate(h.poison, slots)) if h.poison else h
                                      for h in topo.health))


def plan_slots(topo, reader, profile) -> list:
    """The rank plan's slots of ``profile`` on ``topo`` (rank, target, offset_bytes, size_bytes), made
    without the devices' known poison (the plain slices)."""
    from dataclasses import replace

    from sactool.pool.plan import PoolSpec, rank_plan
    from sactool.pool.targets import target_facts, target_names

    targets = [replace(t, poison=None) for t in
               target_facts(topo, reader, target_names(profile.pool), capacity_bytes=profile.pool.capacity_bytes)]
    return list(rank_plan(PoolSpec.of(profile), targets, check_pool=False).slots)


def check_plot(plot: Optional[Path], force: bool) -> Optional[str]:
    """Before any work: ``--plot``'s format from its extension, matplotlib installed, the file new
    (or ``--force``) and writable. None without ``--plot``."""
    if plot is None:
        return None
    from sactool.records import check_writable, refuse_existing
    from sactool.render.figures import plot_format

    fmt = plot_format(plot)
    refuse_existing(plot, force, "pass --force to overwrite it, or choose another --plot")
    check_writable(plot)
    return fmt


def write_plot(plot: Path, topo, fmt: str, *, force: bool, plan=None, rank_gpus=(), gpu_sockets=()) -> None:
    """Draw ``topo`` (and ``plan`` on it) to ``plot`` atomically; the path goes to stderr."""
    from sactool.cli.common import write_result
    from sactool.render import note
    from sactool.render.machine import machine_scene
    from sactool.render.machinedraw import plot_machine

    data = plot_machine(machine_scene(topo, plan, rank_gpus, gpu_sockets), fmt)
    write_result(plot, data, force=force, kind="machine-plot", suffix=f".{fmt}")
    note(f"plot: {plot}")


def register(app) -> None:
    """Add ``probe`` to the typer ``app`` (options as the fast path parses them)."""
    import typer

    from sactool.cli.common import FormatOpt, QuietOpt, SysfsRootOpt, check_format, example, flag

    @app.command(epilog=example("sactool probe", "sactool probe --format json",
                                "sactool probe --snapshot mybox.tar.gz", "sactool probe --plot machine.svg"))
    def probe(
        fmt=FormatOpt,
        sysfs_root: Optional[Path] = SysfsRootOpt,
        snapshot: Optional[Path] = typer.Option(
            None, "--snapshot", help="Also write the files the prober read to this .tar.gz (for bug reports)."),
        plot: Optional[Path] = typer.Option(
            None, "--plot", help="Also draw the machine (sockets, host bridges, links, devices, regions, DAX, "
                                 "nodes, GPUs) to this .svg, .pdf or .png (by the extension; needs matplotlib)."),
        force: bool = flag("--force", help="Overwrite an existing --snapshot / --plot file."),
        poison: bool = flag("--poison", help="Ask each CXL device for its poison list (root; writes "
                                             "memX/trigger_poison_list, reads cxl_poison trace events)."),
        profile: Optional[Path] = typer.Option(
            None, "--profile", "-p", help="Name the rank and pool offset each poisoned range falls in "
                                          "(the profile's devdax rank plan)."),
        quiet: bool = QuietOpt,
    ) -> None:
        """What memory do I have: NUMA nodes, which is CXL and why, CXL devices, regions, DAX, HMAT, tiers, health."""
        run_probe(check_format(fmt), sysfs_root, snapshot, force, plot, poison, profile)
