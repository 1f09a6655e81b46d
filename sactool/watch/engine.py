"""What the engine asks of the pool, from the engine's own Prometheus endpoint.

Scraped over HTTP with a timeout and a bound on the bytes read, parsed with ``prometheus_client``'s
own parser (``prometheus_client.parser.text_string_to_metric_families``), summed over the engine's
label sets (one per DP engine / model).

Metric names are pinned per engine version (:data:`NAMES`): vLLM 0.34.0's HiSparse connector
(``distributed/kv_transfer/kv_connector/v1/hisparse/stats.py``) exports the counters
``vllm:hisparse_cache_hits``, ``vllm:hisparse_cache_misses``, ``vllm:hisparse_host_to_device_bytes``
and the gauge ``vllm:hisparse_host_cache_usage_perc``; generated tokens are
``vllm:generation_tokens``, the decode step ``vllm:inter_token_latency_seconds`` (a histogram: its
``_sum`` over its ``_count`` is the mean time between two output tokens of a request) and the batch
``vllm:num_requests_running`` (a gauge per DP engine) (``v1/metrics/loggers.py``). Earlier vLLM revisions named the first two
``vllm:hisparse_hits`` and ``vllm:hisparse_lookups`` (hits + misses). SGLang 0.5.23's HiSparse
exports nothing to Prometheus (a ``#gpu token / #cpu token`` log line only; its HiCache gauges are
off under HiSparse): an SGLang endpoint gives generated tokens, and the demand is stated absent.

Demand: hit rate = hits / (hits + misses); host-to-device bytes per generated token = bytes /
generated tokens; decode step = inter-token latency sum / count; requests running per engine = the
gauge's mean over the engine label sets (at the scrape: a gauge has no window). Between two scrapes the differences are used (the rate over the window); a single
scrape (``--once``) gives the totals since the engine started, and ``window`` says which.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

MAX_BYTES = 16 << 20
"""The most of an exposition read: an engine's /metrics is tens of KiB."""

NAMES: dict[str, dict[str, str]] = {
    "vllm-0.34": {"hits": "vllm:hisparse_cache_hits", "misses": "vllm:hisparse_cache_misses",
                  "h2d_bytes": "vllm:hisparse_host_to_device_bytes", "tokens": "vllm:generation_tokens",
                  "usage": "vllm:hisparse_host_cache_usage_perc", "itl": "vllm:inter_token_latency_seconds",
                  "running": "vllm:num_requests_running"},
    "vllm-early-hisparse": {"hits": "vllm:hisparse_hits", "lookups": "vllm:hisparse_lookups",
                            "h2d_bytes": "vllm:hisparse_host_to_device_bytes", "tokens": "vllm:generation_tokens"},
    "sglang-0.5.23": {"tokens": "sglang:generation_tokens"},
}
"""Which metric stands for what, per engine naming (see the module docstring)."""


def fetch(url: str, timeout: float) -> str:
    """The exposition text at ``url`` (http/https only), at most :data:`MAX_BYTES`."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{url!r} is not an http(s) URL")
    req = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})
    with urllib.request.urlopen(req, timeout=timeout) as r:   # noqa: S310 (scheme checked above)
        data = r.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"{url} sent more than {MAX_BYTES} bytes")
    return data.decode("utf-8", "replace")


def totals(text: str) -> dict[str, float]:
    """Metric family name → the sum of its samples (counters: the ``_total`` samples; gauges: the
    value; histograms: ``<name>_sum`` and ``<name>_count``; ``<name>#series``: how many label sets
    a gauge has, for a mean per engine), parsed with prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if fam.type == "counter" and not s.name.endswith("_total"):
                continue   # _created timestamps
            if fam.type in ("histogram", "summary"):
                if s.name in (fam.name + "_sum", fam.name + "_count"):
                    out[s.name] = out.get(s.name, 0.0) + float(s.value)
                continue
            out[fam.name] = out.get(fam.name, 0.0) + float(s.value)
            if fam.type == "gauge":
                out[fam.name + "#series"] = out.get(fam.name + "#series", 0.0) + 1.0
    return out


@dataclass(frozen=True)
class Counts:
    """The engine's cumulative counts at one scrape (None: not exported)."""

    naming: str
    hits: float | None
    misses: float | None
    h2d_bytes: float | None
    tokens: float | None
    usage: float | None
    at: float
    itl_sum_s: float | None = None      # inter-token latency histogram: seconds summed, and
    itl_count: float | None = None      # how many gaps (the decode step = sum / count)
    running: float | None = None        # requests running, mean over the engines (a gauge: at the scrape)

    @classmethod
    def of(cls, fams: dict[str, float], at: float) -> "Counts":
        for naming, n in NAMES.items():
            if naming.startswith("vllm") and n["hits"] in fams:
                hits = fams.get(n["hits"])
                misses = fams.get(n["misses"]) if "misses" in n else (
                    fams[n["lookups"]] - (hits or 0.0) if n["lookups"] in fams else None)
                itl, run = n.get("itl", ""), n.get("running", "")
                series = fams.get(run + "#series")
                return cls(naming, hits, misses, fams.get(n["h2d_bytes"]), fams.get(n["tokens"]),
                           fams.get(n.get("usage", "")), at, fams.get(itl + "_sum"), fams.get(itl + "_count"),
                           fams[run] / series if series else None)
        if any(k.startswith("sglang:") for k in fams):
            return cls("sglang-0.5.23", None, None, None, fams.get(NAMES["sglang-0.5.23"]["tokens"]), None, at)
        if any(k.startswith("vllm:") for k in fams):
            return cls("vllm-no-hisparse", None, None, None, fams.get(NAMES["vllm-0.34"]["tokens"]), None, at)
        return cls("unknown", None, None, None, None, None, at)


@dataclass(frozen=True)
class Demand:
    """Hit rate and host-to-device bytes per generated token, over ``window`` (``rate over N s`` or
    ``totals since the engine started``), and what the endpoint is (``naming``) or lacks (``detail``)."""

    url: str
    naming: str
    hit_rate: float | None
    miss_rate: float | None
    h2d_bytes_per_token: float | None
    tokens: float | None
    lookups: float | None
    host_cache_usage: float | None
    window: str
    detail: str = ""
    step_time_s: float | None = None          # mean inter-token latency over the window (vLLM's histogram)
    requests_running: float | None = None     # per engine, at the scrape

    def to_data(self) -> dict[str, Any]:
        return {"url": self.url, "naming": self.naming, "hit_rate": self.hit_rate, "miss_rate": self.miss_rate,
                "host_to_device_bytes_per_token": self.h2d_bytes_per_token, "generated_tokens": self.tokens,
                "lookups": self.lookups, "host_cache_usage": self.host_cache_usage, "window": self.window,
                "detail": self.detail, "decode_step_s": self.step_time_s, "requests_running": self.requests_running}


def _d(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def demand(url: str, now: Counts, before: Counts | None = None) -> Demand:
    """Demand from one scrape (totals) or two (the rate between them; a counter reset — the engine
    restarted — falls back to the totals)."""
    c, window = now, "totals since the engine started"
    if before is not None and before.naming == now.naming:
        keys = ("hits", "misses", "h2d_bytes", "tokens", "itl_sum_s", "itl_count")
        diffs = [_d(getattr(now, k), getattr(before, k)) for k in keys]
        if all(d is None or d >= 0 for d in diffs) and (diffs[3] or 0) > 0:
            c = Counts(now.naming, diffs[0], diffs[1], diffs[2], diffs[3], now.usage, now.at, diffs[4], diffs[5],
                       now.running)
            window = f"rate over {now.at - before.at:.1f} s"
    if c.naming == "sglang-0.5.23":
        return Demand(url, c.naming, None, None, None, c.tokens, None, None, window,
                      "SGLang 0.5.23's HiSparse exports no hit, miss or byte counters to Prometheus (a '#gpu token / "
                      "#cpu token' log line only): engine demand is not observable here")
    if c.hits is None or c.misses is None:
        return Demand(url, c.naming, None, None, None, c.tokens, None, None, window,
                      "the endpoint exports no HiSparse counters (is HiSparse on? vLLM: --kv-transfer-config "
                      "HiSparseConnector)" if c.naming != "unknown" else "no vLLM or SGLang metrics at this endpoint")
    lookups = c.hits + c.misses
    hit = c.hits / lookups if lookups > 0 else None
    per_tok = c.h2d_bytes / c.tokens if c.h2d_bytes is not None and c.tokens else None
    detail = "" if lookups > 0 else "no hot-buffer lookups counted yet (vLLM samples its kernel counters every " \
                                    "2,000 worker steps)"
    step = c.itl_sum_s / c.itl_count if c.itl_sum_s is not None and c.itl_count else None
    return Demand(url, c.naming, hit, None if hit is None else 1.0 - hit, per_tok, c.tokens, lookups, c.usage, window,
                  detail, step, c.running)


def scrape(url: str, timeout: float, at: float) -> Counts:
    """One scrape of ``url`` as :class:`Counts` (raises on an unreachable or unparsable endpoint)."""
    try:
        text = fetch(url, timeout)
    except urllib.error.URLError as e:
        raise OSError(f"{url}: {e.reason}") from None
    return Counts.of(totals(text), at)


__all__ = ["Counts", "Demand", "MAX_BYTES", "NAMES", "demand", "fetch", "scrape", "totals"]
