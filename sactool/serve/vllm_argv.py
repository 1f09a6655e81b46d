"""From a vLLM profile to the exact ``vllm serve`` command: an argv list, an environment delta, and
for every flag and variable the profile field it came from (vLLM 0.34's HiSparse,
:mod:`sactool.hisparse.vllm`). Flag spellings are vLLM 0.34.0's (the recorded option table,
``sactool/data/vllm/options-0.34.0.json``; ``scripts/vllm-options --check`` parses the command built
for every shipped vLLM profile with vLLM's real parser). Pure: no subprocess, no file reads.

HiSparse is turned on by the ``HiSparseConnector`` (``--kv-transfer-config``: ``host_pool_gib`` is read
only there, ``config/kv_transfer.py:16-47``) and tuned by ``--attention-config``'s ``hisparse_config``
(``device_buffer_size``, ``eager_host_mirror``: its only two fields, ``config/attention.py:21-40``).
"""

from __future__ import annotations

import json
import os
from typing import Mapping, Sequence

from sactool.profile import Profile, VllmSettings
from sactool.pool.contract import PROFILE_ENV, STRICT_ENV
from sactool.serve.argv import Command, EnvVar, Flag

PLUGIN_NAME = "sactool_cxl"          # entry point name in group vllm.general_plugins (pyproject.toml)
PLUGINS_ENV = "VLLM_PLUGINS"


def _num(v: float) -> str:
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


def program(python: str, vllm_script: str | None = None) -> tuple[str, ...]:
    """``vllm serve`` with the console script the target Python reported, else the one next to it."""
    if vllm_script:
        return (vllm_script, "serve")
    d = os.path.dirname(python)
    return (os.path.join(d, "vllm") if d else "vllm", "serve")


def connector_json(v: VllmSettings) -> str:
    return json.dumps({"kv_connector": "HiSparseConnector", "kv_role": "kv_both",
                       "kv_connector_extra_config": {"host_pool_gib": v.host_pool_gib}}, separators=(",", ":"))


def attention_json(profile: Profile, user: Mapping | None = None) -> str:
    v = profile.vllm
    assert v is not None
    d = dict(user or {})
    d["hisparse_config"] = {"device_buffer_size": profile.hisparse.device_buffer_size,
                            "eager_host_mirror": v.eager_host_mirror}
    return json.dumps(d, separators=(",", ":"))


def vllm_flags(profile: Profile, *, model_given: bool, user_attention: Mapping | None = None) -> list[Flag]:
    """The vLLM flags the profile implies (user extras are appended by :func:`build_command`)."""
    v, m, h = profile.vllm, profile.model, profile.hisparse
    assert v is not None
    pool = v.host_pool(m)
    out: list[Flag] = []
    if not model_given:
        out.append(Flag((m.hf_id,), "model.hf_id", "the model the profile was tuned for (vllm serve's positional model)"))
    out.append(Flag(("--tensor-parallel-size", str(v.tp_size)), "vllm.tp_size",
                    "GPUs of one DP replica" + ("; they read one shared host pool" if v.shared_host_pool else "")))
    if v.dp_size > 1:
        out.append(Flag(("--data-parallel-size", str(v.dp_size)), "vllm.dp_size",
                        "DP replicas on this host, each with its own host pool"))
    if v.enable_expert_parallel:
        out.append(Flag(("--enable-expert-parallel",), "vllm.enable_expert_parallel",
                        "DP attention with the MoE experts sharded over every GPU"))
    if v.distributed_executor_backend:
        out.append(Flag(("--distributed-executor-backend", v.distributed_executor_backend),
                        "vllm.distributed_executor_backend, vllm.shared_host_pool",
                        "vLLM shares one host pool among the TP ranks only with the mp executor "
                        "(use_shared_hisparse_host_pool, v1/hisparse/runtime.py:291-303)"))
    out.append(Flag(("--kv-cache-dtype", v.kv_cache_dtype), "vllm.kv_cache_dtype",
                    f"{pool.record_bytes} B records per token and layer"))
    out.append(Flag(("--block-size", str(v.block_size)), "vllm.block_size",
                    f"{v.block_size}-token KV blocks: one host block is one such page of {pool.layers} layers "
                    f"({pool.page_bytes} B)"))
    if v.max_model_len is not None:
        out.append(Flag(("--max-model-len", str(v.max_model_len)), "vllm.max_model_len",
                        f"longest request; the pool must hold {pool.blocks_for(v.max_model_len)} host blocks for it"))
    if v.max_num_seqs is not None:
        out.append(Flag(("--max-num-seqs", str(v.max_num_seqs)), "vllm.max_num_seqs",
                        "running requests per DP replica the pool was sized for"))
    if v.gpu_memory_utilization is not None:
        out.append(Flag(("--gpu-memory-utilization", _num(v.gpu_memory_utilization)), "vllm.gpu_memory_utilization",
                        "GPU memory for weights, hot buffers and indexer keys"))
    out.append(Flag(("--kv-transfer-config", connector_json(v)), "vllm.host_pool_gib",
                    f"HiSparseConnector turns HiSparse on; host_pool_gib {v.host_pool_gib} = {pool.blocks} whole host "
                    f"blocks of {pool.stride_bytes} B, {pool.allocated_bytes} B "
                    + ("per DP replica, shared by its TP ranks" if v.shared_host_pool else "per rank")))
    out.append(Flag(("--attention-config", attention_json(profile, user_attention)),
                    "hisparse.device_buffer_size, vllm.eager_host_mirror"
                    + (", user (after --)" if user_attention else ""),
                    f"hisparse_config: {h.device_buffer_size} hot-buffer rows per request (vLLM: at least index_topk, "
                    "at most 32768)" + ("; the other attention-config keys given after -- are merged in"
                                        if user_attention else "")))
    return out


def build_command(profile: Profile, *, profile_path: str, extra_args: Sequence[str] = (), python: str,
                  environ: Mapping[str, str] | None = None, vllm_script: str | None = None,
                  extra_env: Sequence[EnvVar] = (), user_attention: Mapping | None = None) -> Command:
    """argv and environment delta for a vLLM ``profile``; ``extra_args`` are the extras after --
    as :func:`sactool.serve.vllm_options.resolve` spelled them (and the conflict check passed, with
    a user ``--attention-config`` taken out and handed as ``user_attention`` to be merged)."""
    from sactool.serve.vllm_options import model_of

    environ = os.environ if environ is None else environ
    q, v = profile.pool, profile.vllm
    assert v is not None
    extra = list(extra_args)
    prefix = [Flag(program(python, vllm_script), "--python", "vLLM's command line in the target Python")]
    flags = vllm_flags(profile, model_given=model_of(extra) is not None, user_attention=user_attention)
    if extra:
        flags.append(Flag(tuple(extra), "user (after --)", "passed through last, each option spelled in full as "
                          "vLLM's parser resolves it"))
    env: list[EnvVar] = []
    notes: list[str] = []
    if not environ.get("CUDA_DEVICE_ORDER"):
        env.append(EnvVar("CUDA_DEVICE_ORDER", "PCI_BUS_ID", "sactool",
                          "GPU ids in PCI bus order, the order the GPU plan assumes (pool.gpu_local_nodes)"))
    env.extend(extra_env)
    if q.placement == "plugin":
        cur = [p.strip() for p in environ.get(PLUGINS_ENV, "").split(",") if p.strip()]
        if PLUGINS_ENV in environ and PLUGIN_NAME not in cur:
            env.append(EnvVar(PLUGINS_ENV, ",".join(cur + [PLUGIN_NAME]), "pool.placement",
                              "VLLM_PLUGINS is an allow-list: sactool_cxl appended to the plug-ins already named"))
        elif PLUGINS_ENV not in environ:
            notes.append("VLLM_PLUGINS is unset, and stays so: vLLM then loads every installed vllm.general_plugins "
                         "entry point, sactool_cxl included, in every process (API server, engine core, workers)")
        env.append(EnvVar(PROFILE_ENV, os.path.abspath(profile_path), "--profile",
                          "the plug-in reads pool.* and vllm.* from it in every vLLM worker"))
        if q.strict:
            env.append(EnvVar(STRICT_ENV, "1", "pool.strict",
                              "the plug-in stops the worker instead of letting vLLM's allocator place the pool"))
    else:
        notes.append("placement none: vLLM allocates the pool itself (DRAM baseline with the same HiSparse settings)")
    argv = tuple(a for f in prefix for a in f.args) + tuple(a for f in flags for a in f.args)
    return Command(argv=argv, env_delta={e.name: e.value for e in env}, prefix=tuple(prefix), flags=tuple(flags),
                   env=tuple(env), placement=q.placement, hisparse=True, notes=tuple(notes))


__all__ = ["PLUGIN_NAME", "PLUGINS_ENV", "attention_json", "build_command", "connector_json", "program", "vllm_flags"]
