"""``sactool serve``: a profile turned into the exact SGLang command, checked, then exec'd.

``sactool.serve.launch.build_launch(profile_path, extra_args)`` → :class:`~sactool.serve.launch.Launch`
(argv, env delta, explanations, checks); ``exec_launch(launch)`` replaces the process with SGLang.
Command building: :mod:`sactool.serve.argv`; checks: :mod:`sactool.serve.checks` and the pool's
:mod:`sactool.pool.capacity`.

Nothing is imported here: the ``sactool_cxl`` plug-in (:mod:`sactool.plugins.sglang`) runs in every
SGLang scheduler process and reads the profile through :mod:`sactool.pool`, never through the
launcher; what serve hands it is :mod:`sactool.pool.contract`.
"""
