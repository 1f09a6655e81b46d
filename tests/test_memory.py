"""Placement: real buffers on node 0 (this machine has one node), verified with move_pages; the
multi-node/DAX rules on recorded machine trees."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from fixtures.trees import unpack
from sactool.errors import CapacityError, ExitCode, TopologyError, UsageError
from sactool.host.sysfs import SysfsReader
from sactool.memory import allocate, check_cpu_node, check_fits, free_estimate, map_devdax
from sactool.memory import syscalls as sc
from sactool.memory.nodes import FreeEstimate, topology

MiB = 1 << 20


def test_bind_node0_verified_every_page():
    with allocate(32 * MiB, node=0, prefault_threads=2) as buf:
        r = buf.report
        assert r.pages_checked == r.pages_total == 32 * MiB // mmap.PAGESIZE
        assert r.node_pages == {0: r.pages_total}
        assert r.verified_fraction == 1.0
        assert 0 <= r.hugepage_bytes <= 32 * MiB
        d = buf.describe()
        assert d["memory_nodes"] == [0] and d["verified_fraction"] == 1.0
        a = buf.array("uint64")
        assert a.size == 32 * MiB // 8 and a.ctypes.data == buf.address
        a[:] = 7  # writable through the buffer protocol
        assert int(a.sum()) == 7 * a.size
        del a


def test_sampled_verification_and_page_nodes_syscall():
    with allocate(16 * MiB, node=0, hugepages="none") as buf:
        r = buf.verify(sample_pages=100)
        assert r.pages_checked == 100 and r.verified_fraction == 1.0
        assert r.hugepage_bytes == 0  # MADV_NOHUGEPAGE
        st = sc.page_nodes([buf.address, buf.address + 4096])
        assert st == [0, 0]


def test_unmapped_page_reports_errno():
    m = mmap.mmap(-1, 2 * mmap.PAGESIZE)  # never touched: not present
    import ctypes

    c = ctypes.c_char.from_buffer(m)
    addr = ctypes.addressof(c)
    del c
    assert sc.page_nodes([addr])[0] < 0
    m.close()


@pytest.mark.parametrize("kw", [dict(policy="preferred"), dict(policy="interleave", nodes=[0]), dict(weights={0: 3})])
def test_other_policies_on_node0(kw):
    with allocate(8 * MiB, node=0, **kw) as buf:
        assert buf.report.verified_fraction == 1.0


def test_nodemask_layout():
    arr, maxnode = sc.nodemask([0, 65])
    assert (arr[0], arr[1], maxnode) == (1, 2, 129)


def test_nonexistent_node():
    with pytest.raises(TopologyError) as e:
        allocate(MiB, node=42)
    assert e.value.exit_code == ExitCode.UNAVAILABLE and "node" in e.value.message


def test_bad_arguments():
    with pytest.raises(UsageError):
        allocate(0, node=0)
    with pytest.raises(UsageError):
        allocate(MiB, node=0, hugepages="3MB")
    with pytest.raises(UsageError):
        allocate(MiB, node=0, policy="scatter")


def test_too_large_refused_but_node_meminfo_undercount_is_not():
    topo = topology()
    est = free_estimate(topo, SysfsReader(), 0)
    # more than the machine holds at all (a computed bound: MemFree + clean page cache ≤ MemTotal), so
    # the refusal cannot hinge on how much happens to be free between the estimate and the call
    total = SysfsReader().kv("proc/meminfo")["MemTotal"]
    assert est.bytes <= total
    with pytest.raises(CapacityError) as e:
        allocate(total + 1024 * MiB, node=0)
    assert e.value.exit_code == ExitCode.CAPACITY and "--size" in e.value.hint
    # what /proc/meminfo counts free is usable even when node0/meminfo shows less
    proc_free = SysfsReader().kv("proc/meminfo")["MemFree"]
    assert est.bytes >= min(proc_free, topo.node(0).mem_free_bytes or 0)


def test_free_rule_margin():
    fe = FreeEstimate(node=2, bytes=10 * 1024 * MiB, total_bytes=16 * 1024 * MiB, source="test")
    check_fits(fe, 9 * 1024 * MiB)
    with pytest.raises(CapacityError):
        check_fits(fe, 10 * 1024 * MiB - 100 * MiB)  # inside the 3%-of-16 GiB margin


def test_hugetlb_without_pool_is_a_capacity_error():
    total = SysfsReader().int("sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages") or 0
    if total * 2 * MiB >= 4 * MiB:
        with allocate(4 * MiB, node=0, hugepages="2MB") as buf:
            assert buf.report.verified_fraction == 1.0
    else:
        with pytest.raises(CapacityError) as e:
            allocate(4 * MiB, node=0, hugepages="2MB")
        assert "nr_hugepages" in e.value.hint


def test_recorded_topology_is_refused(tmp_path):
    root = unpack("ram__30-system-ram", tmp_path / "t")
    with pytest.raises(TopologyError) as e:
        allocate(MiB, node=2, reader=SysfsReader(root))
    assert "record" in e.value.message


def test_cpu_less_node_cannot_run_threads(tmp_path):
    topo = topology(SysfsReader(unpack("ram__30-system-ram", tmp_path / "t")))
    with pytest.raises(TopologyError) as e:
        check_cpu_node(topo, 2)
    assert "no CPUs" in e.value.message and "node0" in e.value.hint


def test_devdax_rules_on_recordings(tmp_path):
    sysram = SysfsReader(unpack("ram__30-system-ram", tmp_path / "a"))
    with pytest.raises(TopologyError) as e:
        map_devdax("dax0.0", reader=sysram)
    assert "system-ram" in e.value.message and "--node 2" in e.value.hint
    devdax = SysfsReader(unpack("ram__20-devdax", tmp_path / "b"))
    with pytest.raises(CapacityError):
        map_devdax("/dev/dax0.0", 1 << 40, reader=devdax)
    with pytest.raises(TopologyError) as e:
        map_devdax("dax0.0", reader=devdax)
    assert "recorded" in e.value.message
    with pytest.raises(TopologyError):
        map_devdax("dax9.9", reader=devdax)
    with pytest.raises(UsageError):
        map_devdax("/dev/sda")


def test_close_with_live_view_is_safe():
    """close() with a view alive no longer keeps the mapping silently (issue 18): it refuses, loudly,
    and the view stays valid (nothing unmapped under it); once the view goes, close() unmaps."""
    buf = allocate(4 * MiB, node=0)
    v = np.frombuffer(buf.mmap, dtype=np.uint8)
    with pytest.raises(BufferError, match="still exported by live views"):
        buf.close()
    assert v[0] == 1  # pre-faulted pages hold the written byte: still mapped
    del v
    buf.close()
    assert buf.closed


def test_free_estimate_counts_clean_inactive_page_cache(machine):
    """Recorded dev VM: node0 MemFree 8783940 kB, Inactive(file) 5260040 kB, Dirty 94260 kB,
    Writeback 0; /proc/meminfo MemFree 11629496 kB (2845556 kB no node reports)."""
    from sactool.memory.nodes import reclaimable_file_bytes

    reader = SysfsReader(machine("this-machine"))
    topo = topology(reader)
    assert reclaimable_file_bytes(reader, 0) == (5260040 - 94260) * 1024
    est = free_estimate(topo, reader, 0)
    assert est.bytes == (11629496 + 5260040 - 94260) * 1024 and "page cache" in est.source


def test_map_shared_slices_a_file_at_offsets(tmp_path):
    """A file stands in for /dev/daxX.Y: the same mmap(MAP_SHARED) at an aligned offset; each slice
    writes where the file says it is, and slices outside the device or off its align are refused."""
    from sactool.memory import map_shared

    f = tmp_path / "dax0.0"
    with open(f, "wb") as fh:
        fh.truncate(8 * MiB)
    a = map_shared(str(f), 8 * MiB, 2 * MiB, MiB, offset_bytes=2 * MiB)
    b = map_shared(str(f), 8 * MiB, 2 * MiB, 3 * MiB, offset_bytes=4 * MiB)
    assert (a.size_bytes, a.offset_bytes, b.size_bytes, b.offset_bytes) == (2 * MiB, 2 * MiB, 4 * MiB, 4 * MiB)
    a.mmap[0:1], b.mmap[0:1] = b"A", b"B"
    # read back as on a real /dev/daxX.Y: through a second MAP_SHARED mapping (msync and read/pread
    # return EINVAL on a device-DAX mapping, so neither flush() nor reading the file proves anything there)
    import mmap as _mmap

    with open(f, "r+b") as fh:
        second = _mmap.mmap(fh.fileno(), 8 * MiB, flags=_mmap.MAP_SHARED, prot=_mmap.PROT_READ)
    try:
        assert second[2 * MiB:2 * MiB + 1] == b"A" and second[4 * MiB:4 * MiB + 1] == b"B" and second[0:1] == b"\0"
    finally:
        second.close()
    a.close()
    b.close()
    with pytest.raises(UsageError):
        map_shared(str(f), 8 * MiB, 2 * MiB, MiB, offset_bytes=MiB)
    with pytest.raises(CapacityError):
        map_shared(str(f), 8 * MiB, 2 * MiB, 4 * MiB, offset_bytes=6 * MiB)


def test_devdax_placement_is_verified_as_a_mapping(tmp_path):
    """A devdax buffer's placement is its line of /proc/self/maps — the file, the offset, the length, the
    align — not move_pages (ENOENT for every page of a real /dev/dax mapping on 6.12); a mapping of
    another file, or at another offset, is reported as not verified."""
    from sactool.memory import map_shared
    from sactool.memory.placed import check_mapping

    f, g = tmp_path / "dax0.0", tmp_path / "other"
    for p in (f, g):
        with open(p, "wb") as fh:
            fh.truncate(8 * MiB)
    buf = map_shared(str(f), 8 * MiB, 2 * MiB, 2 * MiB, offset_bytes=4 * MiB)
    try:
        r = buf.verify()
        assert buf.mapping is not None and buf.mapping.verified, buf.mapping
        assert (buf.mapping.path, buf.mapping.offset_bytes, buf.mapping.length_bytes) == (str(f), 4 * MiB, 2 * MiB)
        assert r.verified_fraction == 1.0 and r.node_pages == {}
        d = buf.describe()
        assert d["verified_by"] == "mapping" and d["mapping"]["align_bytes"] == 2 * MiB
        assert not check_mapping(buf.address, buf.size_bytes, str(g), 4 * MiB, 2 * MiB).verified
        wrong = check_mapping(buf.address, buf.size_bytes, str(f), 2 * MiB, 2 * MiB)
        assert not wrong.verified and "offset 4194304, not 2097152" in wrong.reason
        assert "only" in check_mapping(buf.address, 4 * MiB, str(f), 4 * MiB, 2 * MiB).reason
    finally:
        buf.close()


def test_close_never_keeps_a_mapping_silently():
    """A view alive at close(): BufferError naming the mapping (it used to be swallowed, the buffer kept
    until a cyclic collection); a view held only by a reference cycle is collected and the mapping goes;
    close_after() lets an error already on its way out through."""
    import gc

    from sactool.memory import allocate
    from sactool.memory.placed import close_after

    buf = allocate(4 << 20, node=0, hugepages="none", prefault_threads=1)
    view = buf.array("uint8")
    with pytest.raises(BufferError, match="4.00 MiB mapping .* still exported by live views"):
        buf.close()
    assert not buf.closed
    del view
    buf.close()
    assert buf.closed and buf.mmap.closed

    buf = allocate(4 << 20, node=0, hugepages="none", prefault_threads=1)
    cycle: dict = {"view": buf.array("uint8")}
    cycle["self"] = cycle            # only a cycle keeps the view: close() collects it and unmaps
    del cycle
    gc.disable()
    try:
        buf.close()
    finally:
        gc.enable()
    assert buf.closed

    buf = allocate(4 << 20, node=0, hugepages="none", prefault_threads=1)
    keep = buf.array("uint8")
    with pytest.raises(ValueError, match="the real error"):
        try:
            raise ValueError("the real error")
        finally:
            close_after(buf)             # the view is alive, but the ValueError is what surfaces
    del keep
    buf.close()


def test_close_after_an_interrupted_run_does_not_crash_the_save():
    """A signal stopped the work (caught, the run returns what finished): a view the interrupted
    frames left must not turn the save into a BufferError traceback (a double SIGTERM to bench all lost
    its finished results that way); without the interruption it still raises."""
    from sactool.memory import allocate
    from sactool.memory.placed import close_after

    buf = allocate(4 << 20, node=0, hugepages="none", prefault_threads=1)
    keep = buf.array("uint8")
    with pytest.raises(BufferError):
        close_after(buf, interrupted=False)
    close_after(buf, interrupted=True)    # no error: the mapping goes with the process
    assert not buf.closed
    del keep
    buf.close()
    assert buf.closed


def test_aligned_zeros_starts_on_its_alignment_where_np_zeros_does_not():
    """The gather's ring (sactool.bench.suite.gather) starts on a page: np.zeros of a large array
    starts 16 B past one, and a 4096 B memcpy into it from line-aligned records ran 15-35 % slower."""
    from sactool.memory.placed import aligned_zeros

    n = 2048 * 4096
    # np.zeros(n) was the ring: mmap-backed it starts 16 B past a page, but once glibc has raised its mmap
    # threshold (after a large free, as in a long test process) it comes from the heap at any 16 B
    # boundary — so where it starts is not asserted here, only that aligned_zeros always starts aligned
    for align in (64, 4096, 2 << 20):
        a = aligned_zeros(n, align)
        assert a.ctypes.data % align == 0 and a.size == n and a.dtype == np.uint8 and not a.any()
        a[:] = 1                                                  # the whole slice is writable memory
    assert aligned_zeros(n).ctypes.data % mmap.PAGESIZE == 0
    with pytest.raises(ValueError, match="power of two"):
        aligned_zeros(n, 48)
