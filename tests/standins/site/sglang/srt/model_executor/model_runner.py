"""Stand-in for ``sglang.srt.model_executor.model_runner`` (tests only, not SGLang): like 0.5.23,
``ModelRunner.maybe_init_hisparse_coordinator`` is the one place a HiSparse coordinator is built —
it imports the class from ``sglang.srt.managers.hisparse_coordinator`` at call time and keeps it
as ``self.hisparse_coordinator``. ``SECOND_COORDINATOR`` (tests): a second coordinator class the
caller builds instead, while ``HiSparseCoordinator`` and every other hook target stay as they are —
what a SGLang with another HiSparse (V2, HiCache as the host pool) would look like."""

SECOND_COORDINATOR = [None]


class ModelRunner:
    def __init__(self, enable_hisparse: bool = True, **coordinator_kw):
        self.enable_hisparse = enable_hisparse
        self.hisparse_coordinator = None
        self._coordinator_kw = coordinator_kw

    def maybe_init_hisparse_coordinator(self):
        if not self.enable_hisparse:
            return
        from sglang.srt.managers.hisparse_coordinator import HiSparseCoordinator

        cls = SECOND_COORDINATOR[0] or HiSparseCoordinator
        self.hisparse_coordinator = cls(
            req_to_token_pool=None, token_to_kv_pool_allocator=None, top_k=2048, device_buffer_size=2048,
            device="cuda", tp_group=None, host_to_device_ratio=2, **self._coordinator_kw)
