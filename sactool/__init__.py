"""sactool: CXL memory toolkit for serving sparse-attention LLMs (SAC-style KV pools)."""

import os as _os

__version__ = "0.1.0"

# Where colorama is installed (it comes with mkdocs-material, the docs extra, and with many ML
# environments) numba colours its messages and writes an ANSI reset (ESC[0m) to stdout at every
# compile when stdout is a terminal: after `sactool bench --format json`'s record, which then no
# longer parses (seen under mpirun, whose ranks' stdout is a pty). numba reads this when it is
# imported, so it is set here, before any sactool module can import numba; a user's value stays.
_os.environ.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")
