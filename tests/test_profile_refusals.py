"""Every refusal of the profile schema (sactool/profile/schema.py, whole.py): one bad field each,
on a profile that is valid otherwise; the one-line error names the field, says why, carries a
hint, and ``profile validate`` exits 4 (docs/reference/exit-codes.md)."""

from __future__ import annotations

import copy

import pytest
import yaml

from sactool.errors import ExitCode, RecordError
from sactool.models import get_model
from sactool.profile import (HiSparseSettings, ModelRef, PoolSettings, Provenance, SglangSettings, from_data,
                             new_profile, settings_fields, validate)

DROP = object()


@pytest.fixture(scope="module")
def good() -> dict:
    """A valid profile as loaded YAML: 8 ranks over nodes 2 and 3, every settings field's provenance."""
    prov = {k: Provenance("default", "test") for k in settings_fields()}
    p = new_profile(model=ModelRef.of(get_model("deepseek-v3.2")),
                    pool=PoolSettings(nodes=(2, 3), rank_targets=("node2", "node3") * 4),
                    hisparse=HiSparseSettings(device_buffer_size=6144, host_to_device_ratio=4),
                    sglang=SglangSettings(tp_size=8, attn_dp_size=8, max_total_tokens=8 * 6208),
                    predictions={"fetch_time_per_token_s": 1e-3}, provenance=prov)
    from sactool.records import dumps

    return yaml.safe_load(dumps(p, "yaml"))


def _set(d: dict, path: tuple, value) -> dict:
    d = copy.deepcopy(d)
    cur = d
    for k in path[:-1]:
        cur = cur[k]
    if value is DROP:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return d


CASES = [
    # the record around the settings
    (("bogus",), 1, "profile field bogus: is not a known field", "upgrade sactool"),
    (("pool", "bogus"), 1, "pool.bogus: is not a known field", "upgrade sactool"),
    (("model",), DROP, "model: is missing (is the file cut short?)", "sactool tune"),
    (("provenance",), DROP, "provenance: is missing (is the file cut short?)", "sactool tune"),
    (("provenance",), {}, "provenance: is empty", "sactool tune"),
    (("provenance",), None, "provenance: is empty", "sactool tune"),
    (("provenance", "pool.nodes"), DROP, "provenance['pool.nodes']: is missing", "source: user"),
    (("provenance", "pool.nodes"), "user", "provenance['pool.nodes']: must be a mapping with a 'source'", None),
    (("provenance", "pool.nodes"), {"source": "guessed"}, "provenance['pool.nodes']: source must be one of", None),
    (("model", "name"), DROP, "model.name: is missing", None),
    (("pool",), [1], "pool: must be a mapping, got list", None),
    (("machine",), [1], "machine: must be a mapping", None),
    (("bench",), 3, "bench: must be a mapping or null", None),
    (("fleet",), "x", "fleet: must be a mapping or null", None),
    (("workload",), [], "workload: must be a mapping or null", None),
    (("predictions", "x"), float("nan"), "predictions.x: must be a finite number, got nan", None),
    (("request", "c"), [1, float("-inf")], "request.c[1]: must be a finite number, got -inf", None),
    # model
    (("model", "hf_id"), "", "model.hf_id: must be a non-empty string", None),
    (("model", "architecture"), 3, "model.architecture: must be a non-empty string, got 3", None),
    (("model", "num_layers"), 0, "model.num_layers: must be >= 1, got 0", None),
    (("model", "kv_lora_rank"), "512", "model.kv_lora_rank: must be an integer, got '512'", None),
    (("model", "hf_id"), "--enable-hierarchical-cache", "model.hf_id: '--enable-hierarchical-cache' would reach "
                                                        "SGLang's command line as a flag", "Hugging Face id"),
    (("model", "hf_id"), "a b", "model.hf_id: 'a b' would reach SGLang's command line as a value with spaces", None),
    # hisparse
    (("hisparse", "top_k"), 1024, "hisparse.top_k: 1024 differs from the model's index_topk 2048", None),
    (("hisparse", "top_k"), True, "hisparse.top_k: must be an integer, got True", None),
    (("hisparse", "device_buffer_size"), 1024, "hisparse.device_buffer_size: must be >= 2048, got 1024", None),
    (("hisparse", "host_to_device_ratio"), 0, "hisparse.host_to_device_ratio: must be >= 1", None),
    (("hisparse", "host_to_device_ratio"), 10 ** 9, "hisparse.host_to_device_ratio: 1000000000 asks", None),
    (("hisparse", "swap_in_block_size"), 2048, "hisparse.swap_in_block_size: must be <= 1024", None),
    (("hisparse", "prefetch"), 1, "hisparse.prefetch: must be true or false, got 1", None),
    # sglang
    (("sglang", "tested"), "", "sglang.tested: must be a version range", None),
    (("sglang", "tested"), "~0.5", "sglang.tested: cannot read '~0.5' as a version clause", "'>=0.5.23,<0.6'"),
    (("sglang", "entrypoint"), "run", "sglang.entrypoint: must be one of launch_server, serve; got 'run'", None),
    (("sglang", "role"), "both", "sglang.role: must be one of", None),
    (("sglang", "tp_size"), 0, "sglang.tp_size: must be >= 1", None),
    (("sglang", "attn_dp_size"), 3, "sglang.attn_dp_size: 3 must divide tp_size 8", None),
    (("sglang", "kv_cache_dtype"), "fp4", "sglang.kv_cache_dtype: must be one of", None),
    (("sglang", "page_size"), 1, "sglang.page_size: DSA on CUDA forces page size 64, got 1", None),
    (("sglang", "page_size"), 0, "sglang.page_size: must be >= 1", None),
    (("sglang", "mem_fraction_static"), 1.5, "sglang.mem_fraction_static: must be a number in (0, 1), got 1.5", None),
    (("sglang", "max_running_requests"), 0, "sglang.max_running_requests: must be >= 1", None),
    (("sglang", "max_running_requests"), 10 ** 30, "sglang.max_running_requests: 1000000000000000000000000000000 "
                                                   "is more than 8 rank(s) can hold", None),
    (("sglang", "context_length"), 10 ** 7, "sglang.context_length: must be <= 163840", None),
    (("sglang", "dsa_decode_backend"), "", "sglang.dsa_decode_backend: must be a non-empty string", None),
    (("sglang", "dsa_decode_backend"), "-x", "sglang.dsa_decode_backend: '-x' would reach", None),
    (("sglang", "base_gpu_id"), -1, "sglang.base_gpu_id: must be >= 0", None),
    (("sglang", "max_total_tokens"), 0, "sglang.max_total_tokens: must be >= 1", None),
    (("sglang", "max_total_tokens"), 100, "sglang.max_total_tokens: 100 is smaller than one request's hot buffer", None),
    # pool: targets
    (("pool", "placement"), "magic", "pool.placement: must be one of plugin, numactl, none", None),
    (("pool", "mode"), "file", "pool.mode: must be one of numa, devdax", None),
    (("pool", "nodes"), [2, -3], "pool.nodes[1]: must be >= 0, got -3", None),
    (("pool", "nodes"), 2, "pool.nodes: must be a list", None),
    (("pool", "dax_devices"), ["mem0"], "pool.dax_devices[0]: must name a DAX device like dax0.0", None),
    (("pool", "rank_assignment"), "random", "pool.rank_assignment: must be one of", None),
    (("pool", "rank_targets"), ["node2"] * 7, "pool.rank_targets: has 7 entries for 8 ranks (tp_size)", None),
    (("pool", "rank_targets"), ["cxl0"] * 8, "pool.rank_targets[0]: must be nodeN or daxX.Y, got 'cxl0'", None),
    (("pool", "rank_targets"), ["node9"] * 8, "pool.rank_targets[0]: node9 is not among the pool's targets", None),
    # pool: allocation
    (("pool", "policy"), "spread", "pool.policy: must be one of bind, preferred, weighted_interleave", None),
    (("pool", "interleave_weights"), [1], "pool.interleave_weights: must be a mapping node -> weight", None),
    (("pool", "interleave_weights"), {"node2": 1}, "pool.interleave_weights: keys must be node numbers", None),
    (("pool", "interleave_weights"), {-1: 1}, "pool.interleave_weights key: must be >= 0, got -1", None),
    (("pool", "interleave_weights"), {2: 256}, "pool.interleave_weights[2]: must be <= 255, got 256", None),
    (("pool", "hugepages"), "4KB", "pool.hugepages: must be one of", None),
    (("pool", "prefault_threads"), 0, "pool.prefault_threads: must be >= 1", None),
    (("pool", "prefault_threads"), 2000, "pool.prefault_threads: must be <= 1024", None),
    (("pool", "prefault_cpus"), "some", "pool.prefault_cpus: must be 'auto' or a cpulist like 0-15", None),
    (("pool", "register_chunk_gb"), 0, "pool.register_chunk_gb: must be >= 1", None),
    (("pool", "capacity_bytes"), 1.5, "pool.capacity_bytes: must be an integer, got 1.5", None),
    (("pool", "strict"), "yes", "pool.strict: must be true or false", None),
    (("pool", "stand_in"), None, "pool.stand_in: must be true or false", None),
    (("pool", "gpu_local_nodes"), [0, 1], "pool.gpu_local_nodes: has 2 entries for 8 ranks", None),
    (("pool", "gpu_local_nodes"), [0] * 7 + [-1], "pool.gpu_local_nodes[7]: must be >= 0", None),
]


@pytest.mark.parametrize("path, value, text, hint", CASES, ids=lambda c: None)
def test_each_refusal_names_the_field(good, path, value, text, hint):
    with pytest.raises(RecordError) as e:
        from_data(_set(good, path, value))
    assert text in e.value.message and e.value.message.startswith("profile field ")
    assert "\n" not in e.value.message and e.value.hint and (hint is None or hint in e.value.hint)
    assert e.value.exit_code == ExitCode.RECORD == 4


@pytest.mark.parametrize("edits, text", [
    ({("pool", "nodes"): []}, "pool.nodes: is empty: name the NUMA node(s)"),
    ({("pool", "mode"): "devdax", ("pool", "rank_targets"): []}, "pool.dax_devices: is empty while pool.mode is devdax"),
    ({("pool", "mode"): "devdax", ("pool", "dax_devices"): ["dax0.0"], ("pool", "rank_targets"): [],
      ("pool", "placement"): "numactl"}, "pool.placement: numactl cannot place memory on a devdax device"),
    ({("pool", "policy"): "weighted_interleave"}, "pool.interleave_weights: is empty while pool.policy is weighted"),
    ({("pool", "rank_assignment"): "locality", ("pool", "rank_targets"): []}, "pool.rank_assignment: locality needs"),
    ({("predictions", "pool_partition_bytes_per_rank"): 1 << 20}, "hisparse.host_to_device_ratio: 4 asks"),
])
def test_rules_across_fields(good, edits, text):
    d = good
    for path, value in edits.items():
        d = _set(d, path, value)
    with pytest.raises(RecordError) as e:
        from_data(d)
    assert text in e.value.message


def test_the_good_profile_loads_and_validate_checks_built_profiles(good):
    import dataclasses

    p = from_data(copy.deepcopy(good))
    assert validate(p) is p
    with pytest.raises(RecordError, match="hisparse.swap_in_block_size: must be <= 1024"):
        validate(dataclasses.replace(p, hisparse=dataclasses.replace(p.hisparse, swap_in_block_size=2000)))
    with pytest.raises(RecordError, match=r"provenance\['pool.mode'\]: source must be one of"):
        validate(dataclasses.replace(p, provenance={"pool.mode": Provenance("guessed")}))
    with pytest.raises(RecordError, match=r"pool.nodes\[0\]: must be an integer, got '2'"):
        validate(dataclasses.replace(p, pool=dataclasses.replace(p.pool, nodes=("2",))))


def test_profile_validate_exits_4_with_the_hint(good, tmp_path, capsys):
    from sactool.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_set(good, ("sglang", "tested"), "~0.5")))
    assert main(["profile", "validate", str(bad)]) == 4
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines()[0] == "error: profile field sglang.tested: cannot read '~0.5' as a version clause"
    assert "hint: use e.g. '>=0.5.23,<0.6'" in err and "Traceback" not in err
