"""The examples in README.md and docs/ run as shown (issue 21): an example that drifts fails here.

Every fenced block whose info string is ``console`` shows commands (``$ …``, continued with a
trailing ``\\``) and what they print. Right above it stands one marker comment:

* ``<!-- example: KEY=VALUE … -->`` — run and compared. The blocks of one file run in order in one
  temporary working directory (a later block may read what an earlier one wrote) holding
  ``profiles/examples``, ``sactool/`` (for its data) and ``tests/fixtures`` of this checkout, and what the
  keys add: ``recording=NAME:DIR`` unpacks tests/fixtures/sysfs/NAME.tar.gz as DIR;
  ``columns=N`` is the terminal width (default 100); ``rc=N`` the exit status expected of each
command but the set-up ones (``mkdir``, ``tar``, ``cp``, ``sed``: 0) (default 0);
  ``streams=stdout|stderr|both`` what is compared (default both: stdout, then stderr, as a
  terminal shows a command whose warnings come after its data); ``env=VAR:VALUE``.
* ``<!-- live: WHERE, DATE -->`` — a live measurement, shown as measured and never compared; the
  marker (and the text beside the block) says where and when (a YYYY-MM-DD date is required).

Every other fenced block is ``bash`` (commands without their output: each ``sactool`` line's
subcommands and options must exist), a file's content (``yaml``, ``json``, ``python``, ``toml``),
or ``text`` with ``<!-- format: … -->`` (the shape of something sactool prints elsewhere, naming
the file that prints it) or ``<!-- layout: -->`` (a tree of the package: every path it names
exists).

``sactool …`` runs in this process (``sactool.cli.main``); other commands (``mkdir``, ``tar``,
``mpirun``) run in bash with this interpreter's bin directory first on PATH; ``| jq .a.b[0]`` (a path filter) is applied here, so jq need not be installed. The output
shown is compared line by line after trailing spaces are dropped and the paths of the temporary
directory, this checkout and the running interpreter's directory are replaced by ``.``, ``.`` and
``.venv/bin``: a line ``…`` stands for any number of lines, and ``…`` inside a line for any text
(times and figures that vary, a trimmed table). A ``console`` block without a marker fails, and so
does a block showing a ``$`` prompt that is not ``console``.

``scripts/update-doc-examples`` (``SACTOOL_UPDATE_DOC_EXAMPLES=1``) rewrites the shown output of
every example that drifted to what the command prints now, keeping each ``…`` where it still
stands for something (:func:`refit`), then checks the pages again; an exit status that changed is
reported, never rewritten.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fixtures.trees import unpack

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
MARKER = re.compile(r"^<!--\s*(example|live|format|layout):?\s*(.*?)\s*-->\s*$")
SETUP = ("mkdir", "tar", "cp", "cd", "sed")   # commands that prepare an example: they must succeed
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
UPDATE = os.environ.get("SACTOOL_UPDATE_DOC_EXAMPLES") == "1"


@dataclass
class Block:
    page: Path
    line: int                      # 1-based line of the opening fence
    info: str
    text: list[str]
    marker: tuple[str, str] | None  # ("example"|"live", rest of the comment)
    options: dict[str, list[str]] = field(default_factory=dict)

    @property
    def where(self) -> str:
        page = self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page.name
        return f"{page}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """Every fenced block of a Markdown page, with the marker comment right above it (if any)."""
    lines = page.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.groups()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        prev = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        mk = MARKER.match(prev)
        body = [s[len(indent):] if s.startswith(indent) else s.lstrip() for s in lines[i + 1:j]]
        b = Block(page, i + 1, info, body, (mk.group(1), mk.group(2)) if mk else None)
        if mk and mk.group(1) == "example":
            for kv in shlex.split(mk.group(2)):
                k, _, v = kv.partition("=")
                b.options.setdefault(k, []).append(v)
        out.append(b)
        i = j + 1
    return out


ALL_BLOCKS = [b for p in PAGES for b in blocks_of(p)]


# ---- commands and their output ------------------------------------------------------------------

def spans_of(block: Block) -> list[tuple[str, int, int]]:
    """(command line, first and end index in ``block.text`` of the output shown after it) for each
    ``$`` line of a block."""
    steps: list[tuple[str, int, int]] = []
    k, text = 0, block.text
    while k < len(text):
        s = text[k]
        if s.startswith("$ "):
            cmd = s[2:]
            while cmd.endswith("\\") and k + 1 < len(text):
                k += 1
                cmd = cmd[:-1] + " " + text[k].strip()
            steps.append((cmd, k + 1, k + 1))
        elif steps:
            steps[-1] = (steps[-1][0], steps[-1][1], k + 1)
        elif s.strip():
            raise AssertionError(f"{block.where}: output before the first '$ ' command: {s!r}")
        k += 1
    return steps


def commands_of(block: Block) -> list[tuple[str, list[str]]]:
    """(command line, the output lines shown after it) for each ``$`` line of a block."""
    return [(cmd, block.text[a:b]) for cmd, a, b in spans_of(block)]


def jq_path(data, expr: str):
    """``jq EXPR`` for a path filter: ``.``, ``.a.b``, ``.a[0]``."""
    for key, idx in re.findall(r"\.([A-Za-z_][\w-]*)|\[(\d+)\]", expr):
        data = data[key] if key else data[int(idx)]
    return data


def shell_env() -> dict[str, str]:
    """bash commands find this interpreter's ``sactool`` and ``mpirun`` first; Open MPI may run as
    root (CI is root: a user is not, and the fleets page says what root needs). More ranks than cores
    is not allowed here: a page's mpirun says --oversubscribe where it needs it, as a reader must."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("PRTE_MCA_rmaps_default_mapping_policy", None)
    env.pop("OMPI_MCA_rmaps_base_oversubscribe", None)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def run_sactool(argv: list[str], capsys) -> tuple[int, str, str]:
    from sactool.cli import main

    capsys.readouterr()
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def run_line(cmd: str, capsys, monkeypatch) -> tuple[int, str, str]:
    """One command line: ``[VAR=value …] [time] sactool ARGS [| jq FILTER]``, else bash."""
    pipe = None
    if re.search(r"\|\s*jq\s", cmd):
        cmd, pipe = (part.strip() for part in cmd.split("|", 1))
    words = shlex.split(cmd)
    env = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        k, _, v = words.pop(0).partition("=")
        env[k] = v
    if words[:1] == ["time"]:
        words.pop(0)
    if words[:1] != ["sactool"]:
        run = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300, env=shell_env())
        return run.returncode, run.stdout, run.stderr
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rc, out, err = run_sactool(words[1:], capsys)
    for k in env:
        monkeypatch.delenv(k)
    if pipe is not None:
        out = json.dumps(jq_path(json.loads(out), shlex.split(pipe)[1]), indent=2, ensure_ascii=False) + "\n"
    return rc, out, err


def normalise(text: str, workdir: Path) -> list[str]:
    bindir = Path(sys.executable).parent
    for path, name in ((str(workdir.resolve()), "."), (str(workdir), "."), (str(bindir.resolve()), ".venv/bin"),
                       (str(bindir), ".venv/bin"), (str(REPO), ".")):
        text = text.replace(path + "/", name + "/").replace(path, name)
    lines = [s.rstrip() for s in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def matches(shown: list[str], actual: list[str]) -> bool:
    """``shown`` against ``actual``: a line '…' is any lines, '…' in a line any text."""
    while shown and not shown[-1].strip():
        shown = shown[:-1]
    parts = []
    for s in shown:
        s = s.rstrip()
        if s.strip() == "…":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(x) for x in s.split("…")) + r"\n")
    return re.fullmatch("".join(parts), "".join(a + "\n" for a in actual)) is not None


def _line_matches(shown: str, actual: str) -> bool:
    return shown.strip() != "…" and matches([shown], [actual])


def refit_line(shown: str, actual: str) -> str:
    """``actual``, keeping each ``…`` of ``shown`` where it stands for something there still."""
    if "…" not in shown:
        return actual
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, shown, actual, autojunk=False).get_opcodes():
        part = shown[i1:i2]
        if op == "equal":
            out.append(part)
        elif "…" in part:
            out.append("…")
        else:
            out.append(actual[j1:j2])
    line = re.sub("…+", "…", "".join(out))
    return line if _line_matches(line, actual) else actual


CHANGED = 1.25    # the cost of a changed line in refit (added: 1, gone: 1.5)


def refit(shown: list[str], actual: list[str]) -> list[str]:
    """The shown lines rewritten to match ``actual`` with the fewest changes: matching lines kept,
    '…' lines kept (each still stands for the lines it covers, possibly none), a changed line
    replaced (:func:`refit_line`), a line gone dropped, a new one added — an edit distance over
    lines in which a '…' line absorbs any lines for free (a changed line costs a little more than a
    new one, so a line added before a kept one is an addition, not a change of both)."""
    while shown and not shown[-1].strip():
        shown = shown[:-1]
    n, m = len(shown), len(actual)
    wild = [s.strip() == "…" for s in shown]
    inf = float("inf")
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    cost[n][m] = 0.0
    for j in range(m - 1, -1, -1):
        cost[n][j] = cost[n][j + 1] + 1
    for i in range(n - 1, -1, -1):
        for j in range(m, -1, -1):
            if wild[i]:
                cost[i][j] = min(cost[i + 1][j], cost[i][j + 1] if j < m else inf)
                continue
            best = cost[i + 1][j] + 1.5                                   # the shown line is gone
            if j < m:
                same = _line_matches(shown[i], actual[j])
                best = min(best, cost[i + 1][j + 1] + (0 if same else CHANGED), cost[i][j + 1] + 1)
            cost[i][j] = best
    out, i, j = [], 0, 0
    while i < n or j < m:
        if i < n and wild[i]:
            if j < m and cost[i][j] == cost[i][j + 1]:
                j += 1
            else:
                out.append(shown[i])
                i += 1
        elif i < n and j < m and cost[i][j] == cost[i + 1][j + 1] + (0 if _line_matches(shown[i], actual[j])
                                                                      else CHANGED):
            out.append(shown[i] if _line_matches(shown[i], actual[j]) else refit_line(shown[i], actual[j]))
            i, j = i + 1, j + 1
        elif i < n and cost[i][j] == cost[i + 1][j] + 1.5:
            i += 1
        else:
            out.append(actual[j])
            j += 1
    return out


def rewrite(page: Path, fixes: list[tuple[Block, int, int, list[str]]]) -> None:
    """Put each fix (block, first and end index in its text, new lines) into the page, bottom up."""
    lines = page.read_text().splitlines(keepends=True)
    for block, a, b, new in sorted(fixes, key=lambda f: (f[0].line, f[1]), reverse=True):
        indent = re.match(r"^(\s*)", lines[block.line - 1]).group(1)
        lines[block.line + a:block.line + b] = [(indent + s if s else s) + "\n" for s in new]
    page.write_text("".join(lines))


# ---- the working directory ------------------------------------------------------------------------

def workdir_for(tmp_path: Path) -> Path:
    """A working directory with a short path of fixed length (``/tmp/docs-XXXXXXXX``) where /tmp is
    writable: sactool prints a recording's absolute root, and rich wraps a line that this path
    makes longer than the terminal, so its length must not depend on pytest's tmp_path."""
    base = Path("/tmp")
    wd = Path(tempfile.mkdtemp(prefix="docs-", dir=base)) if os.access(base, os.W_OK) else tmp_path / "work"
    wd.mkdir(exist_ok=True)
    (wd / "sactool").symlink_to(REPO / "sactool")
    # the shipped examples only: a profile the README's tune left in the checkout's profiles/ is
    # the user's, and tune without --out writes here, not there (issue 27, N1)
    (wd / "profiles").mkdir()
    (wd / "profiles" / "examples").symlink_to(REPO / "profiles" / "examples")
    (wd / "tests").mkdir()
    (wd / "tests" / "fixtures").symlink_to(REPO / "tests" / "fixtures")
    return wd


def prepare(block: Block, wd: Path, monkeypatch) -> None:
    for spec in block.options.get("recording", []):
        name, _, as_dir = spec.partition(":")
        if not (wd / (as_dir or name)).exists():
            unpack(name, wd / (as_dir or name))
    monkeypatch.setenv("COLUMNS", block.options.get("columns", ["100"])[-1])
    for spec in block.options.get("env", []):
        k, _, v = spec.partition(":")
        monkeypatch.setenv(k, v)


def check_block(block: Block, wd: Path, capsys, monkeypatch, fixes: list | None = None) -> list[str]:
    """The block's commands run in ``wd``; a description of each difference (none: as shown).
    With ``fixes`` (a list), a drifted output is not a problem but a fix appended to it."""
    problems = []
    prepare(block, wd, monkeypatch)
    want_rc = int(block.options.get("rc", ["0"])[-1])
    streams = block.options.get("streams", ["both"])[-1]
    for cmd, a, b in spans_of(block):
        shown = block.text[a:b]
        rc, out, err = run_line(cmd, capsys, monkeypatch)
        text = {"stdout": out, "stderr": err}.get(streams, out + err)
        actual = normalise(text, wd)
        expect = 0 if cmd.split()[0] in SETUP else want_rc
        if rc != expect:
            problems.append(f"{block.where}: `{cmd}` exited {rc}, expected {expect}\n{out}{err}")
        elif matches(shown, actual):
            continue
        elif fixes is not None and matches(new := refit(shown, actual), actual):
            fixes.append((block, a, a + len(shown) - sum(1 for _ in _trailing_blank(shown)), new))
        else:
            problems.append(f"{block.where}: `{cmd}` printed (normalised):\n" + "\n".join(actual)
                            + "\n--- the page shows:\n" + "\n".join(shown)
                            + "\n(scripts/update-doc-examples rewrites it)")
    return problems


def _trailing_blank(lines: list[str]):
    for s in reversed(lines):
        if s.strip():
            return
        yield s


# ---- the tests --------------------------------------------------------------------------------------

@pytest.fixture
def workdir(tmp_path, monkeypatch):
    wd = workdir_for(tmp_path)
    monkeypatch.chdir(wd)
    monkeypatch.delenv("SACTOOL_SYSFS_ROOT", raising=False)
    yield wd
    monkeypatch.chdir(tmp_path)
    shutil.rmtree(wd, ignore_errors=True)


def test_every_console_block_is_compared_or_a_dated_live_measurement():
    bad = []
    for b in ALL_BLOCKS:
        prompts = any(s.startswith("$ ") for s in b.text)
        if prompts and b.info != "console":
            bad.append(f"{b.where}: a '$ ' prompt in a '{b.info or 'plain'}' block (make it 'console' with a marker)")
        if b.info != "console":
            continue
        if b.marker is None:
            bad.append(f"{b.where}: console block without <!-- example: … --> or <!-- live: WHERE, DATE -->")
        elif b.marker[0] == "live" and not DATE.search(b.marker[1]):
            bad.append(f"{b.where}: live block without a YYYY-MM-DD date saying when it was measured")
        elif not prompts:
            bad.append(f"{b.where}: console block without a '$ ' command")
    assert bad == [], "\n".join(bad)


PAGES_WITH_EXAMPLES = sorted({b.page for b in ALL_BLOCKS if b.marker and b.marker[0] == "example"})


@pytest.mark.parametrize("page", PAGES_WITH_EXAMPLES, ids=lambda p: str(p.relative_to(REPO)))
def test_examples_run_as_shown(page, workdir, capsys, monkeypatch):
    problems: list[str] = []
    fixes: list | None = [] if UPDATE else None
    for b in (b for b in ALL_BLOCKS if b.page == page and b.marker and b.marker[0] == "example"):
        problems += check_block(b, workdir, capsys, monkeypatch, fixes)
    if fixes:
        rewrite(page, fixes)
        print(f"{page.relative_to(REPO)}: rewrote {len(fixes)} example output(s)")
    assert problems == [], "\n\n".join(problems)


def test_the_collector_can_fail(tmp_path, workdir, capsys, monkeypatch):
    """A shown output that differs from what the command prints is reported, with where it is."""
    page = tmp_path / "p.md"
    page.write_text("<!-- example: -->\n```console\n$ sactool --version\n0.0.0-not-this\n```\n"
                    "<!-- example: -->\n```console\n$ sactool --version\n…\n```\n")
    wrong, right = blocks_of(page)
    assert check_block(right, workdir, capsys, monkeypatch) == []
    (problem,) = check_block(wrong, workdir, capsys, monkeypatch)
    assert "p.md:2" in problem and "0.0.0-not-this" in problem


def test_refit_keeps_the_ellipses_and_changes_only_what_drifted(tmp_path):
    shown = ["head", "…", "fetch … µs per token, pool 1.23 GiB", "gone", "tail", "…"]
    actual = ["head", "x", "y", "fetch 901 µs per token, pool 1.50 GiB", "new", "tail", "z"]
    new = refit(shown, actual)
    assert matches(new, actual)
    assert new == ["head", "…", "fetch … µs per token, pool 1.50 GiB", "new", "tail", "…"]
    assert refit(["a", "b"], ["a", "b"]) == ["a", "b"] and refit([], ["x"]) == ["x"]
    assert refit(["a", "c", "…"], ["a", "b", "c", "d"]) == ["a", "b", "c", "…"]     # added, not changed
    page = tmp_path / "p.md"
    page.write_text("text\n  <!-- example: -->\n  ```console\n  $ true\n  old\n  $ true\n  keep\n  ```\n")
    (b,) = blocks_of(page)
    (first, a, e), _ = spans_of(b)
    rewrite(page, [(b, a, e, ["new 1", "", "new 2"])])
    assert page.read_text() == ("text\n  <!-- example: -->\n  ```console\n  $ true\n  new 1\n\n  new 2\n"
                                "  $ true\n  keep\n  ```\n")


def test_update_mode_rewrites_a_drifted_block(tmp_path, workdir, capsys, monkeypatch):
    """What scripts/update-doc-examples does to a page: the drifted output rewritten, then as shown."""
    from sactool import __version__

    page = tmp_path / "p.md"
    page.write_text("<!-- example: -->\n```console\n$ sactool --version\n0.0.0-not-this\n```\n")
    fixes: list = []
    (b,) = blocks_of(page)
    assert check_block(b, workdir, capsys, monkeypatch, fixes) == [] and len(fixes) == 1
    rewrite(page, fixes)
    (b,) = blocks_of(page)
    assert check_block(b, workdir, capsys, monkeypatch) == []
    assert __version__ in page.read_text() and "not-this" not in page.read_text()


def test_matching_rules():
    assert matches(["a …", "…", "z"], ["a 1.5 s", "b", "c", "z"])
    assert matches(["a", "…"], ["a"])
    assert not matches(["a", "z"], ["a", "b", "z"])
    assert not matches(["fetch 1.2 ms"], ["fetch 1.3 ms"])
    assert jq_path({"v": {"p": [1, {"n": 2}]}}, ".v.p[1]") == {"n": 2}


def test_readme_is_read_in_five_minutes_and_its_links_resolve():
    """README.md stays one short page (issue 21: at most 200 lines) and every relative link or
    picture in it names a file of this checkout (mkdocs checks docs/, not the README)."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200, len(text.splitlines())
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"^[a-z]+://", t)]
    assert "docs/images/probe-sac2s.png" in local and "docs/images/serve-plan-sac2s.png" in local
    assert [t for t in local if not (REPO / t).exists()] == []


# ---- commands shown without their output -----------------------------------------------------------

def sactool_lines(page: Path) -> list[str]:
    """Every ``sactool …`` command line a page shows: in code spans, and at the start of a line of a
    fenced block (after ``$ ``, ``mpirun …``, ``VAR=value``); MPMD ``:`` parts one by one."""
    found = [m.group(1) for m in re.finditer(r"`(sactool [^`]+)`", page.read_text())]
    text = "\n".join(s for b in ALL_BLOCKS if b.page == page for s in b.text).replace("\\\n", " ")
    for m in re.finditer(r"^\s*(?:\$ )?(?:[A-Z_]+=\S+ )*(?:mpirun [^\n]*?)?(sactool [^\n#]*)", text, re.M):
        found += ["sactool " + part.split("sactool ", 1)[1] if "sactool " in part else part
                  for part in m.group(1).split(" : ")]
    return [s.replace("\\", " ") for s in found]


def _choices(param) -> list[str] | None:
    """The values an option accepts, when it has a fixed set (an Enum annotation, a click Choice)."""
    import enum

    ann = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return [str(e.value) for e in ann]
    return getattr(getattr(param, "type", None), "choices", None)


def unknown_words(line: str) -> list[str]:
    """The subcommand or option names of a ``sactool`` command line that its definition lacks
    (``--help`` aside); placeholders (``…``, ``[a|b]``, ``show|validate``, ``P``) are not names."""
    from sactool.cli.reference import command

    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    cmd, i, bad = command, 1, []
    while hasattr(cmd, "commands") and i < len(words) and not words[i].startswith("-"):
        if words[i] in cmd.commands:
            cmd, i = cmd.commands[words[i]], i + 1
            continue
        if re.fullmatch(r"[a-z][a-z0-9-]+", words[i]):
            bad.append(f"subcommand {words[i]!r}")
        break
    params = {o: p for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    rest = words[i:]
    for k, w in enumerate(rest):
        if w == "--":
            break
        name, eq, value = w.partition("=")
        if not re.match(r"^--?[A-Za-z]", name) or name == "--help":
            continue
        if name not in params:
            bad.append(name)
            continue
        choices = _choices(params[name])
        value = value if eq else (rest[k + 1] if k + 1 < len(rest) else "")
        if choices and re.fullmatch(r"[\w.-]+", value) and not value.isupper() and value not in choices:
            bad.append(f"{name} {value} (one of {', '.join(map(str, choices))})")
    return bad


def test_every_sactool_command_the_pages_show_names_real_options():
    """A command line shown without its output (``bash`` blocks, inline code) still cannot drift:
    each subcommand and option it names exists in the command definitions, and a value given to
    an option with choices is one of them."""
    bad, seen = [], 0
    for page in PAGES:
        for line in sactool_lines(page):
            seen += 1
            if unknown := unknown_words(line):
                bad.append(f"{page.relative_to(REPO)}: `{line.strip()}`: no {', '.join(unknown)}")
    assert seen > 100 and bad == [], "\n".join(bad)
    assert unknown_words("sactool bench gahter --node 0") == ["subcommand 'gahter'"]
    assert unknown_words("sactool tune --model m --no-such-flag 1 -- --sglang-flag") == ["--no-such-flag"]
    assert unknown_words("sactool probe --format tabel")[0].startswith("--format tabel (one of")
    assert unknown_words("sactool probe --format=json") == unknown_words("sactool probe --format F") == []


FILE_KINDS = ("yaml", "json", "python", "toml")


def test_every_other_block_is_commands_a_file_a_format_or_the_layout():
    bad = []
    for b in ALL_BLOCKS:
        kind = b.marker[0] if b.marker else None
        if b.info in ("console", "bash", *FILE_KINDS):
            continue
        if b.info != "text" or kind not in ("format", "layout"):
            bad.append(f"{b.where}: a '{b.info or 'plain'}' block: make it console (compared or live), bash, "
                       f"{'/'.join(FILE_KINDS)}, or text under <!-- format: FILE … --> or <!-- layout: -->")
        elif kind == "format" and not [w for w in re.findall(r"[\w./-]+\.\w+", b.marker[1]) if (REPO / w).is_file()]:
            bad.append(f"{b.where}: <!-- format: … --> names no file of the checkout that prints it")
    assert bad == [], "\n".join(bad)


def layout_paths(block: Block) -> list[str]:
    """The paths a layout tree names: the leading words of each line (relative to the package, or
    to the checkout for a top-level ``docs/…``), and ``dir/file.py`` words in the descriptions."""
    root = block.text[0].strip().rstrip("/")
    out = []
    for s in block.text[1:]:
        words = s.split()
        top = not s.startswith(" ")
        lead = []
        for w in words:
            if not re.fullmatch(r"[\w./<>-]+(/|\.py|\.md)", w):
                break
            lead.append(w)
        out += [w if top else f"{root}/{w}" for w in lead]
        out += [f"{root}/{w}" for w in re.findall(r"\b(\w+/\w+\.py)\b", s[len(" ".join(lead)) + 2:])]
    return out


def test_the_layout_trees_name_only_what_exists():
    trees = [b for b in ALL_BLOCKS if b.marker and b.marker[0] == "layout"]
    assert trees
    for b in trees:
        paths = layout_paths(b)
        assert len(paths) > 10, (b.where, paths)
        assert [p for p in paths if not (REPO / p).exists()] == [], b.where


def test_every_path_of_this_checkout_the_pages_name_exists():
    """A file moved or renamed (`sactool/…`, `tests/…`, `scripts/…`, `profiles/…`, `docs/…` in code)
    without the manual following fails here; a recording may be named without ``.tar.gz``.
    docs/sources.md is left out: it cites other repositories' paths."""
    bad, seen = [], 0
    for page in PAGES:
        if page == REPO / "docs" / "sources.md":
            continue
        for m in re.finditer(r"`((?:sactool|tests|scripts|profiles|docs)/[\w./-]*)`", page.read_text()):
            seen += 1
            path = REPO / m.group(1)
            if not (path.exists() or path.with_name(path.name + ".tar.gz").exists()):
                bad.append(f"{page.relative_to(REPO)}: `{m.group(1)}`")
    assert seen > 50 and bad == [], "\n".join(bad)
