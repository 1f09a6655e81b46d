"""SGLang 0.5.23's fixed facts that HiSparse runs under: one owner for each.

What the engine forces (a setting sactool states but cannot tune), the swap-in kernel's CTA widths,
and the SGLang range sactool's profiles are tested against. The profile validates against these,
tune writes them with ``engine`` provenance, serve explains them next to the flag.
"""

from __future__ import annotations

# SGLang 0.5.23 facts (docs/sources.md, SGLang §2.2, §1.5)
DSA_PAGE_SIZE_CUDA = 64           # DSA forces page size 64 on CUDA
SWAP_IN_BLOCK_RANGE = (1, 1024)   # CUDA threads per CTA of the swap-in kernel
DEFAULT_SGLANG_TESTED = ">=0.5.23,<0.6"

SWAP_IN_BLOCK_SIZES = (256, 512, 960, 1024)
"""CTA widths tried: 960 SGLang 0.5.23 default (factory.py), 512 the HiSparse guide's value,
1024 SAC's hard-coded width, 256 a narrower one (docs/sources.md, SGLang §2.2, docs/sources.md, SAC §5)."""
DEFAULT_SWAP_IN_BLOCK = 960

PAGE_SIZE_WHY = "DSA forces a 64-token KV page on CUDA (SGLang 0.5.23 deepseek_v2.py:160-172, docs/sources.md, SGLang §1.5)"
RADIX_CACHE_WHY = "HiSparse requires it (hisparse_hook.py:87-165)"

ENGINE_CONSTRAINTS = (
    {"setting": "sglang.page_size", "value": DSA_PAGE_SIZE_CUDA, "why": PAGE_SIZE_WHY},
    {"setting": "host layout", "value": "layer_first",
     "why": "HiSparse builds its host pool layer-first [layer][token][record]; not configurable (§2.2)"},
    {"setting": "hisparse.top_k", "value": None,
     "why": "SGLang overrides top_k with the model's index_topk (model_runner.py:1039-1041)"},
    {"setting": "--disable-radix-cache", "value": True, "why": RADIX_CACHE_WHY},
)
"""Settings the engine decides, written into every profile tune makes (``engine_constraints``)."""
