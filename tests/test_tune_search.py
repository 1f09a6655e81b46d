"""Search: constraints decide, paired significance, ties go to the engine default / less memory."""

from __future__ import annotations

from sactool.tune import search
from sactool.hisparse.capacity import Deployment, min_ratio, rank_sizing
from sactool.pool.targets import Target
from sactool.pool.rankplan import candidates, round_robin


def _inputs(budget, misses_by_buf, *, reps=3, noise=0.0, targets=None, bw=None):
    """Synthetic misses table: ``misses_by_buf[b]`` per step per layer, per-replicate jitter ``noise``."""
    ctx = 16384
    targets = targets or (Target("node2", "numa", 1 << 40, "t", node=2),)
    # jitter of opposite sign for neighbouring buffer sizes: replicates disagree on their order
    table = [{b: m * (1 + noise * (((r + i) % 2) * 2 - 1)) for i, (b, m) in enumerate(sorted(misses_by_buf.items()))}
             for r in range(reps)]
    return search.Inputs(contexts=(ctx,), concurrency=8, deployment=Deployment(8, 8), targets=targets,
                         layers=61, record_bytes=656, indexer_bytes=132, top_k=2048, gpu_budget_bytes=budget,
                         misses={ctx: table}, hit_rate={ctx: [{b: 0.9 for b in misses_by_buf}] * reps},
                         bandwidth=bw or [{t.name: 1e10 for t in targets}] * reps)


MISSES = {b: 400.0 * 2048 / b for b in search.coarse_buffers(2048)}   # fewer misses with more slots


def _run(x, buffers=None, knobs=False):
    pl = candidates(8, [t.name for t in x.targets])
    evals = [search.evaluate(c, x) for c in search.candidates_for(buffers or list(MISSES), x, pl, knobs=knobs)]
    return search.choose(evals), evals


def test_unconstrained_choice_is_the_largest_buffer_with_engine_defaults():
    (chosen, ranked), evals = _run(_inputs(10**12, MISSES), knobs=True)
    c = chosen.candidate
    assert c.device_buffer_size == 8192 and c.swap_in_block_size == 960 and c.prefetch is True
    tie = next(e for e in evals if e.candidate.swap_in_block_size == 512 and e.candidate.device_buffer_size == 8192
               and e.candidate.host_to_device_ratio == c.host_to_device_ratio)
    assert search.compare(tie, chosen).identical
    assert search.reason_lost(tie, chosen).startswith("identical prediction")


def test_gpu_budget_bounds_the_buffer():
    # budget that holds 8 requests' hot buffers of 6144 slots but not 7168
    p6 = rank_sizing(1, 6144, min_ratio(1, 6144, 16384), layers=61, record_bytes=656, indexer_bytes=132)
    p7 = rank_sizing(1, 7168, min_ratio(1, 7168, 16384), layers=61, record_bytes=656, indexer_bytes=132)
    budget = (p6.gpu_bytes + p7.gpu_bytes) // 2
    (chosen, _), evals = _run(_inputs(budget, MISSES))
    assert chosen.candidate.device_buffer_size == 6144
    bigger = [e for e in evals if e.candidate.device_buffer_size == 8192]
    assert bigger and not any(e.feasible for e in bigger)
    assert search.reason_lost(bigger[0], chosen).startswith("does not fit: GPU")


def test_noisy_measurements_do_not_pick_the_winner():
    # packed (all ranks on node2) has the lower mean, but the rounds disagree on the order:
    # not significant, so the engine's preference (round-robin, as SAC) is kept
    t = (Target("node2", "numa", 1 << 40, "t", node=2), Target("node3", "numa", 1 << 40, "t", node=3))
    rounds = [{"node2": 2.3e10, "node3": 1e10}, {"node2": 1.8e10, "node3": 1e10}] * 2
    (chosen, ranked), evals = _run(_inputs(10**12, {8192: 100.0}, targets=t, bw=rounds), buffers=[8192])
    packed = next(e for e in evals if e.candidate.placement.strategy == "packed")
    assert ranked[0] is packed and packed.mean_s < chosen.mean_s
    assert chosen.candidate.placement.strategy == "round_robin"
    cmp = search.compare(packed, chosen)
    assert not cmp.significant and not cmp.identical
    assert "not significant" in search.reason_lost(packed, chosen)
    # one measurement round: nothing can be told apart across different targets
    (c1, _), ev1 = _run(_inputs(10**12, {8192: 100.0}, targets=t, bw=rounds[:1]), buffers=[8192])
    p1 = next(e for e in ev1 if e.candidate.placement.strategy == "packed")
    assert "one measurement round" in search.reason_lost(p1, c1)


def test_significant_difference_is_ranked():
    # same pool targets: the bandwidth cancels, the simulated misses decide (seeds are averaged)
    m = {4096: 200.0, 8192: 100.0}
    (chosen, _), evals = _run(_inputs(10**12, m, noise=0.3, reps=4), buffers=list(m))
    loser = next(e for e in evals if e.candidate.device_buffer_size == 4096)
    assert chosen.candidate.device_buffer_size == 8192
    assert search.compare(loser, chosen).significant
    assert "+100.0% fetch time" in search.reason_lost(loser, chosen)


def test_round_robin_beats_packed_on_two_targets():
    t = (Target("node2", "numa", 1 << 40, "t", node=2), Target("node3", "numa", 1 << 40, "t", node=3))
    x = _inputs(10**12, {8192: 100.0}, targets=t)
    (chosen, _), evals = _run(x, buffers=[8192])
    assert chosen.candidate.placement == round_robin(8, ["node2", "node3"])
    packed = next(e for e in evals if e.candidate.placement.strategy == "packed")
    assert packed.mean_s == 2 * chosen.mean_s          # all ranks on one target: twice the bytes there


def test_buffer_grids():
    assert search.coarse_buffers(2048) == [2048, 3072, 4096, 5120, 6144, 7168, 8192]
    allb = search.all_buffers(2048)
    assert allb[0] == 2048 and allb[-1] == 8192 and len(allb) == 97
    assert search.t95(1) == 12.706 and search.t95(100) == 1.96


def test_largest_feasible_sees_past_ratio_jumps():
    # 8 requests of 32K on one rank, 3 GiB GPU budget: 3072 slots do not fit (ratio 11 -> 3.226e9 B of
    # hot buffers + indexer keys), but 3264 do (ratio 10); a search stopping at the first misfit misses it
    ctx = 32768
    x = search.Inputs(contexts=(16384, ctx), concurrency=8, deployment=Deployment(1, 1),
                      targets=(Target("node0", "numa", 1 << 40, "t", node=0),), layers=61, record_bytes=656,
                      indexer_bytes=132, top_k=2048, gpu_budget_bytes=3 << 30, misses={}, hit_rate={}, bandwidth=[])
    pl = candidates(1, ["node0"])
    fits_at = {b: not search.constraints(search.Candidate(b, min_ratio(8, b, ctx), 960, True, pl[0]), x)[0]
               for b in (3008, 3072, 3264, 3328)}
    assert fits_at == {3008: True, 3072: False, 3264: True, 3328: False}
    assert search.largest_feasible(x, pl, n=2) == [3008, 3264]   # 3072..3200 need ratio 11


def test_a_candidate_beaten_on_the_same_targets_cannot_win_a_tie():
    """Four pool targets, one measurement round (the generated server tree's case, tune --replicates 1
    with one bench record): across different target loads nothing is significant, but a small buffer
    packed on three targets is beaten by the large buffer packed alike whatever the bandwidth is. It
    used to win the tie on GPU memory (2048 slots, packed/3: 7.40 ms where 8192 slots over all four
    targets predicted 4.31 ms); only the fastest of each target load may be chosen."""
    t = tuple(Target(f"node{n}", "numa", 1 << 40, "t", node=n) for n in (6, 7, 8, 9))
    m = {2048: 400.0, 8192: 100.0}
    x = _inputs(10**12, m, targets=t, reps=1, bw=[{f"node{n}": 1e10 for n in (6, 7, 8, 9)}])
    (chosen, ranked), evals = _run(x, buffers=list(m))
    assert chosen.candidate.device_buffer_size == 8192
    assert chosen.candidate.placement == round_robin(8, [p.name for p in t])
    assert chosen is ranked[0]
    small = next(e for e in evals if e.candidate.device_buffer_size == 2048 and e.feasible
                 and e.candidate.placement.label == "packed/3")
    assert not search.compare(small, chosen).significant      # one round: the test alone cannot tell
    why = search.reason_lost(small, chosen, ranked)
    assert "vs 8192" in why and "packed/3" in why and "same per-target load" in why, why
