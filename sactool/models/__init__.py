"""Model specs for sparse-attention (DSA) LLMs: the figures sizing, tuning and serving need.

Known models ship as excerpts of their Hugging Face ``config.json`` under
``sactool/data/models/<name>.json`` (each names its source); ``get_model`` also accepts a path to
any ``config.json`` with the same fields, so a new DSA model needs no code change.

Record and indexer bytes, KV dtypes and the config.json field table: :mod:`sactool.hisparse.layout`.
Each shipped JSON also carries the checkpoint size (``_sactool.checkpoint_bytes``) with its source,
which the GPU budget (:mod:`sactool.hisparse.gpus`) and the simulator's roofline read.

All layers hold KV, the first dense ones included: ``first_k_dense_replace`` only says which
layers use a dense MLP instead of MoE (SGLang 0.5.23 ``models/deepseek_v2.py:2785-2792``,
``_is_layer_sparse`` tests it for the *MLP*), while every layer has MLA attention with its own DSA
indexer: ``configs/model_config.py:1581-1582`` sets ``num_attention_layers = num_hidden_layers``
for these architectures, the KV pool gets one buffer per attention layer, and the HiSparse host
pool is ``[layer_num][token][record]`` (docs/sources.md, SGLang §2.3, §2.5: 61 × 656 = 40,016 B per
token for DeepSeek-V3.2). So ``kv_bytes_per_token`` multiplies by ``num_layers``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from sactool.errors import RecordError, UsageError

from sactool.hisparse import layout
from sactool.hisparse.layout import CONFIG_FIELDS, KV_DTYPES, normalize_kv_dtype

HF_FIELDS = CONFIG_FIELDS  # the name tests and callers use for the config.json field table

__all__ = ["HF_FIELDS", "KV_DTYPES", "ModelSpec", "active_params_of", "checkpoint_of", "from_hf_config", "get_model", "known_models", "normalize_kv_dtype"]


@dataclass(frozen=True)
class ModelSpec:
    """One DSA model's attention geometry (all figures from its config.json)."""

    name: str                     # sactool's name, e.g. "deepseek-v3.2"
    hf_id: str                    # Hugging Face id, or the absolute directory of a local checkout
    architecture: str             # config.json "architectures"[0]
    num_layers: int               # num_hidden_layers: layers holding MLA KV (all of them)
    first_dense_layers: int       # first_k_dense_replace: dense-MLP layers (they still hold KV)
    kv_lora_rank: int             # latent ("nope") elements per token per layer
    qk_rope_head_dim: int         # rope elements per token per layer
    index_topk: int               # tokens the DSA indexer selects per layer per decode step
    index_head_dim: int           # indexer key elements per token per layer
    index_n_heads: int            # indexer query heads
    max_position_embeddings: int  # longest context, tokens
    checkpoint_bytes: int | None = None  # weights on disk (= in GPU memory), bytes; None: not known
    checkpoint_source: str = ""          # where checkpoint_bytes comes from

    def record_bytes(self, kv_dtype: str = "fp8_e4m3") -> int:
        """Bytes of one token's KV record in one layer (656 FP8 / 1152 BF16 for DeepSeek-V3.2)."""
        return layout.record_bytes(self.kv_lora_rank, self.qk_rope_head_dim, kv_dtype)

    @property
    def indexer_bytes(self) -> int:
        """Bytes of one token's indexer key in one layer (128 FP8 + 4 B fp32 scale = 132)."""
        return layout.indexer_bytes(self.index_head_dim)

    def kv_bytes_per_token(self, kv_dtype: str = "fp8_e4m3") -> int:
        """KV record bytes of one token over all layers (the host pool's bytes per token)."""
        return self.record_bytes(kv_dtype) * self.num_layers

    @property
    def checkpoint(self) -> tuple[int, str] | None:
        """(checkpoint bytes, source), or None when sactool does not know the size."""
        return None if self.checkpoint_bytes is None else (self.checkpoint_bytes, self.checkpoint_source)


def from_hf_config(config: Mapping[str, Any], *, name: str, hf_id: str, where: str,
                   checkpoint: tuple[int, str] | None = None) -> ModelSpec:
    """Build a spec from a Hugging Face config mapping; a missing or bad field → RecordError."""
    values: dict[str, Any] = {}
    for hf_key, field_name in HF_FIELDS.items():
        if hf_key not in config:
            raise RecordError(f"{where}: field {hf_key!r} is missing",
                              "a DSA model's config.json needs " + ", ".join(HF_FIELDS))
        v = config[hf_key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (v == 0 and hf_key != "first_k_dense_replace"):
            raise RecordError(f"{where}: field {hf_key!r} must be a positive integer, got {v!r}",
                              "check the config.json")
        values[field_name] = v
    arch = config.get("architectures")
    if not isinstance(arch, list) or not arch or not isinstance(arch[0], str):
        raise RecordError(f"{where}: field 'architectures' is missing or not a list of names",
                          "a config.json names its model class, e.g. [\"DeepseekV32ForCausalLM\"]")
    if values["first_dense_layers"] > values["num_layers"]:
        raise RecordError(f"{where}: first_k_dense_replace > num_hidden_layers", "check the config.json")
    if values["index_topk"] > values["max_position_embeddings"]:
        raise RecordError(f"{where}: index_topk > max_position_embeddings", "check the config.json")
    ck_bytes, ck_source = checkpoint or (None, "")
    return ModelSpec(name=name, hf_id=hf_id, architecture=arch[0], checkpoint_bytes=ck_bytes,
                     checkpoint_source=ck_source, **values)


def _catalog() -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (file name, config mapping) for the shipped specs."""
    out = {}
    for entry in resources.files("sactool").joinpath("data").joinpath("models").iterdir():
        if entry.name.endswith(".json"):
            cfg = json.loads(entry.read_text(encoding="utf-8"))
            out[cfg["_sactool"]["name"]] = (entry.name, cfg)
    return out


def checkpoint_of(name: str) -> tuple[int, str] | None:
    """(checkpoint bytes, source) of a shipped model by sactool name; None when not known."""
    entry = _catalog().get(str(name).strip().lower())
    meta = entry[1]["_sactool"] if entry else {}
    return (int(meta["checkpoint_bytes"]), meta["checkpoint_source"]) if "checkpoint_bytes" in meta else None


def active_params_of(name: str) -> tuple[float, str] | None:
    """(activated parameters per token, source) of a shipped model (``_sactool.active_params`` of its
    JSON: the roofline's compute term); None when not known (GLM-5: not published here)."""
    entry = _catalog().get(str(name).strip().lower())
    meta = entry[1]["_sactool"] if entry else {}
    return (float(meta["active_params"]), meta.get("active_params_source", "")) if "active_params" in meta else None


def known_models() -> list[str]:
    """Names of the shipped model specs, sorted."""
    return sorted(_catalog())


def _aliases(name: str, cfg: Mapping[str, Any]) -> set[str]:
    hf_id = cfg.get("_name_or_path", "")
    names = {name, hf_id, hf_id.rsplit("/", 1)[-1], *cfg["_sactool"].get("aliases", ())}
    return {n.lower() for n in names if n}


def get_model(name_or_path: str | Path) -> ModelSpec:
    """A shipped spec by name (case-insensitive; HF ids work too) or a config.json path."""
    text = str(name_or_path).strip()
    catalog = _catalog()
    for name, (_, cfg) in catalog.items():
        if text.lower() in _aliases(name, cfg):
            return from_hf_config(cfg, name=name, hf_id=cfg["_name_or_path"], where=f"model {name}",
                                  checkpoint=checkpoint_of(name))
    p = Path(text)
    if p.is_dir() and (p / "config.json").is_file():
        p = p / "config.json"
    if p.is_file():
        from sactool.records import load_structured

        cfg = load_structured(p, what="model config")
        model_name = cfg.get("_name_or_path") or p.parent.name or p.stem
        # the model SGLang loads is the checkout directory (weights, tokenizer and config.json):
        # serve passes hf_id as --model-path, which must not be the config.json file itself
        name = str(model_name).rsplit("/", 1)[-1].lower()
        return from_hf_config(cfg, name=name, hf_id=str(p.parent.resolve()), where=str(p),
                              checkpoint=checkpoint_of(name))
    if text.endswith(".json"):
        raise RecordError(f"model config {text} does not exist", "check the path to the config.json")
    raise UsageError(f"unknown model {text!r}; known models: {', '.join(known_models())}",
                     "give a known name or the path to a Hugging Face config.json")
