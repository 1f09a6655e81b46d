"""Every settings field of the profile is consumed: changing it changes the SGLang argv, its
environment, the plug-in's per-rank placement plan, or the launcher's engine check.

A field added to ``sactool.profile`` without an entry in CHANGES fails this test on purpose.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sactool.profile import load_profile, settings_fields
from sactool.serve.argv import build_command
from sactool.serve.checks import EngineInfo, check_engine
from sactool.pool.plan import PoolSpec, plan_for_rank, rank_plan
from sactool.pool.targets import Target, target_names
from sactool.profile.sizing import host_sizing

REPO = Path(__file__).resolve().parent.parent
BASE = REPO / "profiles/examples/cxl-one-node.yaml"

DEVDAX = {"pool.mode": "devdax", "pool.dax_devices": ("dax0.0", "dax1.0")}
TWO = {"pool.nodes": (2, 3)}
WI = {"pool.policy": "weighted_interleave", "pool.interleave_weights": {0: 3, 2: 1}}

# field -> (changes applied to the base first, the new value)
CHANGES = {
    "pool.placement": ({}, "numactl"),
    "pool.mode": ({"pool.dax_devices": ("dax0.0",)}, "devdax"),
    "pool.nodes": ({}, (3,)),
    "pool.dax_devices": (DEVDAX, ("dax2.0", "dax3.0")),
    "pool.rank_assignment": (TWO, "packed"),
    "pool.rank_targets": (TWO, ("node3",) * 8),
    "pool.policy": ({}, "preferred"),
    "pool.interleave_weights": (WI, {0: 1, 2: 1}),
    "pool.hugepages": ({}, "2MB"),
    "pool.prefault_threads": ({}, 4),
    "pool.prefault_cpus": ({}, "0-3"),
    "pool.register_chunk_gb": ({}, 32),
    "pool.strict": ({}, True),
    "pool.stand_in": ({}, True),
    "pool.gpu_local_nodes": ({}, (1,) * 8),
    "hisparse.top_k": ({}, 1024),
    "hisparse.device_buffer_size": ({}, 6144),
    "hisparse.host_to_device_ratio": ({}, 4),
    "hisparse.swap_in_block_size": ({}, 512),
    "hisparse.prefetch": ({}, False),
    "sglang.tested": ({}, ">=0.5.24,<0.6"),
    "sglang.entrypoint": ({}, "serve"),
    "sglang.role": ({}, "decode"),
    "sglang.tp_size": ({}, 4),
    "sglang.attn_dp_size": ({}, 4),
    "sglang.kv_cache_dtype": ({}, "bfloat16"),
    "sglang.page_size": ({}, 128),
    "sglang.mem_fraction_static": ({}, 0.8),
    "sglang.max_running_requests": ({}, 16),
    "sglang.context_length": ({}, 65536),
    "sglang.dsa_decode_backend": ({}, "flashmla_kv"),
    "sglang.max_total_tokens": ({}, 100_000),
    "sglang.base_gpu_id": ({}, 2),
    "pool.capacity_bytes": (DEVDAX, 256 << 20),
}


def apply(profile, changes: dict):
    """Set dotted fields without validation (a changed value may be one validate refuses)."""
    for dotted, value in changes.items():
        sect, name = dotted.split(".")
        profile = dataclasses.replace(profile, **{sect: dataclasses.replace(getattr(profile, sect), **{name: value})})
    return profile


ENGINE = EngineInfo(python="/env/bin/python", python_version="3.11.7", sglang="0.5.23", launch_server=True,
                    console_script="/env/bin/sglang", plugins=("sactool_cxl=sactool.sglang_plugin:register",))


def fingerprint(profile) -> dict:
    cmd = build_command(profile, profile_path=str(BASE), python="python3", environ={})
    plans = [plan_for_rank(PoolSpec.of(profile), r) for r in range(profile.world_size)] if cmd.placement == "plugin" else []
    # the rank plan over fixed target facts (as a host would give them): slices, GPUs, sockets
    facts = [Target(n, profile.pool.mode, 1 << 30, "test", 2 << 20 if n.startswith("dax") else None, i % 2)
             for i, n in enumerate(target_names(profile.pool))]
    try:
        rank_rows = rank_plan(PoolSpec.of(profile), facts, check_pool=False).to_data() if cmd.placement == "plugin" else []
    except Exception as e:
        rank_rows = [f"refused {type(e).__name__}"]
    try:
        engine = check_engine(profile, ENGINE, entrypoint=profile.sglang.entrypoint, plugin=True)
    except Exception as e:
        engine = [f"refused {e.exit_code}"]
    return {"argv": cmd.argv, "env": cmd.env_delta, "plugin plans": plans, "rank plan": rank_rows, "engine check": engine,
            "host bytes per rank": host_sizing(profile).bytes_per_rank}


def test_table_covers_every_settings_field():
    missing = [f for f in settings_fields() if f not in CHANGES]
    assert not missing, f"settings fields nobody shows to be consumed: {missing}"
    assert set(CHANGES) <= set(settings_fields())


@pytest.mark.parametrize("field", settings_fields())
def test_changing_the_field_changes_what_sglang_gets(field):
    pre, value = CHANGES[field]
    base = apply(load_profile(BASE), pre)
    sect, name = field.split(".")
    assert getattr(getattr(base, sect), name) != value, f"{field}: the new value equals the base"
    a, b = fingerprint(base), fingerprint(apply(base, {field: value}))
    changed = [k for k in a if a[k] != b[k]]
    assert changed, f"changing {field} to {value!r} changed neither argv, env, the plug-in plan nor the checks"
