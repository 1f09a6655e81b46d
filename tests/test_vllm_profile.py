"""vLLM as the second engine: the profile's ``engine``/``vllm`` section, vLLM's pool arithmetic, and
the extras after -- read as ``vllm serve``'s parser reads them (the recorded table of vLLM 0.34.0,
checked against the real parser by scripts/vllm-options --check)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sactool.errors import RecordError, UsageError
from sactool.hisparse import vllm as V
from sactool.models import get_model
from sactool.profile import (ModelRef, PoolSettings, Profile, Provenance, VllmSettings, from_data, load_profile,
                             new_profile, save_profile, settings_fields)


def vllm_profile(**vllm_kw) -> Profile:
    spec = get_model("deepseek-v3.2")
    kw = dict(tp_size=8, dp_size=1, shared_host_pool=True, distributed_executor_backend="mp", max_model_len=131072,
              max_num_seqs=16, host_pool_gib=100.0)
    kw.update(vllm_kw)
    v = VllmSettings(**kw)
    from sactool.profile import HiSparseSettings, SglangSettings

    prov = {f: Provenance("default", "test") for f in settings_fields("vllm")}
    return new_profile(model=ModelRef.of(spec), pool=PoolSettings(nodes=(0,), rank_targets=("node0",) * v.pool_owners),
                       hisparse=HiSparseSettings(top_k=2048, device_buffer_size=4096), sglang=SglangSettings(),
                       engine="vllm", vllm=v, provenance=prov)


def test_vllm_profile_round_trips_without_an_sglang_section(tmp_path):
    p = vllm_profile()
    d = p.to_data()
    assert d["engine"] == "vllm" and "sglang" not in d and set(d["hisparse"]) == {"top_k", "device_buffer_size"}
    q = load_profile(save_profile(p, tmp_path / "v.yaml"))
    assert q.engine == "vllm" and q.vllm == p.vllm and q.world_size == 1    # one shared pool for the DP replica
    assert dataclasses.replace(q.vllm, shared_host_pool=False, distributed_executor_backend="ray").pool_owners == 8


@pytest.mark.parametrize("edit, field, words", [
    (lambda d: d.update(sglang={"tp_size": 8}), "sglang", "SGLang section in a profile for vLLM"),
    (lambda d: d.pop("vllm"), "vllm", "is missing"),
    (lambda d: d["hisparse"].update(host_to_device_ratio=2), "hisparse.host_to_device_ratio", "vLLM's HiSparse has no"),
    (lambda d: d["hisparse"].update(device_buffer_size=40000), "hisparse.device_buffer_size", "int16"),
    (lambda d: d["vllm"].update(host_pool_gib=0.5), "vllm.host_pool_gib", "max_model_len 131072 needs 2050"),
    (lambda d: d["vllm"].update(shared_host_pool=False), "vllm.shared_host_pool", "shares the pool"),
    (lambda d: d["vllm"].update(kv_cache_dtype="fp8_e4m3"), "vllm.kv_cache_dtype", "fp8_ds_mla"),
    (lambda d: d["pool"].update(rank_targets=["node0", "node0"]), "pool.rank_targets", "2 entries for 1 pool"),
    (lambda d: d["model"].update(architecture="DeepseekV4ForCausalLM"), "model.architecture", "DeepSeek V4"),
])
def test_vllm_profile_refusals_name_the_field(edit, field, words):
    d = json.loads(json.dumps(vllm_profile().to_data()))
    edit(d)
    with pytest.raises(RecordError) as e:
        from_data(d)
    assert f"profile field {field}" in e.value.message and words in e.value.message


def test_an_sglang_profile_may_not_carry_a_vllm_section():
    d = json.loads(json.dumps(vllm_profile().to_data()))
    d.update(engine="sglang", sglang={"tp_size": 8})
    d["pool"]["rank_targets"] = ["node0"] * 8
    with pytest.raises(RecordError) as e:
        from_data(d)
    assert "profile field vllm: is a vLLM section in a profile for SGLang" in e.value.message


def test_host_pool_is_sized_by_vllm_rules():
    # DeepSeek-V3.2, fp8_ds_mla: a host block is a 64-token page of 61 layers of 656-byte records
    pool = V.HostPool(100.0, 61, 656, 64, shared=True)
    assert pool.page_bytes == 61 * 64 * 656 == 2_561_024
    assert pool.stride_bytes == 2_564_096                      # rounded up to 4096 when shared
    assert pool.blocks == 100 * 2 ** 30 // 2_564_096
    assert pool.allocated_bytes == pool.blocks * 2_564_096
    private = dataclasses.replace(pool, shared=False)
    assert private.stride_bytes == 2_561_024 and private.allocated_bytes % 4096 == 0
    assert pool.blocks_for(131072) == 2048 + 2
    assert V.HostPool(V.gib_for_blocks(2050, 2_564_096), 61, 656, 64, True).blocks >= 2050
    assert V.HostPool(V.gib_for_blocks(2050, 2_564_096) - 1 / 1024, 61, 656, 64, True).blocks < 2050
    assert V.device_buffer_problem(2047, 2048) and V.device_buffer_problem(32769, 2048)
    assert not V.device_buffer_problem(32768, 2048) and V.default_device_buffer(2048) == 4096
    assert V.preflight_refuses(96, 100) and not V.preflight_refuses(95, 100)


# ------------------------------------------------------------------------------------------
# the extras after --, as vLLM 0.34.0's parser reads them (its recorded option table)
# ------------------------------------------------------------------------------------------

def resolve(argv):
    from sactool.serve.vllm_options import resolve as r

    return r(argv)


@pytest.mark.parametrize("argv, want", [
    (["--max_model_len", "4096"], ["--max-model-len", "4096"]),                 # underscores are dashes
    (["-tp", "2"], ["-tp", "2"]),
    (["--tensor-parallel", "2"], ["--tensor-parallel-size", "2"]),              # a unique prefix
    (["-O3"], ["--optimization-level", "3"]),
    (["--attention-config.hisparse_config.device_buffer_size", "6144", "--port", "8001"],
     ["--port", "8001", "--attention-config", '{"hisparse_config":{"device_buffer_size":6144}}']),
    (["--kv-transfer-config.kv_connector_extra_config.host_pool_gib=2G"],
     ["--kv-transfer-config", '{"kv_connector_extra_config":{"host_pool_gib":2147483648}}']),
    (["--no-enable-expert-parallel"], ["--no-enable-expert-parallel"]),
])
def test_extras_resolve_as_vllm_reads_them(argv, want):
    assert resolve(argv) == want


@pytest.mark.parametrize("argv, words", [
    (["--no-such-option", "1"], "vLLM 0.34.0 has no option --no-such-option"),
    (["--max", "1"], "ambiguous for vLLM"),
    (["stray"], "not an option of vLLM"),
    (["--tensor-parallel-size", "two"], "wants an integer"),
    (["--enable-expert-parallel=1"], "takes no value"),
    (["--config", "x.yaml"], "config file"),
    (["--block-size"], "expects a value"),
])
def test_extras_vllm_would_refuse_are_refused(argv, words):
    with pytest.raises(UsageError) as e:
        resolve(argv)
    assert words in e.value.message


def test_shipped_table_is_vllm_0_34_0s():
    from sactool.serve.vllm_options import shipped_table

    t = shipped_table()
    assert t.version == V.VLLM_SHIPPED and t.engine == "vLLM"
    for name in ("--attention-config", "--kv-transfer-config", "--tensor-parallel-size", "--data-parallel-size",
                 "--block-size", "--kv-cache-dtype", "--max-model-len", "--max-num-seqs", "--enable-expert-parallel",
                 "--distributed-executor-backend", "--gpu-memory-utilization", "--trust-remote-code",
                 "--scheduler-reserve-full-isl"):
        assert name in t.options, name
