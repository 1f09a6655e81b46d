"""``sactool probe --plot`` and ``sactool serve --dry-run --plot``: the machine drawn for every
recording (SVG and PNG for each), every element
named in the SVG (its text and its ``id``), the rank plan on the SAC shape, the output rules
(checked before work, exists/--force, bad extension), and the 8-GPU × 4-device server picture.

GPUs: no recording has any (QEMU had none). The GPU cases add GPU PCI functions to a copy of a
recording (:func:`fixtures.trees.add_gpus`), and the server pictures use the generated server tree
(:mod:`fixtures.servertree`: 2 sockets with SNC-3, 8 GPUs, 4 CXL devices, two behind switches) —
both say so; nothing else here is constructed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from fixtures.trees import ALL, add_gpus
from sactool.cli import main
from sactool.entry import main as entry_main
from sactool.host.sysfs import SysfsReader
from sactool.topology import probe

pytest.importorskip("matplotlib")   # the 'plot' extra; the README's test install has it

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "profiles" / "examples"
STANDIN_SITE = HERE / "standins" / "site"
GPU_NODES = (0, 0, 0, 0, 1, 1, 1, 1)      # the SAC shape's GPU sockets (constructed: no recording has GPUs)


def _names(svg: str) -> set[str]:
    """What the picture names: the text of every <text> element and every id."""
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    ids = re.findall(r'id="([^"]+)"', svg)
    return {t.strip() for t in texts} | set(ids)


def expected(t) -> set[str]:
    """The id of every socket (its first CPU node: sub-NUMA clusters share one), memdev, region, DAX
    device, system-ram DAX node and GPU of a topology (the other nodes are named in their socket's
    text: :func:`_every_node_named`)."""
    from sactool.render.machine import socket_groups

    out = {f"socket-node{leader}" for leader in socket_groups(t).values()}
    out |= {m.name for m in t.memdevs} | {r.name for r in t.regions} | {d.name for d in t.dax_devices}
    out |= {n.name for n in t.nodes if any(d.target_node == n.id and d.mode == "system-ram" for d in t.dax_devices)}
    out |= {f"gpu-{g.pci_device}" for g in t.gpus}
    return out


def _every_node_named(svg: str, t) -> None:
    """Every NUMA node appears: as its own box (a system-ram DAX node) or in its socket's text."""
    text = " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", svg))
    for n in t.nodes:
        assert re.search(rf"\b{n.name}\b", text), f"{n.name} is named nowhere in the picture"


@pytest.mark.parametrize("name", ALL)
def test_probe_plot_names_every_element(name, machine, tmp_path, capsys):
    root = machine(name)
    out = tmp_path / "m.svg"
    assert main(["probe", "--sysfs-root", str(root), "--plot", str(out), "--format", "json"]) == 0
    assert f"plot: {out}" in capsys.readouterr().err
    svg = out.read_text()
    t = probe(SysfsReader(root))
    assert expected(t) <= _names(svg), expected(t) - _names(svg)
    _every_node_named(svg, t)
    for m in t.memdevs:       # each device's path: its links, labelled, the narrowest one marked
        if m.narrowest_link is not None:
            assert f'id="link-{m.host_bridge}-{m.name}"' in svg and "narrowest link" in svg
    png = tmp_path / "m.png"
    assert main(["probe", "--sysfs-root", str(root), "--plot", str(png), "-q"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_probe_plot_on_the_fast_path_and_its_output_rules(machine, tmp_path, capsys):
    root = machine("sac2s__30-system-ram")
    out = tmp_path / "m.svg"
    assert entry_main(["probe", "--sysfs-root", str(root), "--plot", str(out), "-q"]) == 0   # typer-free path
    first = out.read_bytes()
    assert entry_main(["probe", "--sysfs-root", str(root), "--plot", str(out), "-q"]) == 5   # exists
    assert "--force" in capsys.readouterr().err and out.read_bytes() == first
    assert entry_main(["probe", "--sysfs-root", str(root), "--plot", str(out), "--force", "-q"]) == 0
    assert out.read_bytes() == first               # the same tree draws the same bytes
    bad = tmp_path / "m.jpg"
    assert entry_main(["probe", "--sysfs-root", str(root), "--plot", str(bad), "-q"]) == 2
    err = capsys.readouterr().err
    assert "SVG, PDF or PNG" in err and ".svg" in err and not bad.exists()
    # checked before the work: an unwritable place is refused before anything is probed or printed
    assert entry_main(["probe", "--sysfs-root", str(root), "--plot", str(tmp_path / "m.svg" / "x.svg")]) == 1
    cap = capsys.readouterr()
    assert cap.out == "" and "cannot write" in cap.err


def _profile_for(name: str, tmp_path: Path) -> Path:
    """A shipped example profile whose pool this recording has (or the DRAM baseline)."""
    if name == "sac2s__20-devdax":
        return EXAMPLES / "sac-8rank-devdax.yaml"
    if name in ("ram__20-devdax", "pmem__10-region"):
        text = (EXAMPLES / "cxl-devdax.yaml").read_text()
        p = tmp_path / "one-dax.yaml"
        p.write_text(text.replace("  - dax0.0\n  - dax1.0\n", "  - dax0.0\n"))
        return p
    if name in ("sac2s__10-region", "sac2s__30-system-ram"):
        return EXAMPLES / "cxl-two-nodes.yaml"
    if name in ("ram__10-region", "ram__30-system-ram", "pmem__30-system-ram"):
        return EXAMPLES / "cxl-one-node.yaml"
    return EXAMPLES / "dram-baseline.yaml"


def _serve_plot(profile: Path, root: Path, out: Path, monkeypatch, *extra: str) -> int:
    monkeypatch.setenv("PYTHONPATH", str(STANDIN_SITE))      # the target Python reports sglang 0.5.23
    return main(["serve", "--profile", str(profile), "--dry-run", "--format", "json", "--sysfs-root", str(root),
                 "--python", sys.executable, "--plot", str(out), *extra])


@pytest.mark.parametrize("name", ALL)
def test_serve_plot_draws_the_rank_plan(name, machine, tmp_path, capsys, monkeypatch):
    import json

    root = machine(name)
    out = tmp_path / "plan.svg"
    rc = _serve_plot(_profile_for(name, tmp_path), root, out, monkeypatch)
    cap = capsys.readouterr()
    d = json.loads(cap.out)
    assert rc == (d["problems"][0]["exit_code"] if d["problems"] else 0)
    svg = out.read_text()
    t = probe(SysfsReader(root))
    assert expected(t) <= _names(svg)
    if d["plan"]:
        for r in d["plan"]:
            assert f"rank {r['rank']} → {r['target']}" in _names(svg)
            assert f'id="arrow-rank-{r["rank"]}"' in svg
    else:
        assert "no rank plan" in cap.err
    png = tmp_path / "plan.png"
    assert _serve_plot(_profile_for(name, tmp_path), root, png, monkeypatch) == rc
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_serve_plot_on_the_sac_shape_names_gpus_slices_and_sockets(machine, tmp_path, capsys, monkeypatch):
    """The SAC example on sac2s devdax with eight constructed GPUs (add_gpus: no recording has
    GPUs): each rank's box is its CUDA device's PCI function, on its socket, with its slice."""
    root = add_gpus(machine("sac2s__20-devdax"), list(GPU_NODES))
    out = tmp_path / "plan.svg"
    assert _serve_plot(EXAMPLES / "sac-8rank-devdax.yaml", root, out, monkeypatch) == 0
    capsys.readouterr()
    names = _names(out.read_text())
    gpus = sorted(g.pci_device for g in probe(SysfsReader(root)).gpus)
    assert {f"gpu-{b}" for b in gpus} <= names
    for r in range(8):     # round robin over the two devices; 128 MiB slices, 2 MiB-aligned
        assert f"rank {r} → dax{r % 2}.0" in names
        assert f"[{(r // 2) * 128}.00 MiB, +128.00 MiB)".replace("[0.00 MiB", "[0 B") in names
    assert "GPU 0" not in names            # seen in sysfs: no placeholder


def test_serve_plot_needs_dry_run_and_is_checked_first(machine, tmp_path, capsys, monkeypatch):
    root = machine("sac2s__20-devdax")
    out = tmp_path / "plan.svg"
    monkeypatch.setenv("PYTHONPATH", str(STANDIN_SITE))
    assert main(["serve", "--profile", str(EXAMPLES / "sac-8rank-devdax.yaml"), "--sysfs-root", str(root),
                 "--python", sys.executable, "--plot", str(out)]) == 2
    assert "--dry-run" in capsys.readouterr().err and not out.exists()
    out.write_text("keep")
    assert _serve_plot(EXAMPLES / "sac-8rank-devdax.yaml", root, out, monkeypatch) == 5
    cap = capsys.readouterr()
    assert cap.out == "" and out.read_text() == "keep"        # refused before the launch was built


@pytest.mark.parametrize("mode", ["devdax", "system-ram"])
def test_server_pictures_with_eight_gpus_and_four_devices(mode, server_tree, tmp_path, capsys, monkeypatch):
    """The generated server tree (fixtures.servertree): probe --plot names every element, serve
    --dry-run --plot draws 8 ranks by locality on its 4 CXL targets from the GPUs the tree shows
    (no placeholder), the downgraded GPU link is said, and no two device boxes overlap."""
    import json

    from fixtures.servertree import sac_profile
    from sactool.render.machine import ROW_H, machine_scene

    root = server_tree(mode)
    t = probe(SysfsReader(root))
    assert (len(t.gpus), len(t.memdevs), len(t.dax_devices)) == (8, 4, 4)
    out = tmp_path / "machine.svg"
    assert main(["probe", "--sysfs-root", str(root), "--plot", str(out), "-q", "--format", "json"]) == 0
    capsys.readouterr()
    svg = out.read_text()
    assert expected(t) <= _names(svg), expected(t) - _names(svg)
    _every_node_named(svg, t)
    assert "negotiated below its cap (downgraded)" in _names(svg)       # GPU 6 at x8
    plan_svg = tmp_path / "plan.svg"
    assert _serve_plot(sac_profile(tmp_path / "p.yaml", mode), root, plan_svg, monkeypatch) == 0
    d = json.loads(capsys.readouterr().out)
    names = _names(plan_svg.read_text())
    assert expected(t) <= names and len(d["plan"]) == 8
    for r in d["plan"]:       # each rank on a target of its GPU's socket
        assert f"rank {r['rank']} → {r['target']}" in names and f'id="arrow-rank-{r["rank"]}"' in plan_svg.read_text()
        assert r["cpu_node"] == (0 if r["rank"] < 4 else 3)
    assert len({r["target"] for r in d["plan"]}) == 4 and "not seen in sysfs" not in names
    # SNC-3: one socket box per socket (SLIT 12 inside, 21 across), a line per node with its CPUs
    sockets = sorted(n for n in names if n.startswith("socket-node") and "-" not in n[len("socket-node"):])
    assert sockets == ["socket-node0", "socket-node3"], sockets
    assert "socket node0 + node1 + node2 (SLIT 12 between them)" in names
    assert any(n.startswith("node4 dram") and "CPUs 171-213,427-469" in n for n in names)
    sc = machine_scene(t)
    boxes = [b for b in sc.boxes.values() if b.kind != "socket"]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            dx = abs(a.x - b.x) < (a.w + b.w) / 2
            dy = abs(a.y - b.y) * ROW_H < (a.height() + b.height()) / 2
            assert not (dx and dy), f"{a.gid} overlaps {b.gid}"


def test_numa_plan_lines_end_at_the_cxl_nodes(machine):
    """A NUMA-mode plan (node2/node3 of sac2s 30-system-ram, by locality): each rank's line ends at
    its node's box, the GPUs (not in the recording) are placeholders on the profile's sockets, and a
    target that is a socket's own DRAM gets no line (its rank's box still names it)."""
    from sactool.pool.rankplan import plan
    from sactool.pool.targets import Target
    from sactool.render.machine import machine_scene

    t = probe(SysfsReader(machine("sac2s__30-system-ram")))
    p = plan(8, [Target("node2", "numa", 512 << 20, "x", cpu_node=0), Target("node3", "numa", 512 << 20, "x",
                                                                            cpu_node=1)],
             "locality", rank_cpu_nodes=GPU_NODES)
    sc = machine_scene(t, p, [], GPU_NODES)
    assert [(e.a, e.b) for e in sc.edges if e.kind == "rank"] == [
        (f"gpu-{r}", "node2" if r < 4 else "node3") for r in range(8)]
    assert all(sc.boxes[f"gpu-{r}"].dashed for r in range(8))
    trunks = {e.b: e.a for e in sc.edges if e.kind == "trunk"}
    assert [trunks[f"gpu-{r}"] for r in range(8)] == ["socket-node0"] * 4 + ["socket-node1"] * 4
    dram = plan(2, [Target("node0", "numa", 1 << 30, "x", cpu_node=0)], "round_robin")
    sc = machine_scene(t, dram, [], (0, 0))
    assert not [e for e in sc.edges if e.kind == "rank"] and "rank 1 → node0" in sc.boxes["gpu-1"].lines


def test_links_are_paired_into_hops_and_a_switch_gets_a_box(machine):
    """A path through a switch (root port, switch upstream and downstream port, device: as the
    kernel lists them device first) is two links, the switch's own ports joined inside it; the
    narrowest is marked on its hop, a link below its ends' capability is downgraded. No recording
    has a switch: the memdev's path is extended here by hand (constructed)."""
    from dataclasses import replace

    from sactool.render.machine import hops, machine_scene
    from sactool.topology.model import PcieLink

    def lk(bdf, speed, width, cap=32.0, capw=16):
        return PcieLink(bdf, speed, width, cap, capw, "128b/130b", 128 / 130, int(speed * 1e9 * width * 128 / 130 / 8))

    dev, dsp, usp, rp = lk("0000:0f:00.0", 32.0, 16), lk("0000:0e:01.0", 32.0, 16), lk("0000:0d:00.0", 16.0, 16), \
        lk("0000:0c:00.0", 16.0, 16)
    got = hops((dev, dsp, usp, rp))
    assert [h.functions for h in got] == [("0000:0c:00.0", "0000:0d:00.0"), ("0000:0e:01.0", "0000:0f:00.0")]
    assert got[0].downgraded and not got[1].downgraded
    assert got[0].label() == "16 GT/s x16 · 31.5 GB/s/dir · cap 32 GT/s x16"
    t = probe(SysfsReader(machine("sac2s__30-system-ram")))
    m = t.memdev("mem1")
    m2 = replace(m, path_links=(dev, dsp, usp, rp), narrowest_link=usp)
    t = replace(t, memdevs=tuple(m2 if x.name == "mem1" else x for x in t.memdevs))
    sc = machine_scene(t)
    assert sc.boxes["switch-0000:0d:00.0"].kind == "switch"
    links = [e for e in sc.edges if e.kind == "link" and "mem1" in (e.a, e.b) or e.b == "switch-0000:0d:00.0"]
    assert [(e.a, e.b, e.narrowest) for e in links] == [("pci0000:0c", "switch-0000:0d:00.0", True),
                                                         ("switch-0000:0d:00.0", "mem1", False)]


def test_the_pictures_the_docs_show_are_what_the_commands_draw_now(tmp_path, capsys, monkeypatch):
    """docs/images (drawn by scripts/doc-pictures) against a fresh drawing of the same recordings:
    the same text and the same element ids (matplotlib's hashed clip ids aside). A change to the
    picture or to probe that leaves the docs' pictures stale fails here: re-run scripts/doc-pictures."""
    from fixtures.trees import unpack

    images = HERE.parent / "docs" / "images"
    t30, t20 = (unpack(n, tmp_path / n) for n in ("sac2s__30-system-ram", "sac2s__20-devdax"))   # titled by name

    def names(svg: str) -> set[str]:
        return {n for n in _names(svg) if not re.fullmatch(r"p[0-9a-f]{10}", n)}

    fresh = tmp_path / "probe.svg"
    assert main(["probe", "--sysfs-root", str(t30), "--plot", str(fresh), "-q",
                 "--format", "json"]) == 0
    assert names(fresh.read_text()) == names((images / "probe-sac2s.svg").read_text())
    plan = tmp_path / "plan.svg"
    _serve_plot(EXAMPLES / "sac-8rank-devdax.yaml", t20, plan, monkeypatch)
    capsys.readouterr()
    assert names(plan.read_text()) == names((images / "serve-plan-sac2s.svg").read_text())
