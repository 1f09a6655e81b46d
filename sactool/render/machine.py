"""The machine as a picture (``sactool probe --plot``, ``sactool serve --dry-run --plot``), as lstopo
would draw it for this purpose. Each socket gets an area headed by a box naming its CPUs and its
DRAM node(s) — a socket is a CPU node, or the CPU nodes nearer to each other than SLIT's remote
distance 20 (sub-NUMA clusters, :func:`socket_groups`), one line per node; the recordings carry no
``cpuN/topology``, so SLIT is what tells them apart —; inside it, top to bottom, one column per
CXL memdev:

    CXL host bridge (names its CXL port)
    switch, when the memdev's path has one      ← each PCIe link labelled with its negotiated speed ×
    memdev                                         width, the per-direction ceiling it gives and the
    region (interleave ways, granularity)          lower capability of its two ends; the narrowest
    DAX device (mode, size, memory blocks)         link of the path thick and orange, a downgraded
    the NUMA node its memory became                one in red

and, to the left, the socket's GPUs stacked in columns of :data:`GPUS_PER_COLUMN`, each naming its
host bridge and its links (a GPU's path can be long and there can be many, so its links are text
in its box), reached by a trunk line from the socket. With a rank plan each GPU box names its
rank(s), target and slice, and a line in the target's colour runs from the GPU, down beside its
stack, along a lane of its own under everything and up into the target.

:func:`machine_scene` lays it out (pure data, no matplotlib); :mod:`sactool.render.machinedraw`
draws it (:func:`~sactool.render.machinedraw.plot_machine`: SVG or PNG bytes). Every box carries
the kernel's name of what it shows as its SVG ``id`` (``socket-node0``, ``pci0000:0c``, ``mem1``,
``region0``, ``dax0.0``, ``node2``, ``gpu-0000:18:00.0``; rank lines ``arrow-rank-3``) and as text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from sactool.host.sysfs import format_cpulist
from sactool.topology.link import link_ceiling
from sactool.topology.model import PcieLink, Topology
from sactool.units import format_bytes

ROW_H = 0.95                       # inches per row
W_GPU, W_MEM, GAP, SOCKET_GAP = 2.2, 2.3, 0.3, 0.35   # box widths and the gaps between columns (inches)
GPUS_PER_COLUMN = 4                # GPUs stack in columns of this many under their socket
HIGHLIGHT = "!"                    # a box line starting with it is drawn as the narrowest link
WARN = "^"                         # …as a link negotiated below what both its ends can do
LINE_H = 0.16                      # inches per text line in a box
COLOURS = {"socket": "#e8eef7", "bridge": "#f1f1f1", "switch": "#f1f1f1", "memdev": "#fdf1dc", "gpu": "#e3f4e1",
           "region": "#fbe3e3", "dax": "#ece3f7", "node": "#dcefff", "missing": "#ffffff"}
TARGET_COLOURS = ["#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#393b79", "#bcbd22", "#7f7f7f", "#e377c2"]
"""One colour per pool target for the rank lines: none red or orange, the colours of a downgraded and of the
narrowest link (machinedraw: ``#c00000``, ``#b35900``) — a rank line to dax1.0 in red read as a bad link."""


@dataclass
class Box:
    gid: str                   # the kernel's name of the thing (SVG id)
    kind: str                  # a key of COLOURS
    x: float                   # centre, inches from the left
    y: float                   # centre, in row units (0 at the top, growing down)
    w: float                   # inches
    lines: list[str]
    h: float = 0.0             # 0: from the number of lines
    dashed: bool = False

    def height(self) -> float:
        return max(self.h, 0.16 + LINE_H * len(self.lines))


@dataclass
class Edge:
    a: str                     # gid of the upper box
    b: str                     # gid of the lower box
    label: str = ""
    narrowest: bool = False
    x: float | None = None     # where the line runs down, inches (None: between box centres)
    kind: str = "link"         # "link" | "member" (memdev → region → dax → node) | "trunk" (socket → GPU) | "rank"
    colour: str | None = None


@dataclass
class Scene:
    title: str
    boxes: dict[str, Box] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    width: float = 1.0         # inches
    rows: float = 1.0

    def add(self, box: Box) -> Box:
        self.boxes[box.gid] = box
        return box


# ---- links --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hop:
    """One physical PCIe link on a device's path: its upstream and downstream function's reports."""

    up: PcieLink
    down: PcieLink | None

    @property
    def functions(self) -> tuple[str, ...]:
        return (self.up.pci_device,) + ((self.down.pci_device,) if self.down else ())

    def _caps(self) -> tuple[float | None, int | None]:
        ends = [x for x in (self.up, self.down) if x is not None]
        speeds = [x.max_speed_gt_s for x in ends if x.max_speed_gt_s]
        widths = [x.max_width for x in ends if x.max_width]
        return (min(speeds) if speeds else None), (min(widths) if widths else None)

    @property
    def downgraded(self) -> bool:
        """Negotiated slower or narrower than both ends can do (a retrained or badly seated link)."""
        lk = self.down or self.up
        cs, cw = self._caps()
        return bool((cs and lk.speed_gt_s and lk.speed_gt_s < cs) or (cw and lk.width and lk.width < cw))

    def label(self) -> str:
        """``32 GT/s x16 · 63.0 GB/s/dir · cap 32 GT/s x16``: negotiated (LnkSta), the ceiling it gives,
        and what both ends could do (the lower LnkCap of the two)."""
        lk = self.down or self.up
        speed, width = lk.speed_gt_s, lk.width
        _, _, ceiling = link_ceiling(speed, width)
        cs, cw = self._caps()
        cap = f"cap {_gt(cs)} x{cw or '?'}"
        return (f"{_gt(speed)} x{width if width else '?'} · "
                + (f"{ceiling / 1e9:.1f} GB/s/dir" if ceiling else "ceiling ?") + f" · {cap}")


def _gt(v: float | None) -> str:
    return "? GT/s" if v is None else f"{v:g} GT/s"


def hops(path_links: Sequence[PcieLink]) -> list[Hop]:
    """The physical links of a path (``path_links`` is device first): root port ↔ first function
    below it, then each switch downstream port ↔ the function below; a switch's upstream and
    downstream port are joined inside the switch, not by a link."""
    fns = list(reversed(path_links))        # root port first
    return [Hop(fns[i], fns[i + 1] if i + 1 < len(fns) else None) for i in range(0, len(fns), 2)]


# ---- layout -------------------------------------------------------------------------------------
@dataclass
class _Dev:
    gid: str
    kind: str                 # "gpu" | "memdev" | "missing"
    socket: int | None
    bridge: str | None
    hops: list[Hop]
    narrowest: str | None     # pci_device of the path's narrowest link
    lines: list[str]
    switch: str | None = None


def _socket_of_memdev(m, cpu_nodes: set[int]) -> int | None:
    for n in (m.host_bridge_node, m.affinity_node):
        if n in cpu_nodes:
            return n
    return None


def _gpu_link_lines(g) -> list[str]:
    """One or two lines per physical link on a GPU's path (root port first), the narrowest marked."""
    out = []
    for hop in hops(g.path_links):
        text = hop.label()
        mark = HIGHLIGHT if g.narrowest_link is not None and g.narrowest_link.pci_device in hop.functions else ""
        neg, _, cap = text.partition(" · cap ")
        out += [f"{mark}link {neg.replace(' · ', ' = ', 1)}", f"{mark}cap {cap}" + (" · narrowest" if mark else "")]
        if hop.downgraded:
            out.append(f"{WARN}negotiated below its cap (downgraded)")
    return out


def _devices(topo: Topology, cpu_nodes: set[int], extra_gpus: Sequence[tuple[str, int | None, str]]) -> list[_Dev]:
    devs: list[_Dev] = []
    for g in topo.gpus:
        name = " ".join(x for x in (g.vendor_name, g.device) if x) or "GPU"
        devs.append(_Dev(f"gpu-{g.pci_device}", "gpu", g.cpu_node if g.cpu_node in cpu_nodes else None,
                         g.host_bridge, [], None,
                         [f"GPU {g.pci_device}", name + (f" ({g.driver})" if g.driver else "")
                          + (f" · {g.host_bridge}" if g.host_bridge else ""), *_gpu_link_lines(g)]))
    for gid, socket, text in extra_gpus:
        devs.append(_Dev(gid, "missing", socket, None, [], None, [text, "not seen in sysfs"]))
    for m in topo.memdevs:
        size = " + ".join(f"{k} {format_bytes(v)}" for k, v in (("ram", m.ram_size_bytes), ("pmem", m.pmem_size_bytes))
                          if v)
        devs.append(_Dev(m.name, "memdev", _socket_of_memdev(m, cpu_nodes), m.host_bridge, hops(m.path_links),
                         m.narrowest_link.pci_device if m.narrowest_link else None,
                         [f"{m.name} (CXL memdev)", f"serial {m.serial or '?'} · {size or 'no capacity'}"]))
    return devs


REMOTE_DISTANCE = 20   # SLIT: Linux's REMOTE_DISTANCE (include/linux/topology.h), ACPI's default remote


def socket_groups(topo: Topology) -> dict[int, int]:
    """Each CPU node → the first CPU node of its socket as the picture draws it: CPU nodes nearer to
    each other than ``REMOTE_DISTANCE`` both ways (SLIT: sub-NUMA clusters, SNC/NPS, read 11-12)
    are one socket; without a SLIT entry each CPU node is its own."""
    cpu = sorted(n.id for n in topo.nodes if n.has_cpu)
    dist = {(n.id, m): d for n in topo.nodes for m, d in n.distances}
    leader = {n: n for n in cpu}
    for a in cpu:
        for b in cpu:
            if a < b and dist.get((a, b), 255) < REMOTE_DISTANCE and dist.get((b, a), 255) < REMOTE_DISTANCE:
                la, lb = leader[a], leader[b]
                for n, v in leader.items():
                    if v == max(la, lb):
                        leader[n] = min(la, lb)
    return leader


def _socket_lines(topo: Topology, sid: int | None, memory_nodes: list, members: Sequence[int] = ()) -> list[str]:
    if sid is None:
        return ["socket unknown"]
    if len(members) > 1:       # sub-NUMA clusters: one line per node with its CPUs
        dist = {(n.id, m): d for n in topo.nodes if n.id in members for m, d in n.distances if m in members}
        far = max(d for (a, b), d in dist.items() if a != b)
        lines = [f"socket {' + '.join(f'node{m}' for m in members)} (SLIT {far} between them)"]
        for m in memory_nodes:
            tier = f" · tier {m.tier}" if m.tier is not None else ""
            size = format_bytes(m.mem_total_bytes) if m.mem_total_bytes else "?"
            cpus = f" · CPUs {format_cpulist(m.cpus)}" if m.has_cpu else " (CPU-less)"
            lines.append(f"{m.name} {m.kind} {size}{tier}{cpus}")
        return lines
    n = topo.node(sid)
    cpus = format_cpulist(n.cpus) or "none"
    head = f"socket node{sid} · CPUs {cpus}"
    # a long CPU list (SNC, SMT siblings: 0-42,256-298) gets a line of its own
    lines = [head] if len(head) <= 30 else [f"socket node{sid}", f"CPUs {cpus}"]
    for m in memory_nodes:
        tier = f" · tier {m.tier}" if m.tier is not None else ""
        lines.append(f"{m.name} {m.kind} {format_bytes(m.mem_total_bytes) if m.mem_total_bytes else '?'}{tier}"
                     + ("" if m.has_cpu else " (CPU-less)"))
    return lines


def machine_scene(topo: Topology, plan=None, rank_gpus: Sequence[str | None] = (),
                  gpu_sockets: Sequence[int | None] = (), title: str | None = None) -> Scene:
    """Lay the machine out (and ``plan``'s ranks on it, when given).

    ``rank_gpus[r]``: gid of rank r's GPU box (``gpu-<bdf>``) or None when the GPU is not in the
    topology; then a placeholder box is drawn on socket ``gpu_sockets[r]`` (the profile's
    ``pool.gpu_local_nodes``), marked as not seen."""
    group = socket_groups(topo)
    cpu_nodes = set(group)
    dax_nodes = {d.target_node for d in topo.dax_devices if d.mode == "system-ram" and d.target_node is not None}
    extra = []
    if plan is not None:
        for s in plan.slots:
            if s.rank >= len(rank_gpus) or rank_gpus[s.rank] is None:
                sock = gpu_sockets[s.rank] if s.rank < len(gpu_sockets) else None
                extra.append((f"gpu-{s.gpu}", sock if sock in cpu_nodes else None, f"GPU {s.gpu}"))
    extra = list(dict.fromkeys(extra))
    devs = _devices(topo, cpu_nodes, extra)
    for d in devs:
        d.socket = group.get(d.socket) if d.socket is not None else None
    sockets: list[int | None] = sorted(set(group.values())) + ([None] if any(d.socket is None for d in devs) else [])
    order = {"gpu": 0, "missing": 0, "memdev": 1}
    sc = Scene(title or _title(topo, plan))
    deepest = max((len(d.hops) for d in devs), default=1)
    rows = {"socket": 0, "bridge": 0.85}
    dev_row = rows["bridge"] + max(1, deepest) * 1.0 + 0.1
    placed: dict[str, float] = {}
    left = 0.0                                   # the left edge of the next column
    for sid in sockets:
        mine = [d for d in devs if d.socket == sid]
        start = left
        left = _gpu_block(sc, [d for d in mine if d.kind != "memdev"], left, dev_row)
        mems = sorted((d for d in mine if d.kind == "memdev"), key=lambda d: (d.bridge or "", d.gid))
        for bridge in dict.fromkeys(d.bridge for d in mems):
            first = left
            for d in (d for d in mems if d.bridge == bridge):
                placed[d.gid] = left + W_MEM / 2
                _device_column(sc, d, left + W_MEM / 2, W_MEM, dev_row, rows["bridge"])
                left += W_MEM + GAP
            if bridge is not None:
                port = next((p for p in topo.ports if p.uport == bridge), None) or next(
                    (topo_port(topo, m) for m in topo.memdevs if m.host_bridge == bridge and topo_port(topo, m)), None)
                kind = f"CXL host bridge ({port.name})" if port else "PCI host bridge"
                sc.add(Box(bridge, "bridge", (first + left - GAP) / 2, rows["bridge"], left - GAP - first,
                           [bridge, kind]))
        if left == start:
            left += W_MEM + GAP
        mem = [n for n in topo.nodes if n.id not in dax_nodes and _drawn_socket(topo, group, n) == sid]
        sock = f"socket-node{sid}" if sid is not None else "socket-unknown"
        sc.add(Box(sock, "socket", (start + left - GAP) / 2, rows["socket"], left - GAP - start,
                   _socket_lines(topo, sid, mem, sorted(n for n, v in group.items() if v == sid))))
        for d in mine:
            if d.kind != "memdev":
                sc.edges.append(Edge(sock, d.gid, kind="trunk", x=start + 0.12))
        left += SOCKET_GAP
    sc.width = left
    _memory_rows(sc, topo, placed, dev_row)
    if plan is not None:
        _rank_edges(sc, topo, plan, rank_gpus)
    _stack(sc)
    _below_the_title(sc)
    sc.rows = max(b.y + b.height() / 2 / ROW_H + 0.25 for b in sc.boxes.values())
    if not devs:
        sc.notes.append("no CXL memory device and no GPU seen" + ("" if topo.gpus or topo.gpu_scan is None
                                                                  else f" ({topo.gpu_scan})"))
    return sc


def topo_port(topo: Topology, m):
    """The host-bridge CXL port on a memdev's port path (``port2`` in root0 → port2 → endpoint4)."""
    kinds = {p.name: p for p in topo.ports}
    return next((kinds[n] for n in m.ports if n in kinds and kinds[n].kind == "host-bridge"), None)


def _gpu_block(sc: Scene, gpus: list[_Dev], left: float, dev_row: float) -> float:
    """GPUs stacked in columns of :data:`GPUS_PER_COLUMN` from ``left`` (a trunk from the socket
    reaches each); returns the next column's left edge."""
    for i, d in enumerate(sorted(gpus, key=lambda d: d.gid)):
        col = i // GPUS_PER_COLUMN
        x = left + 0.25 + col * (W_GPU + GAP) + W_GPU / 2
        # y: the top of the stack for now; :func:`_stack` places each box once its lines are final
        sc.add(Box(d.gid, d.kind, x, dev_row - 0.45, W_GPU, list(d.lines), dashed=d.kind == "missing"))
    cols = -(-len(gpus) // GPUS_PER_COLUMN)
    return left + (0.25 + cols * (W_GPU + GAP) if gpus else 0.0)


def _stack(sc: Scene) -> None:
    """Stacked GPU boxes placed one under the other now their heights are final."""
    cols: dict[float, list[Box]] = {}
    for b in sc.boxes.values():
        if b.kind in ("gpu", "missing"):
            cols.setdefault(b.x, []).append(b)
    for boxes in cols.values():
        y = min(b.y for b in boxes)
        for b in boxes:
            b.y = y + b.height() / 2 / ROW_H
            y += (b.height() + 0.18) / ROW_H


def _below_the_title(sc: Scene) -> None:
    """Everything moved down as far as a socket box with more lines than three (sub-NUMA
    clusters: a line per node) reaches above a three-line one, so it stays below the title."""
    tallest = max((b.height() for b in sc.boxes.values() if b.kind == "socket"), default=0.0)
    lift = (tallest - (0.16 + LINE_H * 3)) / 2 / ROW_H
    if lift > 0:
        for b in sc.boxes.values():
            b.y += lift


def _home(topo: Topology, n) -> int | None:
    """The socket a memory node is drawn in: its own, else the CPU node next to it."""
    if n.has_cpu:
        return n.id
    try:
        return topo.locality(n.id).cpu_node
    except Exception:  # noqa: BLE001 - a node without a CPU node is drawn under "socket unknown"
        return None


def _drawn_socket(topo: Topology, group: dict[int, int], n) -> int | None:
    """The socket box a memory node is drawn in: its home's socket group (the home itself when
    ungrouped), None when it has no home."""
    home = _home(topo, n)
    return None if home is None else group.get(home, home)


def _device_column(sc: Scene, d: _Dev, x: float, w: float, dev_row: float, bridge_row: float) -> None:
    """The device box and the links above it, each hop on its own row segment."""
    sc.add(Box(d.gid, d.kind, x, dev_row, w, list(d.lines), dashed=d.kind == "missing"))
    if d.bridge is None or not d.hops:
        return
    upper = d.bridge
    for i, hop in enumerate(d.hops):
        last = i == len(d.hops) - 1
        lower = d.gid if last else f"switch-{hop.down.pci_device if hop.down else hop.up.pci_device}"
        if not last:
            sc.add(Box(lower, "switch", x, bridge_row + (i + 1) * 1.0, w, [f"switch {lower[7:]}", "upstream port"]))
        sc.edges.append(Edge(upper, lower, hop.label() + (" · downgraded" if hop.downgraded else ""),
                             d.narrowest in hop.functions, x=x))
        upper = lower


def _memory_rows(sc: Scene, topo: Topology, placed: dict[str, float], dev_row: float) -> None:
    """Regions under their memdevs, DAX devices under their regions, nodes under system-ram DAX."""
    reg_row, dax_row, node_row = dev_row + 0.95, dev_row + 1.8, dev_row + 2.7
    spare = sc.width
    reg_x: dict[str, float] = {}
    for reg in topo.regions:
        xs = [placed[m] for m in reg.memdevs if m in placed]
        x = sum(xs) / len(xs) if xs else spare + W_MEM / 2
        if not xs:
            spare += W_MEM + GAP
        reg_x[reg.name] = x
        ways = f"{reg.interleave_ways}-way" if reg.interleave_ways else "?-way"
        gran = f" · {reg.interleave_granularity_bytes} B" if reg.interleave_granularity_bytes else ""
        state = "" if reg.committed else " · NOT committed"
        sc.add(Box(reg.name, "region", x, reg_row, W_MEM,
                   [f"{reg.name} ({reg.mode or '?'})", f"{ways}{gran} · {format_bytes(reg.size_bytes or 0)}{state}"]))
        for i, m in enumerate(reg.memdevs):
            if m in placed:
                sc.edges.append(Edge(m, reg.name, f"position {i}" if (reg.interleave_ways or 1) > 1 else "",
                                     kind="member"))
    used: dict[float, int] = {}
    for dx in topo.dax_devices:
        region = dx.region or ""
        if region in reg_x:
            x = reg_x[region]
        else:
            x, spare = spare + W_MEM / 2, spare + W_MEM + GAP
        k = used.get(x, 0)
        used[x] = k + 1
        x += 0.0 if k == 0 else 0.5 * k
        loc = topo.dax_locality(dx.name)
        mode = dx.mode or (f"driver {dx.driver}" if dx.driver else "unbound")
        blocks = ""
        if dx.memory_blocks is not None:
            blocks = f" · {dx.memory_blocks_online}/{dx.memory_blocks} blocks" + (" movable" if dx.movable else "")
        sc.add(Box(dx.name, "dax", x, dax_row, W_MEM,
                   [f"{dx.name} ({mode})", f"{format_bytes(dx.size_bytes or 0)}{blocks}",
                    f"target node{dx.target_node}" + (f" · near node{loc.cpu_node}" if loc.cpu_node is not None else "")]))
        if dx.region in reg_x:
            sc.edges.append(Edge(dx.region, dx.name, kind="member"))
        if dx.mode == "system-ram" and dx.target_node in topo.node_ids:
            n = topo.node(dx.target_node)
            sc.add(Box(n.name, "node", x, node_row, W_MEM,
                       [f"{n.name} · {n.kind} · CPU-less" if not n.has_cpu else f"{n.name} · {n.kind}",
                        f"{format_bytes(n.mem_total_bytes or 0)}" + (f" · tier {n.tier}" if n.tier is not None else "")]))
            sc.edges.append(Edge(dx.name, n.name, "kmem", kind="member"))
    sc.width = max(sc.width, spare)


def _rank_edges(sc: Scene, topo: Topology, plan, rank_gpus: Sequence[str | None]) -> None:
    """Each rank's GPU → its pool target; the GPU box names the rank(s) and the slice."""
    targets = list(dict.fromkeys(s.target for s in plan.slots))
    colour = {t: TARGET_COLOURS[i % len(TARGET_COLOURS)] for i, t in enumerate(targets)}
    for s in plan.slots:
        gid = rank_gpus[s.rank] if s.rank < len(rank_gpus) and rank_gpus[s.rank] else f"gpu-{s.gpu}"
        box = sc.boxes.get(gid)
        if box is None:
            continue
        if s.offset_bytes is not None and s.size_bytes is not None:
            where = f"[{format_bytes(s.offset_bytes)}, +{format_bytes(s.size_bytes)})"
        else:
            where = f"{format_bytes(s.size_bytes)} share" if s.size_bytes is not None else "size ?"
        box.lines += [f"rank {s.rank} → {s.target}", where]
        if s.target in sc.boxes:     # a DAX device or a CXL node; a socket's own DRAM gets no line
            sc.edges.append(Edge(gid, s.target, f"rank {s.rank}", kind="rank", colour=colour[s.target]))
    sc.notes.append(f"rank plan ({plan.rule}): " + "; ".join(
        f"{t}: ranks {','.join(str(s.rank) for s in plan.slots if s.target == t)}" for t in targets))


def _title(topo: Topology, plan) -> str:
    kind = topo.origin_of.kind
    name = topo.sysfs_root.rstrip('/').rsplit('/', 1)[-1]
    where = {"live": "this system", "recording": f"recording {name}", "generated": f"generated tree {name}"}[kind]
    kernel = topo.machine.get("kernel") or "?"
    return f"{'rank plan on ' if plan is not None else ''}{where} (kernel {kernel})"
