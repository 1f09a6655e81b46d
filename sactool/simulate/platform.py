"""Platform files: every hardware, engine and workload figure the serving model uses, with sources.

A platform file (YAML, ``kind: platform``) describes one serving box: GPUs and how SGLang runs on
them, the PCIe links, the CXL pool, the host DRAM, the NICs of an RDMA pool, the measured top-k
gather latencies of each memory, and the workload to simulate. Each section carries ``source``
strings naming the paper section, raw log or vendor page a value came from
(``sactool/data/platforms/sac-paper.yaml`` is the worked example). Loading checks every field and
names the field in the error (``RecordError``, exit code 4); a value that contradicts another
(e.g. more ranks than GPUs) is refused the same way.

Units are base units in the key names: ``*_bytes``, ``*_bytes_per_s``, ``*_s``; token counts
accept ``16k`` spellings.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from sactool.errors import RecordError
from sactool.records import load_structured, upgrade
from sactool.simulate.calibration import CalibrationRun

KIND = "platform"
SCHEMA_VERSION = 1
CASES = ("cache_hit", "cache_populate")
HARNESSES = ("e2e_bench", "steady")
TOPK_WORKLOADS = ("sharegpt-dsv32", "filler", "calibrated")
"""``sharegpt-dsv32``: the LRU replay of the workload model fitted to the per-layer statistics of
ShareGPT prompts (``sactool.workload``); ``filler``: the LRU replay of the paper runs' filler-prompt
model (``workload.filler``) with the parameters of ``workload.filler`` fitted to the calibration's
misses (``simulate.fillerfit``), over a whole request; ``calibrated``: the calibration's fitted
request-life means themselves (at the calibrated buffers only)."""
"""``e2e_bench``: the authors' benchmark client and SGLang's loop (``harness.py``: burst dispatch,
round-duration throughput, first-chunk TTFT, front-end queue, lockstep extends and RDMA fetches);
``steady``: closed loop with first arrivals spread over one request lifetime and the saturated
throughput (``engine.run``)."""


@dataclass(frozen=True)
class GatherPoint:
    """One measured single-request, single-layer top-k gather: ``records`` records of
    ``record_bytes`` each in ``latency_s`` (GPU swap-in kernel, one CTA)."""

    records: int
    latency_s: float


@dataclass(frozen=True)
class GatherCurve:
    """Measured gather latencies of one memory at one record size (>= 2 points).

    The model uses the straight line through them: ``latency = fixed_s + records × s_per_record``,
    ``s_per_record`` scaled by cache lines touched per record when the model's record differs
    (``sactool.bench.record.lines_touched``: 656 B -> 11 lines, 1152 B -> 18).
    ``aggregate_bytes_per_s`` (optional): measured all-threads gather bandwidth, a cap on what all
    requests of one GPU together get (from a bench record); None when only per-request figures exist.
    """

    record_bytes: int
    points: tuple[GatherPoint, ...]
    source: str = ""
    aggregate_bytes_per_s: float | None = None

    def line(self) -> tuple[float, float]:
        """(fixed_s, s_per_record) by least squares through the points."""
        n = len(self.points)
        xs = [p.records for p in self.points]
        ys = [p.latency_s for p in self.points]
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        return max(0.0, my - slope * mx), slope


@dataclass(frozen=True)
class StepPoint:
    """Measured decode step time of one rank with KV in HBM (no pool reads)."""

    requests_per_rank: int
    context_tokens: int
    step_time_s: float


@dataclass(frozen=True)
class GpuSection:
    name: str
    step_points: tuple[StepPoint, ...] = ()     # measured compute; else roofline from the catalog
    hisparse_overhead_s: float = 0.0            # measured per-step cost of the HiSparse path
    kv_budget_bytes: float | None = None        # per-GPU bytes for hot buffers + index keys
    source: str = ""
    # measured decode step of the HiSparse path with a DRAM host pool (requests per rank, context);
    # the HiSparse per-step cost at a batch is this minus GPU compute minus the modelled DRAM swap-in
    dram_step_points: tuple[StepPoint, ...] = ()
    dram_step_buffer: int | None = None         # hot-buffer slots those runs used (None: serving.device_buffer_size)


@dataclass(frozen=True)
class Platform:
    """Everything the serving model reads. See ``sactool/data/platforms/sac-paper.yaml``."""

    name: str
    # model and engine
    model: str
    kv_dtype: str
    gpus: int
    attn_dp_size: int
    top_k: int
    device_buffer_size: int
    prefetch: bool
    rdma_device_buffer_size: int | None
    gpu: GpuSection
    prefill_points: tuple[tuple[int, float], ...]   # (context tokens, seconds) for one request per rank
    # links and memories
    gpu_link_bytes_per_s: float
    pcie_switches: int
    switch_uplink_bytes_per_s: float
    cxl_devices: int
    cxl_device_read_bytes_per_s: float
    cxl_gpu_path_bytes_per_s: float
    cxl_write_bytes_per_s: float
    cxl_capacity_bytes: float
    dram_capacity_bytes: float
    dram_write_bytes_per_s: float
    dram_nodes: int                  # DRAM NUMA nodes the ranks' host pools spread over (rank % nodes)
    nics: int
    nic_bytes_per_s: float
    nic_chunk_bytes: int
    nic_per_message_s: float
    rdma_fetch_blocks_decode: bool
    rdma_conversion_bytes_per_s: float | None
    gather_cxl: GatherCurve
    gather_dram: GatherCurve
    # workload
    contexts: tuple[int, ...]
    output_tokens: int
    concurrency: tuple[int, ...]
    requests_per_concurrency: float
    case: str
    arrival_rate_per_s: float | None
    harness: str = "steady"
    hisparse_kernel: str = "sglang-0.5.23"               # whose LRU write-back (hisparse.hotbuffer.KERNELS)
    rdma_requests_per_concurrency: float | None = None   # the RDMA run set's own request count
    shared_prefix: bool = False                          # every request decodes the same prompt (pool holds it once per rank)
    rdma_fetch_fixed_s: float = 0.0                      # fixed cost of one RDMA fetch (beyond wire + CPU passes)
    cxl_rank_devices: tuple[int, ...] = ()               # the CXL device of each rank (a profile's pool.rank_targets);
    #                                                      () = rank % cxl.devices, the paper's round robin
    frontend_s_per_prompt_token: float = 0.0             # serial tokenization in the server's loop
    extend_points: tuple[tuple[int, float], ...] = ()    # (context, s): one extend forward (first token)
    # the runs the HiSparse step's free parameters are fitted on (``simulate.calibration``), their
    # source, and the run families held out of the fit (agreement is reported only on those)
    topk_workload: str = "sharegpt-dsv32"   # TOPK_WORKLOADS: where the hot-buffer misses come from
    filler: dict = field(default_factory=dict)   # context -> workload.filler.FillerParams
    calibration_runs: tuple = ()
    calibration_source: str = ""
    calibration_held_out: tuple[str, ...] = ()
    calibration_baselines: tuple[str, ...] = ()   # inputs read from the validation run families
    # the fit of those runs on this platform as its file describes it (``calibration.Calibration``),
    # made once at load: a what-if (``--set``, ``dataclasses.replace``) changes the hardware, not
    # what the runs measured, so it is not refitted
    calibration: Any = field(default=None, compare=False, repr=False)
    sources: dict[str, str] = field(default_factory=dict)
    validation: dict[str, Any] = field(default_factory=dict)
    origin: str = ""

    @property
    def gpus_per_switch(self) -> int:
        return -(-self.gpus // self.pcie_switches)

    def to_data(self) -> dict[str, Any]:
        from sactool.records import to_data

        return {f.name: to_data(getattr(self, f.name)) for f in dataclasses.fields(self)}


# --------------------------------------------------------------------------------------------
# field readers: every error names the dotted field
# --------------------------------------------------------------------------------------------

def _err(name: str, msg: str) -> RecordError:
    return RecordError(f"platform field {name}: {msg}",
                       "fix the platform file (see sactool/data/platforms/sac-paper.yaml for every field)")


def _get(d: Mapping[str, Any], path: str, *, optional: bool = False, default: Any = None,
         label: str | None = None) -> Any:
    cur: Any = d
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur or cur[part] is None:
            if optional:
                return default
            raise _err(label or path, "is missing")
        cur = cur[part]
    return cur


def _num(d, path, *, positive=True, optional=False, default=None, allow_zero=False,
         label: str | None = None) -> float | None:
    v = _get(d, path, optional=optional, default=default, label=label)
    path = label or path
    if v is None:
        return None
    if isinstance(v, str):  # YAML 1.1 reads 55.4e9 as a string; sizes like 2TB are accepted too
        try:
            v = float(v)
        except ValueError:
            from sactool.units import parse_size

            try:
                v = parse_size(v, what=path)
            except Exception:
                raise _err(path, f"must be a number, got {v!r}") from None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        raise _err(path, f"must be a finite number, got {v!r}")
    if positive and (v < 0 or (v == 0 and not allow_zero)):
        raise _err(path, f"must be {'>= 0' if allow_zero else '> 0'}, got {v!r}")
    return float(v)


def _int(d, path, *, lo=1, optional=False, default=None, label: str | None = None) -> int | None:
    v = _get(d, path, optional=optional, default=default, label=label)
    path = label or path
    if v is None:
        return None
    if isinstance(v, str):
        from sactool.units import parse_tokens

        try:
            v = parse_tokens(v, what=path)
        except Exception:
            raise _err(path, f"must be an integer, got {v!r}") from None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _err(path, f"must be an integer, got {v!r}")
    if v < lo:
        raise _err(path, f"must be >= {lo}, got {v}")
    return v


def _ints(d, path) -> tuple[int, ...]:
    v = _get(d, path)
    if isinstance(v, (int, str)) and not isinstance(v, bool):
        v = [v]
    if not isinstance(v, list) or not v:
        raise _err(path, "must be a non-empty list")
    return tuple(_int({"v": x}, "v", label=f"{path}[{i}]") for i, x in enumerate(v))


def _bool(d, path, *, default: bool) -> bool:
    v = _get(d, path, optional=True, default=default)
    if not isinstance(v, bool):
        raise _err(path, f"must be true or false, got {v!r}")
    return v


def _gather(d, path) -> GatherCurve:
    rb = _int(d, f"{path}.record_bytes")
    raw = _get(d, f"{path}.points")
    if not isinstance(raw, list) or len(raw) < 2:
        raise _err(f"{path}.points", "needs at least two {records, latency_s} measurements")
    pts = []
    for i, p in enumerate(raw):
        if not isinstance(p, Mapping):
            _bad(f"{path}.points[{i}]")
        pts.append(GatherPoint(_int(p, "records", label=f"{path}.points[{i}].records"),
                               _num(p, "latency_s", label=f"{path}.points[{i}].latency_s")))
    if len({p.records for p in pts}) < 2:
        raise _err(f"{path}.points", "needs two different record counts")
    curve = GatherCurve(rb, tuple(sorted(pts, key=lambda p: p.records)), str(_get(d, f"{path}.source", optional=True, default="")),
                        _num(d, f"{path}.aggregate_bytes_per_s", optional=True))
    if curve.line()[1] <= 0:
        raise _err(f"{path}.points", "latency must grow with the number of records")
    return curve


def _choice(d, path: str, allowed: tuple[str, ...], default: str) -> str:
    v = _get(d, path, optional=True, default=default)
    if v not in allowed:
        raise _err(path, f"must be one of {', '.join(allowed)}, got {v!r}")
    return v


def _bad(path: str):
    raise _err(path, "must be a mapping")


def _step_points(d, path: str) -> list[StepPoint]:
    """``[{requests_per_rank, context_tokens, step_time_s}, ...]`` at ``path`` (optional)."""
    out = []
    for i, p in enumerate(_get(d, path, optional=True, default=[]) or []):
        q = f"{path}[{i}]"
        if not isinstance(p, Mapping):
            _bad(q)
        out.append(StepPoint(_int(p, "requests_per_rank", label=f"{q}.requests_per_rank"),
                             _int(p, "context_tokens", label=f"{q}.context_tokens"),
                             _num(p, "step_time_s", label=f"{q}.step_time_s")))
    return out


def _time_points(d, path: str) -> list[tuple[int, float]]:
    """``[{context_tokens, time_s}, ...]`` at ``path`` (optional) as (context, seconds)."""
    out = []
    for i, p in enumerate(_get(d, path, optional=True, default=[]) or []):
        q = f"{path}[{i}]"
        if not isinstance(p, Mapping):
            _bad(q)
        out.append((_int(p, "context_tokens", label=f"{q}.context_tokens"), _num(p, "time_s", label=f"{q}.time_s")))
    return out


def read_runs(d, path: str = "calibration.runs") -> tuple[CalibrationRun, ...]:
    """``[{placement, device_buffer_size, context_tokens, requests_per_rank, step_time_s, run}]``."""
    out = []
    for i, p in enumerate(_get(d, path, optional=True, default=[]) or []):
        q = f"{path}[{i}]"
        if not isinstance(p, dict):
            _bad(q)
        pl = p.get("placement")
        if pl not in ("dram", "sac"):
            raise _err(f"{q}.placement", f"must be dram or sac, got {pl!r}")
        out.append(CalibrationRun(pl, _int(p, "device_buffer_size", label=f"{q}.device_buffer_size"),
                                  _int(p, "context_tokens", label=f"{q}.context_tokens"),
                                  _int(p, "requests_per_rank", label=f"{q}.requests_per_rank"),
                                  _num(p, "step_time_s", label=f"{q}.step_time_s"),
                                  str(p.get("run") or "")))
    return tuple(out)


def read_filler(d, path: str = "workload.filler") -> dict[int, Any]:
    """``{context: FillerParams}``: a packaged workload's name (``sactool/data/workloads/``) or an
    inline block of the same fields; ``{}`` when absent."""
    from sactool.errors import UsageError
    from sactool.workload.filler import load_filler_workload, read_params

    blk = _get(d, path, optional=True, default=None)
    if not blk:
        return {}
    try:
        if isinstance(blk, str):
            return dict(load_filler_workload(blk).per_context)
        if not isinstance(blk, Mapping):
            _bad(path)
        return read_params(dict(blk), path)
    except UsageError as e:
        raise _err(path, e.message) from None


def from_data(data: Mapping[str, Any], *, origin: str = "platform") -> Platform:
    """Build and validate a :class:`Platform` from loaded YAML/JSON (and fit its calibration runs)."""
    data = upgrade(dict(data), kind=KIND, current=SCHEMA_VERSION, source=origin)
    d = data
    steps = _step_points(d, "gpu.decode_step.measured")
    dsteps = _step_points(d, "gpu.hisparse_dram_step.measured")
    extend = _time_points(d, "first_token.extend.measured")
    harness = _get(d, "workload.harness", optional=True, default="steady")
    from sactool.hisparse import KERNELS

    kernel = _get(d, "serving.hisparse_kernel", optional=True, default="sglang-0.5.23")
    if kernel not in KERNELS:
        raise _err("serving.hisparse_kernel", f"must be one of {', '.join(KERNELS)}, got {kernel!r}")
    if harness not in HARNESSES:
        raise _err("workload.harness", f"must be one of {', '.join(HARNESSES)}, got {harness!r}")
    gpu = _gpu(d, steps, dsteps)
    prefill = _time_points(d, "prefill.measured")
    rate = _num(d, "workload.arrival_rate_per_s", optional=True)
    case = _get(d, "workload.case", optional=True, default="cache_hit")
    if case not in CASES:
        raise _err("workload.case", f"must be one of {', '.join(CASES)}, got {case!r}")
    conv = _get(d, "rdma.layout_conversion_bytes_per_s", optional=True)
    p = Platform(
        name=str(_get(d, "name")),
        model=str(_get(d, "model.name")),
        kv_dtype=str(_get(d, "model.kv_dtype")),
        gpus=_int(d, "serving.gpus"),
        attn_dp_size=_int(d, "serving.attn_dp_size"),
        top_k=_int(d, "serving.top_k"),
        device_buffer_size=_int(d, "serving.device_buffer_size"),
        prefetch=_bool(d, "serving.prefetch", default=False),
        rdma_device_buffer_size=_int(d, "serving.rdma_device_buffer_size", optional=True),
        gpu=gpu,
        prefill_points=tuple(sorted(prefill)),
        gpu_link_bytes_per_s=_num(d, "pcie.gpu_link_bytes_per_s"),
        pcie_switches=_int(d, "pcie.switches"),
        switch_uplink_bytes_per_s=_num(d, "pcie.switch_uplink_bytes_per_s"),
        cxl_devices=_int(d, "cxl.devices"),
        cxl_device_read_bytes_per_s=_num(d, "cxl.device_read_bytes_per_s"),
        cxl_gpu_path_bytes_per_s=_num(d, "cxl.gpu_path_read_bytes_per_s"),
        cxl_write_bytes_per_s=_num(d, "cxl.write_bytes_per_s"),
        cxl_capacity_bytes=_num(d, "cxl.capacity_bytes"),
        dram_capacity_bytes=_num(d, "dram.capacity_bytes"),
        dram_write_bytes_per_s=_num(d, "dram.write_bytes_per_s"),
        dram_nodes=_int(d, "dram.nodes", optional=True, default=1),
        nics=_int(d, "nic.count"),
        nic_bytes_per_s=_num(d, "nic.bandwidth_bytes_per_s"),
        nic_chunk_bytes=_int(d, "nic.chunk_bytes"),
        nic_per_message_s=_num(d, "nic.per_message_s", allow_zero=True),
        rdma_fetch_blocks_decode=_bool(d, "rdma.fetch_blocks_decode", default=False),
        rdma_conversion_bytes_per_s=None if conv is None else _num(d, "rdma.layout_conversion_bytes_per_s"),
        gather_cxl=_gather(d, "gather.cxl"),
        gather_dram=_gather(d, "gather.dram"),
        contexts=_ints(d, "workload.contexts"),
        output_tokens=_int(d, "workload.output_tokens"),
        concurrency=_ints(d, "workload.concurrency"),
        requests_per_concurrency=_num(d, "workload.requests_per_concurrency", optional=True, default=2.0),
        case=case,
        arrival_rate_per_s=rate,
        harness=harness,
        hisparse_kernel=kernel,
        rdma_requests_per_concurrency=_num(d, "rdma.requests_per_concurrency", optional=True),
        shared_prefix=_bool(d, "workload.shared_prefix", default=False),
        rdma_fetch_fixed_s=_num(d, "rdma.fetch_fixed_s", optional=True, default=0.0, allow_zero=True),
        frontend_s_per_prompt_token=_num(d, "frontend.s_per_prompt_token", optional=True, default=0.0,
                                         allow_zero=True),
        extend_points=tuple(sorted(extend)),
        topk_workload=_choice(d, "workload.topk", TOPK_WORKLOADS, "sharegpt-dsv32"),
        filler=read_filler(d),
        calibration_runs=read_runs(d),
        calibration_source=str(_get(d, "calibration.source", optional=True, default="")),
        calibration_baselines=tuple(str(x) for x in (_get(d, "calibration.baselines_from_validation_families",
                                                              optional=True, default=[]) or [])),
        calibration_held_out=tuple(str(x) for x in (_get(d, "calibration.held_out", optional=True, default=[]) or [])),
        sources={str(k): str(v) for k, v in (d.get("sources") or {}).items()},
        validation=dict(d.get("validation") or {}),
        origin=origin,
    )
    return _with_calibration(check(p))


def _gpu(d, steps, dsteps) -> GpuSection:
    return GpuSection(
        dram_step_points=tuple(dsteps),
        dram_step_buffer=_int(d, "gpu.hisparse_dram_step.device_buffer_size", optional=True),
        name=str(_get(d, "gpu.name")),
        step_points=tuple(steps),
        hisparse_overhead_s=_num(d, "gpu.hisparse_overhead_s", optional=True, default=0.0, allow_zero=True),
        kv_budget_bytes=_num(d, "gpu.kv_budget_bytes", optional=True),
        source=str(_get(d, "gpu.source", optional=True, default="")),
    )


def _with_calibration(p: Platform) -> Platform:
    """The platform with its calibration runs fitted (``simulate.calibration``), when it has any."""
    if not p.calibration_runs:
        return p
    from sactool.models import get_model
    from sactool.simulate.calibration import calibrate

    spec = get_model(p.model)
    return dataclasses.replace(p, calibration=calibrate(p, record_bytes=spec.record_bytes(p.kv_dtype),
                                                        layers=spec.num_layers))


def check(p: Platform) -> Platform:
    """Cross-field rules (contradictions name the field)."""
    from sactool.models import get_model, normalize_kv_dtype

    try:
        normalize_kv_dtype(p.kv_dtype)
    except Exception:
        raise _err("model.kv_dtype", f"must be fp8_e4m3 or bfloat16, got {p.kv_dtype!r}") from None
    try:
        spec = get_model(p.model)
    except Exception as e:
        raise _err("model.name", getattr(e, "message", str(e))) from None
    if p.attn_dp_size > p.gpus or p.gpus % p.attn_dp_size:
        raise _err("serving.attn_dp_size", f"{p.attn_dp_size} must divide serving.gpus {p.gpus}")
    if p.top_k != spec.index_topk:
        raise _err("serving.top_k", f"{p.top_k} contradicts {spec.name}'s index_topk {spec.index_topk}")
    for name, buf in (("serving.device_buffer_size", p.device_buffer_size),
                      ("serving.rdma_device_buffer_size", p.rdma_device_buffer_size)):
        if buf is not None and buf < p.top_k:
            raise _err(name, f"{buf} is smaller than top_k {p.top_k}")
    if p.pcie_switches > p.gpus:
        raise _err("pcie.switches", f"{p.pcie_switches} switches for {p.gpus} GPUs")
    if p.nics > p.pcie_switches:
        raise _err("nic.count", f"{p.nics} NICs on {p.pcie_switches} PCIe switches (one NIC per switch is modelled)")
    if p.cxl_devices > p.attn_dp_size:
        raise _err("cxl.devices", f"{p.cxl_devices} devices for {p.attn_dp_size} ranks (rank % devices leaves some idle)")
    if not p.gpu.step_points and p.gpu.name.lower() not in _roofline_gpus():
        raise _err("gpu.decode_step.measured", f"is empty and GPU {p.gpu.name!r} has no roofline entry "
                   f"({', '.join(sorted(_roofline_gpus()))})")
    for c in p.contexts:
        if c > spec.max_position_embeddings:
            raise _err("workload.contexts", f"{c} tokens exceed {spec.name}'s max_position_embeddings "
                       f"{spec.max_position_embeddings}")
    if p.topk_workload == "calibrated" and not p.calibration_runs:
        raise _err("workload.topk", "calibrated needs calibration.runs")
    if p.topk_workload == "filler" and not p.filler:
        raise _err("workload.topk", "filler needs workload.filler (python -m sactool.simulate.fillerfit)")
    if p.case == "cache_populate" and not p.prefill_points:
        raise _err("prefill.measured", "is needed for workload.case cache_populate")
    return p


def _roofline_gpus() -> set[str]:
    from sactool.simulate.gpu import ROOFLINE

    return set(ROOFLINE)


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """``["rdma.layout_conversion_bytes_per_s=2e9", ...]`` set dotted fields (values read as YAML)."""
    import copy

    import yaml

    from sactool.errors import UsageError

    data = copy.deepcopy(data)
    for item in overrides or []:
        key, sep, raw = str(item).partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {item!r} is not KEY=VALUE", "e.g. --set nic.count=4")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise UsageError(f"--set {item!r}: value is not valid YAML", "e.g. --set nic.count=4") from None
        cur = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            if not isinstance(cur.get(part), dict):
                raise UsageError(f"--set {key}: {part!r} is not a section of the platform file",
                                 "see sactool/data/platforms/sac-paper.yaml for the fields")
            cur = cur[part]
        if parts[-1] not in cur:
            raise UsageError(f"--set {key}: no such platform field", "see sactool/data/platforms/sac-paper.yaml")
        cur[parts[-1]] = value
    return data


def load_platform(path, overrides: list[str] | None = None) -> Platform:
    """Load and validate a platform file (YAML or JSON); ``overrides`` as for :func:`apply_overrides`."""
    raw = load_structured(path, what="platform file")
    data = apply_overrides(raw, overrides)
    origin = str(path) + (f" with {', '.join(overrides)}" if overrides else "")
    p = from_data(data, origin=origin)
    if overrides and p.calibration is not None and not any(str(o).startswith("calibration.") for o in overrides):
        # the calibration runs ran on the platform as the file describes it, not on the what-if
        p = dataclasses.replace(p, calibration=from_data(raw, origin=str(path)).calibration)
    return p
