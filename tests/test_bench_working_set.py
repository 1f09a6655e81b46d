"""One rule for the gather's working set and its verdict (issue 28): the generated index stream reaches the
whole buffer, so the buffer rule (:mod:`sactool.bench.sizing`) and the in-cache verdict
(:mod:`sactool.bench.trust`) judge the same bytes — on this machine, on a server recording (a dry sizing:
nothing measured) and on a node too small for the rule (the hint names what will work)."""

from __future__ import annotations

import json

import pytest

from sactool.bench.sizing import CACHE_MULTIPLE
from sactool.cli import main

MiB, GiB = 1 << 20, 1 << 30


def test_default_gather_plan_here_clears_the_rule_or_says_what_will(capsys):
    """This machine, whatever its cache: the dry sizing of a default ``bench gather`` gives every record size
    a working set of its buffer's whole records; it clears the multiple exactly when no warning says it
    does not (the node holds the buffer), and nothing is placed or measured."""
    assert main(["bench", "gather", "--dry-run", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    rule, llc = plan["buffer_rule"], plan["buffer_rule"]["llc"]
    assert plan["live"] is True and plan["tests"] == ["gather"] and len(plan["gather"]) == 6
    for g in plan["gather"]:
        assert g["footprint_bytes"] == g["records"] * g["record_bytes"] == rule["size_bytes"] // g["record_bytes"] * g["record_bytes"]
        if llc:
            assert g["clears_rule"] == (g["footprint_bytes"] >= CACHE_MULTIPLE * llc["bytes"])
    flagged = any(g["clears_rule"] is False for g in plan["gather"])
    assert flagged == any(w["code"] == "in_cache" for w in plan["warnings"])


def test_a_server_recording_plans_a_working_set_that_clears_the_rule(server_tree, capsys):
    """The generated 2-socket server (504 MiB L3 per socket, 256 GiB CXL nodes): the dry sizing of the
    default gather on CXL node6 from node0's CPUs plans 8x the cache and one page, and every record size's
    working set clears the rule within the node's memory; no measurement (a recording)."""
    assert main(["bench", "gather", "--dry-run", "--sysfs-root", str(server_tree()), "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    llc = 504 * MiB
    assert plan["live"] is False and plan["memory_node"] == 6 and plan["cpu_node"] == 0
    assert plan["buffer_rule"]["llc"]["bytes"] == llc and plan["buffer_rule"]["size_bytes"] == CACHE_MULTIPLE * llc + 2 * MiB
    assert all(g["clears_rule"] and g["cache_multiple"] >= CACHE_MULTIPLE for g in plan["gather"])
    assert plan["warnings"] == []
    assert main(["bench", "gather", "--dry-run", "--sysfs-root", str(server_tree()), "-r", "656"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "a recorded machine: bench would measure memory node6 from CPUs 0-42,256-298 (node0)" in out
    assert f"gather 656 B: {(CACHE_MULTIPLE * llc + 2 * MiB) // 656} records, working set" in out and "clears the rule" in out


def test_a_node_too_small_for_the_rule_is_flagged_and_the_hint_names_what_will_work(tmp_path, capsys):
    """The same server with 2 GiB CXL devices: no CXL node holds 8x the 504 MiB cache, so the plan takes
    what node6 holds, says the working set is under the rule with the cache's share, and the hint names
    what clears it (a larger region) — and, where another CXL node holds it, that node."""
    from fixtures.servertree import Shape, generate

    small = generate(tmp_path / "small", shape=Shape(cxl_bytes=2 * GiB))
    assert main(["bench", "gather", "--dry-run", "--sysfs-root", str(small), "-r", "656", "--format", "json"]) == 0
    cap = capsys.readouterr()
    plan = json.loads(cap.out)
    (g,) = plan["gather"]
    assert g["clears_rule"] is False and g["footprint_bytes"] <= 2 * GiB
    (w,) = plan["warnings"]
    assert w["code"] == "in_cache" and "the bandwidth may be overstated" in w["message"]
    assert "a larger device or region" in w["hint"] and "cxl create-region" in w["hint"]
    assert "stays flagged with the cache's share" in w["hint"]


def test_a_gather_record_states_its_working_set_and_is_judged_by_it(tmp_path, capsys):
    """A real (small) gather: the record states the footprint it reached (the buffer's whole records, every
    pass shifted) and is flagged in_cache exactly when that is under the multiple of its CPUs' cache."""
    out = tmp_path / "b.json"
    assert main(["bench", "gather", "--node", "0", "--size", "64MiB", "-r", "656", "--threads", "1", "--topk", "256",
                 "--preset", "fast", "--out", str(out)]) == 0
    capsys.readouterr()
    d = json.loads(out.read_text())
    (r,) = [r for r in d["results"] if r["test"] == "gather"]
    p = r["params"]
    assert p["index_shift"] == "per pass" and p["records"] == (64 * MiB) // 656
    assert p["footprint_bytes"] == p["records"] * 656 and p["indices"] == p["steps"] * 256
    assert p["indices"] * 656 < p["footprint_bytes"]          # the stored stream is a fraction of what it reaches
    llc = (d["buffer_rule"]["llc"] or {}).get("bytes")
    flagged = any(w["code"] == "in_cache" for w in d["warnings"])
    assert flagged == bool(llc and p["footprint_bytes"] < CACHE_MULTIPLE * llc)
