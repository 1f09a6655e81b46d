"""The published entry point of the ``sactool_cxl`` SGLang plug-in, kept where it was.

The plug-in lives in :mod:`sactool.plugins.sglang`. Installations whose entry-point metadata was
written before it moved (an editable install made earlier keeps its ``entry_points.txt`` until it
is reinstalled) still name ``sactool.sglang_plugin:register``; this module keeps that name working.
"""

from sactool.plugins.sglang import register

__all__ = ["register"]
