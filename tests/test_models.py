"""Model specs: shipped figures, KV byte arithmetic, config.json import and its errors."""

from __future__ import annotations

import json

import pytest

from sactool.errors import ExitCode, RecordError, UsageError
from sactool.models import HF_FIELDS, ModelSpec, get_model, known_models


# Figures from docs/sources.md, design facts ("Facts the code must respect")
@pytest.mark.parametrize("name,layers,dense,heads,max_pos", [
    ("deepseek-v3.2", 61, 3, 64, 163840),
    ("glm-5", 78, 3, 32, 202752),
    ("glm-5.1", 78, 3, 32, 202752),
])
def test_shipped_specs_match_design(name, layers, dense, heads, max_pos):
    m = get_model(name)
    assert (m.num_layers, m.first_dense_layers, m.index_n_heads, m.max_position_embeddings) == \
        (layers, dense, heads, max_pos)
    assert (m.kv_lora_rank, m.qk_rope_head_dim, m.index_topk, m.index_head_dim) == (512, 64, 2048, 128)


def test_record_bytes_from_dims():
    m = get_model("deepseek-v3.2")
    assert m.record_bytes("fp8_e4m3") == 656 == m.record_bytes("fp8")
    assert m.record_bytes("bfloat16") == 1152 == m.record_bytes("BF16")
    assert m.indexer_bytes == 132
    # all 61 layers hold KV (dense ones included): docs/sources.md, SGLang §2.5 gives 40,016 B/token
    assert m.kv_bytes_per_token("fp8") == 40016
    assert m.kv_bytes_per_token("bf16") == 70272
    assert get_model("glm-5").kv_bytes_per_token("fp8") == 51168
    # the arithmetic follows the dims, not a table
    odd = ModelSpec("x", "x", "X", 10, 1, 256, 32, 512, 256, 8, 4096)
    assert odd.record_bytes("fp8") == 256 + 2 * 4 + 64
    assert odd.record_bytes("bf16") == (256 + 32) * 2
    assert odd.indexer_bytes == 256 + 8


def test_bad_kv_dtype():
    with pytest.raises(UsageError, match="fp4"):
        get_model("deepseek-v3.2").record_bytes("fp4")


@pytest.mark.parametrize("alias", ["DeepSeek-V3.2", "deepseek-ai/DeepSeek-V3.2", "DEEPSEEK-V3.2",
                                   " deepseek-v3.2 "])
def test_aliases(alias):
    assert get_model(alias).name == "deepseek-v3.2"


def test_glm_aliases():
    assert get_model("zai-org/GLM-5.1").name == "glm-5.1"
    assert get_model("GLM-5").name == "glm-5"


def test_unknown_model_lists_known():
    with pytest.raises(UsageError) as ei:
        get_model("llama-3")
    assert ei.value.exit_code == ExitCode.USAGE
    for name in known_models():
        assert name in ei.value.message


def test_missing_config_path(tmp_path):
    with pytest.raises(RecordError, match="does not exist"):
        get_model(tmp_path / "nope" / "config.json")


def test_model_ref_roundtrip():
    from sactool.profile import ModelRef

    ref = ModelRef.of(get_model("glm-5"))
    assert isinstance(ref, ModelRef)
    assert ref.num_layers == 78 and ref.architecture == "GlmMoeDsaForCausalLM"


def _config(**over):
    cfg = {"architectures": ["DeepseekV32ForCausalLM"], "num_hidden_layers": 61,
           "first_k_dense_replace": 3, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
           "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64,
           "max_position_embeddings": 163840, "hidden_size": 7168}
    cfg.update(over)
    return cfg


def test_config_json_path(tmp_path):
    d = tmp_path / "my-dsa"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(_config(num_hidden_layers=40)))
    m = get_model(d / "config.json")
    assert m.num_layers == 40 and m.kv_bytes_per_token("fp8") == 40 * 656
    assert get_model(d).num_layers == 40  # a model directory works too


@pytest.mark.parametrize("missing", list(HF_FIELDS) + ["architectures"])
def test_config_missing_field_is_named(tmp_path, missing):
    cfg = _config()
    del cfg[missing]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(RecordError) as ei:
        get_model(p)
    assert missing in ei.value.message
    assert ei.value.exit_code == ExitCode.RECORD


@pytest.mark.parametrize("field,value", [("kv_lora_rank", "512"), ("num_hidden_layers", 0),
                                         ("index_topk", -1), ("index_topk", True)])
def test_config_bad_values(tmp_path, field, value):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(_config(**{field: value})))
    with pytest.raises(RecordError, match=field):
        get_model(p)


def test_config_corrupt(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(RecordError):
        get_model(p)


def test_model_and_gpu_facts_have_one_owner():
    """The roofline's activated parameters come from the model's JSON (a new model needs only its
    file) and its HBM/FLOP figures from the one GPU catalog, hisparse/gpus.py (issue 19)."""
    from sactool.hisparse.gpus import GPUS
    from sactool.models import active_params_of
    from sactool.simulate.gpu import ROOFLINE

    assert active_params_of("deepseek-v3.2")[0] == 37e9 and "2412.19437" in active_params_of("deepseek-v3.2")[1]
    assert active_params_of("glm-5") is None
    assert set(ROOFLINE) == set(GPUS) and all(ROOFLINE[k][0] == GPUS[k].hbm_bytes_per_s for k in GPUS)
