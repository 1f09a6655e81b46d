"""Terminal view of a :class:`~sactool.topology.Topology`: nodes (kind + evidence), SLIT, CXL tree,
DAX devices, warnings, verdict. Data formats (json/yaml) do not come through here."""

from __future__ import annotations

from rich.markup import escape as esc

from sactool.host.sysfs import format_cpulist
from sactool.topology.model import Topology
from sactool.units import format_bytes, format_rate


def _b(n: int | None) -> str:
    return "?" if n is None else format_bytes(n)


def _hmat_cell(node) -> str:
    h = node.hmat_for(1) or node.hmat_for(0)
    if h is None:
        return "-"
    lat = "?" if h.read_latency_ns is None else str(h.read_latency_ns)
    bw = "?" if h.read_bandwidth_bytes_per_s is None else f"{h.read_bandwidth_bytes_per_s >> 20}"
    src = "from " + ",".join(f"node{i}" for i in h.initiators) if h.initiators else "no initiator link"
    return f"{lat} / {bw} ({src})"


def render_warnings(topo: Topology, err=None) -> None:
    """The topology's warnings on ``err`` (stderr): not data, as for every command (README)."""
    from sactool.render import print_warnings

    print_warnings(topo.warnings, err)


def render_probe(topo: Topology, console=None, err=None) -> None:
    from sactool.render import stderr_console, stdout_console

    c = console or stdout_console()
    _machine_line(topo, c)
    _nodes_table(topo, c)
    _node_evidence(topo, c)
    _cxl(topo, c)
    _dax_table(topo, c)
    _health_table(topo, c)
    io = topo.iomem
    if io is not None and io.soft_reserved:
        c.print("Soft Reserved (EFI specific-purpose memory) in /proc/iomem: "
                + ", ".join(f"{a:#x}-{b:#x}" for a, b in io.soft_reserved))
    _gpus(topo, c)

    render_warnings(topo, err or stderr_console())
    _pool_verdict(topo, c)


def _machine_line(topo: Topology, c) -> None:
    """Which machine this is: this system, or a recording (and where it lies)."""
    m = topo.machine
    if topo.live:
        c.print(f"[bold]{m.get('hostname') or '?'}[/] — this system, kernel {m.get('kernel') or '?'}, "
                f"{m.get('cpus_online') or '?'} CPUs")
    elif topo.origin_of.kind == "generated":
        c.print(f"[bold yellow]GENERATED machine — not a real system[/] ({esc(topo.sysfs_root)}), "
                f"kernel {esc(str(m.get('kernel') or '?'))}: {esc(topo.origin_of.note or '')}")
    else:
        c.print(f"[bold yellow]RECORDED machine — not this system[/] ({topo.sysfs_root}), "
                f"kernel {m.get('kernel') or '?'}")


def _nodes_table(topo: Topology, c) -> None:
    """One row per NUMA node: kind, CPUs, memory, tier, HMAT figures (hugepages where any exist)."""
    from rich.table import Table

    t = Table(title="NUMA nodes", title_justify="left")
    huge = any(h.total for n in topo.nodes for h in n.hugepages)
    cols = ["node", "kind", "CPUs", "memory", "free", "tier", "HMAT read latency / bandwidth MiB/s"]
    for col in cols + (["hugepages free/total"] if huge else []):
        t.add_column(col, overflow="fold")
    for n in topo.nodes:
        row = [n.name, f"[bold]{n.kind}[/]", format_cpulist(n.cpus) or "none", _b(n.mem_total_bytes),
               _b(n.mem_free_bytes), "-" if n.tier is None else str(n.tier), _hmat_cell(n)]
        if huge:
            row.append(", ".join(f"{_b(h.page_size_bytes)}: {h.free}/{h.total}" for h in n.hugepages if h.total)
                       or "-")
        t.add_row(*row)
    c.print(t)


def _node_evidence(topo: Topology, c) -> None:
    """Why each node is classified as it is, the SLIT distances and the demotion switch."""
    from rich.table import Table

    c.print("[bold]Why each node is what it is[/]")
    for n in topo.nodes:
        c.print(f"  {n.name} [bold]{n.kind}[/]: " + esc(" · ".join(n.evidence) or "no evidence"))
    if len(topo.nodes) > 1 and all(n.distances for n in topo.nodes):
        s = Table(title="SLIT distances", title_justify="left")
        s.add_column("from \\ to")
        for n in topo.nodes:
            s.add_column(n.name, justify="right")
        for n in topo.nodes:
            s.add_row(n.name, *(str(n.distance_to(o.id) or "-") for o in topo.nodes))
        c.print(s)
    if topo.demotion_enabled is not None:
        c.print(f"demotion_enabled: {str(topo.demotion_enabled).lower()}")


def _cxl(topo: Topology, c) -> None:
    """The CXL tree (windows → regions → targets → memdevs, then the ports), or why there is none."""
    if topo.memdevs or topo.decoders:
        c.print(_region_tree(topo))
        if topo.ports:
            c.print(_port_tree(topo))
        c.print("[dim]link ceiling = GT/s × lanes × encoding efficiency / 8, per direction: a ceiling, "
                "not a measurement; 'narrowest on path' is the lowest ceiling from the device to its root port[/]")

    elif not topo.cxl_bus:
        c.print("CXL: no /sys/bus/cxl (CXL core not loaded, or no CXL hardware)")
    else:
        c.print("CXL: bus present, no memory devices")


def _region_tree(topo: Topology):
    """Windows, their regions and each region's targets; memdevs in no region at the end."""
    from rich.tree import Tree

    tree = Tree("[bold]CXL[/]")
    placed: set[str] = set()
    for w in topo.windows:
        start = "?" if w.start is None else f"{w.start:#x}"
        wt = tree.add(f"window {w.name}: {_b(w.size_bytes)} at {start}, caps {'+'.join(w.capabilities) or '?'}"
                      + ("" if w.can_create_ram_region else ", cannot create ram regions"))
        for reg in (r for r in topo.regions if r.root_decoder == w.name):
            res = f"{reg.resource:#x}" if reg.resource is not None else "unallocated"
            rt = wt.add(f"{reg.describe()}: {_b(reg.size_bytes)} at {res}, granularity "
                        f"{reg.interleave_granularity_bytes} B, {'committed' if reg.committed else 'NOT committed'}")
            decoders = {d.name: d for d in topo.decoders}
            for i, (tgt, mem) in enumerate(zip(reg.targets, reg.memdevs)):
                md = topo.memdev(mem) if mem else None
                rt.add(f"target{i} {tgt}{_dpa(decoders.get(tgt))} → " + (_memdev_line(md) if md else "[red]no memdev[/]"))
                if mem:
                    placed.add(mem)
    for md in topo.memdevs:
        if md.name not in placed:
            tree.add(_memdev_line(md) + " [dim](in no region)[/]")
    return tree


def _dpa(d) -> str:
    """`` (DPA 0x0 + 512.00 MiB)``: the device-physical range an endpoint decoder maps, or ''."""
    if d is None or d.dpa_resource is None or not d.dpa_size_bytes:
        return ""
    return f" (DPA {d.dpa_resource:#x} + {_b(d.dpa_size_bytes)}{', locked' if d.locked else ''})"


def _blocks(x) -> str:
    """``4/4 movable``: memory blocks online of those in the range, and their zone (system-ram)."""
    if x.memory_blocks is None:
        return "-"
    zone = {True: " movable", False: " not movable"}.get(x.movable, "")
    return f"{x.memory_blocks_online}/{x.memory_blocks}{zone}"


def _dax_table(topo: Topology, c) -> None:
    """The DAX devices: mode, size, target node, the CPU node near them, memory blocks online."""
    from rich.table import Table

    if not topo.dax_devices:
        return
    d = Table(title="DAX devices", title_justify="left")
    for col in ("device", "mode", "size", "target node", "align", "from", "CPU node", "blocks online"):
        d.add_column(col)
    for x in topo.dax_devices:
        loc = topo.dax_locality(x.name)
        blocks = _blocks(x)
        d.add_row(x.name, x.mode or (f"driver {x.driver}" if x.driver else "unbound"),
                  _b(x.size_bytes), "-" if x.target_node is None else f"node{x.target_node}",
                  _b(x.align_bytes), x.region or x.source or "?", _cpu_cell(loc), blocks)
    c.print(d)


def _health_table(topo: Topology, c) -> None:
    """Per memdev: media health (and how it was read), AER totals, error-handling mode, poison."""
    from rich.table import Table

    if not topo.health:
        return
    if all(h.media is None and h.aer is None and h.poison is None for h in topo.health):
        reasons = sorted({h.media_reason for h in topo.health})
        c.print(f"CXL device health: nothing read ({esc('; '.join(reasons))})")
        return
    t = Table(title="CXL device health", title_justify="left")
    for col in ("memdev", "media", "life used", "temp", "dirty shutdowns", "corrected errors", "AER cor/nonfatal/fatal",
                "errors handled", "poison"):
        t.add_column(col)
    notes = []
    for h in topo.health:
        m = h.media
        if m is None:
            media, life, temp, dirty, corr = "?", "?", "?", "?", "?"
            notes.append(f"{h.memdev} media health: {h.media_reason}")
        else:
            media = m.media_status + (f" ({', '.join(m.health_status)})" if m.health_status else "")
            media = f"[red]{esc(media)}[/]" if m.degraded else esc(media)
            life = "n/a" if m.life_used_percent is None else f"{m.life_used_percent}%"
            temp = "n/a" if m.temperature_c is None else f"{m.temperature_c} °C"
            dirty, corr = str(m.dirty_shutdowns), f"{m.corrected_volatile_errors} vol, {m.corrected_persistent_errors} pers"
            notes.append(f"{h.memdev} media health from the {m.source}")
        aer = "?" if h.aer is None else f"{h.aer.correctable}/{h.aer.nonfatal}/{h.aer.fatal}"
        poison = "not read" if h.poison is None else (str(len(h.poison)) + " range(s)" if h.poison else "none")
        t.add_row(h.memdev, media, life, temp, dirty, corr, aer, h.error_mode, poison)
    c.print(t)
    for h in topo.health:
        for p in h.poison or ():
            c.print(f"  [red]poison[/] {esc(p.where())}")
    reasons = sorted({h.poison_reason for h in topo.health if h.poison is None and h.poison_reason})
    for line in notes + [f"poison list: {r}" for r in reasons] + sorted({f"errors handled {h.error_mode}: {h.error_mode_evidence}"
                                                                       for h in topo.health}):
        c.print(f"  {esc(line)}")


def _pool_verdict(topo: Topology, c) -> None:
    """The KV pool verdict and, for each pool node, the CPU node its threads run on."""
    from rich.table import Table

    v = topo.verdict
    label = "KV pool (stand-in)" if v.stand_in else "KV pool"
    nodes = ", ".join(f"node{i}" for i in v.pool_nodes) or "none"
    c.print(f"[bold]{label}: {nodes}[/] — {esc(v.reason)}")
    _devdax_pool(topo, c)
    if v.pool:
        p = Table(title="Pool locality (threads for each pool node run on its CPU node)", title_justify="left")
        for col in ("pool node", "CPU node", "SLIT CPU→node", "from", "evidence"):
            p.add_column(col, overflow="fold")
        for loc in v.pool:
            p.add_row(f"node{loc.node}", _cpu_cell(loc), "-" if loc.distance is None else str(loc.distance),
                      loc.source, esc(loc.evidence))
        c.print(p)


def _devdax_pool(topo: Topology, c) -> None:
    """The verdict's devdax pool (the SAC shape: tune and serve use the devices, not the stand-in)."""
    if topo.verdict.devdax_note:
        c.print(topo.verdict.devdax_note, markup=False)


def _cpu_cell(loc) -> str:
    if loc.cpu_node is None:
        return "?"
    return f"node{loc.cpu_node}" + (" (not known to be near)" if loc.source == "none" else "")


def _memdev_line(md) -> str:
    lk = md.link
    link = "no PCIe link info"
    if lk is not None:
        link = f"{lk.pci_device} {lk.speed_gt_s or '?'} GT/s x{lk.width or '?'}"
        if lk.ceiling_bytes_per_s:
            link += f" ({lk.encoding}) ceiling {format_rate(lk.ceiling_bytes_per_s)}/dir"
    aff = "?" if md.affinity_node is None else f"node{md.affinity_node}"
    return esc(f"{md.name} serial {md.serial or '?'}: ram {_b(md.ram_size_bytes)}, pmem {_b(md.pmem_size_bytes)}, "
            f"fw {md.firmware_version or '?'}, device affinity {aff}, {link}")


def _link_text(lk) -> str:
    if lk is None:
        return "?"
    out = f"{lk.pci_device} {lk.speed_gt_s or '?'} GT/s x{lk.width or '?'}"
    if lk.ceiling_bytes_per_s:
        out += f", ceiling {format_rate(lk.ceiling_bytes_per_s)}/dir"
    return out


def _port_tree(topo: Topology):
    """root → host bridge → switch ports → endpoint → memdev: which memdevs share a bridge or switch."""
    from rich.tree import Tree

    by_parent: dict = {}
    for p in topo.ports:
        by_parent.setdefault(p.parent, []).append(p)
    mem_of = {m.endpoint: m for m in topo.memdevs if m.endpoint}
    hb_node = {m.host_bridge: m.host_bridge_node for m in topo.memdevs if m.host_bridge}

    def label(p) -> str:
        if p.kind == "root":
            return f"{p.name} (CXL root {p.uport or '?'})"
        if p.kind == "host-bridge":
            node = hb_node.get(p.uport)
            return f"{p.name} host bridge {p.uport}" + ("" if node is None else f" on node{node}")
        if p.kind == "switch":
            return f"{p.name} switch (upstream port {p.uport or '?'}) below {p.parent_dport or '?'}"
        m = mem_of.get(p.name)
        tail = f" → {m.name}, narrowest on path: {_link_text(m.narrowest_link)}" if m else ""
        return f"{p.name} below {p.parent_dport or '?'}{tail}"

    tree = Tree("[bold]CXL ports[/]")

    def add(node, parent):
        for p in by_parent.get(parent, []):
            add(node.add(esc(label(p))), p.name)

    add(tree, None)
    return tree


def _gpus(topo: Topology, c) -> None:
    from rich.table import Table

    if not topo.gpus:
        c.print(f"GPUs: none — {esc(topo.gpu_scan or 'not scanned')}")
        return
    g = Table(title="GPUs (PCI class, read from sysfs)", title_justify="left")
    for col in ("PCI device", "vendor:device", "class", "driver", "socket", "link", "narrowest on path"):
        g.add_column(col, overflow="fold")
    for x in topo.gpus:
        low = x.narrowest_link
        g.add_row(x.pci_device, f"{x.vendor_name} {x.vendor}:{x.device}", x.class_name or "?", x.driver or "-",
                  "?" if x.cpu_node is None else f"node{x.cpu_node}", _short_link(x.link),
                  "-" if low is None else (_short_link(low) + ("" if low.pci_device == x.pci_device
                                                              else f" at {low.pci_device}")))
    c.print(g)
    for x in topo.gpus:
        c.print(f"  {x.pci_device} socket: {esc(x.cpu_node_evidence)}")


def _short_link(lk) -> str:
    if lk is None:
        return "?"
    out = f"{lk.speed_gt_s or '?'} GT/s x{lk.width or '?'}"
    return out + (f" ({format_rate(lk.ceiling_bytes_per_s)}/dir)" if lk.ceiling_bytes_per_s else "")
