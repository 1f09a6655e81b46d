"""Errors of ``sactool serve``: one exit code per kind of bad input (README "Serving with SGLang").

Codes from :class:`sactool.errors.ExitCode`: besides the common ones (2 usage, 3 node/device
unavailable, 4 profile corrupt or newer, 6 does not fit) serve uses 7-10, so a script can tell a
wrong model from a missing SGLang from a conflicting flag without parsing messages.
"""

from __future__ import annotations

from sactool.errors import ExitCode, SactoolError


class ModelMismatchError(SactoolError):
    exit_code = ExitCode.MODEL_MISMATCH


class EngineMissingError(SactoolError):
    exit_code = ExitCode.ENGINE_MISSING


class EngineVersionError(SactoolError):
    exit_code = ExitCode.ENGINE_VERSION


class ConflictError(SactoolError):
    exit_code = ExitCode.CONFLICT
