"""``bench gpu-gather``'s index streams and host-buffer layout: which records each request reads at
each step (uniform, clustered, a trace or the DSA workload model), the regions that keep the pass
over all steps beyond the GPU's L2, and the fill pattern the copies are checked against."""

from __future__ import annotations

from sactool import records
from sactool.bench.gpuoptions import LINE, MAX_INDEX_BYTES, PATTERNS
from sactool.errors import UsageError


# ---- index streams ----------------------------------------------------------------------------
def steps_for(topk: int, record_bytes: int, l2_bytes: int, requests: int) -> int:
    """Top-k steps per stream: one pass with a single request in flight reads ≥ 4× the GPU's L2
    (≥ 16 steps), within :data:`MAX_INDEX_BYTES` of uint32 indices for ``requests`` requests."""
    want = max(16, -(-4 * l2_bytes // (topk * record_bytes)))
    cap = max(16, MAX_INDEX_BYTES // (4 * topk * max(1, requests)))
    return int(min(want, cap))


def index_stream(pattern: str, *, requests: int, topk: int, steps: int, context: int, seed: int,
                 trace: str | None):
    """uint32 ``[steps, requests, topk]`` record indices within each request's prefix, and where they
    came from. Each (step, request) row holds ``topk`` distinct indices (uniform) or runs (clustered)."""
    import numpy as np

    from sactool.bench import indices

    if pattern in ("uniform", "clustered"):
        flat = indices.make(pattern, context, topk, steps * requests, seed=seed)
        src = (f"sactool.bench.indices.{pattern}(records={context}, topk={topk}, seed={seed})"
               + (f", runs of {indices.CLUSTER_RECORDS}" if pattern == "clustered" else ""))
        return flat.reshape(steps, requests, topk).astype(np.uint32), src
    if trace is None:
        from sactool.workload import generate_topk

        arr = generate_topk(context, steps, requests, topk, seed=seed)  # [steps, layers, topk]: a layer per request
        return np.ascontiguousarray(arr.astype(np.uint32)), (
            f"workload model (sactool.workload.generate_topk, context {context}, seed {seed}; one layer "
            "stream per request)")
    if str(trace).endswith(".npz"):
        from sactool.workload import load_trace

        tr = load_trace(trace)
        if tr.top_k != topk:
            raise UsageError(f"trace {trace} has top-k {tr.top_k}, not {topk}", f"pass --topk {tr.top_k}")
        if tr.context_tokens + tr.steps > context + steps:
            raise UsageError(f"trace {trace} selects tokens up to {tr.context_tokens + tr.steps - 1}, beyond the "
                             f"{context}-token prefix", f"pass --context {tr.context_tokens}")
        ly = np.arange(requests) % tr.layers      # request b replays layer b mod layers
        st = np.arange(steps) % tr.steps
        return np.ascontiguousarray(tr.indices[st][:, ly, :].astype(np.uint32)), f"trace {trace} (layers → requests)"
    flat = indices.load_trace(trace, context, topk)
    rows = flat.size // topk
    if rows == 0:
        raise UsageError(f"trace {trace} holds fewer than {topk} indices", "one top-k step per line")
    flat = flat[: rows * topk].reshape(rows, topk)
    pick = (np.arange(steps)[:, None] + np.arange(requests)[None, :]) % rows   # request b starts at row b
    return np.ascontiguousarray(flat[pick].astype(np.uint32)), f"trace {trace} (row s+b for request b)"


def region_bases(steps: int, requests: int, region_records: int, total_records: int):
    """uint64 ``[steps, requests]``: first record of request b's prefix at step s (region (s·B+b) mod n)."""
    import numpy as np

    n = total_records // region_records
    if n < 1:
        raise UsageError("the buffer holds less than one prefix", "use a larger --size or a shorter --context")
    k = (np.arange(steps, dtype=np.uint64)[:, None] * np.uint64(requests)
         + np.arange(requests, dtype=np.uint64)[None, :]) % np.uint64(n)
    return np.ascontiguousarray(k * np.uint64(region_records))


def fill_pattern(words) -> None:
    """Write every word (distinct values: index × an odd constant), chunk by chunk, so gathers read
    real, written lines (never the zero page) and a wrong record shows in the check."""
    import numpy as np

    step = 1 << 22
    for lo in range(0, words.size, step):
        hi = min(words.size, lo + step)
        words[lo:hi] = np.arange(lo, hi, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)


def expected_records(host_u8, record_bytes: int, idx_row, base: int):
    """The bytes a request should receive: records ``base + idx_row`` of the host buffer, in order."""
    import numpy as np

    recs = host_u8[: (host_u8.size // record_bytes) * record_bytes].reshape(-1, record_bytes)
    return recs[np.uint64(base) + idx_row.astype(np.uint64)]


