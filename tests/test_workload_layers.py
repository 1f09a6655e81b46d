"""Per-layer locality: the shipped profile of the authors' DeepSeek-V3.2 runs, and the workload
model reproducing every layer's union with the layer keeping its identity."""

from __future__ import annotations

import numpy as np
import pytest

from sactool.workload import WorkloadParams
from sactool.workload.layers import factors_for, layer_targets, layer_unions
from sactool.workload.params import DSV32_LOCALITY, DSV32_STEPS


def test_shipped_profile_is_the_published_csv():
    data = layer_unions()
    assert sorted(data) == [16384, 32768, 65536, 131072] and all(len(v) == 61 for v in data.values())
    for ctx, (union, _, _) in DSV32_LOCALITY.items():       # the summary figures are its means
        assert np.mean(data[ctx]) == pytest.approx(union, abs=0.0006)
    lo, hi = min(data[131072]), max(data[131072])
    assert (lo, hi) == (pytest.approx(0.03770161), pytest.approx(0.70354938))
    assert data[131072].index(hi) == 17 and data[131072].index(lo) == 1
    # between profiled lengths: log2-linear; outside: the end values
    mid = layer_targets(int(2 ** 16.5), 61)
    assert mid[17] == pytest.approx((data[65536][17] + data[131072][17]) / 2, rel=1e-4)
    assert layer_targets(8192, 61) == data[16384] and layer_targets(1 << 20, 61) == data[131072]
    with pytest.raises(Exception, match="61 layers"):
        layer_targets(16384, 4)


def test_factors_grow_with_the_target_union():
    p = WorkloadParams()
    f = factors_for([0.05, 0.2, 0.5, 0.7], context_tokens=131072, top_k=2048, steps=DSV32_STEPS, params=p)
    assert f == sorted(f) and f[0] > 0


def test_model_per_layer_union_at_128k_matches_the_profile(dsv32_128k_workload):
    """Each of the 61 layers, model vs the authors' profile, 128K prompt, 1000 decode steps: the
    trace of ``model_workload`` (the one tune and simulate use, conftest)."""
    w = dsv32_128k_workload
    assert w["workload"].params == WorkloadParams(layer_targets="deepseek-v3.2")
    model = np.asarray(w["layer_union"])
    real = np.array(layer_targets(w["context"], 61))
    ratio = model / real
    table = "\n".join(f"layer {i:2d}: model {m:.3f} real {r:.3f} ({q - 1:+.1%})"
                      for i, (m, r, q) in enumerate(zip(model, real, ratio)))
    assert np.all(np.abs(ratio - 1) <= 0.20), table
    # layers keep their identity: the model's ranking of layers is the profile's
    assert np.corrcoef(model, real)[0, 1] > 0.99
    assert int(np.argmax(model)) == 17 and int(np.argmin(model)) == 1
