"""Fleet mode: the same probe / bench run on every rank of an MPI job, gathered on rank 0, and the
split of a shared pool among hosts (``tune --fleet``).

* :func:`detect` — the fleet this process belongs to (``mpirun``/``mpiexec`` with more than one
  rank and ``mpi4py`` importable), else None: without a launcher nothing changes;
* :func:`~sactool.fleet.probe.fleet_probe` — every host's topology and the pool map
  (:mod:`sactool.fleet.poolmap`: memdevs matched by serial, DAX devices by their memdevs);
* :func:`~sactool.fleet.bench.run_fleet_bench` — the contention sweep (:mod:`sactool.fleet.sweep`);
* :mod:`sactool.fleet.split` — capacity and bandwidth shares per host for ``tune --fleet``.

Light to import: nothing here imports mpi4py, numpy or numba until it is used.
"""

from __future__ import annotations

from sactool.fleet.mpi import HOST_ENV, Fleet, FleetError, FleetInterrupted, detect, launched_size

__all__ = ["detect", "launched_size", "Fleet", "FleetError", "FleetInterrupted", "HOST_ENV"]
