"""Errors of ``sactool serve``: one exit code per kind of bad input (README "Serving with SGLang").

The common codes come from :class:`sactool.errors.ExitCode` (2 usage, 3 node/device unavailable,
4 profile corrupt or newer, 6 does not fit); serve adds the ones below so a script can tell a
wrong model from a missing SGLang from a conflicting flag without parsing messages.
"""

from __future__ import annotations

import enum

from sactool.errors import SactoolError


class ServeExit(enum.IntEnum):
    """Exit codes added by ``sactool serve`` (7-10; 0-6 and 130 keep their common meaning)."""

    MODEL_MISMATCH = 7     # the profile was made for another model than --model-path / config.json
    ENGINE_MISSING = 8     # SGLang, its entry point, the sactool_cxl plug-in or numactl not installed
    ENGINE_VERSION = 9     # installed SGLang outside the profile's tested range
    CONFLICT = 10          # an extra SGLang flag contradicts the profile


class ModelMismatchError(SactoolError):
    exit_code = ServeExit.MODEL_MISMATCH


class EngineMissingError(SactoolError):
    exit_code = ServeExit.ENGINE_MISSING


class EngineVersionError(SactoolError):
    exit_code = ServeExit.ENGINE_VERSION


class ConflictError(SactoolError):
    exit_code = ServeExit.CONFLICT
