"""Hot-buffer misses per decode step, from the tune work's workload model and LRU simulation.

Nothing here models top-k traces or the LRU itself: ``sactool.workload.generate_topk`` draws the
per-layer top-k sequences (calibrated to the DeepSeek-V3.2 statistics in docs/sources.md, design facts) and
``sactool.hisparse.hotbuffer.simulate`` replays HiSparse's per-request, per-layer LRU hot buffer over
them. This module only condenses the result into what the serving model needs, per request:

* ``per_step[s]``: misses per layer at the request's decode step ``s`` (mean over layers), for the
  first ``steps`` steps — step 0 is the first step after admission, when the buffer is still cold;
* ``steady``: the mean over the second half of the simulated steps, used for every later step.

The simulation is kept modest (``DEFAULT_STEPS`` decode steps) so a CLI run takes seconds; later
steps reuse the steady mean. Results are cached per (context, buffer, top_k, layers, steps, seed)
within a process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:   # numpy is imported where the traces are made, not when this module is
    import numpy as np

DEFAULT_STEPS = 128
"""Decode steps simulated per context for the hot-buffer statistics (the rest reuse the steady mean)."""


@dataclass(frozen=True)
class MissProfile:
    context_tokens: int
    buffer_slots: int
    top_k: int
    per_step: tuple[float, ...]      # misses per layer per request at step s (mean over layers)
    steady: float                    # misses per layer per request after the simulated steps
    hit_rate: float                  # steady hit rate (1 - steady / top_k)
    source: str

    def at(self, step: int) -> float:
        return self.per_step[step] if step < len(self.per_step) else self.steady


_CACHE: dict[tuple, MissProfile] = {}

MissFn = Callable[[int, int, int, int], MissProfile]


_TRACES: dict[tuple, np.ndarray] = {}


def lru_profile(context_tokens: int, buffer_slots: int, top_k: int, layers: int, *,
                steps: int = DEFAULT_STEPS, seed: int = 0, mode: str = "pd",
                layer_targets: str | None = None, kernel: str = "sglang-0.5.23") -> MissProfile:
    """Miss profile from ``generate_topk`` + ``hisparse.hotbuffer.simulate`` (cached).

    ``mode="pd"``: the buffer starts empty, as for a request whose KV is already in the pool (the
    SAC fork's prefix-hit path initializes the buffer to -1, docs/sources.md, SAC §4; SGLang PD mode);
    ``"colocated"``: it starts with the prompt's first slots, as after a local prefill.
    ``kernel``: whose LRU write-back (``hisparse.hotbuffer``, "Kernel version").
    """
    key = (context_tokens, buffer_slots, top_k, layers, steps, seed, mode, layer_targets, kernel)
    if key in _CACHE:
        return _CACHE[key]
    from sactool.hisparse.hotbuffer import simulate as lru
    from sactool.workload import generate_topk

    from sactool.workload import WorkloadParams

    tkey = (context_tokens, top_k, layers, steps, seed, layer_targets)
    if tkey not in _TRACES:
        _TRACES.clear()   # one context's trace at a time: [steps, layers, top_k] int32 is large
        _TRACES[tkey] = generate_topk(context_tokens, steps, layers, top_k, seed=seed,
                                      params=WorkloadParams(layer_targets=layer_targets))
    idx = _TRACES[tkey]
    res = lru(idx, buffer_slots, context_tokens=context_tokens, reserve_newest=True, mode=mode, kernel=kernel)
    per = res.misses.mean(axis=1)            # [steps] mean over layers
    tail = per[len(per) // 2:]
    steady = float(tail.mean()) if len(tail) else float(per.mean())
    prof = MissProfile(context_tokens, buffer_slots, top_k, tuple(float(x) for x in per), steady,
                       1.0 - steady / top_k,
                       f"sactool.workload.generate_topk + hisparse.hotbuffer.simulate ({mode}, {kernel} kernel), "
                       f"{steps} steps, seed {seed}" + (f", per-layer targets {layer_targets}" if layer_targets else ""))
    _CACHE[key] = prof
    return prof


def constant_profile(cold: float, steady: float, *, context_tokens: int = 0, buffer_slots: int = 0,
                     top_k: int = 0, source: str = "given") -> MissProfile:
    """A profile with ``cold`` misses at step 0 and ``steady`` after (for what-if runs and tests)."""
    return MissProfile(context_tokens, buffer_slots, top_k, (float(cold),), float(steady),
                       1.0 - steady / top_k if top_k else 0.0, source)


def calibrated_profile(cal, context_tokens: int, buffer_slots: int, top_k: int) -> MissProfile:
    """The misses the platform's calibration fitted at a calibrated buffer (``calibration``): a
    request-life mean, the same at every step. Refused for a buffer the calibration runs did not use."""
    from sactool.errors import UsageError

    m = cal.misses_at(context_tokens, buffer_slots) if cal is not None else None
    if m is None:
        bufs = sorted({b for _, b in cal.misses}) if cal is not None else []
        raise UsageError(f"no calibrated misses for a {buffer_slots}-slot hot buffer (calibrated: "
                         f"{', '.join(map(str, bufs)) or 'none'})",
                         "use a calibrated buffer size, or a workload the LRU replay can run (workload.topk)")
    return MissProfile(context_tokens, buffer_slots, top_k, (m,), m, 1.0 - m / top_k,
                       f"fitted on the platform's calibration runs ({cal.runs} runs; simulate.calibration), "
                       "mean over a request's life")
