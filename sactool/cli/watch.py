"""``sactool watch``: options → :class:`sactool.watch.api.WatchOptions`, sample, render or serve."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from sactool.cli.common import FormatOpt, QuietOpt, SysfsRootOpt, check_format, example, flag
from sactool.errors import UsageError

EXAMPLE = example("sactool watch", "sactool watch --once --format json --pid 4242 --profile myhost.yaml",
                  "sactool watch --listen 127.0.0.1:9464 --metrics-url http://127.0.0.1:8000/metrics")


def _pids(values: List[str] | None) -> tuple[tuple[int, int | None], ...]:
    out = []
    for v in values or []:
        pid, _, rank = v.partition(":")
        if not pid.isdigit() or (rank and not rank.isdigit()):
            raise UsageError(f"--pid {v!r}: not PID or PID:RANK", "e.g. --pid 4242 or --pid 4242:0")
        out.append((int(pid), int(rank) if rank else None))
    return tuple(out)


def watch(
    pid: Optional[List[str]] = typer.Option(
        None, "--pid", metavar="PID[:RANK]", help="An engine process (its ranks are found among its descendants), "
        "or one rank's process with its rank; repeatable. Default: the newest launch 'sactool serve' recorded."),
    profile: Optional[Path] = typer.Option(None, "--profile", help="The serving profile: the pool plan and the "
                                           "prediction (default: the one the recorded launch used)."),
    metrics_url: Optional[str] = typer.Option(None, "--metrics-url", help="The engine's Prometheus endpoint, "
                                              "e.g. http://127.0.0.1:8000/metrics (vLLM)."),
    run_file: Optional[Path] = typer.Option(None, "--run", help="A run file 'sactool serve' wrote (serve-<pid>.json)."),
    interval: float = typer.Option(1.0, "--interval", min=0.1, help="Seconds between samples."),
    timeout: float = typer.Option(0.5, "--timeout", min=0.01, help="Seconds a source's read may take before it is "
                                  "shown stale."),
    once: bool = flag("--once", help="One sample, then exit (with an engine endpoint or CXL counters: two reads "
                                     "an interval apart, for rates)."),
    count: Optional[int] = typer.Option(None, "--count", min=1, help="Stop after this many samples."),
    listen: Optional[str] = typer.Option(None, "--listen", metavar="[HOST:]PORT",
                                         help="Serve the samples as Prometheus/OpenMetrics at http://HOST:PORT/metrics "
                                         "(HOST defaults to 127.0.0.1: loopback only unless you name another)."),
    sysfs_root: Optional[Path] = SysfsRootOpt,
    fmt=FormatOpt,
    quiet: bool = QuietOpt,
) -> None:
    """Watch the KV pool while the engine serves: placement per rank, target occupancy, link traffic, demand."""
    from sactool.watch.api import WatchOptions

    fmt = check_format(fmt)
    if fmt != "table" and not once and count is None:
        raise UsageError(f"--format {fmt} writes one record per sample: give --once or --count N",
                         "e.g. sactool watch --once --format json")
    opts = WatchOptions(profile=profile, pids=_pids(pid), metrics_url=metrics_url, run_file=run_file,
                        interval_s=interval, timeout_s=timeout, sysfs_root=sysfs_root)
    if once:
        from sactool.render.watch import render_sample, render_warnings
        from sactool.watch.api import watch_once

        s = watch_once(opts)
        render_warnings(s)
        render_sample(s, fmt)
        return
    _loop(opts, fmt, count, listen)


def _loop(opts, fmt: str, count: int | None, listen: str | None) -> None:
    import time

    from sactool.render import note
    from sactool.watch.api import Watcher

    w = Watcher(opts)
    collector = server = None
    if listen:
        from sactool.watch.exporter import SampleCollector, parse_listen, serve

        host, port = parse_listen(listen)
        collector = SampleCollector()
        server, port = serve(collector, host, port)
        listen = f"http://{host}:{port}/metrics"
        note(f"serving {listen}")
    n = 0

    def next_sample():
        nonlocal n
        if count is not None and n >= count:
            return None
        if n:
            time.sleep(max(0.0, opts.interval_s - (time.monotonic() - t_last[0])))
        t_last[0] = time.monotonic()
        s = w.sample()
        n += 1
        if collector is not None:
            collector.update(s)
        return s

    t_last = [time.monotonic()]
    try:
        import sys

        if fmt == "table" and sys.stdout.isatty():
            from sactool.render.watch import live

            live(next_sample, listen=listen)
        else:
            from sactool.render.watch import render_sample, render_warnings

            while (s := next_sample()) is not None:
                render_warnings(s)
                render_sample(s, fmt, stream=True)
    finally:
        w.close()
        if server is not None:
            server.shutdown()
