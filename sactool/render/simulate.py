"""Tables and the ``--explain`` view of ``sactool simulate`` (its ``--plot`` figure:
:mod:`sactool.render.simfigure`).

The explain view attributes each ratio to its drivers: per generated token, the time of compute,
the HiSparse path's fixed cost, the swap-in (bytes moved from the pool/DRAM) and the stalls of
synchronous RDMA fetches; per request, TTFT's admission wait (capacity cap), NIC queueing, transfer
(bytes moved), prefill and first decode step (cold hot-buffer fill + compute).
"""

from __future__ import annotations

from sactool.units import format_bytes, format_percent, format_tokens

NAMES = {"sac": "SAC/CXL", "rdma": "RDMA pool", "dram": "local DRAM"}


def _ms(x):
    return "-" if x is None else (f"{x * 1e3:.1f} ms" if x < 10 else f"{x:.1f} s")


def _x(v):
    return "-" if v is None else f"{v:.2f}x"


def render_simulation(res, *, explain: bool = False, sensitivity=None) -> None:
    from rich.table import Table

    from sactool.render import stdout_console

    con = stdout_console()
    if not con.is_terminal:
        con.width = 150   # piped: keep rows on one line instead of rich's 80-column default
    con.print(f"[bold]{res.platform}[/bold]: {res.model}, {res.kv_dtype} KV ({res.record_bytes} B records), "
              f"{res.case.replace('_', ' ')}, {res.output_tokens} output tokens")
    concs = sorted({p.concurrency for p in res.points})
    ctxs = sorted({p.context_tokens for p in res.points})
    t = Table(title="per placement", show_lines=False)
    for col in ("context", "conc", "placement", "TTFT mean", "TTFT p99", "TBT mean", "tok/s", "hit rate",
                "local KV needed", "GPU buffers+keys/GPU", "max conc"):
        t.add_column(col, justify="left" if col in ("placement",) else "right")
    for ctx in ctxs:
        for c in concs:
            for p in res.points:
                if (p.context_tokens, p.concurrency) != (ctx, c):
                    continue
                if not p.fits:
                    t.add_row(format_tokens(ctx), str(c), NAMES[p.placement], "does not fit", "", "", "", "",
                              format_bytes(p.local_memory_bytes), format_bytes(p.gpu_hot_buffer_bytes_per_gpu),
                              str(p.max_concurrency))
                    continue
                t.add_row(format_tokens(ctx), str(c), NAMES[p.placement], _ms(p.ttft_mean_s), _ms(p.ttft_p99_s),
                          _ms(p.tbt_mean_s), f"{p.throughput_tokens_per_s:.0f}",
                          format_percent(p.hit_rate),
                          format_bytes(p.local_memory_bytes), format_bytes(p.gpu_hot_buffer_bytes_per_gpu),
                          f"{p.max_concurrency}" + (" (capped)" if p.capped else ""))
    con.print(t)
    r = Table(title="ratios (SAC vs RDMA pool, SAC vs local DRAM)")
    for col in ("context", "conc", "throughput SAC/RDMA", "TTFT RDMA/SAC", "TBT RDMA/SAC", "throughput SAC/DRAM"):
        r.add_column(col, justify="right")
    v = res.validation or {}
    per = {int(k): x for k, x in (v.get("per_context") or {}).items()}

    def ref_row(label, d):
        r.add_row(label, "", _x(d.get("sac_vs_rdma_throughput")), _x(d.get("rdma_vs_sac_ttft")),
                  _x(d.get("rdma_vs_sac_tbt")),
                  "-" if d.get("sac_vs_dram_throughput") is None else f"{d['sac_vs_dram_throughput']:.0%}",
                  style="dim")

    for x in res.ratios:
        r.add_row("mean" if x.context_tokens is None else format_tokens(x.context_tokens), str(x.concurrency),
                  _x(x.sac_vs_rdma_throughput), _x(x.rdma_vs_sac_ttft), _x(x.rdma_vs_sac_tbt),
                  "-" if x.sac_vs_dram_throughput is None else f"{x.sac_vs_dram_throughput:.0%}")
        if x.context_tokens in per:
            ref_row("  raw logs", per[x.context_tokens])
    if v:
        ref_row("paper", v)
    con.print(r)
    if explain:
        render_explain(res, con)
        render_miss_check(getattr(res, "miss_check", None) or {}, con)
        if sensitivity is not None:
            render_sensitivity(sensitivity, con)
    for n in res.notes:
        con.print(f"[dim]note: {n}[/dim]")


def _render_ttft_vs_logs(res, con) -> None:
    """Absolute TTFT, model vs the platform's logged figures (validation.ttft_s): whole run set,
    first burst, the rest — a ratio can be off because either of its sides is."""
    from rich.table import Table

    logs = (res.validation or {}).get("ttft_s") or {}
    if not logs:
        return
    t = Table(title="TTFT (s), model vs the authors' logs: run set mean | first burst | later requests")
    for col in ("context", "conc", "placement", "model", "logs", "model - logs"):
        t.add_column(col, justify="right")
    rows = 0
    for p in res.points:
        place = logs.get(p.placement) or {}
        ref = place.get(p.context_tokens) or place.get(str(p.context_tokens))
        if not p.fits or not ref or p.concurrency != logs.get("concurrency"):
            continue
        rows += 1
        b = p.breakdown
        m = (p.ttft_mean_s, b.get("first_wave_ttft_s", 0.0), b.get("later_ttft_s", 0.0))
        r = (ref.get("mean"), ref.get("first_wave"), ref.get("later"))
        t.add_row(format_tokens(p.context_tokens), str(p.concurrency), NAMES[p.placement],
                  " | ".join(f"{x:.2f}" for x in m), " | ".join("-" if x is None else f"{x:.2f}" for x in r),
                  " | ".join("-" if y is None else f"{(x - y) / y:+.0%}" for x, y in zip(m, r)))
    if rows:
        con.print(t)


def drivers(res, context: int, concurrency: int) -> list[tuple[str, dict[str, float]]]:
    """Rows (driver, {placement: value}) for one point; values in seconds or bytes."""
    pts = {p.placement: p for p in res.points
           if p.context_tokens == context and p.concurrency == concurrency and p.fits}
    rows: list[tuple[str, dict[str, float]]] = []

    def row(name, key, scale=1.0):
        rows.append((name, {k: p.breakdown.get(key, 0.0) * scale for k, p in pts.items()}))

    row("TBT: GPU compute", "compute_s")
    row("TBT: HiSparse per-step cost", "overhead_s")
    row("TBT: swap-in (bytes moved)", "swapin_s")
    row("TBT: fetch stalls (sync RDMA)", "stall_s")
    row("TBT: extends of arrivals", "extend_stall_s")
    row("TTFT: front-end queue", "ttft_frontend_s")
    row("TTFT: admission wait (cap/step)", "ttft_admission_wait_s")
    row("TTFT: lockstep wait (fetches)", "ttft_lockstep_wait_s")
    row("TTFT: extend (first token)", "ttft_extend_s")
    row("TTFT: output held (front-end)", "ttft_delivery_s")
    row("TTFT: NIC queue (queueing)", "ttft_fetch_queue_s")
    row("TTFT: fetch transfer (bytes)", "ttft_fetch_s")
    row("TTFT: prefill + pool write", "ttft_prefill_s")
    row("TTFT: first step (cold buffer)", "ttft_first_step_s")
    row("first token -> own fetch done", "fetch_after_first_token_s")
    row("bytes from pool per token", "pool_bytes_per_token")
    row("bytes over NIC per request", "nic_bytes_per_request")
    # rows that are zero everywhere (mechanisms of the other model) are left out
    return [(n, v) for n, v in rows if any(abs(x) > 0 for x in v.values()) or n.startswith("bytes")]


def _parts(rows, prefix: str, a: str, b: str) -> str:
    """'+34.0 ms fetch stalls, +3.5 ms swap-in' — the components of b − a, largest first."""
    diffs = [(v.get(b, 0.0) - v.get(a, 0.0), n.split(": ", 1)[1]) for n, v in rows if n.startswith(prefix)]
    diffs = sorted((d for d in diffs if abs(d[0]) >= 5e-5), key=lambda d: -abs(d[0]))
    return ", ".join(f"{d * 1e3:+.1f} ms {name}" if abs(d) < 10 else f"{d:+.2f} s {name}" for d, name in diffs) or "none"


def summary(res, ctx: int, conc: int, rows) -> list[str]:
    """One line per ratio: its value and the per-token / per-request components behind it."""
    ratio = next((x for x in res.ratios if x.context_tokens == ctx and x.concurrency == conc), None)
    if ratio is None:
        return []
    vals = dict(rows)
    out = []
    if ratio.rdma_vs_sac_tbt is not None:
        nic = vals["bytes over NIC per request"].get("rdma", 0.0)
        out.append(f"TBT RDMA/SAC {ratio.rdma_vs_sac_tbt:.2f}x (throughput SAC/RDMA "
                   f"{ratio.sac_vs_rdma_throughput:.2f}x): RDMA minus SAC per token = {_parts(rows, 'TBT', 'sac', 'rdma')}"
                   f"; RDMA moves {format_bytes(nic)} per request over its NIC")
    if ratio.rdma_vs_sac_ttft is not None:
        out.append(f"TTFT RDMA/SAC {ratio.rdma_vs_sac_ttft:.2f}x: RDMA minus SAC per request = "
                   f"{_parts(rows, 'TTFT', 'sac', 'rdma')}")
    if ratio.sac_vs_dram_throughput is not None:
        pool = vals["bytes from pool per token"]
        out.append(f"throughput SAC/DRAM {ratio.sac_vs_dram_throughput:.0%}: SAC minus DRAM per token = "
                   f"{_parts(rows, 'TBT', 'dram', 'sac')}; both gather {format_bytes(pool.get('sac', 0.0))} "
                   "per token, SAC over the CXL path")
    return out


HARNESS_TEXT = {
    "e2e_bench": "harness e2e_bench (the authors' test/cxl_utils/e2e_bench.py on SGLang): the first `concurrency` "
                 "requests leave in one burst, each completion sends the next, each run set has its own request "
                 "count; throughput = output tokens / round duration, TTFT = first streamed chunk, TBT = mean gap "
                 "between chunks; the server tokenizes POSTs one at a time and holds outputs while it does; ranks "
                 "run extends and decode steps in lockstep, under SGLang's overlap scheduler: an iteration "
                 "receives, fetches (RDMA), launches the next forward, then processes the previous one, so a "
                 "batch's first tokens come out one iteration after its launch (after that iteration's fetches) "
                 "and its requests enter staging then; the RDMA pool fetches each full prefix after the "
                 "request's first token, one after the other per rank, stalling decode",
    "steady": "harness steady: closed loop with first arrivals spread over one request lifetime; throughput "
              "over the saturated window",
}


def render_explain(res, con) -> None:
    from rich.table import Table

    con.print(HARNESS_TEXT.get(res.inputs.get("harness", "steady"), ""))
    _render_ttft_vs_logs(res, con)
    ovh = res.inputs.get("hisparse_overhead_by_requests_per_rank_s") or {}
    for ctx, tab in sorted(ovh.items(), key=lambda kv: int(kv[0])):
        con.print(f"HiSparse per-step cost at {format_tokens(int(ctx))} (measured DRAM step - compute - modelled "
                  "DRAM swap-in), by requests per rank: "
                  + ", ".join(f"{b}: {v * 1e3:.1f} ms" for b, v in sorted(tab.items())))

    for ctx in sorted({p.context_tokens for p in res.points}):
        for c in sorted({p.concurrency for p in res.points}):
            rows = drivers(res, ctx, c)
            if not rows or not rows[0][1]:
                continue
            t = Table(title=f"drivers at {format_tokens(ctx)} context, concurrency {c}")
            t.add_column("driver")
            places = [k for k in ("sac", "rdma", "dram") if k in rows[0][1]]
            for k in places:
                t.add_column(NAMES[k], justify="right")
            if "sac" in places and "rdma" in places:
                t.add_column("share of RDMA-SAC gap", justify="right")
            tbt_gap = sum(v.get("rdma", 0) - v.get("sac", 0) for n, v in rows if n.startswith("TBT"))
            if not any(n.startswith("TBT") for n, _ in rows):   # pragma: no cover - always present
                continue
            ttft_gap = sum(v.get("rdma", 0) - v.get("sac", 0) for n, v in rows if n.startswith("TTFT"))
            for name, vals in rows:
                is_bytes = name.startswith("bytes")
                if name.startswith("first token"):
                    cells = [_ms(vals[k]) for k in places] + ([""] if "sac" in places and "rdma" in places else [])
                    t.add_row(name, *cells)
                    continue
                cells = [format_bytes(vals[k]) if is_bytes else _ms(vals[k]) for k in places]
                if "sac" in places and "rdma" in places:
                    gap = tbt_gap if name.startswith("TBT") else ttft_gap if name.startswith("TTFT") else None
                    d = vals["rdma"] - vals["sac"]
                    cells.append("" if not gap else f"{d / gap:.0%}")
                t.add_row(name, *cells)
            caps = [f"{NAMES[p.placement]} capped at {p.max_concurrency}" for p in res.points
                    if p.context_tokens == ctx and p.concurrency == c and p.capped]
            con.print(t)
            for line in summary(res, ctx, c, rows):
                con.print(line)
            if caps:
                con.print("capacity cap: " + "; ".join(caps))


def _misses(v):
    return "-" if v is None else f"{v:.0f}"


def _gap(v):
    return "-" if v is None else f"{v * 1e3:+.1f} ms"


def render_miss_check(chk: dict, con) -> None:
    """The model's hot-buffer miss volume next to what the authors' logs imply (a validation view:
    ``simulate.misscheck``; nothing in it is an input)."""
    from rich.table import Table

    per = chk.get("per_context") or {}
    if not per:
        return
    b = chk.get("requests_per_rank")
    t = Table(title=f"validation, not an input: hot-buffer misses per layer per request per step, and the SAC-DRAM "
                    f"decode step at {b} requests per rank (logs: the authors' dc_0502 runs)")
    for col in ("context", "model misses", "first touches", "SAC-DRAM step: model", "logs",
                "misses the logs' step needs", "1 CXL device - 2: model", "logs"):
        t.add_column(col, justify="right")
    for ctx, r in sorted(per.items(), key=lambda kv: int(kv[0])):
        t.add_row(format_tokens(int(ctx)), _misses(r.get("model_misses_per_layer")),
                  _misses(r.get("first_touch_misses_per_layer")), _gap(r.get("model_gap_s")),
                  _gap(r.get("logs_gap_s")), _misses(r.get("implied_misses_per_layer")),
                  _gap(r.get("model_one_minus_two_devices_s")), _gap(r.get("logs_one_minus_two_devices_s")))
    con.print(t)
    sw = chk.get("by_requests_per_rank") or {}
    if sw.get("rows"):
        rows = sorted(sw["rows"].items(), key=lambda kv: int(kv[0]))
        con.print(f"at {format_tokens(int(sw['context_tokens']))} by requests per rank (logs: the p2 sweep): "
                  + "; ".join(f"{n}: logs {_gap(r['logs_gap_s'])}, model {_gap(r['model_gap_s'])}, needs "
                              f"{_misses(r['implied_misses_per_layer'])} misses" for n, r in rows))
    if chk.get("misses_from") in ("calibrated", "filler"):
        con.print("model misses: " + ("the filler workload's LRU replay, its parameters " if chk["misses_from"] == "filler"
                                      else "") + "fitted on the platform's calibration runs (simulate.calibration: the dc_0502 / "
                  "dc_0417 p2 sweeps at c != 64, both buffers, DRAM and SAC), for the prompt those runs decoded; "
                  "the c = 64 logs here were never in the fit. First touches (ShareGPT union) are shown for "
                  "scale only. SAC/DRAM is decided by misses x (record bytes over the CXL device share + the "
                  "per-missed-record cost both placements pay).")
        return
    con.print("model misses: steady LRU replay of the workload model; first touches: the misses no cache avoids "
              "(published per-layer union over 1000 steps, ShareGPT prompts), a lower bound; the rest of the "
              "model's misses come from its revisit knobs (revisit, revisit_window), which no published "
              "statistic constrains. SAC/DRAM is decided by misses x record bytes over the CXL device share "
              "(cxl.device_read_bytes_per_s / ranks per device); 'misses the logs' step needs' holds that "
              "bandwidth fixed. The logs' runs decoded " + str(chk.get("prompt") or "their own prompts")
              + ", not the profiled ShareGPT prompts; no top-k locality or hit rate of that prompt is published.")


def render_sensitivity(sens, con) -> None:
    """The ±delta table: each input's effect on the four mean ratios, and per ratio its top three."""
    from rich.table import Table

    from sactool.simulate.sensitivity import LABELS, RATIOS

    pct = int(round(sens.delta * 100))
    t = Table(title=f"sensitivity: each input at -{pct}% / +{pct}%, mean ratios over contexts at concurrency "
                    f"{sens.concurrency} (model rerun per cell)")
    t.add_column("input")
    for r in RATIOS:
        t.add_column(LABELS[r], justify="right")

    def cell(r, row):
        b = sens.base.get(r)
        lo, hi = row.low.get(r), row.high.get(r)
        if not b or lo is None or hi is None:
            return "-"
        f = (lambda v: f"{v:.0%}") if r == "sac_vs_dram_throughput" else (lambda v: f"{v:.2f}")
        return f"{f(lo)} / {f(hi)}"

    t.add_row("(as given)", *[("-" if sens.base.get(r) is None else
                               (f"{sens.base[r]:.0%}" if r == "sac_vs_dram_throughput" else f"{sens.base[r]:.2f}"))
                              for r in RATIOS], style="bold")
    for row in sens.rows:
        t.add_row(f"{row.name} ({row.what})", *[cell(r, row) for r in RATIOS])
    con.print(t)
    for r in RATIOS:
        top = sens.top_inputs(r)
        if top:
            con.print(f"{LABELS[r]} is most sensitive to: "
                      + "; ".join(f"{row.name} ({ch:.0%})" for row, ch in top))
