"""bench on a device-DAX buffer (issue 30, seen on a real kernel): the placement is the mapping — no
move_pages verdict, no THP warning (the device maps with its own align), and the header names the
device and its target node instead of a node that is not online in the devdax phase.

A regular file stands in for /dev/daxX.Y (the same mmap(MAP_SHARED) at an offset); the real device
is covered by scripts/live-cxl (CHECK bench-devdax)."""

from __future__ import annotations

import io

from rich.console import Console

from sactool.bench.api import BenchOptions, _buffer_warnings
from sactool.memory import map_shared

MiB = 1 << 20


def _devdax_buffer(tmp_path):
    f = tmp_path / "dax0.0"
    with open(f, "wb") as fh:
        fh.truncate(8 * MiB)
    buf = map_shared(str(f), 8 * MiB, 2 * MiB, 4 * MiB, offset_bytes=0, node=2, name="dax0.0")
    buf.verify(4096)
    return buf


def test_devdax_buffer_warns_neither_unverified_nor_thp(tmp_path):
    buf = _devdax_buffer(tmp_path)
    try:
        d = buf.describe()
        codes = [w["code"] for w in _buffer_warnings(d, BenchOptions(dax="dax0.0", tests=("bandwidth",)), 2,
                                                     4 * MiB, 1 * MiB)]
        assert codes == [] and d["verified_by"] == "mapping" and d["mapping"]["verified"]
        # the same description without a mapping (an anonymous buffer) would warn on both
        anon = {**d, "mapping": None, "verified_fraction": 0.0, "hugepage_fraction": 0.0}
        anon.pop("mapping")
        codes = [w["code"] for w in _buffer_warnings(anon, BenchOptions(node=2, tests=("bandwidth",)), 2, 4 * MiB, MiB)]
        assert codes == ["placement_unverified", "thp_not_granted"]
    finally:
        buf.close()


def test_devdax_mapping_elsewhere_is_unverified_with_its_reason(tmp_path):
    buf = _devdax_buffer(tmp_path)
    try:
        d = buf.describe()
        d["mapping"] = {**d["mapping"], "verified": False, "reason": "at offset 0, not 2097152"}
        (w,) = _buffer_warnings(d, BenchOptions(dax="dax0.0", tests=("bandwidth",)), 2, 4 * MiB, MiB)
        assert w["code"] == "placement_unverified" and "at offset 0, not 2097152" in w["message"]
        assert "short of free memory" not in w["hint"]
    finally:
        buf.close()


def test_header_names_the_device_and_its_target_node(tmp_path):
    from sactool.bench import record as R
    from sactool.render.bench import _header

    buf = _devdax_buffer(tmp_path)
    try:
        bdesc = buf.describe()
    finally:
        buf.close()
    rec = R.from_data({"kind": R.KIND, "schema_version": R.SCHEMA_VERSION, "sactool_version": "0", "created_at": "x",
                       "machine": {}, "command": "latency", "tests": ["latency"], "protocol": {"preset": "fast"},
                       "memory_node": 2, "dax_device": {"name": "dax0.0", "path": "/dev/dax0.0", "target_node": 2,
                                                        "target_node_online": False},
                       "cpu_node": 0, "cpus": [0], "stand_in": None, "llc_bytes": MiB, "buffer_rule": {},
                       "buffer": bdesc, "results": [], "warnings": [], "complete": True})
    out = io.StringIO()
    _header(Console(file=out, width=200), rec)
    text = out.getvalue()
    assert "memory dax0.0 (device-DAX, target node2, not online as a node)" in text
    assert "mapping verified (/proc/self/maps)" in text and "verified on node" not in text
