"""The OpenMetrics/Prometheus endpoint of ``sactool watch --listen HOST:PORT``, through
``prometheus_client``: a collector that turns the latest :class:`~sactool.watch.api.WatchSample`
into ``sactool_*`` families (base units in the names, counters ending ``_total``, labels
``target``, ``rank``, ``node``, ``memdev``, ``source``), served by prometheus_client's own HTTP
server (text format, or OpenMetrics when the scraper asks for it).

As node_exporter does per collector, every source has ``sactool_watch_source_up{source}`` (1: this
interval's read succeeded) and ``sactool_watch_source_age_seconds{source}``: a source that is absent
or stuck is a visible 0, not a missing series.
"""

from __future__ import annotations

import threading
from typing import Any, Iterator

METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "sactool_pool_bytes": ("gauge", "Present bytes of a rank's KV host pool per NUMA node (numa_maps).",
                           ("rank", "target", "node")),
    "sactool_pool_mapped_bytes": ("gauge", "Bytes of a rank's pool mappings (devdax: of its device).",
                                  ("rank", "target")),
    "sactool_pool_off_plan_bytes": ("gauge", "Bytes of a rank's pool not where the rank plan puts it.",
                                    ("rank", "target")),
    "sactool_pool_on_plan": ("gauge", "1 when every page (or the devdax range) of the rank's pool is on plan.",
                             ("rank", "target")),
    "sactool_target_total_bytes": ("gauge", "Size of a pool target: node MemTotal or DAX device size.", ("target",)),
    "sactool_target_free_bytes": ("gauge", "Free bytes of a pool target: node MemFree, or device size minus "
                                  "the planned slices.", ("target",)),
    "sactool_target_pool_bytes": ("gauge", "Bytes the watched ranks' pools hold on a target.", ("target",)),
    "sactool_link_read_bytes": ("counter", "Bytes read from a CXL memdev over its link (cxl_pmu s2m_drs_memdata "
                                "x 64), since watch started.", ("memdev", "target")),
    "sactool_link_write_bytes": ("counter", "Bytes written to a CXL memdev over its link (cxl_pmu m2s_rwd_memwr "
                                 "x 64), since watch started.", ("memdev", "target")),
    "sactool_link_ceiling_bytes_per_second": ("gauge", "Per-direction PCIe link ceiling of a memdev's path "
                                              "(computed by probe, not measured).", ("memdev",)),
    "sactool_engine_hit_ratio": ("gauge", "Engine hot-buffer hit ratio (HiSparse counters).", ()),
    "sactool_engine_host_to_device_bytes_per_token": ("gauge", "Engine host-to-device bytes per generated token.", ()),
    "sactool_predicted_hit_ratio": ("gauge", "The profile's predicted hot-buffer hit ratio at its buffer size.",
                                    ("workload",)),
    "sactool_predicted_fetch_bytes_per_token": ("gauge", "The profile's predicted fetch bytes per generated token.",
                                                ("workload",)),
    "sactool_observed_over_predicted_miss_ratio": ("gauge", "Observed miss rate over the profile's predicted one.",
                                                   ("workload",)),
    "sactool_watch_source_up": ("gauge", "1 when the source's read succeeded this interval.", ("source",)),
    "sactool_watch_source_age_seconds": ("gauge", "Age of the source's value shown.", ("source",)),
}
"""Every family the endpoint serves: name → (type, help, labels). The reference page lists them."""


def _rows(sample: Any) -> Iterator[tuple[str, tuple[str, ...], float]]:
    for r in sample.ranks:
        rank, tgt = str(r.rank), r.plan.target
        for n, b in sorted(r.node_bytes.items()):
            yield "sactool_pool_bytes", (rank, tgt, str(n)), b
        yield "sactool_pool_mapped_bytes", (rank, tgt), r.mapped_bytes
        yield "sactool_pool_off_plan_bytes", (rank, tgt), r.off_plan_bytes
        yield "sactool_pool_on_plan", (rank, tgt), 1.0 if r.status == "on_plan" else 0.0
    for t in sample.targets:
        if t.total_bytes is not None:
            yield "sactool_target_total_bytes", (t.target,), t.total_bytes
        if t.free_bytes is not None:
            yield "sactool_target_free_bytes", (t.target,), t.free_bytes
        yield "sactool_target_pool_bytes", (t.target,), t.pool_bytes
    for x in sample.traffic:
        md, tgt = x.memdev or "", x.target or ""
        if x.read_bytes_total is not None:
            yield "sactool_link_read_bytes", (md, tgt), x.read_bytes_total
        if x.write_bytes_total is not None:
            yield "sactool_link_write_bytes", (md, tgt), x.write_bytes_total
        if x.ceiling_bytes_per_s is not None:
            yield "sactool_link_ceiling_bytes_per_second", (md,), x.ceiling_bytes_per_s
    e = sample.engine
    if e is not None and e.hit_rate is not None:
        yield "sactool_engine_hit_ratio", (), e.hit_rate
    if e is not None and e.h2d_bytes_per_token is not None:
        yield "sactool_engine_host_to_device_bytes_per_token", (), e.h2d_bytes_per_token
    p = sample.prediction
    if p is not None:
        if p.predicted_hit_rate is not None:
            yield "sactool_predicted_hit_ratio", (p.workload,), p.predicted_hit_rate
        if p.predicted_bytes_per_token is not None:
            yield "sactool_predicted_fetch_bytes_per_token", (p.workload,), p.predicted_bytes_per_token
        if p.miss_ratio is not None:
            yield "sactool_observed_over_predicted_miss_ratio", (p.workload,), p.miss_ratio
    for s in sample.sources:
        yield "sactool_watch_source_up", (s.source,), 1.0 if s.ok else 0.0
        if s.age_s is not None:
            yield "sactool_watch_source_age_seconds", (s.source,), s.age_s


class SampleCollector:
    """A prometheus_client collector over the latest sample (``update`` swaps it in)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sample: Any = None

    def update(self, sample: Any) -> None:
        with self._lock:
            self._sample = sample

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:
            sample = self._sample
        fams: dict[str, Any] = {}
        for name, (kind, doc, labels) in METRICS.items():
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            fams[name] = cls(name, doc, labels=list(labels))
        if sample is not None:
            for name, labels, value in _rows(sample):
                fams[name].add_metric(list(labels), float(value))
        yield from (f for f in fams.values() if f.samples)

    def describe(self) -> Iterator[Any]:
        return iter(())


def parse_listen(text: str) -> tuple[str, int]:
    """``PORT`` (loopback) or ``HOST:PORT`` / ``[v6]:PORT`` → (host, port); UsageError otherwise."""
    from sactool.errors import UsageError

    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--listen {text!r}: not HOST:PORT", "e.g. --listen 127.0.0.1:9464 (loopback only)")
    return host, int(port)


def serve(collector: SampleCollector, host: str, port: int) -> tuple[Any, int]:
    """Start prometheus_client's HTTP server on (``host``, ``port``) with only ``collector`` registered;
    (server, bound port — the one the kernel chose when ``port`` is 0)."""
    from prometheus_client import CollectorRegistry, start_http_server

    from sactool.errors import SactoolError

    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    try:
        server, _thread = start_http_server(port, addr=host, registry=reg)
    except OSError as e:
        raise SactoolError(f"cannot listen on {host}:{port}: {e.strerror or e}",
                           "choose another port (--listen 127.0.0.1:PORT)") from None
    return server, server.server_address[1]


__all__ = ["METRICS", "SampleCollector", "parse_listen", "serve"]
