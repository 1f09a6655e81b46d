"""Profile schema: round trip, refusal of newer schemas, validation errors that name the field."""

from __future__ import annotations

import pytest
import yaml

from sactool.errors import ExistsError, RecordError
from sactool.models import get_model
from sactool.profile import (HiSparseSettings, ModelRef, PoolSettings, Provenance, SglangSettings, from_data, load_profile,
                             new_profile, save_profile, settings_fields)


def _profile(**over):
    prov = {k: Provenance("default", "test") for k in settings_fields()}
    kw = dict(model=ModelRef.of(get_model("deepseek-v3.2")),
              pool=PoolSettings(nodes=(2, 3), rank_targets=("node2", "node3") * 4),
              hisparse=HiSparseSettings(device_buffer_size=6144, host_to_device_ratio=4),
              sglang=SglangSettings(tp_size=8, attn_dp_size=8, max_total_tokens=8 * 6208),
              predictions={"fetch_time_per_token_s": 1e-3}, provenance=prov)
    kw.update(over)
    return new_profile(**kw)


def test_round_trip(tmp_path):
    p = _profile()
    path = save_profile(p, tmp_path / "p.yaml")
    q = load_profile(path)
    assert q == p
    assert q.hisparse.config_json() == {"top_k": 2048, "device_buffer_size": 6144, "host_to_device_ratio": 4,
                                        "swap_in_block_size": 960}
    with pytest.raises(ExistsError):
        save_profile(p, path)
    save_profile(p, path, force=True)


def _data(tmp_path):
    return yaml.safe_load(save_profile(_profile(), tmp_path / "p.yaml", force=True).read_text())


def test_newer_schema_is_refused(tmp_path):
    d = _data(tmp_path)
    d["schema_version"] = 99
    with pytest.raises(RecordError) as e:
        from_data(d)
    assert "newer" in e.value.message and "upgrade sactool" in e.value.hint
    d["schema_version"] = "one"
    with pytest.raises(RecordError, match="schema_version"):
        from_data(d)


def test_upgrade_steps_run_in_order(tmp_path, monkeypatch):
    # an older record goes through each step; here a fake v4 -> v5 step fills a field
    import sactool.profile as prof

    d = _data(tmp_path)
    assert from_data(d).schema_version == prof.SCHEMA_VERSION == 4   # current: nothing to upgrade
    old = dict(d, schema_version=0)
    with pytest.raises(RecordError):        # no valid schema_version < 1 exists
        from_data(old)
    monkeypatch.setattr(prof, "SCHEMA_VERSION", 5)
    monkeypatch.setattr(prof, "_UPGRADES", {**prof._UPGRADES, 4: lambda r: {**r, "request": {"upgraded": True}}})
    up = prof.from_data(dict(d, schema_version=1))
    assert up.request == {"upgraded": True} and up.schema_version == 5 and up.engine == "sglang"


def test_schema_3_profile_upgrades_to_engine_sglang(tmp_path):
    """Profiles before schema 4 were all SGLang's: they load as engine sglang, with no vllm section."""
    d = _data(tmp_path)
    d.pop("engine", None)
    d["schema_version"] = 3
    p = from_data(d)
    assert p.engine == "sglang" and p.vllm is None and p.schema_version == 4
    assert p.to_data()["engine"] == "sglang" and "vllm" not in p.to_data()


def test_schema_1_profile_without_workload_block_is_accepted(tmp_path, capsys):
    """Profiles written before the workload block (schema 1) load, validate and show, with the
    workload 'not recorded' rather than guessed."""
    from sactool.cli import main

    d = _data(tmp_path)
    d.pop("workload", None)
    d["schema_version"] = 1
    v1 = tmp_path / "v1.yaml"
    v1.write_text(yaml.safe_dump(d))
    p = load_profile(v1)
    assert p.schema_version == 4 and p.workload is None and p.engine == "sglang"
    assert main(["profile", "validate", str(v1)]) == 0
    assert main(["profile", "show", str(v1)]) == 0
    o, _ = capsys.readouterr()
    assert "hit rates from: not recorded (a profile written before schema 2)" in o
    d["workload"] = "per-layer"               # present but not a mapping: refused, named
    with pytest.raises(RecordError, match="workload: must be a mapping or null"):
        from_data(dict(d, schema_version=2))


def test_workload_block_round_trips(tmp_path):
    from sactool.workload.layers import model_workload

    block = {**model_workload("deepseek-v3.2", 61, 2048).to_data(), "steps": 8, "seeds": [0]}
    q = load_profile(save_profile(_profile(workload=block), tmp_path / "w.yaml"))
    assert q.workload == block and q.to_data()["workload"]["model_profile"] == "deepseek-v3.2"


@pytest.mark.parametrize("section, field, value, text", [
    ("hisparse", "device_buffer_size", 1024, "hisparse.device_buffer_size: must be >= 2048"),
    ("hisparse", "swap_in_block_size", 2048, "hisparse.swap_in_block_size: must be <= 1024"),
    ("hisparse", "top_k", 1024, "hisparse.top_k"),
    ("sglang", "page_size", 1, "sglang.page_size"),
    ("sglang", "kv_cache_dtype", "fp4", "sglang.kv_cache_dtype: must be one of"),
    ("sglang", "max_total_tokens", 100, "sglang.max_total_tokens"),
    ("sglang", "attn_dp_size", 3, "sglang.attn_dp_size"),
    ("pool", "rank_targets", ["node9"] * 8, "pool.rank_targets[0]"),
    ("pool", "placement", "magic", "pool.placement"),
    ("pool", "bogus", 1, "pool.bogus: is not a known field"),
])
def test_field_errors_name_the_field(tmp_path, section, field, value, text):
    d = _data(tmp_path)
    d[section][field] = value
    with pytest.raises(RecordError) as e:
        from_data(d)
    assert text in e.value.message


def test_missing_section_and_bad_provenance(tmp_path):
    d = _data(tmp_path)
    del d["hisparse"]
    with pytest.raises(RecordError, match="hisparse: is missing"):
        from_data(d)
    d = _data(tmp_path)
    d["provenance"]["hisparse.device_buffer_size"] = {"source": "guessed"}
    with pytest.raises(RecordError, match="provenance"):
        from_data(d)


def test_cli_validate_exit_codes(tmp_path, capsys):
    from sactool.cli import main

    path = save_profile(_profile(), tmp_path / "p.yaml")
    assert main(["profile", "validate", str(path)]) == 0
    d = yaml.safe_load(path.read_text())
    d["schema_version"] = 7
    newer = tmp_path / "newer.yaml"
    newer.write_text(yaml.safe_dump(d))
    capsys.readouterr()
    assert main(["profile", "validate", str(newer)]) == 4
    o, e = capsys.readouterr()
    assert o == "" and "upgrade sactool" in e
    broken = tmp_path / "broken.yaml"
    broken.write_text("hisparse: [unclosed")
    assert main(["profile", "validate", str(broken)]) == 4
    assert main(["profile", "validate", str(tmp_path / "none.yaml")]) == 4
    assert main(["profile", "show", str(path)]) == 0
    o, _ = capsys.readouterr()
    assert "hisparse.device_buffer_size" in o and "6144" in o
