"""Stand-in for ``sglang.srt.distributed.parallel_state`` (tests only, not SGLang): the TP rank
function the plug-in asks, which — like 0.5.23's before the group is initialised — cannot answer
here, so the plug-in falls back to ``$SACTOOL_RANK``."""


def get_tensor_model_parallel_rank():
    raise AssertionError("tensor model parallel group is not initialized")
