"""Fetch cost of the HiSparse swap-in: bytes and time per decode step, from measured gather figures.

Per decode step and per layer, each running request asks for its top-k records; the ones not in
its GPU hot buffer ("misses", from :mod:`sactool.hisparse.hotbuffer`) are copied from the host pool,
one warp per record (docs/sources.md, SGLang §2.3 step 5). So per request and
generated token::

    fetch bytes = misses per step per layer × record bytes × layers           (issue 3, item 4)

and the pool must deliver that for every request that shares it before the step can finish.
The RDMA baseline of SAC instead moves a request's whole prefix once (docs/sources.md, SAC §1, §4.3)::

    RDMA full-prefix bytes = context tokens × record bytes × layers

These functions are pure arithmetic so that ``simulate`` can reuse them.

Besides the bytes, every missed record costs a fixed time that DRAM and CXL pool alike pay, serial
per rank (``simulate.calibration``: fitted on the paper platform's calibration runs, 164 ns per
record per layer). :func:`per_missed_record_cost` is that figure with its provenance (packaged in
``sactool/data/costs/per-missed-record.yaml``, checked against the fit by the test suite) and
:func:`common_miss_time_per_token` the time it adds per generated token; ``simulate``'s engine and
``tune``'s hot-buffer search both charge it through that function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class PerMissCost:
    """Seconds per missed record per layer that every placement pays, and where it comes from."""

    seconds: float
    source: str
    applies: str

    def to_data(self) -> dict[str, Any]:
        return {"per_missed_record_s": self.seconds, "source": self.source, "applies": self.applies,
                "file": "sactool/data/costs/per-missed-record.yaml"}


def per_missed_record_cost() -> PerMissCost:
    """The packaged per-missed-record cost (``sactool/data/costs/per-missed-record.yaml``)."""
    from sactool.data import data_path
    from sactool.errors import RecordError
    from sactool.records import load_structured

    d = load_structured(data_path("costs", "per-missed-record.yaml"), what="per-miss cost file")
    v = d.get("per_missed_record_s")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e-3:
        raise RecordError(f"per-miss cost file: per_missed_record_s must be a number of seconds, got {v!r}",
                          "reinstall sactool")
    return PerMissCost(float(v), str(d.get("source") or ""), str(d.get("applies") or ""))


def common_miss_time_per_token(misses_per_step_per_layer: float, requests: float, layers: int,
                               s_per_record: float) -> float:
    """Seconds the per-missed-record cost adds to a rank's decode step (all layers), when
    ``requests`` requests each miss ``misses_per_step_per_layer`` records per layer: serial per
    rank, so ``requests × misses × layers × s_per_record``."""
    return float(requests) * float(misses_per_step_per_layer) * layers * s_per_record


class GatherLike(Protocol):
    """What the cost model needs of ``sactool.bench.GatherFigure``."""

    record_bytes: int
    bandwidth_bytes_per_s: float


def fetch_bytes_per_token(misses_per_step_per_layer: float, record_bytes: int, layers: int) -> float:
    """Bytes one request fetches from the pool per generated token (all layers)."""
    return float(misses_per_step_per_layer) * record_bytes * layers


def fetch_time_per_token(misses_per_step_per_layer: float, record_bytes: int, layers: int,
                         gather: GatherLike | Any, concurrency: int) -> float:
    """Seconds the pool needs per decode step when ``concurrency`` requests share it.

    ``= concurrency × misses × record_bytes × layers / gather.bandwidth_bytes_per_s``.

    This is the fetch stall added to each generated token (the time between tokens) of every one
    of the ``concurrency`` requests. Assumptions, stated so a reader can disagree with them:

    * the pool delivers missed records at the *measured* bandwidth of ``gather``, taken as the
      pool's throughput limit, not scaled by a guessed parallelism. Which measurement that is,
      the profile's ``bench.fetch_path`` says: ``gpu`` — the GPU swap-in of ``sactool bench
      gpu-gather`` (a GPU loading the records from the pool's memory, as HiSparse does) at the
      design's requests in flight per rank, one block each; ``cpu_proxy`` — random gathers of
      ``gather.record_bytes`` records by CPU threads (``sactool bench gather``), a CPU proxy
      for the GPU path: a few CPU threads and eight GPUs pulling over their own PCIe links are
      different machines, so the proxy may be far off in either direction;
    * no overlap of the fetch with compute: for models without IndexShare every layer's swap-in
      runs synchronously before its attention (docs/sources.md, SGLang §2.3 step 6), so the stall
      adds to the step time;
    * hits cost nothing here (they are GPU-local), and per-kernel fixed overheads are left out.

    ``gather.record_bytes`` should equal ``record_bytes`` (bandwidth depends on record size);
    a mismatch raises ValueError.
    """
    if gather.record_bytes != record_bytes:
        raise ValueError(f"gather figure is for {gather.record_bytes} B records, not {record_bytes} B")
    if gather.bandwidth_bytes_per_s <= 0:
        raise ValueError("gather bandwidth must be positive")
    if concurrency < 0:
        raise ValueError("concurrency must be >= 0")
    return concurrency * fetch_bytes_per_token(misses_per_step_per_layer, record_bytes, layers) \
        / gather.bandwidth_bytes_per_s


def step_time_over_targets(bytes_per_target: dict[str, float], bandwidth_per_target: dict[str, float]) -> float:
    """Decode-step fetch time when ranks are spread over several pool targets.

    Each target (CXL node or DAX device) serves the bytes of the ranks placed on it at its own
    measured bandwidth, independently of the others, so the step waits for the slowest:
    ``max_t bytes_t / bandwidth_t``.
    """
    t = 0.0
    for name, b in bytes_per_target.items():
        if b <= 0:
            continue
        bw = bandwidth_per_target[name]
        if bw <= 0:
            raise ValueError(f"bandwidth of {name} must be positive")
        t = max(t, b / bw)
    return t


def rdma_full_prefix_bytes(context_tokens: int, record_bytes: int, layers: int) -> int:
    """Bytes an RDMA pool moves to prefetch one request's whole prefix (SAC's baseline)."""
    return int(context_tokens) * record_bytes * layers
