"""What a newcomer trips over on the SAC machine walkthrough (README followed literally): messages
in the README's units, help without Python type names, a profile shown in its own spelling."""

from __future__ import annotations

import re
from pathlib import Path

SAC_EXAMPLE = str(Path(__file__).resolve().parent.parent / "profiles" / "examples" / "sac-8rank-devdax.yaml")


def test_small_buffer_warning_speaks_iec_units_and_names_a_size():
    """bench latency --size 64MiB with a 32 MiB LLC: the warning said '33554432 bytes, less than 4× the
    33554432-byte last-level cache — use --size of at least 8× the LLC'."""
    from sactool.bench.api import BenchOptions, _buffer_warnings

    bdesc = {"verified_fraction": 1.0, "hugepage_fraction": 1.0}
    (w,) = _buffer_warnings(bdesc, BenchOptions(tests=("latency",)), 0, 64 << 20, 32 << 20)
    text = w["message"] + " " + w["hint"]
    assert w["code"] == "small_buffer"
    assert not re.search(r"\d{6,}", text), text
    assert "32.00 MiB" in text and "--size 256MiB" in text, text


def test_unavailable_cpu_error_lists_cpus_as_a_cpulist():
    """bench --cpus 7 said 'allowed: [0, 1]' (a Python list) where --cpus takes '0-1'."""
    import os

    import pytest

    from sactool.bench.api import resolve_cpus
    from sactool.errors import UsageError
    from sactool.host.sysfs import format_cpulist

    with pytest.raises(UsageError) as ei:
        resolve_cpus(None, 0, (4095,))
    assert f"(allowed: {format_cpulist(sorted(os.sched_getaffinity(0)))})" in ei.value.message
    assert "[" not in ei.value.message


def test_gpu_gather_size_messages_speak_iec_units():
    """gpu-gather's too-small --size said '--size 1048576 holds 1597 records…' and its L2 warning
    '(67108864 B) … (52428800 B)'."""
    from types import SimpleNamespace

    import pytest

    from sactool.bench.gpugather import GpuGatherOptions, _plan
    from sactool.errors import UsageError

    gpu = SimpleNamespace(l2_bytes=50 << 20)
    with pytest.raises(UsageError) as ei:
        _plan(GpuGatherOptions(size_bytes=1 << 20, blocks=(4,), record_bytes=(656,), steps=1), gpu, False,
              None, None, None, [], None)
    text = ei.value.message + " " + ei.value.hint
    assert "--size 1.00 MiB holds" in text and not re.search(r"\d{7,}", text), text
    assert re.search(r"--size \d+MiB", ei.value.hint), ei.value.hint


def test_profile_show_spells_values_as_the_yaml_file_does(capsys, monkeypatch):
    """profile show printed Python reprs — None, True, ['dax0.0', 'dax1.0'] — for values the user
    edits in YAML as null, true, [dax0.0, dax1.0]."""
    from sactool.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    rc = main(["profile", "show", SAC_EXAMPLE])
    assert rc == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():   # "pool.strict = true  (user)", a line per setting
        m = re.match(r"((?:pool|hisparse|sglang)\.\w+) = (.*?)  \(\w+\)$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    assert rows["pool.strict"] == "true" and rows["pool.stand_in"] == "false"
    assert rows["pool.capacity_bytes"] == "null" and rows["hisparse.prefetch"] == "true"
    assert rows["pool.dax_devices"] == "[dax0.0, dax1.0]"
    assert rows["pool.gpu_local_nodes"] == "[0, 0, 0, 0, 1, 1, 1, 1]"


def test_profile_show_fetch_time_is_spelled_as_tune_prints_it(capsys, tmp_path):
    """tune printed 'predicted fetch time per token 751 µs', profile show of the same file '0.751 ms'."""
    import yaml

    from sactool.cli import main

    doc = yaml.safe_load(open(SAC_EXAMPLE))
    doc.setdefault("predictions", {})["fetch_time_per_token_s"] = 751e-6
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    assert main(["profile", "show", str(tmp_path / "p.yaml")]) == 0
    assert "predicted fetch time per token 751 µs at concurrency" in capsys.readouterr().out


def test_alternative_against_a_chosen_one_that_fetches_nothing_names_its_time():
    """tune --context 2k on sac2s 20-devdax: the chosen buffer holds every context (0 µs), an
    alternative needs 15 µs per token, and 'why it lost' said '+0.0% fetch time per token'."""
    from sactool.pool.rankplan import round_robin
    from sactool.tune.search import Candidate, Evaluation, reason_lost

    rr = round_robin(8, ["dax0.0", "dax1.0"])
    chosen = Evaluation(Candidate(3072, 1, 960, True, rr), True, (), (0.0, 0.0, 0.0), 150 << 20, 120 << 20)
    other = Evaluation(Candidate(2048, 1, 960, True, rr), True, (), (15e-6, 15e-6, 15e-6), 100 << 20, 120 << 20)
    why = reason_lost(other, chosen)
    assert "0.0%" not in why and "+15 µs fetch time per token" in why, why


import pytest  # noqa: E402


@pytest.mark.parametrize("argv,option,want", [
    (["tune"], "--bench", "<path>"),
    (["tune"], "--seed", "<int>"),
    (["simulate"], "--set", "<field=value>"),
    (["bench", "gpu-gather"], "--placement", "<strict|best-effort>"),
])
def test_help_metavars_are_what_one_types(capsys, monkeypatch, argv, option, want):
    """tune --help showed '--bench <list[Path]>' and '--seed <int range> [x>=0]', simulate '--set
    <list[str]>' (Python type names), gpu-gather '--placement <str>' without its two choices."""
    from sactool.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    try:
        main([*argv, "--help"])
    except SystemExit:
        pass
    line = next(l for l in capsys.readouterr().out.splitlines() if re.search(rf"\s{re.escape(option)}\s", l))
    assert want in line and "list[" not in line and "range" not in line, line


def test_probe_of_a_devdax_sac_box_names_the_devices_tune_and_serve_use(capsys, monkeypatch, machine):
    """sac2s 20-devdax (the SAC shape: two devdax devices, one per socket): probe's verdict said only
    'KV pool (stand-in): node1 … figures describe DRAM' while tune and serve plan dax0.0 and dax1.0."""
    from sactool.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    assert main(["probe", "--sysfs-root", str(machine("sac2s__20-devdax"))]) == 0
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.startswith("devdax pool"))
    assert "dax0.0 (512.00 MiB, socket node0)" in line and "dax1.0 (512.00 MiB, socket node1)" in line, line
    assert "tune and serve" in line


def test_probe_without_devdax_has_no_devdax_pool_line(capsys, monkeypatch, machine):
    from sactool.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    assert main(["probe", "--sysfs-root", str(machine("sac2s__30-system-ram"))]) == 0
    assert "devdax pool" not in capsys.readouterr().out


def test_tune_context_table_headers_are_whole_at_80_columns():
    """README's first command at an 80-column terminal: the headers read 'fetch/to…', 'concurre…',
    'prefix/r…' and '798.43 KiB' broke over two lines."""
    import io

    from rich.console import Console

    from sactool.render.tune import _context_table

    rows = [{"context_tokens": 16384, "hit_rate": 0.99, "fetch_bytes_per_token": 817592,
             "fetch_time_per_token_s": 593e-6, "max_concurrency": 24, "profile_holds": 8,
             "rdma_full_prefix_bytes_per_request": 655_622_144},
            {"context_tokens": 131072, "hit_rate": None, "max_concurrency": 0,
             "rdma_full_prefix_bytes_per_request": 5_116_000_000}]
    t, beyond = _context_table({"per_context": rows})
    buf = io.StringIO()
    Console(file=buf, width=80, color_system=None).print(t)
    text = buf.getvalue()
    assert "…" not in text, text
    assert max(len(l) for l in text.splitlines()) <= 80
    for word in ("concurrency", "/request", "798.43 KiB", "625.25 MiB", "593 µs"):
        assert word in text, (word, text)
    assert [r["context_tokens"] for r in beyond] == [131072]


def test_a_cxl_node_is_never_freer_than_its_size(machine):
    """tune --sysfs-root sac2s-30-system-ram said 'pool: node2 (513.09 MiB free)' for a 512 MiB node:
    the 16.4 MiB that /proc/meminfo counts free but no node reports (deferred page init, a boot-time
    DRAM matter) was added to the kmem-onlined CXL nodes too."""
    from sactool.host.sysfs import SysfsReader
    from sactool.memory.nodes import free_estimate
    from sactool.topology import probe

    reader = SysfsReader(machine("sac2s__30-system-ram"))
    topo = probe(reader)
    for nid in (2, 3):
        est = free_estimate(topo, reader, nid)
        assert est.bytes == 524288 * 1024 and "no node reports" not in est.source, est
    assert free_estimate(topo, reader, 0).bytes == (1919572 + 16840) * 1024  # a CPU node keeps the correction


def test_capacity_source_names_the_margin_in_iec_units(machine):
    """serve --dry-run on sac2s 30-system-ram: '513.09 MiB free (node2/meminfo MemFree …, minus
    16106127 bytes kept back)' — the only raw byte count in the sentence."""
    from sactool.pool.targets import target_facts as pool_targets
    from sactool.host.sysfs import SysfsReader
    from sactool.topology import probe

    reader = SysfsReader(machine("sac2s__30-system-ram"))
    (t,) = pool_targets(probe(reader), reader, ["node2"])
    assert "minus 15.36 MiB kept back" in t.capacity_source and not re.search(r"\d{6,}", t.capacity_source), t


def test_tune_summary_does_not_call_a_dax_device_free():
    """tune on sac2s 20-devdax printed 'pool: dax0.0 (512.00 MiB free)': a devdax device is no node
    with free memory; its capacity is its size."""
    from sactool.render.tune import _pool_cell

    assert _pool_cell({"name": "dax0.0", "capacity_bytes": 512 << 20}) == "dax0.0 (512.00 MiB device size)"
    assert _pool_cell({"name": "node2", "capacity_bytes": 512 << 20}) == "node2 (512.00 MiB free)"


def test_system_ram_hint_names_both_devices_of_the_sac_profile(capsys, machine):
    """serve --dry-run of sac-8rank-devdax.yaml on sac2s 30-system-ram hinted 'pool.nodes [2]' and
    'daxctl reconfigure-device --mode=devdax dax0.0' though the profile's dax1.0 is node3 too."""
    import pytest

    from sactool.errors import TopologyError
    from sactool.pool.targets import target_facts as pool_targets
    from sactool.host.sysfs import SysfsReader
    from sactool.topology import probe

    reader = SysfsReader(machine("sac2s__30-system-ram"))
    with pytest.raises(TopologyError) as ei:
        pool_targets(probe(reader), reader, ["dax0.0", "dax1.0"])
    assert "pool.nodes [2, 3]" in ei.value.hint and "--mode=devdax dax0.0 dax1.0" in ei.value.hint, ei.value.hint
    assert "dax1.0 is node3" in ei.value.message
