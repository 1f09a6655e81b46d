"""``sactool tune --fleet FILE``: one profile per host of a fleet bench record, each tuned for its
share of the shared pool (capacity) and for the gather bandwidth it measured while every rank of
the fleet fetched at once (:mod:`sactool.fleet.split`). Every profile is checked for an existing
file before the first host is tuned."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sactool.errors import ExistsError, UsageError


def profile_paths(shares, model_name: str, out_dir: Path | None) -> dict[str, Path]:
    """``profiles/<model>/<host>.yaml`` (or ``<out_dir>/<host>.yaml``) per host."""
    from sactool.fleet.split import host_file_name

    base = out_dir if out_dir is not None else Path("profiles") / model_name
    paths = {s.host: base / f"{host_file_name(s.host)}.yaml" for s in shares}
    if len(set(paths.values())) != len(paths):
        raise UsageError("two hosts of the fleet record map to the same profile file name",
                         "name the hosts apart (SACTOOL_FLEET_HOST) and measure again")
    return paths


def tune_fleet(options, fleet_path: Path, progress=None):
    """(results, warnings): a :class:`~sactool.tune.options.TuneResult` per host."""
    from sactool.fleet.split import load_plan, pool_source
    from sactool.models import get_model, normalize_kv_dtype
    from sactool.tune.api import tune

    if options.bench is not None or options.sysfs_root is not None:
        raise UsageError("--fleet brings the pool and its figures; --bench / --sysfs-root do not combine with it",
                         "drop them")
    spec = get_model(options.model)
    shares, warnings, _ = load_plan(fleet_path, spec.record_bytes(normalize_kv_dtype(options.kv_dtype)))
    if not shares:
        raise UsageError(f"fleet record {fleet_path} has no host with measured figures", "rerun the fleet bench")
    paths = profile_paths(shares, spec.name, Path(options.out) if options.out else None)
    if not options.force and not options.resume:
        for host, p in paths.items():
            if p.exists():
                raise ExistsError(f"{p} already exists (host {host})", "pass --force to overwrite the fleet's profiles")
    _make_dirs(paths, bool(options.out))
    from sactool.tune.simcache import HotBufferCache

    results, cache = [], HotBufferCache()   # hosts with the same simulation inputs simulate once
    for share in shares:
        results.append(tune(replace(options, out=paths[share.host], pool_source=pool_source(share), hotbuffer_cache=cache),
                            progress=progress))
    return results, warnings


def _make_dirs(paths: dict[str, Path], given: bool) -> None:
    """The fleet's profile directory: ``--out DIR`` itself is created (its parent must exist: a
    typo does not make a tree of directories), the default ``profiles/<model>/`` with its parents."""
    from sactool.errors import SactoolError

    for d in sorted({p.parent for p in paths.values()}):
        try:
            d.mkdir(parents=not given, exist_ok=True)
        except FileNotFoundError:
            raise SactoolError(f"cannot write the fleet's profiles in {d}: {d.parent} does not exist",
                               f"create it first (mkdir -p {d.parent}), or choose another --out") from None
        except OSError as e:
            raise SactoolError(f"cannot write the fleet's profiles in {d}: {e.strerror}",
                               "choose another --out") from None


__all__ = ["tune_fleet", "profile_paths"]
