"""Issue 11 item 11 (and the --sysfs-root part of item 8): a recorded tree is never read outside
its root, a FIFO or device in it never blocks or is opened, and ``probe --snapshot`` archives
nothing from outside. Real probe processes with a timeout: the FIFO case used to hang forever."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from fixtures.trees import unpack

from sactool.host.sysfs import SysfsReader

NODE = "sys/devices/system/node"
DAX = "sys/devices/platform/ACPI0017:00/root0/decoder0.0/region0/dax_region0/dax0.0"
SACTOOL = str(Path(sys.executable).with_name("sactool"))
SECRET = "SECRET-7f3a-not-for-bug-reports"


@pytest.fixture()
def tree(tmp_path) -> Path:
    return unpack("ram__10-region", tmp_path / "tree")


@pytest.fixture()
def secret(tmp_path) -> Path:
    p = tmp_path / "outside" / "shadow"
    p.parent.mkdir()
    p.write_text(SECRET + "\n")
    return p


def _probe(root: Path, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([SACTOOL, "probe", "--sysfs-root", str(root), *extra],
                          capture_output=True, text=True, timeout=timeout)


def test_fifo_in_tree_does_not_hang_probe(tree):
    (tree / NODE / "node1/meminfo").unlink()
    os.mkfifo(tree / NODE / "node1/meminfo")
    r = _probe(tree, "-f", "json")  # used to block in open() forever
    assert r.returncode == 0, r.stderr
    assert f"{NODE}/node1/meminfo: not a regular file (fifo)" in r.stdout


@pytest.mark.parametrize("absolute", [True, False])
def test_link_outside_the_tree_is_not_read_printed_or_archived(tree, secret, tmp_path, absolute):
    attr = tree / NODE / "node1/meminfo"
    attr.unlink()
    attr.symlink_to(secret if absolute else os.path.relpath(secret, attr.parent))
    snap = tmp_path / "snap.tar.gz"
    r = _probe(tree, "--snapshot", str(snap))
    assert r.returncode == 0, r.stderr
    assert SECRET not in r.stdout + r.stderr
    j = _probe(tree, "-f", "json")
    assert j.returncode == 0 and SECRET not in j.stdout + j.stderr
    assert f"{NODE}/node1/meminfo: resolves outside the sysfs root" in j.stdout
    with tarfile.open(snap) as tar:
        members = tar.getmembers()
        assert not any(m.name.endswith("node1/meminfo") for m in members)
        assert all(SECRET.encode() not in (tar.extractfile(m).read() if m.isfile() else b"") for m in members)
        # the archive is one a careful user can unpack (tarfile's "data" filter refuses links leaving it)
        if hasattr(tarfile, "data_filter"):
            tar.extractall(tmp_path / "replay", filter="data")


def test_directory_link_outside_is_not_listed(tree, secret):
    (tree / "sys/class").mkdir(parents=True, exist_ok=True)
    os.symlink(secret.parent, tree / "sys/class/escape")
    r = SysfsReader(tree)
    assert r.listdir("sys/class/escape") == [] and r.why("sys/class/escape") == "resolves outside the sysfs root"
    assert r.is_dir("sys/class/escape") is False
    assert r.text("sys/class/escape/shadow") is None
    assert r.readlink("sys/class/escape/shadow") is None and r.exists("sys/class/escape/shadow") is False


def test_links_inside_the_tree_still_work(tree):
    r = SysfsReader(tree)
    assert os.path.islink(tree / "sys/bus/cxl/devices/region0")
    assert r.resolve("sys/bus/cxl/devices/region0") is not None
    assert r.text("sys/bus/cxl/devices/region0/size") is not None  # through the link, inside the tree
    # an absolute link is refused even when its target happens to lie inside the tree: it names a
    # place on the machine that unpacked the tarball, not in the recording (openat2's RESOLVE_BENEATH)
    (tree / "sys/bus/cxl/abs").symlink_to(tree / DAX / "size")
    assert r.text("sys/bus/cxl/abs") is None and r.why("sys/bus/cxl/abs") == "resolves outside the sysfs root"


def test_live_sysfs_links_work():
    live = SysfsReader("/")
    names = live.listdir("sys/bus/node/devices")  # each entry is a link into sys/devices/system/node
    assert names and all(os.path.islink(f"/sys/bus/node/devices/{n}") for n in names)
    assert live.text(f"sys/bus/node/devices/{names[0]}/cpulist") is not None


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root")
def test_device_node_is_not_opened(tree):
    attr = tree / DAX / "size"
    attr.unlink()
    os.mknod(attr, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers: reading it never ends
    r = SysfsReader(tree)
    assert r.text(f"{DAX}/size") is None and r.why(f"{DAX}/size") == "not a regular file (character device)"
    from sactool.host.files import NotRead, read_regular

    with pytest.raises(NotRead, match="character device"):
        read_regular(attr, tree)


def _env() -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if "PYTHONPATH" in os.environ:  # checking these tests against another checkout
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="switching to uid 65534 needs root and setpriv")
def test_unreadable_root_as_user_is_exit_3():
    """``--sysfs-root`` a non-root user cannot read: a one-line error and exit 3, not a traceback."""
    d = Path(tempfile.mkdtemp(prefix="sactool-unreadable-"))  # mode 0700, owned by root
    try:
        unpack("ram__10-region", d / "t")
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", SACTOOL, "probe",
                            "--sysfs-root", str(d / "t")], capture_output=True, text=True, timeout=300,
                           env=_env())
        assert r.returncode == 3, r.stderr
        assert "Traceback" not in r.stderr and r.stderr.startswith("error: ")
        os.chmod(d, 0o755)
        os.chmod(d / "t" / "sys" / "devices" / "system" / "node", 0o700)
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", SACTOOL, "probe",
                            "--sysfs-root", str(d / "t")], capture_output=True, text=True, timeout=300,
                           env=_env())
        assert r.returncode == 3 and "permission denied" in r.stderr, r.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)
