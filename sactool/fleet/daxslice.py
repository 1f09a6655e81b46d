"""A devdax device shared by the ranks of one machine in a fleet bench: each rank's slice, by the
rank plan's one rule (:func:`sactool.pool.rankplan.plan`, which ``serve`` and the plug-in
follow too), and what physical device it is, so hosts sharing it can be told. Pure (no MPI)."""

from __future__ import annotations

from typing import Any

from sactool.fleet.mpi import FleetError


def dax_slices(target, ranks: int) -> tuple:
    """The slices ``ranks`` ranks of one machine take of devdax ``target`` (a
    :class:`sactool.pool.targets.Target`), the i-th by local rank: the rank plan's rule
    (:func:`sactool.pool.rankplan.plan`, which serve and the plug-in use) — partition =
    capacity // ranks rounded down to the device's align, local rank i maps [i·partition,
    (i+1)·partition). CapacityError when the device cannot give each rank an aligned slice."""
    from sactool.pool.rankplan import check_disjoint, plan

    p = plan(ranks, [target], "explicit", explicit=[target.name] * ranks)
    check_disjoint(p, [target])
    return p.slots


def fleet_slices(seen: list[tuple]) -> list[dict]:
    """Every rank's slice, from the exchange (``(machine, local_rank, cpus, dax facts)`` per rank,
    in rank order): ranks of one machine naming one device split it by local rank."""
    from sactool.pool.targets import Target

    groups: dict[tuple[str, str], list[int]] = {}
    for r, (machine, _, _, fact) in enumerate(seen):
        groups.setdefault((machine, fact[0]), []).append(r)
    out: list[dict] = [{} for _ in seen]
    for (machine, name), ranks in groups.items():
        ranks.sort(key=lambda r: seen[r][1])
        _, cap, align = seen[ranks[0]][3]
        if any(tuple(seen[r][3]) != tuple(seen[ranks[0]][3]) for r in ranks):
            raise FleetError(f"the ranks on {machine} see {name} differently (size or align)",
                             "check the device on that machine ('sactool probe')")
        for i, (r, slot) in enumerate(zip(ranks, dax_slices(Target(name, "devdax", cap, "", align), len(ranks)))):
            out[r] = {"device": name, "machine": machine, "offset_bytes": slot.offset_bytes,
                      "size_bytes": slot.size_bytes, "align_bytes": align, "index": i, "ranks_sharing": len(ranks),
                      "rule": "sactool.pool.rankplan: capacity // ranks on the device, aligned down; "
                              "local rank i maps [i x slice, (i+1) x slice)"}
    return out


def check_fits_slice(sl: dict, size: int, capacity: int) -> None:
    """Each rank's buffer must fit its slice of the device (the hint gives the largest --size)."""
    from sactool.errors import CapacityError
    from sactool.units import format_bytes

    if size > sl["size_bytes"]:
        raise CapacityError(f"a {format_bytes(size)} buffer per rank does not fit its slice of {sl['device']}: "
                            f"{sl['ranks_sharing']} ranks on {sl['machine']} share its {format_bytes(capacity)} in "
                            f"{format_bytes(sl['size_bytes'])} slices (align {format_bytes(sl['align_bytes'])})",
                            f"use --size {format_bytes(sl['size_bytes']).replace(' ', '')} or less (per rank), or "
                            "fewer ranks per machine")


def dax_pool_device(topo, reader, target, machine: str) -> dict[str, Any]:
    """What physical device devdax ``target`` is (the serials of the memdevs of its CXL region,
    else this machine's boot and the device name), so hosts sharing it can be told."""
    from sactool.fleet.poolmap import norm_serial

    serials = sorted({s for s in (norm_serial(m.serial) for m in topo.memdevs_of_dax(target.name)) if s})
    boot = reader.str("proc/sys/kernel/random/boot_id") or "unknown-boot"
    return {"kind": "devdax", "key": "cxl:" + "+".join(serials) if serials else f"devdax:{machine}:{boot}:{target.name}",
            "memdev_serials": serials, "device": target.name, "capacity_bytes": target.capacity_bytes,
            "free_bytes": None, "capacity_source": target.capacity_source}
