"""The pool plan watch compares the running engine with: which target each rank's pool is on, and
(devdax) which slice. One function, :func:`plan_rows`, so the plan's owner can move (it reads the
rank plan the launcher and the plug-in share, :mod:`sactool.pool.plan`) without watch
changing anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class PlanRow:
    """Rank ``rank``'s pool as planned: ``target`` (``node2`` / ``dax0.0``), ``mode`` (numa | devdax),
    ``node`` (numa: the target node), ``policy`` (bind | preferred | weighted_interleave),
    ``offset_bytes``/``size_bytes`` (devdax: the rank's slice; numa: its share of the target, no
    offset), ``stand_in`` (a DRAM node stands in for CXL)."""

    rank: int
    target: str
    mode: str
    node: int | None
    policy: str
    offset_bytes: int | None
    size_bytes: int | None
    stand_in: bool = False

    def to_data(self) -> dict[str, Any]:
        return {"target": self.target, "mode": self.mode, "node": self.node, "policy": self.policy,
                "offset_bytes": self.offset_bytes, "size_bytes": self.size_bytes, "stand_in": self.stand_in}


def engine_poison(reader: Any, pids: Sequence[int]) -> tuple[dict[str, tuple[tuple[int, int], ...]] | None, str]:
    """The DAX devices' known poison serve handed the engine (``$SACTOOL_POOL_POISON`` in the first
    given process's environment that has it: the ranks carved their slices around exactly that set),
    and where it was read; (None, "") when no process has it (or its environment is unreadable)."""
    from sactool.pool.contract import POISON_ENV, poison_from_env

    for pid in pids:
        t = reader.text(f"proc/{pid}/environ")
        env = dict(kv.split("=", 1) for kv in (t or "").split("\0") if "=" in kv)
        if POISON_ENV in env:
            try:
                return poison_from_env(env), f"${POISON_ENV} of pid {pid}"
            except ValueError:
                return None, ""
    return None, ""


def plan_rows(profile: Any, reader: Any, pids: Sequence[int] = ()) -> tuple[list[PlanRow], str]:
    """Every rank's planned pool, and a note ("" or why the slices are unknown). The rank plan is
    made over this machine's targets when they can be read (sizes, align: devdax slices), its devdax
    slices carved around the poison serve handed the engine (:func:`engine_poison`, from ``pids``);
    where they cannot (a target absent here), the profile's rank rule alone gives each rank its target."""
    import dataclasses

    from sactool.errors import SactoolError
    from sactool.pool.plan import PoolSpec, rank_plan, rank_target
    from sactool.pool.targets import node_of

    q = profile.pool
    spec = PoolSpec.of(profile)
    note = ""
    slots: dict[int, Any] = {}
    try:
        from sactool.pool.placer import HostPoolPlacer

        placer = HostPoolPlacer(spec, reader=reader)
        targets = placer.live_targets()
        given, where = engine_poison(reader, pids) if q.mode == "devdax" else (None, "")
        if given is not None:
            targets = [dataclasses.replace(t, poison=given[t.name]) if t.name in given else t for t in targets]
        plan = rank_plan(spec, targets, check_pool=False)
        slots = {s.rank: s for s in plan.slots}
        note = "; ".join(f"slices carved around known poison ({where}): {line}" for line in plan.carve_lines())
    except (SactoolError, OSError, ValueError) as e:
        note = f"the rank plan over this machine's targets could not be made ({getattr(e, 'message', e)}): " \
               "targets from the profile's rank rule, no slice offsets"
    rows = []
    for r in range(profile.world_size):
        s = slots.get(r)
        target = s.target if s is not None else rank_target(spec, r)
        rows.append(PlanRow(r, target, q.mode, node_of(target), q.policy,
                            s.offset_bytes if s is not None else None, s.size_bytes if s is not None else None,
                            q.stand_in))
    return rows, note


__all__ = ["PlanRow", "plan_rows"]
