"""Candidate space, evaluation and choice.

A candidate is one HiSparse/pool configuration: ``device_buffer_size``, ``host_to_device_ratio``,
``swap_in_block_size``, ``prefetch`` and a rank placement. Its *objective* here is the predicted fetch
time per generated token (:func:`sactool.hisparse.cost.fetch_time_per_token`, slowest pool target),
averaged over the requested context lengths, at one request count per rank (``Inputs.concurrency``):
tune's objective, tokens per second per rank, orders candidates with the same requests exactly so
(the rest of the step is the same for all of them). Fewer requests with larger buffers are weighed
against the design's in :mod:`sactool.tune.requests`.

Noise. The workload seeds are samples of the workload, not noise: misses are averaged over them.
What is noisy is the measured gather bandwidth. It is measured in rounds, interleaved over the
pool targets (A B A B …), and every candidate is evaluated with every round, so candidates are
compared on *paired* samples. Two candidates that load the pool targets alike differ by the same
factor in every round (the bandwidth cancels): their order is decided by the simulation alone.
Candidates that load targets differently depend on the measurement: when their paired difference
is within its 95% confidence interval (Student t), or only one round exists, they are "not
significant" and the choice goes to the one using the least GPU memory, then the least pool
memory, then the engine's defaults — never to the noisier mean. Only the fastest candidates of
each target load take part in that tie: one beaten by a candidate that loads the targets alike is
beaten whatever the bandwidth is, so an interval measured against a differently loaded candidate
cannot rescue it (with one round, every small buffer packed on fewer targets would otherwise tie
with the best and win on GPU memory).

Search (what ``tune`` runs): buffers on a coarse grid (top_k/2 steps from top_k to 4·top_k),
plus the largest page-aligned sizes that fit the design point (found by arithmetic over every
size, since fitting needs no simulation and misses do not grow with the buffer); for each,
the smallest ratio that holds the design point and one above it; every placement; and the
prefetch switch (which does not enter the cost model: it ties, and the engine default is kept).
The swap-in CTA width is chosen before the search from a GPU swap-in record's widths
(:func:`choose_swap_in_block`), and the fetch figure is that width's; without a GPU figure every
width ties and SGLang's 960 is kept. ``scripts/tune-exhaustive`` evaluates every page-aligned size.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from sactool.hisparse.capacity import PAGE, Deployment, RankSizing, fits, min_ratio, rank_sizing
from sactool.hisparse.cost import PerMissCost, common_miss_time_per_token, fetch_bytes_per_token, step_time_over_targets
from sactool.hisparse.engine import DEFAULT_SWAP_IN_BLOCK, SWAP_IN_BLOCK_SIZES  # noqa: F401 (re-exported)
from sactool.pool.rankplan import Placement, pool_bytes_per_rank
from sactool.pool.targets import Target

DEFAULT_PREFETCH = True

# two-sided 95% Student t quantiles, dof 1..30 (standard table); larger dof -> 1.96
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def t95(dof: int) -> float:
    return _T95[dof - 1] if 1 <= dof <= len(_T95) else 1.96


@dataclass(frozen=True)
class SwapInChoice:
    """``swap_in_block_size`` (threads per swap-in CTA) and where it came from.

    ``source``: ``measured`` (chosen from a GPU swap-in record's widths) or ``default`` (SGLang
    0.5.23's 960, not a measurement); ``blocks``: the requests in flight per rank the figures are
    for; ``us_per_step_per_request[w]``: the measured µs one request waits per top-k step at width w
    (slowest pool target); ``why``: one line."""

    block_size: int
    source: str
    why: str
    blocks: int | None = None
    us_per_step_per_request: Mapping[int, float] = field(default_factory=dict)
    figure: str = ""                    # the measured figure the chosen width's number came from

    def to_data(self) -> dict:
        return {"block_size": self.block_size, "source": self.source, "why": self.why, "blocks": self.blocks,
                "us_per_step_per_request": {str(w): v for w, v in sorted(self.us_per_step_per_request.items())},
                "figure": self.figure}


def default_swap_in(why: str) -> SwapInChoice:
    """SGLang's default CTA width, said to be one (no GPU figure to choose by)."""
    return SwapInChoice(DEFAULT_SWAP_IN_BLOCK, "default",
                        f"SGLang 0.5.23's default, not a measurement: {why}")


def _ties(a: Sequence[float], b: Sequence[float]) -> bool:
    """Paired rounds ``a``, ``b`` (one sample of each per rotated round): is their difference
    within its 95% confidence interval (Student t)? One round cannot tell them apart."""
    d = [x - y for x, y in zip(a, b)]
    if all(v == 0 for v in d):
        return True
    if len(d) < 2:
        return True
    return abs(statistics.fmean(d)) <= t95(len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))


def choose_swap_in_block(step_us: Mapping[int, float], rounds_us: Mapping[int, Sequence[float]], blocks: int, *,
                         where: str = "") -> SwapInChoice:
    """The CTA width with the least measured µs per top-k step per request (``step_us[w]``, the
    GPU figure's median) at ``blocks`` requests in flight per rank. ``rounds_us[w]``: the same per
    measurement round (the protocol rotates configurations within a round, so rounds pair across
    widths); a width whose paired difference to the fastest is within the 95% interval ties with it,
    and on a tie SGLang's default (960) is kept — never the noisier mean."""
    if not step_us:
        return default_swap_in("the GPU record measured no CTA width here")
    best = min(sorted(step_us), key=lambda w: step_us[w])
    tied = [w for w in sorted(step_us) if _ties(rounds_us.get(w, ()), rounds_us.get(best, ()))]
    pick = DEFAULT_SWAP_IN_BLOCK if DEFAULT_SWAP_IN_BLOCK in tied else best
    figs = ", ".join(f"{w}: {step_us[w]:.2f}" for w in sorted(step_us))
    at = f"at {blocks} request{'s' if blocks != 1 else ''} in flight per rank{where}"
    if pick == best and pick != DEFAULT_SWAP_IN_BLOCK:
        why = f"least measured µs per top-k step per request {at} ({figs} µs)"
    elif pick == best:
        why = f"SGLang's default is also the fastest measured width {at} ({figs} µs)"
    else:
        why = (f"SGLang's default: the fastest measured width, {best}, is within the measurement's noise of it "
               f"{at} ({figs} µs)")
    return SwapInChoice(pick, "measured", why, blocks, dict(step_us))


@dataclass(frozen=True)
class Candidate:
    device_buffer_size: int
    host_to_device_ratio: int
    swap_in_block_size: int
    prefetch: bool
    placement: Placement

    @property
    def label(self) -> str:
        return (f"{self.device_buffer_size} R{self.host_to_device_ratio} swap{self.swap_in_block_size} "
                f"{'prefetch' if self.prefetch else 'no-prefetch'} {self.placement.label}")


@dataclass(frozen=True)
class Inputs:
    """Everything the evaluation needs besides the candidate.

    ``misses[ctx][seed][buffer]``: mean missed records per step per layer (one request), per
    workload seed; ``hit_rate[ctx][seed][buffer]``; ``bandwidth[round][target]``: measured gather
    bytes/s, one mapping per measurement round.
    """

    contexts: tuple[int, ...]
    concurrency: int
    deployment: Deployment
    targets: tuple[Target, ...]
    layers: int
    record_bytes: int
    indexer_bytes: int
    top_k: int
    gpu_budget_bytes: int
    misses: Mapping[int, Sequence[Mapping[int, float]]]
    hit_rate: Mapping[int, Sequence[Mapping[int, float]]]
    bandwidth: Sequence[Mapping[str, float]]
    swap_in: SwapInChoice | None = None     # measured: the one CTA width searched; None/default: widths tie
    per_miss: PerMissCost | None = None     # the per-missed-record cost every placement pays, when it applies

    @property
    def swap_in_block(self) -> int:
        return self.swap_in.block_size if self.swap_in is not None else DEFAULT_SWAP_IN_BLOCK

    @property
    def swap_in_widths(self) -> tuple[int, ...]:
        """The widths the knob stage tries: all of them when none was measured (they tie in the
        model), else only the measured choice (the bandwidth is that width's figure)."""
        if self.swap_in is not None and self.swap_in.source == "measured":
            return (self.swap_in.block_size,)
        return SWAP_IN_BLOCK_SIZES

    @property
    def replicates(self) -> int:
        return min(len(v) for v in self.misses.values())


@dataclass(frozen=True)
class Evaluation:
    candidate: Candidate
    feasible: bool
    why_infeasible: tuple[str, ...]
    samples_s: tuple[float, ...]            # objective per measurement round (s per token)
    gpu_bytes_per_rank: int
    pool_bytes_per_rank: int
    per_context: dict[int, dict[str, float]] = field(default_factory=dict)

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.samples_s) if self.samples_s else math.inf


def constraints(c: Candidate, x: Inputs) -> tuple[list[str], RankSizing]:
    """Why ``c`` does not fit the design point (empty: it fits), and its rank plan. No misses needed."""
    req = x.deployment.requests_per_rank(x.concurrency)
    plan = rank_sizing(req, c.device_buffer_size, c.host_to_device_ratio, layers=x.layers,
                     record_bytes=x.record_bytes, indexer_bytes=x.indexer_bytes)
    why: list[str] = []
    need_r = min_ratio(req, c.device_buffer_size, max(x.contexts))
    if c.host_to_device_ratio < need_r:
        why.append(f"ratio {c.host_to_device_ratio} < {need_r}: the host pool cannot hold {req} request(s) "
                   f"of {max(x.contexts)} tokens per rank")
    why += fits(plan, gpu_budget_bytes=x.gpu_budget_bytes, pool_bytes_per_rank=pool_bytes_per_rank(c.placement, x.targets))
    return why, plan


def largest_feasible(x: Inputs, placements: Sequence[Placement], *, n: int = 3) -> list[int]:
    """The ``n`` largest page-aligned buffer sizes that fit the design point with some ratio and
    placement — pure arithmetic. Feasibility is not monotone in the size (the integer ratio jumps),
    so every size is checked; since misses do not grow with the buffer, the optimum is among them."""
    ok = [b for b in all_buffers(x.top_k)
          if any(not constraints(c, x)[0] for c in candidates_for([b], x, placements))]
    return ok[-n:]


def per_miss_for(bench_info: Mapping) -> PerMissCost | None:
    """The per-missed-record cost the search charges (``hisparse.cost.per_missed_record_cost``),
    or None where it does not apply: with a GPU swap-in figure (``bench.fetch_path: gpu``) the
    measurement timed the swap-in on the GPU itself, and the fit cannot say which part of the
    per-record cost that figure already holds; a CPU proxy holds none of it."""
    from sactool.hisparse.cost import per_missed_record_cost

    return None if bench_info.get("fetch_path") == "gpu" else per_missed_record_cost()


def evaluate(c: Candidate, x: Inputs) -> Evaluation:
    """Predicted fetch time per token (per measurement round) and resource use of one candidate:
    per context the slowest pool target's bytes over its measured bandwidth, plus, when
    ``x.per_miss`` is given, the per-missed-record cost every placement pays
    (:func:`sactool.hisparse.cost.common_miss_time_per_token`, the term ``simulate`` charges)."""
    req = x.deployment.requests_per_rank(x.concurrency)
    why, plan = constraints(c, x)
    per_target = c.placement.ranks_per_target()
    reps = x.replicates
    s_rec = x.per_miss.seconds if x.per_miss is not None else 0.0
    per_ctx: dict[int, dict[str, float]] = {}
    for ctx in x.contexts:
        m = statistics.fmean(x.misses[ctx][r][c.device_buffer_size] for r in range(reps))
        per_ctx[ctx] = {"misses_per_step_per_layer": m,
                        "hit_rate": statistics.fmean(x.hit_rate[ctx][r][c.device_buffer_size] for r in range(reps)),
                        "fetch_bytes_per_token": fetch_bytes_per_token(m, x.record_bytes, x.layers),
                        "common_miss_time_per_token_s": common_miss_time_per_token(m, req, x.layers, s_rec)}

    def at(ctx: int, bw: Mapping[str, float]) -> float:
        per_req = per_ctx[ctx]["fetch_bytes_per_token"]
        return (step_time_over_targets({t: n * req * per_req for t, n in per_target.items()},
                                       {t: bw[t] for t in per_target})
                + per_ctx[ctx]["common_miss_time_per_token_s"])

    samples = [sum(at(ctx, bw) for ctx in x.contexts) / len(x.contexts) for bw in x.bandwidth]
    for ctx in x.contexts:
        per_ctx[ctx]["fetch_time_per_token_s"] = statistics.fmean(at(ctx, bw) for bw in x.bandwidth)
    return Evaluation(c, not why, tuple(why), tuple(samples), plan.gpu_bytes, plan.host_pool_bytes, per_ctx)


@dataclass(frozen=True)
class Comparison:
    """``delta_s``: mean paired difference to the chosen one; ``ci_s``: its 95% half-width."""

    delta_s: float
    ci_s: float
    significant: bool
    identical: bool


def compare(a: Evaluation, best: Evaluation) -> Comparison:
    """Paired comparison over measurement rounds (see the module docstring)."""
    d = [x - y for x, y in zip(a.samples_s, best.samples_s)]
    mean = statistics.fmean(d) if d else 0.0
    if all(v == 0 for v in d):
        return Comparison(0.0, 0.0, False, True)
    if a.candidate.placement.ranks_per_target() == best.candidate.placement.ranks_per_target():
        return Comparison(mean, 0.0, True, False)   # same targets, same load: the bandwidth cancels
    if len(d) < 2:
        return Comparison(mean, math.inf, False, False)
    ci = t95(len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
    return Comparison(mean, ci, abs(mean) > ci, False)


def _preference(e: Evaluation) -> tuple:
    c = e.candidate
    return (e.gpu_bytes_per_rank, e.pool_bytes_per_rank, c.host_to_device_ratio,
            c.swap_in_block_size != DEFAULT_SWAP_IN_BLOCK, c.prefetch != DEFAULT_PREFETCH,
            PLACEMENT_PREFERENCE.get(c.placement.strategy, len(PLACEMENT_PREFERENCE)), c.device_buffer_size)


PLACEMENT_PREFERENCE = {"locality": 0, "round_robin": 1}
"""On a tie: a target on each GPU's socket (when GPU locality is known), then SAC's rank % targets."""


def _load(e: Evaluation) -> tuple[tuple[str, int], ...]:
    """How ``e`` loads the pool targets (ranks per target): candidates alike here are compared
    by the simulation alone (the bandwidth cancels in every round)."""
    return tuple(sorted(e.candidate.placement.ranks_per_target().items()))


def fastest_alike(feasible: Sequence[Evaluation]) -> dict[tuple, Evaluation]:
    """The fastest of each target load among ``feasible`` (sorted by mean objective)."""
    out: dict[tuple, Evaluation] = {}
    for e in feasible:
        out.setdefault(_load(e), e)
    return out


def choose(evals: Iterable[Evaluation]) -> tuple[Evaluation | None, list[Evaluation]]:
    """The chosen evaluation and all feasible ones ranked by mean objective.

    Only the fastest candidates of each target load can be chosen: one that a candidate loading
    the targets alike beats is beaten whatever the bandwidth is (it cancels), so it cannot win a
    tie through a comparison with a candidate that loads them differently (where one measurement
    round, or a wide interval, makes every difference "not significant")."""
    feasible = sorted((e for e in evals if e.feasible), key=lambda e: (e.mean_s, _preference(e)))
    if not feasible:
        return None, []
    best = feasible[0]
    fastest = fastest_alike(feasible)
    tied = [e for e in feasible if e.mean_s <= fastest[_load(e)].mean_s and not compare(e, best).significant]
    return min(tied, key=_preference), feasible


def reason_lost(e: Evaluation, chosen: Evaluation, feasible: Sequence[Evaluation] | None = None) -> str:
    """One line: why ``e`` was not chosen (``feasible``: :func:`choose`'s ranked list, to name a
    candidate loading the targets alike that beats ``e``)."""
    if not e.feasible:
        return "does not fit: " + "; ".join(e.why_infeasible)
    c, w = e.candidate, chosen.candidate
    cmp = compare(e, chosen)
    if not cmp.identical and _load(e) != _load(chosen):
        alike = beaten_alike(e, chosen, feasible)
        if alike:
            return alike
    if cmp.identical:
        diffs = []
        if c.swap_in_block_size != w.swap_in_block_size:
            diffs.append("CTA width is not in the model")
        if c.prefetch != w.prefetch:
            diffs.append("prefetch only acts on IndexShare layers")
        if c.placement != w.placement:
            diffs.append("placement gives the same per-target load")
        diffs.append(_resource_note(e, chosen) or "engine default preferred")
        return "identical prediction: " + "; ".join(diffs)
    # a chosen candidate without misses (every context fits its hot buffer) fetches nothing: no
    # relative figure exists, so the difference is said in µs
    rel = f"{cmp.delta_s / chosen.mean_s * 100:+.1f}%" if chosen.mean_s else f"{cmp.delta_s * 1e6:+.0f} µs"
    if math.isinf(cmp.ci_s):
        ci = "one measurement round"
    else:
        ci = f"± {cmp.ci_s / chosen.mean_s * 100:.1f}%" if chosen.mean_s else f"± {cmp.ci_s * 1e6:.0f} µs"
    if not cmp.significant:
        note = _resource_note(e, chosen) or "engine default preferred"
        return f"not significant ({rel}, {ci}); {note}"
    if cmp.ci_s == 0:
        return f"{rel} fetch time per token (more misses on the same pool targets)"
    return f"{rel} fetch time per token (significant, {ci})"


def beaten_alike(e: Evaluation, chosen: Evaluation, feasible: Sequence[Evaluation] | None) -> str:
    """Why ``e`` lost to a candidate loading the pool targets as ``e`` does, or "" when none beats it.
    ``feasible``: the ranked list :func:`choose` returned (else only ``e``'s own figures are known)."""
    alike = fastest_alike(feasible).get(_load(e)) if feasible else None
    if alike is None or alike is e or alike.mean_s >= e.mean_s:
        return ""
    rel = f"{(e.mean_s - alike.mean_s) / alike.mean_s * 100:+.1f}%" if alike.mean_s else "slower"
    c = alike.candidate
    return (f"{rel} fetch time per token vs {c.device_buffer_size} R{c.host_to_device_ratio} "
            f"{c.placement.label} (same per-target load: decided by the simulation)")


def _resource_note(e: Evaluation, chosen: Evaluation) -> str:
    if e.gpu_bytes_per_rank > chosen.gpu_bytes_per_rank:
        return f"uses {(e.gpu_bytes_per_rank - chosen.gpu_bytes_per_rank) / 2**20:.0f} MiB more GPU memory per rank"
    if e.pool_bytes_per_rank > chosen.pool_bytes_per_rank:
        return f"uses {(e.pool_bytes_per_rank - chosen.pool_bytes_per_rank) / 2**20:.0f} MiB more pool per rank"
    return ""


# ---------------------------------------------------------------------------------------------
# candidate spaces
# ---------------------------------------------------------------------------------------------

def coarse_step(top_k: int) -> int:
    """Coarse grid step: top_k/2, page-aligned (7 sizes from top_k to 4·top_k)."""
    return max(PAGE, (top_k // 2) // PAGE * PAGE)


def coarse_buffers(top_k: int) -> list[int]:
    return list(range(top_k, 4 * top_k + 1, coarse_step(top_k)))


def all_buffers(top_k: int) -> list[int]:
    """Every page-aligned size from top_k to 4·top_k (the exhaustive space)."""
    first = -(-top_k // PAGE) * PAGE
    return sorted({top_k, *range(first, 4 * top_k + 1, PAGE)})


def candidates_for(buffers: Iterable[int], x: Inputs, placements: Sequence[Placement], *,
                   ratios_extra: int = 1, knobs: bool = False) -> list[Candidate]:
    """Candidates for ``buffers``: ratios from the smallest that holds the design point up to
    ``ratios_extra`` above it; with ``knobs`` every swap-in width and prefetch setting too."""
    req = x.deployment.requests_per_rank(x.concurrency)
    swaps = x.swap_in_widths if knobs else (x.swap_in_block,)
    prefetches = (True, False) if knobs else (DEFAULT_PREFETCH,)
    out = []
    for b in buffers:
        r0 = min_ratio(req, b, max(x.contexts))
        for r in range(r0, r0 + ratios_extra + 1):
            for s in swaps:
                for p in prefetches:
                    for pl in placements:
                        out.append(Candidate(b, r, s, p, pl))
    return out


def best_feasible_buffer(evals: Iterable[Evaluation]) -> int | None:
    chosen, _ = choose(evals)
    return chosen.candidate.device_buffer_size if chosen else None
