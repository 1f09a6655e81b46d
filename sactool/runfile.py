"""The run file ``sactool serve`` leaves at launch, so ``sactool watch`` can find the engine: the
process it became (``serve`` replaces itself with the engine, so its PID is the engine's launcher,
whose descendants are the ranks), the profile, the engine and its metrics endpoint.

Location: ``$SACTOOL_RUN_DIR``, else ``$XDG_RUNTIME_DIR/sactool``, else ``/tmp/sactool-<uid>``
(created 0700); one file ``serve-<pid>.json`` per launch, written atomically. A leaf module: serve
writes it, watch reads it, neither imports the other.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

KIND = "serve_run"
SCHEMA_VERSION = 1
"""Version of the ``serve_run`` run file; its history:

1 — the first format: ``pid``, ``engine``, ``profile``, ``argv``, ``metrics_url``."""
RUN_DIR_ENV = "SACTOOL_RUN_DIR"


def run_dir() -> Path:
    """Where run files live (see the module docstring)."""
    if os.environ.get(RUN_DIR_ENV):
        return Path(os.environ[RUN_DIR_ENV])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "sactool"
    return Path(f"/tmp/sactool-{os.getuid()}")


def metrics_url(argv: list[str], engine: str) -> str | None:
    """The engine's Prometheus endpoint from its argv: SGLang serves ``/metrics`` on its HTTP port
    with ``--enable-metrics`` (default port 30000); vLLM always does, on ``--port`` (default 8000).
    ``--host`` 0.0.0.0 or :: is scraped on loopback."""
    def opt(name: str) -> str | None:
        for i, a in enumerate(argv):
            if a == name and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith(name + "="):
                return a.split("=", 1)[1]
        return None

    if engine == "sglang" and "--enable-metrics" not in argv:
        return None
    port = opt("--port") or ("30000" if engine == "sglang" else "8000")
    host = opt("--host") or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/metrics"


def write(profile_path: str, argv: list[str], engine: str = "sglang", *, pid: int | None = None) -> Path:
    """Write this launch's run file (before the exec: its PID becomes the engine's)."""
    from sactool.records import atomic_write, header

    d = run_dir()
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    pid = os.getpid() if pid is None else pid
    rec: dict[str, Any] = {**header(KIND, SCHEMA_VERSION), "pid": pid, "engine": engine,
                           "profile": os.path.abspath(profile_path), "argv": list(argv),
                           "metrics_url": metrics_url(list(argv), engine)}
    path = d / f"serve-{pid}.json"
    atomic_write(path, json.dumps(rec, indent=2) + "\n", force=True)
    return path


def read(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A run file, checked (RecordError on anything else)."""
    from sactool.errors import RecordError
    from sactool.records import load_structured, upgrade

    rec = upgrade(load_structured(path, what="run file"), kind=KIND, current=SCHEMA_VERSION, source=f"run file {path}")
    if not isinstance(rec.get("pid"), int) or isinstance(rec.get("pid"), bool) or rec["pid"] <= 0:
        raise RecordError(f"run file {path} has no valid pid", "re-launch with sactool serve")
    return rec


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0; another user's process counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def latest() -> Path | None:
    """The newest run file whose process still runs (None: none)."""
    d = run_dir()
    try:
        files = sorted(d.glob("serve-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for f in files:
        try:
            pid = int(f.stem.split("-", 1)[1])
        except ValueError:
            continue
        if alive(pid):
            return f
    return None


__all__ = ["KIND", "RUN_DIR_ENV", "alive", "SCHEMA_VERSION", "latest", "metrics_url", "read", "run_dir", "write"]
