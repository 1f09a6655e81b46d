"""What ``sactool tune`` is asked (:class:`TuneOptions`) and answers (:class:`TuneResult`), and the
defaults both halves of the tune share. Imported by :mod:`sactool.tune.api` (checks, entry) and
:mod:`sactool.tune.run` (the heavy half), which no longer import each other's names."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from sactool.tune.pool import PoolSource

Progress = Callable[[str, int, int], None]

SAC_CONCURRENCY = 64
"""Concurrency of SAC's main experiments (docs/sources.md, SAC §1, §3: "concurrency 64"); the default
design concurrency, lowered to what the pool holds when it holds less."""
DEFAULT_CONTEXTS = (16384, 32768, 65536, 131072)   # the paper's 16K–128K sweep (docs/sources.md, SAC §3)
DEFAULT_STEPS = 128
DEFAULT_REPLICATES = 3
DEFAULT_GATHER_SECONDS = 0.6


@dataclass(frozen=True)
class TuneOptions:
    """What the user asks for. ``given`` names the options the user set (provenance "user")."""

    model: str = "deepseek-v3.2"
    engine: str = "sglang"                              # sglang | vllm: whose settings the profile holds
    contexts: tuple[int, ...] = DEFAULT_CONTEXTS        # tokens
    concurrency: int | None = None                      # total requests; None = auto
    tp: int = 8                                         # GPU ranks (canonical DeepSeek-V3.2 command: tp 8)
    attn_dp: int | None = None                          # attention-DP groups; None = tp (DP attention)
    gpu: str | None = None                              # catalog name; None = gpus.DEFAULT_GPU
    gpu_kv_budget_bytes: int | None = None              # per GPU
    weights_bytes: int | None = None                    # whole checkpoint
    kv_dtype: str = "fp8"
    bench: Path | tuple[Path, ...] | None = None        # one bench record, or one per pool target
    trace: Path | None = None
    strict: bool = False
    out: Path | None = None
    force: bool = False
    resume: bool = False
    steps: int = DEFAULT_STEPS                          # decode steps simulated per context
    replicates: int = DEFAULT_REPLICATES                # workload seeds / measurement rounds
    seed: int = 0
    workload: str = "sharegpt-dsv32"                   # top-k workload the hot-buffer misses are simulated on
    gather_seconds: float = DEFAULT_GATHER_SECONDS
    gather_size_bytes: int | None = None                # quick-gather buffer (--gather-size); None = sized from
    #                                                     this machine (sactool.bench.sizing.derive)
    sysfs_root: Path | None = None
    pool_bytes: int | None = None                       # pins each pool target's capacity (else free memory / DAX size)
    exhaustive: bool = False                            # evaluate every page-aligned buffer size
    observed: str | None = None                         # --observed FILE|URL: refit the workload to the engine
    observed_buffer: int | None = None                  # --observed-buffer: the hot buffer the engine ran
    write: bool = True
    given: frozenset[str] = field(default_factory=frozenset)
    pool_source: PoolSource | None = None               # pool and bandwidth from a record instead of this
    #                                                     machine (tune --fleet: sactool.fleet.split.pool_source)
    hotbuffer_cache: Any = None                         # sactool.tune.simcache.HotBufferCache: simulations
    #                                                     shared by tunes with the same inputs (tune --fleet)


@dataclass(frozen=True)
class TuneResult:
    profile: Any                       # sactool.profile.Profile
    path: Path | None
    summary: dict[str, Any]            # what the table shows (also in JSON)
    alternatives: tuple[dict[str, Any], ...]
    evaluated: int
    space: int
    warnings: tuple[dict[str, str], ...]
    elapsed_s: float
    chosen_objective_s: float
    best_objective_s: float
    simulations: dict[str, int] = field(default_factory=dict)   # hot-buffer passes: run, reused (shared cache)

    def to_data(self) -> dict[str, Any]:
        from sactool.records import to_data

        return {"kind": "tune_result", "path": str(self.path) if self.path else None,
                "summary": to_data(self.summary), "alternatives": to_data(self.alternatives),
                "candidates_evaluated": self.evaluated, "candidate_space": self.space,
                "warnings": to_data(self.warnings), "elapsed_s": round(self.elapsed_s, 3),
                "hotbuffer_simulations": dict(self.simulations),
                "profile": self.profile.to_data()}
