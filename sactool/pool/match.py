"""Is the profile's pool on this machine what it was where the profile was tuned?

A profile names its pool by the kernel's numbers (``node2``, ``dax0.0``), and those numbers mean
other memory on another machine: a profile tuned on the two-socket SAC box (``pool.nodes: [2, 3]``,
CXL there) names, on an SNC-3 server, two DRAM sub-NUMA nodes with CPUs — the pool would land in
DRAM while the user believes it is on CXL. So before anything starts, each pool target is checked
against this machine's probe:

* a NUMA target must be CXL memory here (probe's ``kind``) and CPU-less, unless the profile says a
  DRAM node stood in (``pool.stand_in``) — refused otherwise (TopologyError, exit 3);
* a devdax target must come from CXL memory (``daxX.Y`` of a CXL region) — refused otherwise;
* its size must be what tune planned with (``request.pool_targets[].capacity_bytes``): a device of
  another size, or a node holding less in all than tune counted free on it, is a warning;
* the machine itself (:func:`sactool.host.machine.machine_differences` over the profile's ``machine``
  block) — another host, CPU model or NUMA layout is a warning, refused with ``serve --strict``
  (RecordError, exit 4).

Engine-neutral: pool settings, the profile's record of where it was tuned, a probed topology and this
machine's block in; check lines out (serve prints them). It imports no engine, serve, tune or simulate.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from sactool.errors import RecordError, TopologyError
from sactool.records import WarningLine
from sactool.units import format_bytes


def check_targets(pool: Any, topo: Any, tuned_targets: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """Check lines for each pool target of ``pool`` (a profile's PoolSettings) on ``topo``; raises
    TopologyError for a target that is not CXL memory here. ``tuned_targets``: the profile's
    ``request.pool_targets`` (name, capacity_bytes, source) — what tune planned with."""
    where = "here" if topo.live else "in the recording"
    tuned = {str(t.get("name")): t for t in tuned_targets if isinstance(t, Mapping)}
    lines: list[str] = []
    if pool.mode == "devdax":
        for name in pool.dax_devices:
            dev = next((d for d in topo.dax_devices if d.name == name), None)
            if dev is None:
                continue            # the pool check names the missing device (exit 3)
            if dev.source != "cxl":
                raise TopologyError(
                    f"DAX device {name} {where} is not CXL memory (it comes from "
                    f"{dev.source or 'an unknown source'}{', region ' + dev.region if dev.region else ''}): the pool "
                    "would not be on CXL", "run 'sactool probe' to see the CXL devices, and re-tune the profile on "
                    "this machine (sactool tune)")
            lines.append(f"{name}: CXL {where} ({dev.region or 'region unknown'}), "
                         f"{format_bytes(dev.size_bytes) if dev.size_bytes else 'size unknown'}")
            lines += _size_warning(name, dev.size_bytes, tuned.get(name), device=True)
        return lines
    for nid in pool.nodes:
        try:
            node = topo.node(nid)
        except TopologyError:
            continue                # the pool check names the missing node (exit 3)
        if pool.stand_in:
            lines.append(f"node{nid}: {node.kind} {where}; the profile says a DRAM node stood in for CXL "
                         "(pool.stand_in)")
            continue
        if node.kind != "cxl" or node.has_cpu:
            what = node.kind.upper() if node.kind in ("dram", "hbm") else f"{node.kind} memory"
            cpus = f" with CPUs {_cpus(node.cpus)}" if node.has_cpu else ""
            raise TopologyError(
                f"pool node{nid} is {what}{cpus} {where}, not a CPU-less CXL node: the profile's pool would land "
                f"in {'DRAM' if node.kind == 'dram' else 'that memory'}, not on CXL",
                "the profile was tuned on another machine: re-tune here (sactool tune), or fix pool.nodes to this "
                f"machine's CXL nodes ({_cxl_nodes(topo) or 'none: see sactool probe'})")
        lines.append(f"node{nid}: CXL, CPU-less {where}, {format_bytes(node.mem_total_bytes or 0)}")
        lines += _size_warning(f"node{nid}", node.mem_total_bytes, tuned.get(f"node{nid}"), device=False)
    return lines


def _size_warning(name: str, size: int | None, tuned: Mapping[str, Any] | None, *, device: bool) -> list[str]:
    """A warning when the target's size here differs from what tune planned with."""
    if size is None or not tuned or not isinstance(tuned.get("capacity_bytes"), int):
        return []
    planned = tuned["capacity_bytes"]
    src = str(tuned.get("source") or "")
    if device and "size" in src and size != planned:
        return [WarningLine("pool-size-differs", f"{name} is {format_bytes(size)} here, the profile was tuned for a "
                            f"{format_bytes(planned)} device: its slices were planned for another size",
                            "re-tune here: sactool tune")]
    if not device and size < planned:
        return [WarningLine("pool-size-differs", f"{name} holds {format_bytes(size)} in all here, less than the "
                            f"{format_bytes(planned)} free tune counted on it: the profile was tuned on another machine",
                            "re-tune here: sactool tune")]
    return []


def _cpus(cpus: Sequence[int]) -> str:
    from sactool.host.sysfs import format_cpulist

    return format_cpulist(list(cpus))


def _cxl_nodes(topo: Any) -> str:
    return ", ".join(f"node{n.id}" for n in topo.nodes if n.kind == "cxl")


def check_machine(tuned: Mapping[str, Any] | None, here: Mapping[str, Any], *, strict: bool,
                  where: str = "this machine") -> list[str]:
    """A check line saying whether the profile's ``machine`` block is ``here``'s; a warning line for
    another machine, RecordError with ``strict``."""
    from sactool.host.machine import machine_differences

    if not tuned:
        return ["machine: the profile records none (an example, or written by hand): it is matched to "
                f"{where} by its pool targets only"]
    diffs = machine_differences(tuned, here)
    if not diffs:
        return [f"machine: the profile was tuned on {where} (host, CPU model, CPUs and NUMA layout match)"]
    msg = f"the profile was tuned on another machine than {where}: " + "; ".join(diffs)
    if strict:
        raise RecordError(msg, "re-tune on this machine (sactool tune), or drop --strict to serve it anyway")
    return [WarningLine("other-machine", msg, "re-tune here: sactool tune; serve --strict refuses such a profile")]


__all__ = ["check_machine", "check_targets"]
