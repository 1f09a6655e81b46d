"""Hot-buffer simulation results shared by tunes with the same simulation inputs.

``tune --fleet`` tunes one profile per host; hosts with the same model, contexts, workload and
candidate buffer sizes would each run the same LRU simulations. The key is the simulation's exact
input: a digest of the top-k index array (whatever the workload model or trace made it) and every
other argument of the call (context tokens, ...). Each buffer size's result is kept under it, so a
host reuses what an earlier host simulated and simulates only the sizes it adds. Identical inputs
give identical results (the simulation is deterministic), so sharing changes no figure.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass
class HotBufferCache:
    """``results[key][buffer] = (misses per step per layer, hit rate)``; ``runs``: simulation
    passes run (one pass over a trace gives every buffer size asked), ``reused``: passes answered
    entirely from the cache; ``buffers_run`` / ``buffers_reused``: buffer sizes each way."""

    results: dict[str, dict[int, tuple[float, float]]] = field(default_factory=dict)
    runs: int = 0
    reused: int = 0
    buffers_run: int = 0
    buffers_reused: int = 0

    @staticmethod
    def key(indices, kwargs: dict) -> str:
        """The index array's bytes, dtype and shape, and every other argument of the simulation
        call (``kwargs``: the same mapping the call is made with, so an argument added there is
        in the key too)."""
        import json

        import numpy as np

        a = np.ascontiguousarray(indices)
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{a.dtype.str}{a.shape}{json.dumps(kwargs, sort_keys=True, default=str)}".encode())
        # an ndarray is a buffer; numpy's stubs declare its __buffer__ only for Python >= 3.12
        h.update(a.view(np.uint8).reshape(-1))  # type: ignore[arg-type]
        return h.hexdigest()

    def get(self, key: str, buffers) -> dict[int, tuple[float, float]]:
        have = self.results.get(key, {})
        return {b: have[b] for b in buffers if b in have}

    def put(self, key: str, got: dict[int, tuple[float, float]]) -> None:
        self.results.setdefault(key, {}).update(got)


__all__ = ["HotBufferCache"]
