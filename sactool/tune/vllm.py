"""``tune --engine vllm``: the chosen design point written as vLLM's settings.

The search is the engine-neutral one (measured gathers, the hot-buffer LRU simulation of the same
workload, the GPU budget with the MLA latent replicated over the TP ranks of an attention replica):
its ``device_buffer_size`` is kept when vLLM accepts it (at least ``index_topk`` — one decode query
without speculation — and at most 32768, :mod:`sactool.hisparse.vllm`). What differs is the pool:
vLLM has no host-to-device ratio; it sizes one pool by ``host_pool_gib`` in whole host blocks
(a 64-token page of every layer), shared by the TP ranks of a DP replica (TP > 1, ``mp`` executor)
or private to each rank. The pool is sized to hold the replica's share of the design concurrency at
the longest design context, plus vLLM's null and copy-on-write blocks, and each pool must fit its
share of the target the rank plan maps it to; where it does not, the concurrency is lowered to what
fits (a warning says so).

SGLang's attention DP maps onto vLLM's data parallelism: ``--attn-dp N`` becomes ``N`` DP replicas of
``tp / N`` GPUs (with expert parallelism when N > 1). vLLM's own default layout for DeepSeek-V3.2 is
one replica of TP 8 (one shared pool), which ``tune --engine vllm`` takes when ``--attn-dp`` is not given.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from sactool.errors import CapacityError
from sactool.hisparse import vllm as V
from sactool.profile import PoolSettings, Profile, Provenance, VllmSettings, new_profile, settings_fields
from sactool.records import warning

VLLM_DTYPE = {"fp8_e4m3": "fp8_ds_mla", "bfloat16": "auto"}


def as_search_pool(pool: Any, tp: int) -> Any:
    """The pool as the engine-neutral search sees it for vLLM: the search sizes a host pool per GPU
    rank, while the ``tp`` ranks of a DP replica share one vLLM pool (TP > 1), so each target holds
    ``tp`` times what its bytes hold for the search. Gathers, names and nodes are unchanged."""
    if tp <= 1:
        return pool
    targets = tuple(dataclasses.replace(t, capacity_bytes=t.capacity_bytes * tp,
                                        capacity_source=f"{t.capacity_source}; x{tp}: the {tp} TP ranks of a DP replica "
                                                        "share one vLLM pool") for t in pool.targets)
    return dataclasses.replace(pool, targets=targets)


def _owner_targets(pool_s: PoolSettings, owners: int, targets, owner_cpu_nodes) -> tuple[str, ...]:
    from sactool.pool.rankplan import assign

    facts = list(targets)
    rule = pool_s.rank_assignment if pool_s.rank_assignment != "explicit" else "round_robin"
    if rule == "locality" and (not owner_cpu_nodes or any(n is None for n in owner_cpu_nodes)):
        rule = "round_robin"
    names, _ = assign(owners, facts, rule, rank_cpu_nodes=owner_cpu_nodes)
    return tuple(names)


def to_vllm(d: Any, profile: Profile, summary: dict, warnings: list) -> tuple[Profile, dict]:
    """The SGLang-shaped ``profile`` the search built for design point ``d`` as a vLLM profile."""
    s, h, q, m = profile.sglang, profile.hisparse, profile.pool, profile.model
    dp = s.attn_dp_size
    tp = s.tp_size // dp
    shared = V.uses_shared_pool(tp)
    buf = h.device_buffer_size
    why = V.device_buffer_problem(buf, h.top_k)
    if why:
        buf = min(max(buf, V.min_device_buffer(h.top_k)), V.INT16_SLOTS)
        warnings.append(warning("vllm_device_buffer", f"device_buffer_size {h.device_buffer_size}: {why}; {buf} used",
                                "vLLM's bounds are index_topk .. 32768"))
    owners = dp if shared else tp * dp
    gpu_nodes = q.gpu_local_nodes
    owner_nodes = tuple(gpu_nodes[o * tp] for o in range(dp)) if shared and gpu_nodes else \
        (tuple(gpu_nodes) if gpu_nodes else ())
    targets = (d.real_pool or d.pool).targets
    rank_targets = _owner_targets(q, owners, targets, owner_nodes)
    context = max(d.design)
    concurrency = d.concurrency
    per_replica = math.ceil(concurrency / dp)
    pool = V.HostPool(1.0, m.num_layers, d.rec_bytes, V.BLOCK_SIZE, shared)
    stride = pool.stride_bytes
    # the most requests of `context` tokens each pool can hold in its share of its target
    sharing = {n: rank_targets.count(n) for n in set(rank_targets)}
    room = min(t.capacity_bytes // sharing[t.name] for t in targets if t.name in sharing)
    fit = (room // stride - V.EXTRA_HOST_BLOCKS) // V.cdiv(context, V.BLOCK_SIZE)
    if fit < 1:
        raise CapacityError(f"one {context}-token request needs {V.blocks_for_requests(1, context)} host blocks "
                            f"({V.blocks_for_requests(1, context) * stride} B) per vLLM pool, the pool targets' "
                            f"shares hold {room} B", "lower --context, or use more or larger pool targets")
    if fit < per_replica:
        warnings.append(warning("vllm_pool_concurrency",
                                f"each vLLM pool holds {fit} request(s) of {context} tokens in its share of its target "
                                f"({room} B), fewer than the {per_replica} the design concurrency asks per "
                                f"{'DP replica' if shared else 'rank'}: max_num_seqs {fit}",
                                "add pool memory, or lower --concurrency / --context"))
        per_replica = fit
    blocks = V.blocks_for_requests(per_replica, context)
    gib = V.gib_for_blocks(blocks, stride)
    v = VllmSettings(tp_size=tp, dp_size=dp, enable_expert_parallel=dp > 1, kv_cache_dtype=VLLM_DTYPE[s.kv_cache_dtype],
                     block_size=V.BLOCK_SIZE, max_model_len=context, max_num_seqs=per_replica,
                     host_pool_gib=gib, shared_host_pool=shared, distributed_executor_backend="mp" if shared else None)
    vpool = v.host_pool(m)
    pool_s = dataclasses.replace(q, rank_targets=rank_targets)
    prov = _provenance(d, profile, v, targets=targets, concurrency=concurrency, fit=fit, blocks=blocks, stride=stride)
    missing = set(settings_fields("vllm")) - set(prov)
    assert not missing, missing
    predictions = dict(profile.predictions)
    predictions["vllm"] = {"host_pool_bytes": vpool.allocated_bytes, "host_blocks": vpool.blocks,
                           "host_block_bytes": vpool.stride_bytes, "pools": v.pool_owners,
                           "requests_per_pool": per_replica, "pool_room_bytes": room}
    out = new_profile(model=m, pool=pool_s, hisparse=dataclasses.replace(h, device_buffer_size=buf),
                      sglang=type(s)(), engine="vllm", vllm=v, machine=profile.machine,
                      request=dict(profile.request, engine="vllm"), predictions=predictions, bench=profile.bench,
                      provenance=prov, workload=profile.workload, fleet=profile.fleet)
    summary = dict(summary, engine="vllm", vllm=dataclasses.asdict(v), host_pool_bytes=vpool.allocated_bytes * owners,
                   host_pool_bytes_per_rank=vpool.allocated_bytes,
                   pool=[{"name": t.name, "capacity_bytes": t.capacity_bytes, "capacity_source": t.capacity_source}
                         for t in targets])
    return out, summary


def _provenance(d: Any, profile: Profile, v: VllmSettings, *, targets, concurrency: int, fit: int, blocks: int,
                stride: int) -> dict[str, Provenance]:
    """Where each setting of the vLLM profile came from: the search's pool and hot-buffer entries,
    and the vLLM section's."""
    s, q = profile.sglang, profile.pool
    shared, dp, per_replica, context = v.shared_host_pool, v.dp_size, v.max_num_seqs, v.max_model_len
    prov = {k: p for k, p in profile.provenance.items() if k.startswith("pool.") or k in (
        "hisparse.top_k", "hisparse.device_buffer_size")}
    prov["hisparse.device_buffer_size"] = Provenance(
        prov["hisparse.device_buffer_size"].source,
        prov["hisparse.device_buffer_size"].detail + "; within vLLM's bounds (index_topk .. 32768, "
        "ResolvedHiSparseConfig)")
    prov["pool.rank_targets"] = Provenance("derived", f"{q.rank_assignment} over "
                                           f"{', '.join(t.name for t in targets)}, one entry per vLLM pool "
                                           f"({'DP replica' if shared else 'rank'})")
    user = d.o.given
    prov.update({
        "vllm.tested": Provenance("default", "the vLLM range the plug-in's hooks and the argv are verified against"),
        "vllm.tp_size": Provenance("user" if "tp" in user else "default",
                                   f"--tp {s.tp_size} over {dp} DP replica(s)"),
        "vllm.dp_size": Provenance("user" if "attn-dp" in user else "default",
                                   "--attn-dp: SGLang's attention DP is vLLM's data parallelism" if "attn-dp" in user
                                   else "1: vLLM's DeepSeek-V3.2 layout, one TP replica"),
        "vllm.enable_expert_parallel": Provenance("derived", "on with more than one DP replica (MoE over every GPU)"),
        "vllm.kv_cache_dtype": Provenance("user" if "kv-dtype" in user else "default",
                                          f"{s.kv_cache_dtype}: {d.rec_bytes} B records, vLLM's {v.kv_cache_dtype}"),
        "vllm.block_size": Provenance("engine", "64-token pages (CacheConfig.DEFAULT_BLOCK_SIZE; FlashMLA sparse)"),
        "vllm.max_model_len": Provenance("derived", "longest requested context the deployment holds"),
        "vllm.max_num_seqs": Provenance("derived", f"design concurrency {concurrency} over {dp} DP replica(s)"
                                        + (f", lowered to what the pool holds ({fit})" if per_replica == fit < math.ceil(
                                            concurrency / dp) else "")),
        "vllm.gpu_memory_utilization": Provenance("default", "null: vLLM's default"),
        "vllm.host_pool_gib": Provenance("derived", f"{per_replica} request(s) x cdiv({context}, 64) + 2 = {blocks} "
                                         f"host blocks of {stride} B, in whole MiB"),
        "vllm.shared_host_pool": Provenance("derived", "vLLM shares the pool of TP > 1 with the mp executor"
                                            if shared else "TP 1: each rank allocates its own pool"),
        "vllm.distributed_executor_backend": Provenance("derived", "mp: the shared pool needs it" if shared else
                                                        "null: vLLM's default"),
        "vllm.eager_host_mirror": Provenance("default", "vLLM's default (true)"),
    })
    return prov


__all__ = ["as_search_pool", "to_vllm"]
