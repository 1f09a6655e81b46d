"""Stand-in for the SGLang package (tests only): just enough for ``sactool serve`` to find a
distribution and exec ``python -m sglang.launch_server``. Not SGLang."""
