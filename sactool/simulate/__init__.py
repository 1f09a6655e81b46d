"""Serving model: SAC/CXL vs an RDMA KV pool vs local DRAM, from measured or cited figures.

``simulate(SimulationOptions(platform)) -> SimulationResult``; platform files via
``load_platform``; see ``api``, ``engine`` (the step-level model), ``platform``, ``gpu``, ``misses``.
Importing this package is light; numpy/numba load when a simulation runs.
"""

from __future__ import annotations

from sactool.simulate.platform import Platform, load_platform

__all__ = ["Platform", "load_platform", "simulate", "SimulationOptions", "SimulationResult"]


def __getattr__(name):
    if name in ("simulate", "SimulationOptions", "SimulationResult"):
        from sactool.simulate import api

        return getattr(api, name)
    raise AttributeError(name)
