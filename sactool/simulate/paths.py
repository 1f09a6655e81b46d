"""A rank's path to the memory its swap-ins read (``engine.PathModel``), from a platform's fields."""

from __future__ import annotations

from sactool.bench.record import lines_touched
from sactool.simulate import engine


def path_model(p, placement: str, record_bytes: int, common_s: float = 0.0) -> engine.PathModel:
    """A rank's path to the memory it gathers from. A curve's measured all-threads bandwidth
    (``aggregate_bytes_per_s``, from a bench record) is what one memory node/device delivers, shared
    by the ranks mapped to it. ``common_s``: the calibrated cost per missed record every placement
    pays (``calibration``)."""
    curve = p.gather_cxl if placement == "sac" else p.gather_dram
    fixed, slope = curve.line()
    # one record = one warp's dependent 8-byte loads over the cache lines it touches: scale the
    # measured per-record time by lines touched (656 B -> 11 lines, 1152 B -> 18), as bench does
    s_rec = slope * lines_touched(record_bytes) / lines_touched(curve.record_bytes)
    agg = curve.aggregate_bytes_per_s
    if placement == "sac":
        dev = min(p.cxl_device_read_bytes_per_s, agg) if agg else p.cxl_device_read_bytes_per_s
        return engine.PathModel(fixed, s_rec, min(p.gpu_link_bytes_per_s, p.cxl_gpu_path_bytes_per_s),
                                dev, p.cxl_devices, common_s)
    if agg:
        return engine.PathModel(fixed, s_rec, p.gpu_link_bytes_per_s, agg, p.dram_nodes, common_s)
    return engine.PathModel(fixed, s_rec, p.gpu_link_bytes_per_s, None, 1, common_s)
