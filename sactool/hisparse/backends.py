"""Which DSA attention backends SGLang 0.5.23's HiSparse validator accepts for each KV cache dtype.

Source: ``python/sglang/srt/arg_groups/hisparse_hook.py`` of SGLang 0.5.23
(``HISPARSE_CUDA_DSA_BACKENDS_BY_DTYPE``, ``validate_hisparse_dsa_backend``, run for
``--dsa-prefill-backend`` and ``--dsa-decode-backend`` at start-up): on CUDA, ``bfloat16`` takes
``flashmla_sparse`` only and ``fp8_e4m3`` takes ``flashmla_kv`` or ``flashinfer_sparse_mla``; any
other value raises ``ValueError`` before the model loads. (ROCm's set, ``tilelang``/``triton``/``aiter``,
does not apply: the plug-in registers host memory with CUDA.) Omitting the flag lets SGLang pick
(``flashmla_kv`` for fp8, ``flashmla_sparse`` for bf16).
"""

from __future__ import annotations

CUDA_BACKENDS_BY_DTYPE = {
    "bfloat16": ("flashmla_sparse",),
    "fp8_e4m3": ("flashinfer_sparse_mla", "flashmla_kv"),
}
"""SGLang 0.5.23 ``HISPARSE_CUDA_DSA_BACKENDS_BY_DTYPE``, sorted as its message sorts them."""

FLAGS = (("--dsa-prefill-backend", "prefill"), ("--dsa-decode-backend", "decode"))


def refusal(kv_cache_dtype: str, label: str, backend: str) -> str | None:
    """SGLang's own message for ``--dsa-<label>-backend=<backend>`` with this KV dtype, or None when
    its validator accepts the pair (a dtype outside its table accepts any of the CUDA backends)."""
    allowed = CUDA_BACKENDS_BY_DTYPE.get(kv_cache_dtype)
    if allowed is None:
        allowed = tuple(sorted({b for bs in CUDA_BACKENDS_BY_DTYPE.values() for b in bs}))
    if backend in allowed:
        return None
    return (f"HiSparse supports DSA {label} backend(s) {list(allowed)} on this platform with "
            f"--kv-cache-dtype={kv_cache_dtype}, but got --dsa-{label}-backend={backend}")
