"""Rendering of ``sactool tune``: the summary table (stdout), progress and warnings (stderr)."""

from __future__ import annotations

from typing import Any, Callable

from sactool.render import stderr_console, stdout_console
from sactool.units import format_bytes, format_percent, format_tokens


def _t(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e6:.0f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def format_duration(s: float) -> str:
    """``42 s``, ``5 min 3 s``, ``3 h 20 min``, ``2 d 7 h``."""
    s = max(0, int(round(s)))
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "min", 60), ("min", 60, "s", 1)):
        if s >= size:
            return f"{s // size} {unit} {(s % size) // subsize} {sub}"
    return f"{s} s"


ESTIMATE_FROM_S = 60.0
"""A phase whose measured time left is at least this long gets a ``time left`` line (shorter ones
finish before the line would help); the figure in the line is measured, this only decides to speak."""


class _Estimates:
    """Time left per phase, measured: the second item's duration (the first pays numba compiles and
    buffer allocation) times the items left — said once per phase, as hyperfine's ETA, in a line that
    stays when stderr is no terminal."""

    def __init__(self, say: Callable[[str], None], clock: Callable[[], float]):
        self.say, self.clock = say, clock
        self.first: dict[str, float] = {}
        self.said: set[str] = set()

    def __call__(self, label: str, done: int, total: int) -> None:
        now = self.clock()
        if done == 1:
            self.first[label] = now
        elif done == 2 and total > 2 and label in self.first and label not in self.said:
            each = now - self.first[label]
            left = each * (total - 2)
            if left >= ESTIMATE_FROM_S:
                self.said.add(label)
                self.say(f"tune {label}: 2 of {total} done, {format_duration(each)} each (measured): about "
                         f"{format_duration(left)} left; Ctrl-C keeps what is finished, --resume continues")


def progress_reporter(clock: Callable[[], float] | None = None) -> tuple[Callable[[str, int, int], None],
                                                                        Callable[[], None]]:
    """A rich progress display on stderr, with the time left of each phase (bar and a measured
    estimate line, :class:`_Estimates`); returns (callback, close)."""
    import time

    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    from sactool.render import compile_notice, quiet

    prog = Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=stderr_console(), transient=True)
    tasks: dict[str, Any] = {}
    names = {"gather": "measure", "simulate": "simulate", "refine": "refine"}
    unhook = compile_notice(lambda msg: prog.console.print(msg, markup=False, highlight=False))
    estimate = _Estimates(lambda msg: None if quiet() else prog.console.print(msg, markup=False, highlight=False),
                          clock or time.monotonic)

    def cb(label: str, done: int, total: int) -> None:
        if not tasks:
            prog.start()
        if label not in tasks:
            tasks[label] = prog.add_task(names.get(label, label), total=total)
        prog.update(tasks[label], completed=done, total=total)
        estimate(label, done, total)

    def close() -> None:
        unhook()
        if tasks:   # a display never started prints nothing (no blank line before an early error)
            prog.stop()

    return cb, close


def warning_lines(warnings, shown: int = 3) -> list[tuple[str, str, str | None]]:
    """(code, message, hint), one per warning kind, as bench groups its warnings: a kind given
    once keeps its line; the same message several times (each host of a fleet, say) is one line
    saying how often; up to ``shown`` different messages of one kind are joined into one line,
    more give the first and how many others there are. The result's ``warnings`` (``--format
    json``) keep every one."""
    groups: dict[str, list[dict]] = {}
    for w in warnings:
        groups.setdefault(w["code"], []).append(w)
    out = []
    for code, ws in groups.items():
        msgs = list(dict.fromkeys(w["message"] for w in ws))
        if len(msgs) > shown:
            msg = f"{msgs[0]}; and {len(msgs) - 1} more of this kind ({code}: see --format json)"
        else:
            msg = "; ".join(msgs) + (f" ({len(ws)} times)" if len(ws) > 1 and len(msgs) == 1 else "")
        out.append((code, msg, ws[0].get("hint")))
    return out


def render_warnings(warnings) -> None:
    from sactool.render import print_warnings

    print_warnings(warning_lines(warnings), stderr_console())


CONTEXT_COLUMNS = ("context", "hit\nrate", "fetch\n/token", "fetch time\n/token", "max\nconcurrency",
                   "profile\nholds", "RDMA prefix\n/request")
"""Headers of the per-context table, broken where a narrow terminal may break them: at 80 columns
single-line headers were cut to 'fetch/to…', 'concurre…', 'prefix/r…'."""


def _context_table(s: dict):
    """(table, rows beyond the profile): one row per requested context length."""
    from rich.table import Table

    t = Table(title=None, show_edge=False, pad_edge=False)
    for col in CONTEXT_COLUMNS:
        t.add_column(col, justify="right", no_wrap=True)
    beyond = []
    for row in s["per_context"]:
        if row.get("hit_rate") is None:   # not in the profile: fewer than the design concurrency fit
            t.add_row(format_tokens(row["context_tokens"]), "-", "-", "-", str(row["max_concurrency"]), "-",
                      format_bytes(row["rdma_full_prefix_bytes_per_request"]))
            beyond.append(row)
            continue
        t.add_row(format_tokens(row["context_tokens"]), format_percent(row["hit_rate"]),
                  format_bytes(row["fetch_bytes_per_token"]), _t(row["fetch_time_per_token_s"]),
                  str(row["max_concurrency"]), str(row["profile_holds"]),
                  format_bytes(row["rdma_full_prefix_bytes_per_request"]))
    return t, beyond


def _pool_cell(p: dict) -> str:
    """A pool target with its capacity: pinned by ``--pool-bytes``, else a node's free memory, a DAX
    device's size."""
    pinned = str(p.get("capacity_source") or "").startswith("--pool-bytes")
    what = "pinned by --pool-bytes" if pinned else "free" if p["name"].startswith("node") else "device size"
    return f"{p['name']} ({format_bytes(p['capacity_bytes'])} {what})"


BUFFER_COLUMNS = ("device_buffer\nsize", "misses\n/step/layer", "fetch time\n/token", "vs 4096", "GPU\n/rank", "fits")
"""Headers of the by-hot-buffer-size table, broken where an 80-column terminal may break them."""


def _why_not(row: dict) -> str:
    """``GPU`` / ``pool`` / ``ratio`` (what a row that does not fit runs out of), or '' when it fits."""
    if row.get("feasible"):
        return ""
    text = row.get("why_infeasible") or ""
    kinds = [k for k, key in (("GPU", "GPU:"), ("pool", "pool:"), ("ratio", "ratio ")) if key in text]
    return "+".join(kinds) or "see --format json"


def gpu_line(name, origin, budget_bytes, budget=None) -> str:
    """``GPU: h100 (probe sees 8 x h100); KV budget 30.12 GiB per GPU (0.85 x … - … weights/GPU)`` — the GPU
    a profile was planned for and where it came from, as tune's summary and ``profile show`` print it."""
    origin = origin or {}
    text = f"GPU: {name or '-'}"
    if origin.get("detail"):
        text += f" ({origin['detail']})"
    if budget_bytes is not None:
        text += f"; KV budget {format_bytes(budget_bytes)} per GPU"
        if (budget or {}).get("detail"):
            text += f" = {budget['detail']}" if (budget or {}).get("source") == "derived" else f" ({budget['detail']})"
    return text


def _chosen(con, result, s) -> None:
    """The chosen settings: SGLang's HiSparse knobs, or (tune --engine vllm) vLLM's."""
    cfg, v = s["hisparse_config"], s.get("vllm")
    if v:
        con.print(f"chosen for vLLM: device_buffer_size {result.profile.hisparse.device_buffer_size}, tp {v['tp_size']} "
                  f"x dp {v['dp_size']}, host_pool_gib {v['host_pool_gib']} "
                  f"({format_bytes(s['host_pool_bytes_per_rank'])} per "
                  f"{'DP replica, shared by its TP ranks' if v['shared_host_pool'] else 'rank'}), max_num_seqs "
                  f"{v['max_num_seqs']}, max_model_len {v['max_model_len']}, pools "
                  f"{', '.join(result.profile.pool.rank_targets)}", markup=False)
        _reason(con, s)
        return
    con.print(f"chosen: device_buffer_size {cfg['device_buffer_size']}, host_to_device_ratio "
              f"{cfg['host_to_device_ratio']}, swap_in_block_size {cfg['swap_in_block_size']}, prefetch "
              f"{'on' if s['prefetch'] else 'off'}, placement {s['placement']}")
    sw = s.get("swap_in")
    if sw:
        con.print(f"swap_in_block_size {sw['block_size']}: {sw['why']}", markup=False)
    _reason(con, s)


def _reason(con, s) -> None:
    """Why this buffer for this many requests per rank (``requests_vs_buffer``)."""
    rq = s.get("requests_vs_buffer")
    if rq:
        con.print(f"device_buffer_size {rq['device_buffer_size']} for {rq['requests_per_rank']} request(s) per rank: "
                  f"{rq['why']}", markup=False)


def render_tune(result) -> None:
    """The short summary: what was chosen, what it predicts, why the others lost, the path."""
    from rich.table import Table

    s = result.summary
    con = stdout_console()
    pool = ", ".join(_pool_cell(p) for p in s["pool"])
    held = s.get("concurrency", s["design_concurrency"])
    con.print(f"[bold]{s['model']}[/bold]  kv {s['kv_cache_dtype']} ({s['record_bytes']} B records x "
              f"{s['layers']} layers)  tp {s['tp']} attn-dp {s['attn_dp']}  design concurrency "
              f"{s['design_concurrency']}" + (f", the profile holds {held}" if held != s["design_concurrency"] else ""))
    con.print(f"pool: {pool}" + ("  [yellow](stand-in for CXL: DRAM figures)[/yellow]" if s["stand_in"] else ""))
    con.print(gpu_line(s.get("gpu"), s.get("gpu_from"), s.get("gpu_kv_budget_bytes"), s.get("gpu_kv_budget")),
              markup=False)
    bw = s.get("gather_bandwidth_bytes_per_s")
    fig = s.get("fetch_figure") or "gather"
    con.print(f"fetch figure: {fig}: {bw / 1e9:.2f} GB/s  ({s.get('gather_detail')})" if bw else "fetch figure: -",
              markup=False)
    v = s.get("vllm")
    _chosen(con, result, s)
    con.print(f"predicted fetch time per token {_t(s['fetch_time_per_token_s'])} (mean over design contexts); "
              f"GPU {format_bytes(s['gpu_bytes_per_rank'])} per rank (hot buffers "
              f"{format_bytes(s['hot_buffer_bytes_per_rank'])} + indexer keys "
              f"{format_bytes(s['index_key_bytes_per_rank'])}) of {format_bytes(s['gpu_kv_budget_bytes'])}; "
              f"pool {format_bytes(s['host_pool_bytes_per_rank'])} per " + ("pool" if v else "rank"))
    from sactool.profile import workload_summary

    con.print(f"hit rates from: {workload_summary(s.get('workload'))}", markup=False)
    t, beyond = _context_table(s)
    con.print(t)
    for row in beyond:
        n, ctx, c = row["max_concurrency"], format_tokens(row["context_tokens"]), s["design_concurrency"]
        why = ("not one such request fits per rank (see the warning)" if not n else
               f"at most {n} such requests fit, fewer than the design concurrency {c}" if n < c else
               f"the design check (one request per rank with top_k-slot hot buffers) failed (see the warning), "
               f"though the chosen device_buffer_size would hold {n}")
        con.print(f"{ctx}: not in the profile (its context_length stops below): {why}", markup=False)
    _by_buffer(con, s)
    _by_requests(con, s)
    _sensitivity(con, s)
    a = Table(title=None, show_edge=False)
    for col in ("alternative", "fetch time/token", "GPU/rank", "why it lost"):
        a.add_column(col)
    for alt in result.alternatives:
        a.add_row(alt["candidate"], _t(alt["fetch_time_per_token_s"]), format_bytes(alt["gpu_bytes_per_rank"]),
                  alt["reason"])
    con.print(a)
    con.print("engine constraints (not tuned): " + "; ".join(
        f"{e['setting']}={e['value']}" for e in s["engine_constraints"]), markup=False)
    sims = getattr(result, "simulations", None) or {}
    shared = (f"; hot-buffer simulations: {sims.get('run', 0)} run, {sims.get('reused', 0)} reused from an earlier "
              "host's identical inputs" if sims.get("reused") else "")
    con.print(f"{result.evaluated} candidates evaluated of {result.space}; {result.elapsed_s:.1f} s{shared}")
    if result.path:
        con.print(f"profile: {result.path}", markup=False)


def _by_buffer(con, s) -> None:
    """The by-size table (each evaluated ``device_buffer_size`` at the design's requests) and how its fetch
    time was charged."""
    from rich.table import Table

    bb = s.get("by_buffer") or []
    if bb:
        t4 = min((r["fetch_time_per_token_s"] for r in bb if r["device_buffer_size"] == 4096), default=None)
        b = Table(title="by hot-buffer size (best candidate of each; gain = fetch time saved per token vs 4096)",
                  show_edge=False, title_justify="left")
        for col in BUFFER_COLUMNS:
            b.add_column(col, justify="right", no_wrap=True)
        first_no: dict[str, dict] = {}
        for r in bb:
            vs = (f"{_t(t4 - r['fetch_time_per_token_s'])}" if t4 is not None and r["device_buffer_size"] != 4096
                  else "")
            why = _why_not(r)
            if why:
                first_no.setdefault(why, r)
            b.add_row(f"{r['device_buffer_size']}" + (" (chosen)" if r["chosen"] else ""),
                      f"{r['misses_per_step_per_layer']:.1f}", _t(r["fetch_time_per_token_s"]), vs,
                      format_bytes(r["gpu_bytes_per_rank"]), f"no: {why}" if why else "yes")
        con.print(b)
        for why, r in first_no.items():   # the reason on screen, not only in --format json (issue 27 N23)
            con.print(f"fits no: {why} — at {r['device_buffer_size']} slots, {r.get('why_infeasible')}", markup=False)
        rq = s.get("requests_vs_buffer") or {}
        if rq and rq["requests_per_rank"] != rq["design_requests_per_rank"]:
            con.print(f"(sizes at the design's {rq['design_requests_per_rank']} requests per rank; the chosen "
                      f"{rq['device_buffer_size']} slots hold {rq['requests_per_rank']}: see requests_vs_buffer)",
                      markup=False)
        pm = s.get("per_miss_cost") or {}
        if pm.get("applied"):
            con.print(f"fetch time includes {pm['per_missed_record_s'] * 1e9:.0f} ns per missed record per layer, paid "
                      f"by DRAM and CXL alike: {pm['source']}, {pm['file']}", markup=False)
        elif pm:
            con.print(f"fetch time without the per-missed-record cost: {pm['why']}", markup=False)


def _by_requests(con, s) -> None:
    """Requests per rank against hot-buffer slots (``requests_vs_buffer``): each request count's largest
    buffer, its fetch per step and, with a measured step, the step and tokens/s per rank."""
    from rich.table import Table

    rows = (s.get("requests_vs_buffer") or {}).get("by_requests") or []
    if len(rows) < 2:
        return
    t = Table(title="requests per rank against hot-buffer slots (the GPU budget holds both)", show_edge=False)
    for col in ("requests/rank", "device_buffer_size", "fetch/step", "step", "tokens/s/rank"):
        t.add_column(col)
    for r in rows:
        t.add_row(f"{r['requests_per_rank']}" + (" (chosen)" if r["chosen"] else ""), str(r["device_buffer_size"]),
                  _t(r["fetch_time_per_step_s"]), _t(r["step_s"]),
                  "-" if r["tokens_per_s_per_rank"] is None else f"{r['tokens_per_s_per_rank']:.1f}")
    con.print(t)


def _sensitivity(con, s) -> None:
    """The sensitivity row (misses x1/x2/x5/x10: which buffer, at what fetch time) and, after
    ``--observed``, what the workload was refit on."""
    from rich.table import Table

    rows = s.get("miss_sensitivity") or []
    if rows:
        t = Table(title="if misses are k x the model's (the workload model is tune's least certain input)",
                  show_edge=False)
        for col in ("misses", "buffer", "requests\n/rank", "hit rate", "fetch\n/token", "GPU/rank"):
            t.add_column(col, justify="right", no_wrap=True)
        t.add_column("why")
        for r in rows:
            t.add_row(f"x{r['miss_factor']:g}", str(r["device_buffer_size"]), str(r.get("requests_per_rank", "-")),
                      "-" if r["hit_rate"] is None else f"{r['hit_rate']:.2%}", _t(r["fetch_time_per_token_s"]),
                      format_bytes(r["gpu_bytes_per_rank"]), r["why"])
        con.print(t)
    refit = (s.get("workload") or {}).get("refit")
    if refit:
        o = refit["observation"]
        con.print(f"refit to {o['source']} ({o['naming']}, {o['window']}): miss rate {refit['observed_miss_rate']:.2%} "
                  f"at {refit['device_buffer_size']} slots = {refit['observed_over_model']:.2f}x the model's "
                  f"{refit['model_miss_rate']:.2%}; rate_scale {refit['rate_scale']:.3g} simulates "
                  f"{refit['refit_miss_rate']:.2%}; {refit['agreement']}", markup=False)


def render_fleet_tune(results) -> None:
    """One block per host: its share of the pool and bandwidth, then the usual summary."""
    con = stdout_console()
    for r in results:
        f = r.profile.fleet
        others = [h for h in f["hosts_sharing"] if h != f["host"]]
        con.print(f"[bold]host {f['host']}[/bold]: {format_bytes(f['share_bytes'])} of {f['memory_node']} "
                  f"({format_bytes(f['device_capacity_bytes'])}"
                  + (f" shared with {', '.join(others)}" if others else ", not shared") + f"); gather "
                  f"{f['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s with all {f['active_ranks']} ranks fetching "
                  f"(aggregate {f['aggregate_bytes_per_s'] / 1e9:.2f} GB/s)", markup=True)
        render_tune(r)
        con.print("")
