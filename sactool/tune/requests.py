"""Requests against hot-buffer slots: the second half of tune's objective.

tune's objective is the most generated tokens per second per rank at the design point. A rank
serving ``b`` requests takes one decode step per token of each: ``C(b) + F(b, B)``, the step without
its fetch (GPU compute, the engine's own per-step work) plus the fetch of the misses of ``b``
requests with ``B`` hot-buffer slots each (:func:`sactool.tune.search.evaluate`). So it decodes
``b / (C(b) + F(b, B))`` tokens per second.

**At the design's requests** ``C`` is the same for every candidate and the fetch decides
(:func:`sactool.tune.search.choose`): the largest buffer that fits the GPU budget beside the design's
requests (misses never grow with the buffer). That buffer is as large as it is because the budget
also holds the requests: SGLang's device pool holds ``b × (B + page)`` slots beside every request's
indexer keys (:mod:`sactool.hisparse.capacity`). A larger buffer costs requests.

**Fewer requests, larger buffers.** For each ``b`` below the design's, the largest buffer that fits
``b`` requests (arithmetic), simulated, and its best candidate; the one with the most tokens per
second is taken over the design's only when the difference is significant over the paired
measurement rounds (Student t, 95%, as :func:`sactool.tune.search.compare`; one round cannot tell, so
the design's requests stay). The more a token misses, the more fetch a larger buffer saves against
the fixed ``C``: the choice moves with the miss level.

``C`` is measured, never assumed: the running engine's decode step (vLLM's mean inter-token latency,
:mod:`sactool.watch.observe`) at the requests it was running and the buffer it ran, minus the fetch
tune predicts there (the same fetch model, the refit workload, the measured figures) — anchored on
the engine, so an error in the fetch model at that point is absorbed. Other request counts move it by
the HBM reads of a request (:func:`sactool.hisparse.gpus.kv_read_seconds_per_request`, a lower bound:
the step of fewer requests is overstated, which favours the design's requests). Without a measured
step (no ``--observed``, or one without the inter-token latency) and with ``--concurrency`` (the
requests are the user's), the design's requests stay, and the choice says so — with, in the first
case, the step below which the best of fewer requests would have paid (no step is assumed).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from sactool.hisparse.capacity import min_ratio
from sactool.tune import search


@dataclass(frozen=True)
class StepTime:
    """The decode step without its fetch, per rank, measured from the engine: ``compute_s`` at
    ``requests`` requests per rank (the observed step ``observed_step_s`` minus tune's predicted fetch
    ``predicted_fetch_s`` at the observed ``device_buffer_size``), ``slope_s`` per request more."""

    compute_s: float
    requests: float
    slope_s: float
    observed_step_s: float
    predicted_fetch_s: float
    device_buffer_size: int
    source: str
    slope_source: str

    def at(self, requests: int) -> float:
        return self.compute_s + self.slope_s * (requests - self.requests)

    def to_data(self) -> dict[str, Any]:
        return {"compute_s": self.compute_s, "requests_per_rank": self.requests, "per_request_s": self.slope_s,
                "observed_step_s": self.observed_step_s, "predicted_fetch_s": self.predicted_fetch_s,
                "device_buffer_size": self.device_buffer_size, "source": self.source,
                "per_request_source": self.slope_source}


@dataclass(frozen=True)
class Trade:
    """The choice between the design's requests and fewer with larger buffers: ``chosen`` (an
    :class:`~sactool.tune.search.Evaluation`), ``requests_per_rank`` it holds (``design_requests`` asked),
    ``why`` (one line), ``rows`` (each request count's best: buffer, fetch, step, tokens/s)."""

    chosen: Any
    requests_per_rank: int
    design_requests: int
    why: str
    rows: tuple[dict[str, Any], ...] = ()
    step: StepTime | None = None
    evals: tuple[Any, ...] = field(default=(), repr=False)
    brief: str = ""                   # ``why`` for a row of the sensitivity table (default: ``why``)
    break_even_step_s: float | None = None   # no measured step: the most it may take for the best trade to pay

    @property
    def traded(self) -> bool:
        return self.requests_per_rank != self.design_requests

    def to_data(self) -> dict[str, Any]:
        return {"requests_per_rank": self.requests_per_rank, "design_requests_per_rank": self.design_requests,
                "device_buffer_size": self.chosen.candidate.device_buffer_size, "why": self.why,
                "decode_step": self.step.to_data() if self.step is not None else None,
                "break_even_step_s": self.break_even_step_s, "by_requests": list(self.rows)}


def inputs_for(d: Any, gather: Any, sims: Any, concurrency: int, factor: float = 1.0) -> "search.Inputs":
    """The search's inputs at ``concurrency`` (total requests), every simulated miss count x ``factor``."""
    top_k = d.spec.index_topk
    misses, hits = sims.misses, sims.hits
    if factor != 1.0:
        misses = {c: [{b: m * factor for b, m in per.items()} for per in reps] for c, reps in sims.misses.items()}
        hits = {c: [{b: max(0.0, 1.0 - m / top_k) for b, m in per.items()} for per in reps] for c, reps in misses.items()}
    return search.Inputs(contexts=d.design, concurrency=concurrency, deployment=d.dep, targets=d.pool.targets,
                         layers=d.spec.num_layers, record_bytes=d.rec_bytes, indexer_bytes=d.spec.indexer_bytes,
                         top_k=top_k, gpu_budget_bytes=d.budget.bytes_per_gpu, misses=misses, hit_rate=hits,
                         bandwidth=gather.rounds, swap_in=swap_in_of(gather), per_miss=search.per_miss_for(gather.info))


def swap_in_of(gather: Any) -> "search.SwapInChoice":
    """The CTA width choice the gather figures came with (``bench.swap_in`` of the profile)."""
    d = gather.info.get("swap_in") or {}
    if not d:
        return search.default_swap_in("no GPU swap-in figure")
    return search.SwapInChoice(int(d["block_size"]), d["source"], d["why"], d.get("blocks"),
                               {int(w): v for w, v in (d.get("us_per_step_per_request") or {}).items()},
                               d.get("figure") or "")


def observed_step(d: Any, obs: Any, buffer: int, placements, gather: Any, sims: Any, chosen: Any,
                  warnings: list) -> StepTime | None:
    """The step without its fetch from observation ``obs`` (at ``buffer`` slots), or None (and why, as a
    warning, where the observation has a step that cannot be used)."""
    from sactool.hisparse.gpus import kv_read_seconds_per_request
    from sactool.records import warning

    if obs is None or obs.step_time_s is None or not obs.requests_running:
        return None
    b_obs = max(1, round(obs.requests_running))
    sims.simulate([buffer], "simulate")
    x = inputs_for(d, gather, sims, b_obs * d.attn_dp)
    c = chosen.candidate
    e = search.evaluate(search.Candidate(buffer, min_ratio(b_obs, buffer, max(d.design)), c.swap_in_block_size,
                                         c.prefetch, c.placement), x)
    fetch = e.mean_s
    compute = obs.step_time_s - fetch
    src = (f"{obs.source}: mean inter-token latency {obs.step_time_s * 1e3:.2f} ms at {obs.requests_running:g} requests "
           f"running and {buffer} slots ({obs.window}), minus the fetch tune predicts there, {fetch * 1e3:.2f} ms")
    if compute <= 0:
        warnings.append(warning("decode_step_unused", f"{src}: nothing is left for the rest of the step, so the fetch "
                                "model overstates this engine's fetch (another pool, or another deployment); requests "
                                "are not traded for hot-buffer slots",
                                "observe the engine serving this profile on this pool"))
        return None
    mean_ctx = round(statistics.fmean(d.design))
    slope, slope_src = kv_read_seconds_per_request(d.o.gpu, top_k=d.spec.index_topk, record_bytes=d.rec_bytes,
                                                   index_key_bytes=d.spec.indexer_bytes, layers=d.spec.num_layers,
                                                   context_tokens=mean_ctx)
    return StepTime(compute, float(obs.requests_running), slope, obs.step_time_s, fetch, buffer, src,
                    f"{slope_src}, at the design contexts' mean {mean_ctx} tokens")


def ladder(d: Any, placements, gather: Any, sims: Any, design_buffer: int) -> list[tuple[int, int]]:
    """(requests per rank, the largest buffer that fits them) below the design's requests, while fewer
    requests still buy a larger buffer — pure arithmetic; the buffers are then simulated."""
    b_d = d.dep.requests_per_rank(d.concurrency)
    top = max(search.all_buffers(d.spec.index_topk))
    out, last = [], design_buffer
    for b in range(b_d - 1, 0, -1):
        if last >= top:
            break
        fit = search.largest_feasible(inputs_for(d, gather, sims, b * d.attn_dp), placements, n=1)
        if fit and fit[-1] > last:
            out.append((b, fit[-1]))
            last = fit[-1]
    return out


def _token_times(e: Any, step: StepTime, b: int) -> list[float]:
    """Seconds per generated token per rank, per measurement round: the step over its ``b`` tokens."""
    return [(step.at(b) + f) / b for f in e.samples_s]


def trade(d: Any, placements, gather: Any, sims: Any, design: Any, step: StepTime | None, *,
          factor: float = 1.0) -> Trade:
    """The design's choice ``design`` against fewer requests with larger buffers (module docstring), with
    every simulated miss count x ``factor`` (the sensitivity row)."""
    b_d = d.dep.requests_per_rank(d.concurrency)
    buf = design.candidate.device_buffer_size
    if "concurrency" in d.o.given:
        return Trade(design, b_d, b_d, f"--concurrency {d.concurrency} fixes the requests per rank ({b_d})", step=step)
    rungs = ladder(d, placements, gather, sims, buf)
    if not rungs:
        top = max(search.all_buffers(d.spec.index_topk))
        return Trade(design, b_d, b_d, "the largest buffer tune searches fits beside the design's requests"
                     if buf >= top else "fewer requests would not buy a larger buffer", step=step)
    sims.simulate(sorted({B for _, B in rungs}), "simulate")
    best: dict[int, Any] = {b_d: design}
    evals: list[Any] = []
    for b, B in rungs:
        x = inputs_for(d, gather, sims, b * d.attn_dp, factor)
        ev = [search.evaluate(c, x) for c in search.candidates_for([B], x, placements)]
        evals += ev
        ch, _ = search.choose(ev)
        if ch is not None:
            best[b] = ch
    tt = {b: _token_times(e, step, b) for b, e in best.items()} if step is not None else {}
    rows = tuple({"requests_per_rank": b, "device_buffer_size": e.candidate.device_buffer_size,
                  "host_to_device_ratio": e.candidate.host_to_device_ratio, "fetch_time_per_step_s": e.mean_s,
                  "step_s": step.at(b) + e.mean_s if step is not None else None,
                  "tokens_per_s_per_rank": 1.0 / statistics.fmean(tt[b]) if step is not None else None,
                  "gpu_bytes_per_rank": e.gpu_bytes_per_rank} for b, e in sorted(best.items(), reverse=True))
    if step is None:
        c_star, why, brief = _break_even(d, best, b_d)
        return Trade(design, b_d, b_d, why, tuple(dict(r, chosen=r["requests_per_rank"] == b_d) for r in rows),
                     evals=tuple(evals), brief=brief, break_even_step_s=c_star)
    win = min(best, key=lambda b: (statistics.fmean(tt[b]), -b))
    pick, why, brief = _decide(win, b_d, best, tt, step)
    return Trade(best[pick], pick, b_d, why, tuple(dict(r, chosen=r["requests_per_rank"] == pick) for r in rows),
                 step, tuple(evals), brief)


def _break_even(d: Any, best: dict, b_d: int) -> tuple[float, str, str]:
    """Without a measured step: (the most the step without its fetch may take for fewer requests with a
    larger buffer to decode more tokens/s, why, the same briefly) — ``b / (C + F_b) > b_d / (C + F_d)``
    holds while ``C`` is below ``(b F_d - b_d F_b) / (b_d - b)`` (the per-request HBM reads, a lower
    bound, moved into ``F_b``)."""
    from sactool.hisparse.gpus import kv_read_seconds_per_request

    slope, _ = kv_read_seconds_per_request(d.o.gpu, top_k=d.spec.index_topk, record_bytes=d.rec_bytes,
                                           index_key_bytes=d.spec.indexer_bytes, layers=d.spec.num_layers,
                                           context_tokens=round(statistics.fmean(d.design)))
    f_d = best[b_d].mean_s
    c_star = {b: (b * f_d - b_d * (e.mean_s - slope * (b_d - b))) / (b_d - b) for b, e in best.items() if b != b_d}
    b = max(c_star, key=lambda k: c_star[k])
    head = ("a larger buffer costs requests, and tune weighs them only against the engine's measured decode step "
            "(tune --observed: vLLM's inter-token latency), so the design's are kept")
    if c_star[b] <= 0:
        tail = "fewer requests with a larger buffer would decode fewer tokens/s at any step"
        return c_star[b], f"{head}; {tail}", "fewer requests would not pay at any step"
    e = best[b]
    tail = (f"{e.candidate.device_buffer_size} slots x {b} requests per rank would decode more tokens/s if the step "
            f"without its fetch is under {c_star[b] * 1e3:.1f} ms")
    return (c_star[b], f"{head}: {tail} (the fetch: {f_d * 1e3:.1f} ms per step at the design's, {e.mean_s * 1e3:.1f} ms "
            f"at {b})", f"{e.candidate.device_buffer_size} x {b} pays if the step without its fetch is under "
            f"{c_star[b] * 1e3:.1f} ms (unmeasured)")


def _decide(win: int, b_d: int, best: dict, tt: dict, step: StepTime) -> tuple[int, str, str]:
    """(requests per rank taken, why, the same briefly): the fastest is taken over the design's only
    when significant."""
    e_d, B_d = best[b_d], best[b_d].candidate.device_buffer_size
    if win == b_d:
        runner = min((b for b in best if b != b_d), key=lambda b: statistics.fmean(tt[b]))
        gain = statistics.fmean(tt[b_d]) / statistics.fmean(tt[runner]) - 1
        alt = f"{best[runner].candidate.device_buffer_size} slots x {runner}"
        return b_d, (f"the design's {b_d} requests per rank: fewer with a larger buffer decode fewer tokens/s "
                     f"(best: {alt}, {gain:+.1%}; the step without its fetch is {step.at(b_d) * 1e3:.1f} ms, from the "
                     f"engine's measured step)"), f"fewer requests decode fewer tokens/s ({alt}: {gain:+.1%})"
    diff = [a - b for a, b in zip(tt[win], tt[b_d])]
    gain = statistics.fmean(tt[b_d]) / statistics.fmean(tt[win]) - 1
    e = best[win]
    what = (f"{e.candidate.device_buffer_size} slots x {win} requests per rank decode {gain:+.1%} tokens/s per rank "
            f"over {B_d} x {b_d}")
    short = f"{gain:+.1%} tokens/s per rank over {B_d} x {b_d}"
    if len(diff) < 2:
        return (b_d, f"not significant (one measurement round): {what}; the design's requests are kept",
                f"not significant (one round): {e.candidate.device_buffer_size} x {win} {gain:+.1%}")
    ci = search.t95(len(diff) - 1) * statistics.stdev(diff) / math.sqrt(len(diff))
    if not statistics.fmean(diff) < -ci:
        rel = ci / statistics.fmean(tt[win])
        return (b_d, f"not significant (± {rel:.1%}): {what}; the design's requests are kept",
                f"not significant (± {rel:.1%}): {e.candidate.device_buffer_size} x {win} {gain:+.1%}")
    return win, (f"{what}: at these misses the fetch the larger buffer saves ({e_d.mean_s * 1e3:.1f} -> "
                 f"{e.mean_s * 1e3:.1f} ms per step) outweighs the requests it turns away (the step without its "
                 f"fetch {step.at(win) * 1e3:.1f} ms, from the engine's measured step)"), short


__all__ = ["StepTime", "Trade", "inputs_for", "ladder", "observed_step", "swap_in_of", "trade"]
