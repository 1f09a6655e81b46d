"""Issue 22, security: a recorded tree is someone else's tarball. Nothing outside it is read even
while another process swaps a link in (the race), a hard link out of it is neither echoed nor
archived, terminal escapes in it never reach the terminal raw, and a snapshot carries only the
/proc/iomem lines probe uses. Each case failed on e141ef7 (of 50,000 racing reads 13 returned the
outside file and 11 raised OSError from ``realpath``; the hard-linked cpulist was echoed and
archived; ESC reached the terminal; the whole iomem was kept)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from fixtures.trees import unpack

from sactool.host import files
from sactool.host.sysfs import SysfsReader

NODE = "sys/devices/system/node"
MEM0 = "sys/devices/pci0000:0c/0000:0c:00.0/0000:0d:00.0/mem0"
SACTOOL = str(Path(sys.executable).with_name("sactool"))
SECRET = "SECRET-7f3a-not-for-bug-reports"
HOSTILE = "\x1b]0;HACKED\x07\x1b[2J\x9b31m"

# Two processes: one renames a fresh regular file over proc/version, the other a fresh link to
# the secret; each ``rename`` is atomic, so a reader sees one or the other, never nothing.
SWAPPER = r"""
import os, sys, itertools
d, kind, target = sys.argv[1], sys.argv[2], sys.argv[3]
for i in itertools.count():
    tmp = os.path.join(d, f".{kind}{i}")
    if kind == "link":
        os.symlink(target, tmp)
    else:
        with open(tmp, "w") as f:
            f.write("Linux version 6.1.0-recorded (gcc) #1 SMP\n")
    os.rename(tmp, os.path.join(d, "version"))
"""


def _strings(obj) -> list[str]:
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return [obj] if isinstance(obj, str) else []


@pytest.fixture()
def tree(tmp_path) -> Path:
    return unpack("ram__10-region", tmp_path / "tree")


@pytest.fixture()
def secret(tmp_path) -> Path:
    p = tmp_path / "outside" / "shadow"
    p.parent.mkdir()
    p.write_text(f"Linux version {SECRET} root:$6$hash:19000:0:99999:7:::\n")
    p.chmod(0o600)
    return p


@pytest.fixture(params=["openat2", "walk"])
def mode(request):
    """Both ways of resolving beneath the root: openat2 (this kernel has it) and the O_NOFOLLOW walk."""
    files.use_openat2(False if request.param == "walk" else None)
    if request.param == "openat2" and files._openat2_syscall() is None:
        pytest.skip("this kernel has no openat2 (Linux < 5.6, or filtered); the walk is tested")
    assert (files._openat2_syscall() is None) == (request.param == "walk")
    yield request.param
    files.use_openat2(None)


@pytest.fixture()
def swapping(tree, secret):
    procs = [subprocess.Popen([sys.executable, "-c", SWAPPER, str(tree / "proc"), kind,
                               os.path.relpath(secret, tree / "proc") if kind == "link" else "-"])
             for kind in ("file", "link")]
    seen, deadline = set(), time.monotonic() + 60
    while len(seen) < 2 and time.monotonic() < deadline:   # both have started swapping
        seen.add(os.path.islink(tree / "proc/version"))
    yield tree
    for p in procs:
        p.kill()
        p.wait()


def test_no_leak_while_links_are_swapped_in(swapping, mode):
    reads = {"recorded": 0, "refused": 0, "leaked": 0}
    deadline = time.monotonic() + 20
    while sum(reads.values()) < 10_000 or (min(reads["recorded"], reads["refused"]) < 20 and time.monotonic() < deadline):
        r = SysfsReader(swapping)
        text = r.text("proc/version")
        if text is None:
            assert r.why("proc/version") == "resolves outside the sysfs root", r.why("proc/version")
            reads["refused"] += 1
        elif SECRET in text:
            reads["leaked"] += 1
        else:
            assert text.startswith("Linux version 6.1.0-recorded"), text
            reads["recorded"] += 1
    assert reads["leaked"] == 0, reads
    assert reads["recorded"] and reads["refused"], reads   # the swap really raced the reads


def test_probes_while_links_are_swapped_in(swapping):
    """A few whole probes (scripts/tree-race runs 200 and quotes the count)."""
    for _ in range(4):
        r = subprocess.run([SACTOOL, "probe", "--sysfs-root", str(swapping), "-f", "json"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert SECRET not in r.stdout + r.stderr


def test_walk_resolves_links_inside_and_refuses_escapes(tree, secret, mode):
    r = SysfsReader(tree)
    assert r.text("sys/bus/cxl/devices/region0/size") is not None   # relative links inside: followed
    assert r.resolve("sys/bus/cxl/devices/region0") == "sys/devices/platform/ACPI0017:00/root0/decoder0.0/region0"
    (tree / "sys/escape").symlink_to(os.path.relpath(secret.parent, tree / "sys"))
    (tree / "sys/up").symlink_to("../..")
    for rel in ("sys/escape/shadow", "sys/up/outside/shadow", "sys/../../outside/shadow"):
        assert r.text(rel) is None and r.why(rel) == "resolves outside the sysfs root", rel
    assert r.listdir("sys/escape") == [] and r.resolve("sys/escape/shadow") is None
    (tree / "sys/loop").symlink_to("loop")
    assert r.text("sys/loop") is None and "symbolic links" in r.why("sys/loop")


def test_hard_link_out_of_the_tree_is_neither_echoed_nor_archived(tree, secret, tmp_path, mode):
    cpulist = tree / NODE / "node1/cpulist"
    cpulist.unlink()
    os.link(secret, cpulist)
    r = SysfsReader(tree)
    assert r.text(f"{NODE}/node1/cpulist") is None
    assert r.why(f"{NODE}/node1/cpulist").startswith("hard-linked")
    snap = tmp_path / "snap.tar.gz"
    out = subprocess.run([SACTOOL, "probe", "--sysfs-root", str(tree), "--snapshot", str(snap)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert SECRET not in out.stdout + out.stderr and "root:$6$" not in out.stdout + out.stderr
    with tarfile.open(snap) as tar:
        blobs = [tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()]
    assert blobs and not any(b"root:$6$" in b or SECRET.encode() in b for b in blobs)


def test_terminal_escapes_from_the_tree_are_shown_escaped(tree):
    (tree / MEM0 / "firmware_version").write_text(HOSTILE + "\n")
    for env in ({}, {"FORCE_COLOR": "1", "COLUMNS": "200"}):   # plain, and rich styling as on a terminal
        r = subprocess.run([SACTOOL, "probe", "--sysfs-root", str(tree)], capture_output=True,
                           timeout=120, env={**os.environ, **env})
        assert r.returncode == 0, r.stderr
        out = r.stdout + r.stderr
        assert b"\x1b]0;" not in out and b"\x1b[2J" not in out and "\x9b".encode() not in out
        assert b"\\x1b]0;HACKED" in r.stdout and b"\\x1b[2J" in r.stdout   # rich drops the BEL itself
        if not env:
            assert b"\x1b" not in out
    j = subprocess.run([SACTOOL, "probe", "--sysfs-root", str(tree), "-f", "json"], capture_output=True,
                       timeout=120)
    assert b"\x1b" not in j.stdout and "\x9b".encode() not in j.stdout
    assert HOSTILE in _strings(json.loads(j.stdout))   # the data keep the value; only its display is escaped


def test_snapshot_keeps_only_the_iomem_lines_probe_uses(tmp_path):
    tree = unpack("sac2s__10-region", tmp_path / "tree")
    with open(tree / "proc/iomem", "a") as f:
        f.write("1a0000000-1a0ffffff : Soft Reserved\n")
    snap = tmp_path / "snap.tar.gz"
    r = subprocess.run([SACTOOL, "probe", "--sysfs-root", str(tree), "--snapshot", str(snap)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with tarfile.open(snap) as tar:
        iomem = tar.extractfile("proc/iomem").read().decode()
    assert "Kernel code" not in iomem and "System RAM\n" not in iomem and "PCI Bus" not in iomem
    assert iomem.splitlines() == ["190000000-28fffffff : CXL Window 0", "290000000-38fffffff : CXL Window 1",
                                  "1a0000000-1a0ffffff : Soft Reserved"]
    replay = unpack(snap, tmp_path / "replay")
    a, b = (json.loads(subprocess.run([SACTOOL, "probe", "--sysfs-root", str(t), "-f", "json"], capture_output=True,
                                      text=True, timeout=120).stdout)["iomem"] for t in (tree, replay))
    assert a == b and a["cxl_windows"]


def test_nested_soft_reserved_keeps_its_parents():
    from sactool.topology.snapshot import shareable_iomem

    text = ("100000000-17fffffff : System RAM\n  147800000-1487fffff : Kernel code\n"
            "c0000000-fe5fffff : PCI Bus 0000:00\n  d0000000-dfffffff : Reserved\n"
            "    d0000000-d0ffffff : Soft Reserved\n  e0000000-e0ffffff : 0000:00:01.0\n")
    assert shareable_iomem(text) == ("c0000000-fe5fffff : PCI Bus 0000:00\n  d0000000-dfffffff : Reserved\n"
                                     "    d0000000-d0ffffff : Soft Reserved\n")


@pytest.mark.skipif(not Path("/proc/iomem").exists(), reason="no /proc/iomem")
def test_live_snapshot_does_not_carry_kernel_addresses(tmp_path):
    snap = tmp_path / "live.tar.gz"
    r = subprocess.run([SACTOOL, "probe", "--snapshot", str(snap)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with tarfile.open(snap) as tar:
        iomem = tar.extractfile("proc/iomem").read().decode()
    assert "Kernel" not in iomem and "System RAM" not in iomem


def test_a_tree_full_of_escapes_prints_none_raw(tmp_path):
    """Every file of a recorded tree ends in escapes, and a directory name holds one: no output
    format lets one through raw (e141ef7: 6 lines of the table carried OSC and clear-screen)."""
    tree = unpack("sac2s__30-system-ram", tmp_path / "tree")
    for f in [p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()]:
        with open(f, "a") as fh:
            fh.write(HOSTILE)
    (tree / "sys/bus/cxl/devices" / "mem9\x1b[2J").mkdir(parents=True, exist_ok=True)
    for fmt in ("table", "json", "yaml"):
        r = subprocess.run([SACTOOL, "probe", "--sysfs-root", str(tree), "-f", fmt], capture_output=True, timeout=120,
                           env={**os.environ, "FORCE_COLOR": "1", "COLUMNS": "160"})
        assert r.returncode == 0, r.stderr
        out = r.stdout + r.stderr
        assert b"\x1b]" not in out and b"\x1b[2J" not in out and "\x9b".encode() not in out, fmt
