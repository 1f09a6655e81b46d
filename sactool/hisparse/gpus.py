"""A small GPU catalog and the per-GPU memory budget HiSparse may use.

Capacities are the vendors' marketed HBM sizes, taken as decimal gigabytes (10^9 B). The
``nvidia-smi`` totals of these parts are a little larger (they are GiB-sized parts), so the figure
here errs on the side of fitting less, never more.

The budget follows SGLang's memory rule: ``--mem-fraction-static`` is the fraction of GPU memory
for *static* allocations, model weights plus the KV pool; what is left of it after the weights is
the KV pool (SGLang ``ModelRunner``; `docs/advanced_features/server_arguments`:
"fraction of the memory used for static allocation (model weights and KV cache memory pool)").
Under HiSparse that pool holds the hot buffers and the indexer keys of every logical token
(docs/sources.md, SGLang §2.5).
"""

from __future__ import annotations

from dataclasses import dataclass

from sactool.errors import CapacityError, UsageError
from sactool.units import format_bytes


@dataclass(frozen=True)
class GpuSpec:
    """``hbm_bytes``: memory of one GPU, bytes (decimal GB as marketed); ``source``: where from."""

    name: str
    hbm_bytes: int
    source: str
    hbm_bytes_per_s: float = 0.0     # HBM bandwidth (the roofline's memory term)
    bf16_flops: float = 0.0          # dense BF16 FLOP/s (the roofline's compute term)
    roofline_source: str = ""


GPUS: dict[str, GpuSpec] = {
    # NVIDIA H20: 96 GB HBM3, 4.0 TB/s (NVIDIA H20 product brief; the SAC testbed GPU,
    # docs/sources.md, SAC §3 "8x NVIDIA H20, 96 GB HBM each")
    # 148 TFLOPS FP16/BF16 dense (https://willitrunai.com/es/gpus/h20-96gb)
    "h20": GpuSpec("h20", 96 * 10**9, "NVIDIA H20 product brief: 96 GB HBM3; SAC testbed (docs/sources.md, SAC §3)",
                   4.0e12, 148e12, "H20: 4.0 TB/s HBM3, 148 TFLOPS BF16 (willitrunai.com/es/gpus/h20-96gb)"),
    # NVIDIA H100 SXM5: 80 GB HBM3, 3.35 TB/s (NVIDIA H100 Tensor Core GPU datasheet)
    # 989 TFLOPS BF16 dense (the datasheet lists 1,979 with sparsity)
    "h100": GpuSpec("h100", 80 * 10**9, "NVIDIA H100 Tensor Core GPU datasheet: 80 GB HBM3 (SXM5)",
                    3.35e12, 989e12, "H100 SXM: 3.35 TB/s, 989 TFLOPS BF16 dense (nvidia.com/en-us/data-center/h100)"),
    # NVIDIA H200 SXM: 141 GB HBM3e, 4.8 TB/s (NVIDIA H200 Tensor Core GPU datasheet, SC23);
    # the GPU of the SGLang HiSparse blog benchmark (8x H200, docs/sources.md, SGLang §7)
    # 989 TFLOPS BF16 dense (1,979 with sparsity)
    "h200": GpuSpec("h200", 141 * 10**9, "NVIDIA H200 Tensor Core GPU datasheet: 141 GB HBM3e",
                    4.8e12, 989e12, "H200 SXM: 4.8 TB/s, 989 TFLOPS BF16 dense (nvidia.com/en-us/data-center/h200)"),
}

DEFAULT_GPU = "h200"
"""The HiSparse reference deployment (LMSYS HiSparse blog, 8x H200) — a default, recorded as such,
used only where probe sees no NVIDIA GPU of the catalog and ``--gpu`` is not given."""

PCI_DEVICE_IDS: dict[int, str] = {
    # NVIDIA (vendor 0x10de) PCI device ids -> catalog name, the ids of the parts the catalog sizes.
    # pci.ids (pci-ids.ucw.cz, vendor 10de): 2330 "GH100 [H100 SXM5 80GB]", 2331 "GH100 [H100 PCIe]" (80 GB)
    0x2330: "h100", 0x2331: "h100",
    # NVIDIA gpu-admin-tools, gpu/devid_names.py: 0x2335 and 0x233B "H200" (H200 SXM 141GB, H200 NVL
    # 141GB), 0x2329 "H20" (96 GB, the SAC testbed's)
    0x2335: "h200", 0x233B: "h200", 0x2329: "h20",
}
"""Which catalog GPU a PCI function is, by its ``device`` id; an id not here is a GPU sactool cannot size."""


def catalog_name(device: str | None) -> str | None:
    """The catalog name of an NVIDIA PCI ``device`` id as sysfs prints it (``0x2330``), or None."""
    try:
        return PCI_DEVICE_IDS.get(int(str(device), 16))
    except ValueError:
        return None

DEFAULT_MEM_FRACTION_STATIC = 0.85
"""``--mem-fraction-static`` of the SAC runs (docs/sources.md, SAC §3/§5: "mem_fraction_static 0.85")."""

def get_gpu(name: str) -> GpuSpec:
    key = str(name).strip().lower()
    if key not in GPUS:
        raise UsageError(f"unknown GPU {name!r}; known GPUs: {', '.join(sorted(GPUS))}",
                         "pick one of the catalog, or give --gpu-kv-budget SIZE per GPU")
    return GPUS[key]


@dataclass(frozen=True)
class GpuBudget:
    """Per-GPU bytes HiSparse may use for hot buffers + indexer keys, and how it was derived."""

    bytes_per_gpu: int
    source: str          # "user" | "derived"
    detail: str
    gpu: str | None
    mem_fraction_static: float


def kv_budget(*, model_name: str, tp: int, gpu: str | None, budget_bytes: int | None,
              weights_bytes: int | None = None, checkpoint: tuple[int, str] | None = None,
              mem_fraction_static: float = DEFAULT_MEM_FRACTION_STATIC, gpu_source: str = "") -> GpuBudget:
    """The per-GPU KV budget: given (``--gpu-kv-budget``), or ``fraction × HBM − weights / tp``.

    Weights are split over the ``tp`` GPUs of one model instance (tensor/expert parallel):
    ``weights_bytes`` (given) or the model's ``checkpoint`` (bytes, source: its
    :class:`sactool.models.ModelSpec`'s ``checkpoint_bytes``/``checkpoint_source``).
    ``gpu_source`` says where the GPU came from (named in the refusal when the weights do not fit).
    Raises CapacityError when the weights leave nothing, UsageError when the weights are unknown.
    """
    if budget_bytes is not None:
        return GpuBudget(budget_bytes, "user", "--gpu-kv-budget", gpu, mem_fraction_static)
    spec = get_gpu(gpu or DEFAULT_GPU)
    if weights_bytes is None:
        known = checkpoint   # sactool/data/models/<name>.json: checkpoint_bytes, its source
        if known is None:
            raise UsageError(f"the checkpoint size of {model_name} is not known to sactool",
                             "give --gpu-kv-budget SIZE (per GPU) or --weights-bytes SIZE")
        weights_bytes, wsrc = known
    else:
        wsrc = "--weights-bytes"
    static = int(spec.hbm_bytes * mem_fraction_static)
    per_gpu_weights = -(-weights_bytes // tp)
    left = static - per_gpu_weights
    if left <= 0:
        raise CapacityError(
            f"the weights need {format_bytes(per_gpu_weights)} per GPU at tp {tp}, more than "
            f"{mem_fraction_static:g} x {format_bytes(spec.hbm_bytes)} of a {spec.name}"
            + (f" ({gpu_source})" if gpu_source else ""),
            "use more GPUs (--tp), a larger GPU (--gpu), or give --gpu-kv-budget")
    detail = (f"{mem_fraction_static:g} x {format_bytes(spec.hbm_bytes)} ({spec.name}) - "
              f"{format_bytes(per_gpu_weights)} weights/GPU ({wsrc}, / tp {tp})")
    return GpuBudget(left, "derived", detail, spec.name, mem_fraction_static)


def kv_read_seconds_per_request(gpu: str | None, *, top_k: int, record_bytes: int, index_key_bytes: int,
                                layers: int, context_tokens: int) -> tuple[float, str]:
    """(seconds, where from): what one more request adds to a decode step by its HBM reads alone — the
    ``top_k`` records attention reads from its hot buffer and the indexer keys of its whole context,
    which the indexer scores, in every layer — over the HBM bandwidth of ``gpu`` (None: the catalog
    default). The per-request term of ``simulate``'s roofline (:mod:`sactool.simulate.gpu`): a lower
    bound, since kernels, communication and scheduling add to it."""
    spec = get_gpu(gpu or DEFAULT_GPU)
    per_req = (top_k * record_bytes + context_tokens * index_key_bytes) * layers
    return per_req / spec.hbm_bytes_per_s, (f"{format_bytes(per_req)} of KV and indexer keys per request per step over "
                                            f"{spec.name}'s {spec.hbm_bytes_per_s / 1e12:g} TB/s HBM ({spec.roofline_source})")
