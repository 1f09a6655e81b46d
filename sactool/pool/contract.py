"""The serve ↔ plug-in contract: the environment ``sactool serve`` hands every engine process, and
how a plug-in reads it back. One owner for both sides (``serve/argv.py`` and ``serve/gpus.py``
set these; ``sactool/plugins/`` read them), whichever engine runs.

==============================  =========================================================
``SACTOOL_PROFILE``             the profile the plug-in reads (absolute path); unset: the
                                plug-in does nothing
``SACTOOL_STRICT``              ``1``: stop the rank instead of falling back (``pool.strict``;
                                also when the profile cannot be read)
``SACTOOL_RANK``                the rank, where the engine cannot tell it (tests, one process);
                                then ``RANK``, ``LOCAL_RANK`` (torchrun's)
``SACTOOL_GPU_LOCAL_NODES``     the CPU node of each rank's GPU, comma-separated, when the
                                GPUs the ranks really get sit elsewhere than the profile says
``SACTOOL_DEVDAX_STANDIN``      JSON ``{"dax0.0": {"path": FILE, "align_bytes": N}}``: a file
                                stands in for a DAX device that is not there (integration checks)
``SACTOOL_POOL_POISON``         JSON ``{"dax0.0": [[OFFSET, LENGTH], ...]}``: the known poison of
                                each DAX target as serve read it; every rank carves its slice
                                around exactly these ranges (unset: serve did not read them)
==============================  =========================================================

Why the poison travels in the environment instead of each rank reading the devices' poison lists
itself: the ranks sharing a device must cut it from the same poison set, or their slices can
overlap (a rank that saw a new record would shrink and move its slices while the others did not).
serve reads the lists once, shows the carved plan in ``--dry-run`` and hands that very set to
every rank, so the plan each rank maps is the one shown. A record that appears after serve read the
lists is not in that plan (serve's health check refuses, strict, a poisoned planned slice it sees
at launch; the next launch carves around it). Reading the list also needs root and writes
``trigger_poison_list`` on every device — once per launch instead of once per rank.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from sactool.errors import RecordError

PROFILE_ENV = "SACTOOL_PROFILE"
"""The profile the plug-in reads (absolute path); unset: the plug-in does nothing."""
STRICT_ENV = "SACTOOL_STRICT"
"""``1``: stop the rank instead of falling back (``pool.strict``; also when the profile is unreadable)."""
RANK_ENV = "SACTOOL_RANK"
"""The rank, where the engine's own group cannot tell it (tests, a single process)."""
RANK_VARS = (RANK_ENV, "RANK", "LOCAL_RANK")
"""Where a plug-in looks for its rank when the engine cannot say, in order."""

GPU_NODES_ENV = "SACTOOL_GPU_LOCAL_NODES"
"""Set by ``sactool serve`` when the GPUs the ranks really get (CUDA_VISIBLE_DEVICES, in PCI bus
order) sit on other sockets than the profile's ``pool.gpu_local_nodes``: comma-separated CPU node
per GPU rank (SGLang: per rank; vLLM: per GPU rank, tp x dp of them). The plug-in plans with it, so its plan is the one ``serve --dry-run`` showed (an engine
may narrow CUDA_VISIBLE_DEVICES per rank process, so the plug-in cannot re-derive it there)."""

STANDIN_ENV = "SACTOOL_DEVDAX_STANDIN"
"""JSON ``{"dax0.0": {"path": FILE, "align_bytes": N}}``: a file standing in for a DAX device."""

POISON_ENV = "SACTOOL_POOL_POISON"
"""JSON ``{"dax0.0": [[offset, length], ...]}``: the known poison of each DAX target, as serve read it
(the rank plan carves every slice around it, the same in every rank)."""


def with_gpu_nodes(profile: Any, nodes: Sequence[int]) -> Any:
    """``profile`` with ``pool.gpu_local_nodes`` = ``nodes`` (the socket of each rank's GPU); a
    locality plan tune resolved for other GPUs (``pool.rank_targets``) is dropped, so the locality
    rule runs again over these sockets. Other rules do not depend on the GPUs and stay."""
    import dataclasses

    from sactool.profile import validate

    q = profile.pool
    nodes = tuple(int(n) for n in nodes)
    if nodes == tuple(q.gpu_local_nodes):
        return profile
    targets = () if q.rank_assignment == "locality" else q.rank_targets
    return validate(dataclasses.replace(profile, pool=dataclasses.replace(q, gpu_local_nodes=nodes,
                                                                             rank_targets=targets)))


def gpu_nodes_from_env(value: str, world: int) -> tuple[int, ...]:
    """``$SACTOOL_GPU_LOCAL_NODES`` -> one CPU node per rank; RecordError when malformed."""
    try:
        nodes = tuple(int(v) for v in value.split(","))
    except ValueError:
        nodes = ()
    if len(nodes) != world or any(n < 0 for n in nodes):
        raise RecordError(f"${GPU_NODES_ENV}={value!r} is not {world} comma-separated node numbers",
                          "launch through 'sactool serve', which sets it, or unset it")
    return nodes


def with_env_gpu_nodes(profile: Any, environ: Mapping[str, str] | None = None) -> Any:
    """The profile with ``$SACTOOL_GPU_LOCAL_NODES`` as each rank's GPU socket (unchanged when unset)."""
    value = (os.environ if environ is None else environ).get(GPU_NODES_ENV)
    if not value:
        return profile
    v = getattr(profile, "vllm", None)     # vLLM: one socket per GPU rank (tp x dp), not per pool
    gpus = v.gpus if getattr(profile, "engine", "sglang") == "vllm" and v is not None else profile.world_size
    return with_gpu_nodes(profile, gpu_nodes_from_env(value, gpus))


def env_rank(environ: Mapping[str, str] | None = None) -> tuple[int | None, str]:
    """(rank, ``$VAR`` it came from) from :data:`RANK_VARS`; (None, "unknown") when none is set."""
    env = os.environ if environ is None else environ
    for var in RANK_VARS:
        v = env.get(var, "")
        if v.isdigit():
            return int(v), f"${var}"
    return None, "unknown"


def standin_devices(environ: Mapping[str, str] | None = None) -> dict[str, dict]:
    """``$SACTOOL_DEVDAX_STANDIN``: DAX device name -> {"path", "align_bytes"} of a file standing in."""
    import json

    raw = (os.environ if environ is None else environ).get(STANDIN_ENV, "")
    if not raw:
        return {}
    try:
        data = json.loads(raw)
        return {str(k): {"path": str(v["path"]), "align_bytes": int(v["align_bytes"])} for k, v in data.items()}
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"${STANDIN_ENV} is not a JSON mapping name -> {{path, align_bytes}}: {e}") from None


def poison_value(poison: Mapping[str, Sequence[tuple[int, int]] | None]) -> str | None:
    """``$SACTOOL_POOL_POISON`` for the known poison of each DAX target (None where a target's lists
    were not read: such a target is left out); None when no target's poison is known."""
    import json

    known = {k: [[int(o), int(n)] for o, n in v] for k, v in poison.items() if v is not None}
    return json.dumps(known, separators=(",", ":"), sort_keys=True) if known else None


def poison_from_env(environ: Mapping[str, str] | None = None) -> dict[str, tuple[tuple[int, int], ...]] | None:
    """``$SACTOOL_POOL_POISON``: DAX device -> its known poison ``(offset, length)``; None when unset.
    ValueError when malformed (the rank must not guess where its slice is)."""
    import json

    raw = (os.environ if environ is None else environ).get(POISON_ENV)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        out = {str(k): tuple(sorted((int(o), int(n)) for o, n in v)) for k, v in data.items()}
    except (ValueError, TypeError, AttributeError) as e:
        raise ValueError(f"${POISON_ENV} is not a JSON mapping name -> [[offset, length], ...]: {e}") from None
    if any(o < 0 or n < 0 for v in out.values() for o, n in v):
        raise ValueError(f"${POISON_ENV}: a negative offset or length")
    return out
