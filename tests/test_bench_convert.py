"""``sactool bench convert``: the RDMA baseline's three CPU passes give the fork's layout, and the
command measures them on a placed buffer and records a figure the serving model can take."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sactool.bench import kernels as K
from sactool.bench.record import convert_figure, load_bench
from sactool.cli import main
from sactool.errors import RecordError


def _reference(remote, idx, layers, w, size):
    """The fork's tensor expressions (rdma_memory_pool.py ``_prefetch_for_decode_single``) in numpy."""
    n = idx.size
    staging = remote[idx.astype(np.intp)].reshape(n, layers, w)       # staging[:n] = remote[valid]
    src = staging.transpose(1, 0, 2).copy()                            # permute(1, 0, 2, 3).contiguous()
    kv = np.zeros((layers, size, w), dtype=remote.dtype)
    kv[:, idx.astype(np.intp)] = src                                   # kv_buffer[:, valid] = src
    return kv


def test_passes_reproduce_the_forks_layout():
    layers, w, tokens = 5, 3, 17
    rng = np.random.default_rng(0)
    remote = rng.integers(1, 2**62, size=(tokens, layers * w), dtype=np.uint64)
    idx = rng.permutation(tokens).astype(np.uint64)
    staging = np.zeros_like(remote)
    tmp = np.zeros((layers, tokens, w), dtype=np.uint64)
    kv = np.zeros((layers, tokens, w), dtype=np.uint64)
    # split over two "threads" by token range, as the bench does
    for lo, hi in ((0, 9), (9, tokens)):
        K.convert_gather(remote, staging, idx, lo, hi)
    for lo, hi in ((0, 9), (9, tokens)):
        K.convert_transpose(staging, tmp, layers, w, lo, hi)
    for lo, hi in ((0, 9), (9, tokens)):
        K.convert_scatter(tmp, kv, idx, lo, hi)
    assert np.array_equal(kv, _reference(remote, idx, layers, w, tokens))
    # token t of layer l in the layer-first pool is the l-th record of page-first row idx^-1(t)
    inv = np.argsort(idx)
    assert np.array_equal(kv[2, 4], remote[idx[inv[4]], 2 * w:3 * w])


def test_convert_command_records_a_rate(tmp_path, capsys):
    out = tmp_path / "c.json"
    code = main(["bench", "convert", "--node", "0", "--size", "64MiB", "--preset", "fast", "--threads", "1",
                 "--format", "json", "--out", str(out)])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    data = json.loads(cap.out)
    rs = [r for r in data["results"] if r["test"] == "convert"]
    assert {r["params"]["implementation"] for r in rs} == {"numba", "numpy"}
    for r in rs:
        p, d = r["params"], r["derived"]
        assert p["record_bytes"] == 1152 and p["layers"] == 61 and p["tokens"] >= 2
        assert p["prefix_bytes"] == p["tokens"] * 61 * 1152
        assert d["bandwidth_bytes_per_s"] > 1e7 and d["seconds_per_gb"] == pytest.approx(1e9 / d["bandwidth_bytes_per_s"])
        assert sum(d["pass_share"].values()) == pytest.approx(1.0)
        assert r["stats"]["n"] == 3
    bw, src = convert_figure(load_bench(out))
    assert bw == max(r["derived"]["bandwidth_bytes_per_s"] for r in rs
                     if r["params"]["implementation"] == "numpy")
    assert "numpy" in src and "1152 B x 61 layers" in src
    with pytest.raises(RecordError, match="no convert results for 656"):
        convert_figure(load_bench(out), 656)


def test_convert_refuses_records_of_partial_words(capsys):
    assert main(["bench", "convert", "--node", "0", "--size", "64MiB", "--preset", "fast",
                 "--record-bytes", "1150"]) == 2
    assert "8-byte words" in capsys.readouterr().err
