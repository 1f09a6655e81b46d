"""Rendering of ``sactool profile show|validate``."""

from __future__ import annotations

from sactool.render import stdout_console
from sactool.units import format_bytes


def render_profile(p, path) -> None:
    """The settings with their provenance, then the main predictions."""
    import textwrap

    from rich.text import Text

    con = stdout_console()
    con.print(f"[bold]{path}[/bold]  {p.kind} v{p.schema_version}, sactool {p.sactool_version}, "
              f"{p.created_at}, host {p.machine.get('hostname', '?')}")
    con.print(f"model {p.model.name} ({p.model.hf_id}, {p.model.num_layers} layers, top_k {p.model.index_topk})",
              markup=False)
    from sactool.render.tune import gpu_line

    req = p.request or {}
    con.print(gpu_line(req.get("gpu"), req.get("gpu_from"), (req.get("gpu_kv_budget") or {}).get("bytes_per_gpu"),
                       req.get("gpu_kv_budget")) if req.get("gpu") else
              "GPU: not recorded (an example, or a profile from before tune recorded it)", markup=False)
    from sactool.profile import settings_fields

    # one block per setting, not a table: a 4-column table left the detail a strip 27 characters wide at
    # 100 columns (227 lines for 34 settings at 80, digests and paths split mid-token). The name is what one
    # types to change it, whole at the line's start; the detail wraps at spaces under it. A vLLM profile:
    # pool, hisparse's top_k and buffer, vllm.
    for key in settings_fields(p.engine):
        sect, name = key.split(".", 1)
        prov = p.provenance.get(key)
        head = Text(key, style="bold")
        head.append(f" = {_yaml_value(name, getattr(getattr(p, sect), name))}", style="")
        head.append(f"  ({prov.source if prov else 'no provenance'})", style="dim")
        con.print(head)
        if prov and prov.detail:
            for line in textwrap.wrap(prov.detail, width=max(20, con.width - 4), break_on_hyphens=False):
                con.print("    " + line, markup=False, highlight=False)
    pr = p.predictions or {}
    if pr.get("fetch_time_per_token_s") is not None:
        from sactool.render.tune import _t as fetch_time  # the same figure as tune's summary, spelled alike

        con.print(f"predicted fetch time per token {fetch_time(pr['fetch_time_per_token_s'])} at concurrency "
                  f"{pr.get('design_concurrency')}; GPU {format_bytes(pr.get('gpu_bytes_per_rank'))} per rank; "
                  f"pool {format_bytes(pr.get('host_pool_bytes'))} in all", markup=False)
    from sactool.profile import workload_summary

    con.print(f"hit rates from: {workload_summary(p.workload)}", markup=False)
    b = p.bench or {}
    if b.get("bandwidth_bytes_per_s"):
        fig = b.get("fetch_figure") or ("CPU gather (a CPU proxy for the GPU swap-in; profile predates the label)")
        con.print(f"fetch figure: {fig}: {b['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s", markup=False)
    if p.pool.stand_in:
        con.print("pool: a DRAM node stood in for CXL when this profile was tuned", markup=False)
    f = getattr(p, "fleet", None)
    if f:
        others = [h for h in f.get("hosts_sharing", []) if h != f.get("host")]
        con.print(f"fleet: host {f.get('host')} gets {format_bytes(f.get('share_bytes'))} of "
                  f"{format_bytes(f.get('device_capacity_bytes'))} on {f.get('memory_node')}"
                  + (f" (shared with {', '.join(others)})" if others else "")
                  + f"; gather {(f.get('bandwidth_bytes_per_s') or 0) / 1e9:.2f} GB/s with {f.get('active_ranks')} "
                  f"ranks fetching at once; from {f.get('record')} ({f.get('bandwidth_source')})", markup=False)


def _yaml_value(name: str, v) -> str:
    """A setting as the profile's YAML spells it (null, true, [dax0.0, dax1.0]), a size also in IEC units."""
    import yaml

    if isinstance(v, tuple):
        v = list(v)
    if isinstance(v, str):
        return v
    text = yaml.safe_dump(v, default_flow_style=True, width=1 << 20).strip()
    text = text.removesuffix("...").strip()
    if name.endswith("_bytes") and isinstance(v, int) and not isinstance(v, bool):
        text += f" ({format_bytes(v)})"
    return text


def render_valid(p, path, fmt: str = "table") -> None:
    """The verdict of ``profile validate`` (only valid profiles get here: invalid ones raise)."""
    import sys

    if fmt != "table":
        from sactool.render import emit_data

        emit_data({"path": str(path), "valid": True, "kind": p.kind, "schema_version": p.schema_version,
                   "model": p.model.name, "provenance_entries": len(p.provenance)}, fmt)
        return
    from sactool.render import printable

    sys.stdout.write(printable(f"{path}: valid {p.kind} (schema {p.schema_version}), model {p.model.name}, "
                     f"{len(p.provenance)} provenance entries\n"))
