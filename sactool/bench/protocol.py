"""The measurement protocol: warm-up, calibration, interleaved rounds, raw samples.

A *configuration* is a callable ``run(reps) -> work`` that performs ``reps`` repetitions of one
kernel invocation and returns the amount of work done (loads, bytes, records, …); the protocol
times it with ``clock`` (nanoseconds, ``time.perf_counter_ns`` by default; tests inject a fake).

1. first call (``reps=1``) timed apart as ``first_call_seconds`` (JIT compile or cache load);
2. warm-up: ``warmup`` more calls;
3. calibration: ``reps`` doubled until one sample takes ≥ ``min_sample_seconds``;
4. ``rounds`` rounds; each round takes one sample of every configuration, in a rotated order
   (A B C, B C A, C A B …) so slow drift does not favour one configuration;
5. each sample is stored raw as (seconds, work); the caller turns them into units; an observer
   (:mod:`sactool.bench.disturb`) may record what else ran during each sample.

Ctrl-C between samples stops the rounds and keeps every finished sample (``interrupted``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

Clock = Callable[[], int]


@dataclass(frozen=True)
class Protocol:
    """Preset knobs. ``min_sample_seconds``: calibrated minimum length of one sample."""

    name: str
    min_sample_seconds: float
    rounds: int
    warmup: int = 1
    max_reps: int = 1 << 30

    def to_data(self) -> dict:
        return {"preset": self.name, "min_sample_seconds": self.min_sample_seconds, "rounds": self.rounds,
                "warmup_calls": self.warmup, "interleaved": True, "order": "rotated each round",
                "clock": "time.perf_counter_ns", "calibration": "reps doubled until a sample >= min_sample_seconds"}


PRESETS = {
    "fast": Protocol("fast", 0.02, 3),
    "default": Protocol("default", 0.05, 5),
    "rigorous": Protocol("rigorous", 0.2, 15, warmup=2),
}


@dataclass
class Config:
    """One measured configuration; filled in by :func:`run_protocol`."""

    key: str
    run: Callable[[int], float]
    reps: int = 1
    first_call_seconds: float | None = None
    samples: list = field(default_factory=list)  # [(seconds, work), …]
    others: list = field(default_factory=list)   # per sample: what else ran (observe.stop), when observed


def _timed(cfg: Config, reps: int, clock: Clock) -> tuple[float, float]:
    t0 = clock()
    work = cfg.run(reps)
    return (clock() - t0) / 1e9, float(work)


def calibrate(cfg: Config, proto: Protocol, clock: Clock) -> None:
    reps = max(1, cfg.reps)
    while True:
        secs, _ = _timed(cfg, reps, clock)
        if secs >= proto.min_sample_seconds or reps >= proto.max_reps:
            break
        # jump close to the target when the estimate is usable, else double
        guess = int(reps * proto.min_sample_seconds / secs * 1.2) if secs > 0 else reps * 2
        reps = min(proto.max_reps, max(reps * 2, min(guess, reps * 64)))
    cfg.reps = reps


def run_protocol(configs: list[Config], proto: Protocol, *, clock: Clock = time.perf_counter_ns,
                 progress: Callable[[str, int, int], None] | None = None, observe=None) -> bool:
    """Measure every configuration; returns False when interrupted by Ctrl-C (samples kept).

    ``observe`` (``start() -> token``, ``stop(token) -> dict | None``, e.g.
    :class:`sactool.bench.disturb.Observer`) is called around every timed sample; what it returns is
    kept in the configuration's ``others``, one entry per sample."""
    from sactool.errors import check_signalled

    total = len(configs) * proto.rounds
    done = 0
    try:
        for cfg in configs:
            check_signalled()
            if cfg.first_call_seconds is None:
                cfg.first_call_seconds, _ = _timed(cfg, 1, clock)
            for _ in range(proto.warmup):
                _timed(cfg, 1, clock)
            calibrate(cfg, proto, clock)
            if progress:
                progress(f"calibrated {cfg.key}", done, total)
        for r in range(proto.rounds):
            k = r % len(configs) if configs else 0
            for cfg in configs[k:] + configs[:k]:
                check_signalled()
                token = observe.start() if observe else None
                sample = _timed(cfg, cfg.reps, clock)
                other = observe.stop(token) if observe else None
                cfg.samples.append(sample)
                if observe:
                    cfg.others.append(other)
                done += 1
                if progress:
                    progress(cfg.key, done, total)
    except KeyboardInterrupt:
        return False
    return True
