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
from typing import Annotated, Any, Mapping, NoReturn

from pydantic import AliasPath, BaseModel, BeforeValidator, Field, PlainValidator, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError, PydanticUndefined

from sactool.errors import RecordError
from sactool.records import load_structured, upgrade
from sactool.simulate.calibration import CalibrationRun

KIND = "platform"
SCHEMA_VERSION = 1
"""Version of the ``platform`` file (``sactool simulate --platform``); its history:

1 — the first format."""
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
# the file's schema (pydantic): every error names the dotted field
# --------------------------------------------------------------------------------------------

def _err(name: str, msg: str) -> RecordError:
    return RecordError(f"platform field {name}: {msg}",
                       "fix the platform file (see sactool/data/platforms/sac-paper.yaml for every field)")


def _fail(msg: str) -> NoReturn:
    raise PydanticCustomError("platform", "{msg}", {"msg": msg})


def _number(*, allow_zero: bool = False) -> PlainValidator:
    def check(v: Any) -> float:
        if v is None:
            _fail("is missing")
        if isinstance(v, str):  # YAML 1.1 reads 55.4e9 as a string; sizes like 2TB are accepted too
            try:
                v = float(v)
            except ValueError:
                from sactool.units import parse_size

                try:
                    v = parse_size(v, what="value")
                except Exception:
                    _fail(f"must be a number, got {v!r}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
            _fail(f"must be a finite number, got {v!r}")
        if v < 0 or (v == 0 and not allow_zero):
            _fail(f"must be {'>= 0' if allow_zero else '> 0'}, got {v!r}")
        return float(v)
    return PlainValidator(check)


def _integer(v: Any) -> int:
    if v is None:
        _fail("is missing")
    if isinstance(v, str):
        from sactool.units import parse_tokens

        try:
            v = parse_tokens(v, what="value")
        except Exception:
            _fail(f"must be an integer, got {v!r}")
    if isinstance(v, bool) or not isinstance(v, int):
        _fail(f"must be an integer, got {v!r}")
    if v < 1:
        _fail(f"must be >= 1, got {v}")
    return v


def _flag(v: Any) -> bool:
    if not isinstance(v, bool):
        _fail(f"must be true or false, got {v!r}")
    return v


def _choice(allowed: tuple[str, ...]) -> PlainValidator:
    def check(v: Any) -> str:
        if v not in allowed:
            _fail(f"must be one of {', '.join(allowed)}, got {v!r}")
        return str(v)
    return PlainValidator(check)


def _int_list(v: Any) -> Any:
    if isinstance(v, (int, str)) and not isinstance(v, bool):
        v = [v]
    if not isinstance(v, list) or not v:
        _fail("must be a non-empty list")
    return v


Num = Annotated[float, _number()]
Num0 = Annotated[float, _number(allow_zero=True)]
Int = Annotated[int, PlainValidator(_integer)]
Bool = Annotated[bool, PlainValidator(_flag)]
Text = Annotated[str, PlainValidator(str)]
Ints = Annotated[list[Int], BeforeValidator(_int_list)]


def _at(path: str, default: Any = PydanticUndefined) -> Any:
    """The field at dotted ``path`` of the file (``default`` when absent)."""
    return Field(default, validation_alias=AliasPath(*path.split(".")))


def _drop_nulls(v: Any) -> Any:
    """A null value in a mapping counts as absent."""
    if isinstance(v, Mapping):
        return {k: _drop_nulls(x) for k, x in v.items() if x is not None}
    return [_drop_nulls(x) for x in v] if isinstance(v, list) else v


class _Step(BaseModel):
    requests_per_rank: Int
    context_tokens: Int
    step_time_s: Num


class _Time(BaseModel):
    context_tokens: Int
    time_s: Num


class _Run(BaseModel):
    placement: Annotated[str, _choice(("dram", "sac"))] = Field(None, validate_default=True)
    device_buffer_size: Int
    context_tokens: Int
    requests_per_rank: Int
    step_time_s: Num
    run: Text = ""


class _GatherPoint(BaseModel):
    records: Int
    latency_s: Num


class _Gather(BaseModel):
    record_bytes: Int
    points: list[_GatherPoint] = Field(min_length=2)
    source: Text = ""
    aggregate_bytes_per_s: Num | None = None

    @field_validator("points")
    @classmethod
    def _grows(cls, v: list[_GatherPoint]) -> list[_GatherPoint]:
        if len({p.records for p in v}) < 2:
            _fail("needs two different record counts")
        if GatherCurve(1, tuple(GatherPoint(p.records, p.latency_s) for p in v)).line()[1] <= 0:
            _fail("latency must grow with the number of records")
        return v

    def curve(self) -> GatherCurve:
        pts = sorted((GatherPoint(**p.model_dump()) for p in self.points), key=lambda p: p.records)
        return GatherCurve(self.record_bytes, tuple(pts), self.source, self.aggregate_bytes_per_s)


class _File(BaseModel):
    """The file's schema: :class:`Platform`'s fields, each at its dotted place in the file."""

    name: Text = _at("name")
    model: Text = _at("model.name")
    kv_dtype: Text = _at("model.kv_dtype")
    gpus: Int = _at("serving.gpus")
    attn_dp_size: Int = _at("serving.attn_dp_size")
    top_k: Int = _at("serving.top_k")
    device_buffer_size: Int = _at("serving.device_buffer_size")
    prefetch: Bool = _at("serving.prefetch", False)
    rdma_device_buffer_size: Int | None = _at("serving.rdma_device_buffer_size", None)
    hisparse_kernel: Text = _at("serving.hisparse_kernel", "sglang-0.5.23")
    gpu_name: Text = _at("gpu.name")
    step_points: list[_Step] = _at("gpu.decode_step.measured", [])
    dram_step_points: list[_Step] = _at("gpu.hisparse_dram_step.measured", [])
    dram_step_buffer: Int | None = _at("gpu.hisparse_dram_step.device_buffer_size", None)
    hisparse_overhead_s: Num0 = _at("gpu.hisparse_overhead_s", 0.0)
    kv_budget_bytes: Num | None = _at("gpu.kv_budget_bytes", None)
    gpu_source: Text = _at("gpu.source", "")
    prefill_points: list[_Time] = _at("prefill.measured", [])
    extend_points: list[_Time] = _at("first_token.extend.measured", [])
    gpu_link_bytes_per_s: Num = _at("pcie.gpu_link_bytes_per_s")
    pcie_switches: Int = _at("pcie.switches")
    switch_uplink_bytes_per_s: Num = _at("pcie.switch_uplink_bytes_per_s")
    cxl_devices: Int = _at("cxl.devices")
    cxl_device_read_bytes_per_s: Num = _at("cxl.device_read_bytes_per_s")
    cxl_gpu_path_bytes_per_s: Num = _at("cxl.gpu_path_read_bytes_per_s")
    cxl_write_bytes_per_s: Num = _at("cxl.write_bytes_per_s")
    cxl_capacity_bytes: Num = _at("cxl.capacity_bytes")
    dram_capacity_bytes: Num = _at("dram.capacity_bytes")
    dram_write_bytes_per_s: Num = _at("dram.write_bytes_per_s")
    dram_nodes: Int = _at("dram.nodes", 1)
    nics: Int = _at("nic.count")
    nic_bytes_per_s: Num = _at("nic.bandwidth_bytes_per_s")
    nic_chunk_bytes: Int = _at("nic.chunk_bytes")
    nic_per_message_s: Num0 = _at("nic.per_message_s")
    rdma_fetch_blocks_decode: Bool = _at("rdma.fetch_blocks_decode", False)
    rdma_conversion_bytes_per_s: Num | None = _at("rdma.layout_conversion_bytes_per_s", None)
    rdma_requests_per_concurrency: Num | None = _at("rdma.requests_per_concurrency", None)
    rdma_fetch_fixed_s: Num0 = _at("rdma.fetch_fixed_s", 0.0)
    frontend_s_per_prompt_token: Num0 = _at("frontend.s_per_prompt_token", 0.0)
    gather_cxl: _Gather = _at("gather.cxl")
    gather_dram: _Gather = _at("gather.dram")
    contexts: Ints = _at("workload.contexts")
    output_tokens: Int = _at("workload.output_tokens")
    concurrency: Ints = _at("workload.concurrency")
    requests_per_concurrency: Num = _at("workload.requests_per_concurrency", 2.0)
    case: Annotated[str, _choice(CASES)] = _at("workload.case", "cache_hit")
    arrival_rate_per_s: Num | None = _at("workload.arrival_rate_per_s", None)
    harness: Annotated[str, _choice(HARNESSES)] = _at("workload.harness", "steady")
    shared_prefix: Bool = _at("workload.shared_prefix", False)
    topk_workload: Annotated[str, _choice(TOPK_WORKLOADS)] = _at("workload.topk", "sharegpt-dsv32")
    calibration_runs: list[_Run] = _at("calibration.runs", [])
    calibration_source: Text = _at("calibration.source", "")
    calibration_held_out: list[Text] = _at("calibration.held_out", [])
    calibration_baselines: list[Text] = _at("calibration.baselines_from_validation_families", [])
    sources: dict[Any, Any] = _at("sources", {})
    validation: dict[str, Any] = _at("validation", {})


_MESSAGES = {"missing": "is missing", "model_type": "must be a mapping", "dict_type": "must be a mapping",
             "list_type": "must be a list",
             "too_short": "needs at least two {records, latency_s} measurements"}


def read_filler(workload: Mapping[str, Any], path: str = "workload.filler") -> dict[int, Any]:
    """``{context: FillerParams}``: a packaged workload's name (``sactool/data/workloads/``) or an
    inline block of the same fields; ``{}`` when absent."""
    from sactool.errors import UsageError
    from sactool.workload.filler import load_filler_workload, read_params

    blk = workload.get("filler")
    if not blk:
        return {}
    try:
        if isinstance(blk, str):
            return dict(load_filler_workload(blk).per_context)
        if not isinstance(blk, Mapping):
            raise _err(path, "must be a mapping")
        return read_params(dict(blk), path)
    except UsageError as e:
        raise _err(path, e.message) from None


def _times(m: list[_Time]) -> tuple[tuple[int, float], ...]:
    return tuple(sorted((t.context_tokens, t.time_s) for t in m))


def from_data(data: Mapping[str, Any], *, origin: str = "platform") -> Platform:
    """Build and validate a :class:`Platform` from loaded YAML/JSON (and fit its calibration runs)."""
    data = _drop_nulls(upgrade(dict(data), kind=KIND, current=SCHEMA_VERSION, source=origin))
    try:
        f = _File.model_validate(data)
    except ValidationError as e:  # the first error, naming the dotted field
        first = e.errors()[0]
        path = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in first["loc"]).lstrip(".")
        raise _err(path, _MESSAGES.get(first["type"], first["msg"])) from None
    from sactool.hisparse import KERNELS

    if f.hisparse_kernel not in KERNELS:
        raise _err("serving.hisparse_kernel", f"must be one of {', '.join(KERNELS)}, got {f.hisparse_kernel!r}")
    gpu = GpuSection(name=f.gpu_name, step_points=tuple(StepPoint(**s.model_dump()) for s in f.step_points),
                     hisparse_overhead_s=f.hisparse_overhead_s, kv_budget_bytes=f.kv_budget_bytes, source=f.gpu_source,
                     dram_step_points=tuple(StepPoint(**s.model_dump()) for s in f.dram_step_points),
                     dram_step_buffer=f.dram_step_buffer)
    fields = f.model_dump(exclude={"gpu_name", "step_points", "dram_step_points", "dram_step_buffer",
                                   "hisparse_overhead_s", "kv_budget_bytes", "gpu_source"})
    fields.update(
        gpu=gpu, prefill_points=_times(f.prefill_points), extend_points=_times(f.extend_points),
        gather_cxl=f.gather_cxl.curve(), gather_dram=f.gather_dram.curve(),
        contexts=tuple(f.contexts), concurrency=tuple(f.concurrency), filler=read_filler(data["workload"]),
        calibration_runs=tuple(CalibrationRun(**r.model_dump()) for r in f.calibration_runs),
        calibration_held_out=tuple(f.calibration_held_out), calibration_baselines=tuple(f.calibration_baselines),
        sources={str(k): str(v) for k, v in f.sources.items()}, origin=origin)
    return _with_calibration(check(Platform(**fields)))


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
