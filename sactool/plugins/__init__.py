"""Engine plug-ins: one module per engine (``vllm.py``: the ``vllm.general_plugins`` entry point)."""
