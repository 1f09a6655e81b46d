"""The reference pages of the manual say what the code does (issue 21): exit codes, the profile's
fields and provenance kinds, the records' top-level keys, one page per command. A field, key or code
added to the code and not to docs/ (or left on a page after it went away) fails here."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"


def section(page: str, heading: str) -> str:
    """The text of ``## heading`` on a page, up to the next ``## ``."""
    text = (DOCS / page).read_text()
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"{page}: no section '## {heading}'"
    return m.group(1)


def test_exit_code_table_is_the_code_s():
    from sactool.errors import ExitCode

    text = (DOCS / "reference" / "exit-codes.md").read_text()
    rows = {int(m.group(1)) for m in re.finditer(r"^\| (\d+) \|", text, re.M)}
    assert rows == {int(c) for c in ExitCode}


def test_profile_page_names_every_field_and_provenance_kind():
    from sactool import profile as P

    text = (DOCS / "reference" / "profile.md").read_text()
    fields = (set(P.settings_fields()) | set(P.settings_fields("vllm"))
              | {f"model.{f.name}" for f in dataclasses.fields(P.ModelRef)})
    rows = set(re.findall(r"^\| `((?:pool|hisparse|sglang|vllm|model)\.\w+)` \|", text, re.M))
    assert rows == fields, (sorted(fields - rows), sorted(rows - fields))
    tops = {f.name for f in dataclasses.fields(P.Profile)}
    assert [t for t in sorted(tops) if f"`{t}`" not in text] == []
    kinds = set(re.findall(r"^\| `(\w+)` \| ", section("reference/profile.md", "Provenance kinds"), re.M))
    assert kinds == set(P.PROVENANCE_SOURCES)
    assert f"| {P.SCHEMA_VERSION} |" in section("reference/profile.md", "Format history")


HEADER = ("kind", "schema_version", "sactool_version", "created_at")   # named once, atop the page


def _missing(keys, text: str) -> list[str]:
    return [k for k in keys if k not in HEADER and f"`{k}`" not in text]


def test_records_page_names_every_top_level_key(machine, capsys):
    from sactool.cli import main

    assert main(["probe", "--sysfs-root", str(machine("sac2s__30-system-ram")), "--format", "json"]) == 0
    topology = json.loads(capsys.readouterr().out)
    assert _missing(topology, section("reference/records.md", "probe: topology record")) == []
    bench = json.loads((REPO / "tests" / "fixtures" / "bench" / "node0-gather.json").read_text())
    text = section("reference/records.md", "bench record")
    assert _missing(bench, text) == [] and _missing(bench["results"][0], text) == []
    assert _missing(bench["results"][0]["stats"], text) == []


def test_simulation_record_keys_are_named(capsys):
    from sactool.cli import main

    rc = main(["simulate", "--platform", str(REPO / "sactool" / "data" / "platforms" / "sac-paper.yaml"),
               "--context", "16k", "--concurrency", "8", "--hotbuffer-steps", "2", "--format", "json"])
    assert rc == 0
    rec = json.loads(capsys.readouterr().out)
    text = section("reference/records.md", "simulate: simulation record")
    assert _missing(rec, text) == [] and _missing(rec["points"][0], text) == []


def test_every_command_has_a_page_in_the_site():
    from sactool.cli.reference import command

    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    pages = [p for item in nav if isinstance(item, dict) and "Commands" in item for d in item["Commands"]
             for p in d.values()]
    names = {Path(p).stem for p in pages}
    assert set(command.commands) - {"profile"} <= names | {"gpu-gather"}
    assert "profile" in names and all((DOCS / p).is_file() for p in pages)
    bench = command.commands["bench"]
    assert "gpu-gather" in bench.commands and "gpu-gather" in names


def test_serve_dry_run_json_keys_are_named(machine, capsys):
    from sactool.cli import main

    rc = main(["serve", "--profile", str(REPO / "profiles" / "examples" / "sac-8rank-devdax.yaml"), "--dry-run",
               "--format", "json", "--sysfs-root", str(machine("sac2s__20-devdax"))])
    assert rc in (0, 8)   # 8: SGLang is not installed in the interpreter running the tests
    out = json.loads(capsys.readouterr().out)
    text = section("commands/serve.md", "Output fields")
    assert _missing(out, text) == [] and _missing(out["plan"][0], text) == []
    assert _missing(out["plan_targets"][0], text) == []


def _history_versions(kind: str) -> list[int]:
    """The schema versions the format-history row of ``kind`` names ("1 — …; 2 — …")."""
    text = section("reference/records.md", "Format history")
    row = re.search(rf"^\| `{kind}` \|[^|]*\|(.*)\|\s*$", text, re.M)
    assert row, f"records.md: no format-history row for `{kind}`"
    return [int(v) for v in re.findall(r"(?:^|;)\s*(\d+) —", row.group(1))]


def test_format_history_ends_at_each_record_s_current_version(capsys):
    """Each versioned record's row in the format history names every version up to the one the
    code writes now: a bump without its line in the history fails here."""
    from sactool import profile
    from sactool.bench import record as bench
    from sactool.cli import main
    from sactool.fleet import probe as fleet
    from sactool.simulate import platform
    from sactool.topology import records as topology

    assert main(["simulate", "--platform", "sac-paper", "--context", "16k", "--concurrency", "8",
                 "--hotbuffer-steps", "2", "--format", "json"]) == 0
    simulation = json.loads(capsys.readouterr().out)["schema_version"]
    current = {"topology": topology.SCHEMA_VERSION, "bench": bench.SCHEMA_VERSION, "profile": profile.SCHEMA_VERSION,
               "simulation": simulation, "platform": platform.SCHEMA_VERSION, "fleet_topology": fleet.SCHEMA_VERSION}
    for kind, version in current.items():
        assert _history_versions(kind) == list(range(1, version + 1)), kind


def _keys(obj, out: set[str]) -> set[str]:
    """Every key of every object nested in a record (a SLIT row's node names aside)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not re.fullmatch(r"node\d+", k):
                out.add(k)
            _keys(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _keys(v, out)
    return out


def test_every_field_of_the_topology_record_is_named(machine, server_tree, capsys):
    """Every key at any depth of ``probe --format json`` on every recording, on the generated
    server tree (switches, GPUs, SNC) in both modes, is named in records.md or on probe's page."""
    from fixtures.trees import ALL

    from sactool.cli import main

    roots = [machine(name) for name in ALL] + [server_tree("system-ram"), server_tree("devdax")]
    keys: set[str] = set()
    for root in roots:
        assert main(["probe", "--sysfs-root", str(root), "--format", "json", "-q"]) == 0
        _keys(json.loads(capsys.readouterr().out), keys)
    text = section("reference/records.md", "probe: topology record") + (DOCS / "commands" / "probe.md").read_text()
    assert len(keys) > 140
    assert sorted(k for k in keys if f"`{k}`" not in text) == []


def test_every_command_page_links_its_generated_reference_and_says_its_errors():
    """One page per command (issue 21: what it answers, options, examples, output fields, errors):
    each links its section of the generated CLI reference (mkdocs --strict checks the anchor) and
    has an Errors section; the top-level commands' pages have an Output section too."""
    from sactool.cli.reference import command

    pages = {name: DOCS / "commands" / f"{name}.md" for name in command.commands} | {
        "bench gpu-gather": DOCS / "commands" / "gpu-gather.md"}
    for name, page in pages.items():
        text = page.read_text()
        assert f"reference/cli.md#sactool-{name.replace(' ', '-')}" in text, page.name
        assert re.search(r"^## Errors$", text, re.M), page.name
        if name != "profile":      # profile show/validate: its examples are its output
            assert re.search(r"^## Output", text, re.M), page.name


def test_the_generated_cli_reference_lists_every_command_and_option():
    """docs/reference/cli.md is mkdocs-click over the typer app: the page is rendered through
    mkdocs-click's public entry point, the Markdown extension the site build loads (mkdocs.yml
    markdown_extensions), and every command and every option of it is in the generated text."""
    import html

    import markdown

    from sactool.cli.reference import command

    page = (DOCS / "reference" / "cli.md").read_text()
    directive = dict(re.findall(r"^\s+:(\w+): (.+)$", page, re.M))
    assert directive["module"] == "sactool.cli.reference" and directive["command"] == "command"
    text = markdown.markdown(page, extensions=["mkdocs_click"])
    assert ":::" not in text, "the directive was not expanded"

    sections = {}     # "sactool bench gather" -> its section, from the headings' nesting
    stack: list[str] = []
    for m in re.finditer(r"<h(\d)[^>]*>(.*?)</h\1>(.*?)(?=<h\d|\Z)", text, re.S):
        depth = int(m.group(1)) - 2
        if depth < 0:
            continue
        stack[depth:] = [html.unescape(m.group(2))]
        sections[" ".join(stack)] = html.unescape(m.group(3))

    def walk(cmd, path):
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, f"{path} {name}")

    for path, cmd in walk(command, "sactool"):
        assert path in sections, (path, sorted(sections))
        for p in cmd.params:
            if not getattr(p, "hidden", False):
                assert all(o in sections[path] for o in p.opts), (path, p.opts)


def test_every_key_of_a_tuned_and_an_example_profile_is_named(machine, tmp_path, capsys):
    """Every key at any depth of a profile tune writes (on a recording with the fixed bench record,
    with a trace too) and of every shipped example — the settings, the header and the record of
    why — is named on the profile page (provenance's keys are the settings fields themselves)."""
    import numpy as np

    from sactool.cli import main
    from sactool.workload import save_trace

    root = machine("this-machine")
    bench = str(REPO / "tests" / "fixtures" / "bench" / "node0-gather.json")
    common = ["tune", "--model", "deepseek-v3.2", "--sysfs-root", str(root), "--bench", bench, "--context", "16k",
              "--steps", "4", "--replicates", "1", "-q"]
    trace = tmp_path / "t.npz"
    rng = np.random.default_rng(0)
    idx = np.stack([np.stack([rng.choice(16384 + s, 2048, replace=False) for _ in range(61)]) for s in range(4)])
    save_trace(trace, idx.astype(np.int32), 16384, model="deepseek-v3.2", source="test: uniform indices")
    profiles = []
    for extra in ([], ["--trace", str(trace)]):
        out = tmp_path / f"p{len(profiles)}.yaml"
        assert main([*common, *extra, "--out", str(out)]) == 0, capsys.readouterr().err
        profiles.append(yaml.safe_load(out.read_text()))
    assert profiles[1]["workload"]["source"] == "trace"
    profiles += [yaml.safe_load(p.read_text()) for p in sorted((REPO / "profiles" / "examples").glob("*.yaml"))]
    keys: set[str] = set()
    for prof in profiles:
        _keys({k: v for k, v in prof.items() if k != "provenance"}, keys)
        for v in prof.get("provenance", {}).values():
            _keys(v, keys)
    capsys.readouterr()
    text = (DOCS / "reference" / "profile.md").read_text()
    assert len(keys) > 100
    assert sorted(k for k in keys if f"`{k}`" not in text and not re.search(rf"\.{re.escape(k)}`", text)) == []


def test_every_key_of_the_bench_and_simulation_records_is_named(capsys):
    """Every key at any depth of the fixed bench record, and of a simulation record outside its
    model-internal blocks (`inputs`, `validation`, `miss_check`), is named in records.md."""
    from sactool.cli import main

    keys = _keys(json.loads((REPO / "tests" / "fixtures" / "bench" / "node0-gather.json").read_text()), set())
    assert main(["simulate", "--platform", "sac-paper", "--context", "16k", "--concurrency", "8",
                 "--hotbuffer-steps", "2", "--format", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    _keys({k: v for k, v in rec.items() if k not in ("inputs", "validation", "miss_check")}, keys)
    text = (DOCS / "reference" / "records.md").read_text()
    assert len(keys) > 120
    assert sorted(k for k in keys if f"`{k}`" not in text and not re.fullmatch(r"\d.*", k)) == []
