"""vLLM 0.34's HiSparse, as sactool plans for it: one owner for each fact, with where it was read.

Read from the released vLLM 0.34.0 wheel (``vllm/`` paths below; line numbers are 0.34.0's and
move between releases, so ``scripts/vllm-integration`` resolves the symbols, not the lines). Pure
arithmetic: no vLLM, no torch here.

* The hot buffer (``ResolvedHiSparseConfig.from_vllm_config``, ``v1/hisparse/runtime.py:119-171``):
  ``device_buffer_size`` defaults to ``(q + 1)·index_topk``, must be at least ``q·index_topk`` and at
  most 32768 (int16 slot indices, ``torch.iinfo(torch.int16).max + 1``), ``q`` the widest decode
  query (``max_decode_query_len``, ``v1/attention/backend.py:565-584``: 1 without speculation);
  a size that is not a multiple of the kernel block is padded (a warning).
* The host pool (``create_hisparse_layout``, ``v1/hisparse/layout.py:237-268``): ``host_pool_gib``
  (``kv_connector_extra_config`` of the ``HiSparseConnector``, ``config/kv_transfer.py:16-47``) is
  turned into ``int(gib·2**30) // stride`` whole host blocks; a host block holds one
  ``block_size``-token page of every sparse-MLA layer; the stride is that page, rounded up to
  4096 bytes when the pool is shared (``get_hisparse_host_block_stride``, runtime.py:306-311); the
  pool must hold ``cdiv(max_model_len, block_size) + 2`` blocks (a full-length request, the null
  block and a copy-on-write tail).
* Who owns a pool (``use_shared_hisparse_host_pool``, runtime.py:291-303): one region shared by the
  TP ranks of a DP replica when TP > 1, PP = PCP = DCP = 1, world = TP, the ``mp`` executor and one
  node per DP group; otherwise each rank allocates a private pool of the whole ``host_pool_gib``.
* The preflight (``check_hisparse_host_memory``, runtime.py:204-213): refuses a pool above 95 % of
  ``psutil.virtual_memory().available`` (machine-wide: no node, no device). A shared region is also
  checked against ``/dev/shm``'s free space (``check_shm_free_space``,
  ``distributed/device_communicators/shm_broadcast.py:245-276``), a real limit: tmpfs past its size
  is SIGBUS, not slower memory.
"""

from __future__ import annotations

from dataclasses import dataclass

VLLM_TESTED = ">=0.34.0,<0.35"
"""The vLLM releases sactool's vLLM plug-in and argv are verified against (scripts/vllm-integration)."""
VLLM_SHIPPED = "0.34.0"
"""The vLLM whose option table ships (``sactool/data/vllm/options-0.34.0.json``)."""

BLOCK_SIZE = 64
"""Tokens per KV block: ``CacheConfig.DEFAULT_BLOCK_SIZE`` (config/cache.py:185), and the FlashMLA
sparse kernel reads 64-token pages (``get_supported_kernel_block_sizes``,
v1/attention/backends/mla/flashmla_sparse.py:165-172). sactool states it (``--block-size 64``) so the
host-block sizing below is the one vLLM makes."""

INT16_SLOTS = 32768
"""Most hot-buffer rows per request: ``torch.iinfo(torch.int16).max + 1`` (runtime.py:149)."""

HOST_ALIGN = 4096
"""``SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT`` = ``mmap.PAGESIZE`` on x86-64; the private pool is
padded to it too (``allocate_pinned_host_pool``, runtime.py:216-224)."""

PREFLIGHT_FRACTION = 0.95
"""``check_hisparse_host_memory``: pool bytes above this share of available memory are refused."""

EXTRA_HOST_BLOCKS = 2
"""Beyond a full-length request's pages: the pool's null block and a copy-on-write tail (layout.py:254-260)."""

SHM_PATH = "/dev/shm"
"""Where a shared pool's files live (``SharedOffloadRegion``, v1/kv_offload/cpu/shared_offload_region.py:
``/dev/shm/vllm_offload_hisparse_{instance}_dp{i}.mmap`` and ``.1`` … segments)."""

KV_DTYPES = {"fp8_e4m3": "fp8_ds_mla", "bfloat16": "auto"}
"""sactool's KV dtype -> vLLM's ``--kv-cache-dtype``: 656-byte FP8 records are vLLM's ``fp8_ds_mla``
(``MLAAttentionImpl.get_fp8_ds_mla_row_bytes`` = 656, v1/attention/backend.py:1017); BF16 is the
model dtype, ``auto`` (DeepseekV32ForCausalLM maps ``bfloat16`` to ``auto``,
model_executor/models/config.py:90-93)."""

REFUSED_ARCHITECTURES = {"DeepseekV4ForCausalLM": "HiSparse does not support DeepSeek V4 (v1/hisparse/layout.py:100-104)"}


def min_device_buffer(top_k: int, query_len: int = 1) -> int:
    return query_len * top_k


def default_device_buffer(top_k: int, query_len: int = 1) -> int:
    return (query_len + 1) * top_k


def device_buffer_problem(size: int, top_k: int, query_len: int = 1) -> str:
    """Why vLLM would refuse ``device_buffer_size`` ("" when it accepts it)."""
    lo = min_device_buffer(top_k, query_len)
    if size < lo:
        return (f"vLLM needs at least {lo} rows (max_decode_query_len {query_len} x index_topk {top_k}), "
                f"got {size}")
    if size > INT16_SLOTS:
        return f"vLLM's int16 slot index holds at most {INT16_SLOTS} rows, got {size}"
    return ""


def round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def uses_shared_pool(tp: int, *, pp: int = 1, dcp: int = 1, executor: str = "mp", nodes_per_dp: int = 1) -> bool:
    """``use_shared_hisparse_host_pool`` on CUDA: one region per DP replica read by its TP ranks."""
    return tp > 1 and pp == 1 and dcp == 1 and executor == "mp" and nodes_per_dp == 1


@dataclass(frozen=True)
class HostPool:
    """One HiSparse host pool as vLLM sizes it (per DP replica when shared, per rank when private)."""

    host_pool_gib: float          # what the command says (kv_connector_extra_config.host_pool_gib)
    layers: int                   # sparse-MLA layers whose pages the pool holds
    record_bytes: int             # bytes per token per layer (656 fp8_ds_mla, 1152 bf16)
    block_size: int               # tokens per block
    shared: bool

    @property
    def page_bytes(self) -> int:
        """One host block: a ``block_size``-token page of every layer (the source group's page size)."""
        return self.layers * self.block_size * self.record_bytes

    @property
    def stride_bytes(self) -> int:
        return round_up(self.page_bytes, HOST_ALIGN) if self.shared else self.page_bytes

    @property
    def blocks(self) -> int:
        """``int(host_pool_gib · 2**30) // stride``: whole host blocks (layout.py:249)."""
        return int(self.host_pool_gib * 2 ** 30) // self.stride_bytes

    @property
    def allocated_bytes(self) -> int:
        """Bytes vLLM maps: the shared region is ``blocks · stride``; the private pool is
        ``blocks · page`` rounded up to 4096 (and one more page of slack for alignment, not touched)."""
        if self.shared:
            return self.blocks * self.stride_bytes
        return round_up(self.blocks * self.page_bytes, HOST_ALIGN)

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size

    def blocks_for(self, max_model_len: int) -> int:
        """Blocks vLLM requires for one request of ``max_model_len`` tokens (layout.py:254-260)."""
        return cdiv(max_model_len, self.block_size) + EXTRA_HOST_BLOCKS

    def problem(self, max_model_len: int) -> str:
        """vLLM's own refusals of this pool ("" when none)."""
        if self.blocks <= 0:
            return "HiSparse has no allocatable host blocks (host_pool_gib below one host block)"
        need = self.blocks_for(max_model_len)
        if self.blocks < need:
            return (f"HiSparse host pool has {self.blocks} blocks but max_model_len {max_model_len} needs {need}; "
                    "increase host_pool_gib")
        return ""


def gib_for_blocks(blocks: int, stride_bytes: int) -> float:
    """The smallest ``host_pool_gib``, in 1/1024 GiB steps (MiB, written exactly in JSON), that
    vLLM turns into at least ``blocks`` host blocks."""
    mib = cdiv(blocks * stride_bytes, 1 << 20)
    return mib / 1024


def blocks_for_requests(requests: int, context: int, block_size: int = BLOCK_SIZE) -> int:
    """Host blocks that hold ``requests`` requests of ``context`` tokens each, plus vLLM's two."""
    return requests * cdiv(context, block_size) + EXTRA_HOST_BLOCKS


def preflight_refuses(pool_bytes: int, available_bytes: int) -> bool:
    """Would ``check_hisparse_host_memory`` refuse ``pool_bytes`` with ``available_bytes`` available?"""
    return pool_bytes > available_bytes * PREFLIGHT_FRACTION


__all__ = ["BLOCK_SIZE", "EXTRA_HOST_BLOCKS", "HOST_ALIGN", "HostPool", "INT16_SLOTS", "KV_DTYPES",
           "PREFLIGHT_FRACTION", "REFUSED_ARCHITECTURES", "SHM_PATH", "VLLM_SHIPPED", "VLLM_TESTED",
           "blocks_for_requests", "cdiv", "default_device_buffer", "device_buffer_problem", "gib_for_blocks",
           "min_device_buffer", "preflight_refuses", "round_up", "uses_shared_pool"]
