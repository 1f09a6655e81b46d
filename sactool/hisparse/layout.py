"""Bytes of one token's KV record and indexer key, the KV dtypes, and the config.json fields.

KV bytes per token per layer (docs/sources.md, SGLang §1.3; SGLang 0.5.23
``calculate_mla_kv_cache_dim``, ``mem_cache/kv_cache_configurator.py:3412-3476``; FlashMLA README):

* ``fp8_e4m3``: ``kv_lora_rank`` FP8 bytes + ``kv_lora_rank // 128`` fp32 scales
  + ``qk_rope_head_dim`` × 2 (the rope part stays BF16) = 512 + 16 + 128 = **656 B**
  (the scaled layout of the HiSparse backends ``flashmla_kv`` / ``flashinfer_sparse_mla``).
  SGLang asserts ``kv_lora_rank % 128 == 0`` there and divides without rounding; a config
  that breaks the assertion is refused here too.
* ``bfloat16``: (``kv_lora_rank`` + ``qk_rope_head_dim``) × 2 = 576 × 2 = **1152 B**.
* indexer key: ``index_head_dim`` FP8 bytes + one fp32 scale per 128 = 128 + 4 = **132 B**;
  it stays on the GPU under HiSparse (docs/sources.md, SGLang §1.4; ``index_head_dim == 128`` is
  asserted by SGLang, ``memory_pool.py:5346``).
"""

from __future__ import annotations

from sactool.errors import RecordError, UsageError

# FlashMLA / SGLang FP8 DSA layout: one fp32 scale per 128-element group (docs/sources.md, SGLang §1.3,
# ``DSATokenToKVPool.quant_block_size = 128``, §1.2)
QUANT_BLOCK = 128
FP32_BYTES = 4
BF16_BYTES = 2
FP8_BYTES = 1

KV_DTYPES = ("fp8_e4m3", "bfloat16")
_KV_DTYPE_ALIASES = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "bf16": "bfloat16", "bfloat16": "bfloat16"}

#: config.json field -> ModelSpec field (the fields a DSA model's config.json must have)
CONFIG_FIELDS = {
    "num_hidden_layers": "num_layers",
    "first_k_dense_replace": "first_dense_layers",
    "kv_lora_rank": "kv_lora_rank",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "index_topk": "index_topk",
    "index_head_dim": "index_head_dim",
    "index_n_heads": "index_n_heads",
    "max_position_embeddings": "max_position_embeddings",
}


def normalize_kv_dtype(kv_dtype: str) -> str:
    """``fp8``/``fp8_e4m3`` → ``fp8_e4m3``; ``bf16``/``bfloat16`` → ``bfloat16``; else UsageError."""
    key = str(kv_dtype).strip().lower()
    if key not in _KV_DTYPE_ALIASES:
        raise UsageError(f"unknown KV dtype {kv_dtype!r}", "use fp8 (fp8_e4m3) or bf16 (bfloat16)")
    return _KV_DTYPE_ALIASES[key]


def record_bytes(kv_lora_rank: int, qk_rope_head_dim: int, kv_dtype: str = "fp8_e4m3") -> int:
    """Bytes of one token's MLA latent KV in one layer (656 FP8 / 1152 BF16 for DeepSeek-V3.2)."""
    if normalize_kv_dtype(kv_dtype) == "bfloat16":
        return (kv_lora_rank + qk_rope_head_dim) * BF16_BYTES
    if kv_lora_rank % QUANT_BLOCK:
        raise RecordError(f"kv_lora_rank {kv_lora_rank} is not a multiple of {QUANT_BLOCK}: SGLang's FP8 "
                          "layout needs whole 128-element scale groups", "use --kv-dtype bf16 for this model")
    return kv_lora_rank * FP8_BYTES + kv_lora_rank // QUANT_BLOCK * FP32_BYTES + qk_rope_head_dim * BF16_BYTES


def indexer_bytes(index_head_dim: int) -> int:
    """Bytes of one token's indexer key in one layer (128 FP8 + 4 B fp32 scale = 132)."""
    return index_head_dim * FP8_BYTES + -(-index_head_dim // QUANT_BLOCK) * FP32_BYTES
