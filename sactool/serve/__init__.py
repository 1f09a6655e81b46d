"""``sactool serve``: a profile turned into the exact SGLang command, checked, then exec'd.

``build_launch(profile_path, extra_args)`` → :class:`Launch` (argv, env delta, explanations,
checks); ``exec_launch(launch)`` replaces the process with SGLang. The ``sactool_cxl`` plug-in
(``sactool/sglang_plugin.py``) reads the same profile inside SGLang via :mod:`sactool.serve.pool`.
"""

from sactool.serve.argv import Command, EnvVar, Flag, build_command
from sactool.serve.launch import Launch, Problem, build_launch, exec_launch

__all__ = ["Command", "EnvVar", "Flag", "build_command", "Launch", "Problem", "build_launch", "exec_launch"]
