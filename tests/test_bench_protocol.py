"""The measurement protocol with a fake clock: first call apart, warm-up, calibration to the
minimum sample time, rotated interleaving, raw samples kept, Ctrl-C keeps finished samples."""

from __future__ import annotations

from sactool.bench.protocol import PRESETS, Config, Protocol, run_protocol


class FakeClock:
    def __init__(self):
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def kernel(clock: FakeClock, name: str, cost_ns: int, log: list, first_extra_ns: int = 0):
    state = {"calls": 0}

    def run(reps: int) -> float:
        state["calls"] += 1
        clock.ns += reps * cost_ns + (first_extra_ns if state["calls"] == 1 else 0)
        log.append((name, reps))
        return reps * 10  # work units

    return run


def test_calibration_first_call_and_interleaving():
    clock, log = FakeClock(), []
    proto = Protocol("t", min_sample_seconds=0.01, rounds=4, warmup=1)
    a = Config("A", kernel(clock, "A", 1_000, log, first_extra_ns=500_000_000))  # 1 µs per rep, 0.5 s JIT
    b = Config("B", kernel(clock, "B", 3_000_000, log))  # 3 ms per rep
    assert run_protocol([a, b], proto, clock=clock)
    assert abs(a.first_call_seconds - 0.500001) < 1e-9  # JIT time kept apart from samples
    assert a.reps * 1_000 >= 10_000_000 and b.reps * 3_000_000 >= 10_000_000  # >= min sample
    assert b.reps <= 8  # calibration does not overshoot wildly
    assert len(a.samples) == len(b.samples) == 4
    for secs, work in a.samples:
        assert secs == a.reps * 1e-6 and work == a.reps * 10
    sampled = [n for n, r in log if (n == "A" and r == a.reps) or (n == "B" and r == b.reps)][-8:]
    assert sampled == ["A", "B", "B", "A", "A", "B", "B", "A"]  # rotated order each round


def test_interrupt_keeps_finished_samples():
    clock, log = FakeClock(), []
    calls = {"n": 0}
    good = kernel(clock, "A", 2_000_000, log)

    def flaky(reps: int) -> float:
        calls["n"] += 1
        if calls["n"] > 6:
            raise KeyboardInterrupt
        return good(reps)

    cfg = Config("A", flaky)
    ok = run_protocol([cfg], Protocol("t", 0.001, rounds=10), clock=clock)
    assert ok is False
    assert 1 <= len(cfg.samples) < 10
    assert all(s > 0 for s, _ in cfg.samples)


def test_presets_are_ordered():
    f, d, r = PRESETS["fast"], PRESETS["default"], PRESETS["rigorous"]
    assert f.min_sample_seconds < d.min_sample_seconds < r.min_sample_seconds
    assert f.rounds < d.rounds < r.rounds
    assert d.to_data()["interleaved"] is True


def test_shuffled_rounds_sample_each_once_in_changing_orders_and_observe_each_sample():
    """``shuffle_seed``: every round samples every configuration once, in seeded orders that differ (no
    configuration always follows the same one); an observer is called around each timed sample only."""
    clock, log = FakeClock(), []
    names = "ABCDE"
    cfgs = [Config(n, kernel(clock, n, 20_000_000, log)) for n in names]   # 20 ms: calibrated at 1 rep

    class Obs:
        n = 0

        def start(self):
            return clock.ns

        def stop(self, t0):
            Obs.n += 1
            return {"ns": clock.ns - t0}

    proto = Protocol("t", min_sample_seconds=0.01, rounds=6, warmup=0, shuffle_seed=3)
    assert run_protocol(cfgs, proto, clock=clock, observe=Obs())
    timed = [n for n, _ in log][-6 * 5:]
    rounds = [timed[i:i + 5] for i in range(0, 30, 5)]
    assert all(sorted(r) == list(names) for r in rounds) and len({tuple(r) for r in rounds}) > 2
    after_a = {r[r.index("A") + 1] for r in rounds if r.index("A") < 4}
    assert len(after_a) > 1                               # A's neighbour changes
    assert Obs.n == 30 and all(c.others == [{"ns": 20_000_000}] * 6 for c in cfgs)
    assert "shuffled each round (seed 3)" == proto.to_data()["order"]
