"""The engine plug-ins: one module per engine (:mod:`sactool.plugins.sglang`, :mod:`sactool.plugins.vllm`),
plus the engine-neutral hook helpers (:mod:`sactool.plugins.hooks`). Each places its engine's KV host pool
through :mod:`sactool.pool` and imports nothing of sactool but ``pool``, ``profile`` and the leaves
(errors, units, records, inputfile): the boundary is a test (tests/test_boundaries.py). Nothing is
imported here, so loading one engine's plug-in never loads another's.
"""
