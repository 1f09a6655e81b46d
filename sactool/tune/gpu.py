"""Which GPU tune plans for: the NVIDIA GPUs probe sees, ``--gpu`` over them, the catalog default last.

A budget planned for another GPU than the installed one is wrong both ways (an H200's 141 GB on an
H100 box promises hot buffers that do not fit; the reverse wastes GPU memory), so the GPU comes from
probe (``<bdf>/device`` matched against :data:`sactool.hisparse.gpus.PCI_DEVICE_IDS`) wherever probe
sees NVIDIA GPUs. ``--gpu`` still wins — a profile for another machine is a legitimate job — and a
mismatch with what probe sees is a warning. Mixed parts: the one with the least memory (every rank
must fit). With no NVIDIA GPU seen (a development box, a recording without a GPU) the catalog default
stands, and the summary says it is a default.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from sactool.hisparse.gpus import DEFAULT_GPU, GPUS, catalog_name
from sactool.records import warning


@dataclass(frozen=True)
class GpuChoice:
    """``name``: a catalog name; ``source``: user | probe | default; ``detail``: why, in words."""

    name: str
    source: str
    detail: str
    warnings: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def to_data(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "detail": self.detail}


def _seen(gpus: Sequence[Any]) -> tuple[Counter, Counter]:
    """(catalog name -> count, unknown NVIDIA device id -> count) over probe's GPUs."""
    from sactool.topology.cuda import is_cuda

    known: Counter = Counter()
    unknown: Counter = Counter()
    for g in gpus:
        if not is_cuda(g) or g.excluded:
            continue
        name = catalog_name(g.device)
        if name is None:
            unknown[g.device or "?"] += 1
        else:
            known[name] += 1
    return known, unknown


def _words(counts: Counter, *, ids: bool = False) -> str:
    return ", ".join(f"{n} x {'NVIDIA device ' if ids else ''}{k}" for k, n in sorted(counts.items()))


def choose_gpu(requested: str | None, gpus: Sequence[Any]) -> GpuChoice:
    """The GPU to plan for, given ``--gpu`` (``requested``, a catalog name or None) and probe's GPUs."""
    known, unknown = _seen(gpus)
    warns: list[dict[str, Any]] = []
    seen_words = "; ".join(w for w in (_words(known), _words(unknown, ids=True)) if w)
    if unknown:
        warns.append(warning(
            "gpu_unknown", f"probe sees {_words(unknown, ids=True)}, not in sactool's GPU catalog "
            f"({', '.join(sorted(GPUS))}): its memory is unknown, so "
            + (f"the budget is planned for --gpu {requested}" if requested else
               f"the budget is planned for {_least(known) if known else DEFAULT_GPU}"
               + ("" if known else " (the default)")),
            "give --gpu-kv-budget SIZE (HBM per GPU x --mem-fraction-static - weights per GPU), or --gpu NAME"))
    if known and len(known) > 1:
        warns.append(warning("gpu_mixed", f"probe sees mixed GPUs ({_words(known)}): the budget is planned for "
                             f"the smallest, {_least(known)}, so every rank fits",
                             "run ranks on one kind of GPU (CUDA_VISIBLE_DEVICES), or give --gpu"))
    if requested is not None:
        req = requested.lower()
        if known and req not in known:
            warns.append(warning("gpu_mismatch", f"--gpu {req} but probe sees {seen_words}: the GPU budget is "
                                 f"planned for {req}, not for the GPUs of this machine",
                                 f"drop --gpu to plan for the installed {_least(known)}, or tune on the machine "
                                 "that has the GPU"))
        detail = f"--gpu {req}; probe sees " + (seen_words or "no NVIDIA GPU")
        return GpuChoice(req, "user", detail, tuple(warns))
    if known:
        name = _least(known)
        return GpuChoice(name, "probe", f"probe sees {seen_words}", tuple(warns))
    detail = (f"default: probe sees {seen_words}, none in the catalog" if unknown else
              "default: probe sees no NVIDIA GPU; --gpu names the serving machine's")
    return GpuChoice(DEFAULT_GPU, "default", detail, tuple(warns))


def _least(known: Counter) -> str:
    return min(known, key=lambda k: (GPUS[k].hbm_bytes, k))


__all__ = ["GpuChoice", "choose_gpu"]
