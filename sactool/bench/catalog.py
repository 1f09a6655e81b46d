"""The bench tests sactool knows, by name and in the order ``bench all`` runs them.

A leaf module (no numpy, no numba): the command line lists the names, :mod:`sactool.bench.api`
validates the request against them and :mod:`sactool.bench.runner` runs them in this order, so
neither of the latter two needs the other for the list.
"""

from __future__ import annotations

TESTS = ("latency", "mlp", "loaded", "gather", "bandwidth", "convert")
"""All tests, in the order ``all`` runs them (write/copy bandwidth and the RDMA layout conversion
last: they overwrite the chains)."""

CHAIN_TESTS = ("latency", "mlp", "loaded")
"""Tests that walk the two pointer-chase chains built over the buffer's halves (bench/runner.py)."""
