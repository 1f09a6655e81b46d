"""Trace files: round trip, validation of corrupt / wrong-shape / out-of-range / newer files."""

from __future__ import annotations

import numpy as np
import pytest

from sactool.errors import ExistsError, ExitCode, RecordError, UsageError
from sactool.workload import TRACE_FORMAT_VERSION, generate_topk, load_trace, save_trace


def _write(path, **arrays):
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _good():
    return generate_topk(3000, 8, 2, 128, seed=5)


def test_round_trip(tmp_path):
    x = _good()
    p = save_trace(tmp_path / "t.npz", x, 3000, model="deepseek-v3.2", source="generated", seed=5)
    t = load_trace(p)
    assert np.array_equal(t.indices, x) and t.indices.dtype == np.int32
    assert t.context_tokens == 3000 and (t.steps, t.layers, t.top_k) == (8, 2, 128)
    assert t.meta == {"model": "deepseek-v3.2", "source": "generated", "seed": 5}


def test_no_overwrite_without_force(tmp_path):
    p = save_trace(tmp_path / "t.npz", _good(), 3000, source="generated")
    with pytest.raises(ExistsError):
        save_trace(p, _good(), 3000)
    save_trace(p, _good(), 3000, force=True)


def test_save_refuses_bad_rows(tmp_path):
    x = _good()
    x[3, 1, 0] = 3000 + 3  # one past the sequence at step 3
    with pytest.raises(UsageError):
        save_trace(tmp_path / "t.npz", x, 3000)


def test_corrupt_file(tmp_path):
    p = tmp_path / "t.npz"
    p.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(RecordError) as ei:
        load_trace(p)
    assert ei.value.exit_code == ExitCode.RECORD


def test_not_an_archive(tmp_path):
    p = tmp_path / "t.npz"
    p.write_text("junk")
    with pytest.raises(RecordError, match="not an .npz archive"):
        load_trace(p)


def test_missing_file(tmp_path):
    with pytest.raises(RecordError, match="does not exist"):
        load_trace(tmp_path / "nope.npz")


def test_missing_key(tmp_path):
    p = tmp_path / "t.npz"
    _write(p, indices=_good(), format_version=np.int64(1))
    with pytest.raises(RecordError, match="context_tokens"):
        load_trace(p)


def test_wrong_shape(tmp_path):
    p = tmp_path / "t.npz"
    _write(p, indices=_good()[:, 0, :], context_tokens=np.int64(3000), format_version=np.int64(1))
    with pytest.raises(RecordError, match="shape"):
        load_trace(p)


@pytest.mark.parametrize("value", [-1, 3000 + 7, 10**6])
def test_out_of_range(tmp_path, value):
    x = _good()
    x[7, 0, 5] = value
    p = tmp_path / "t.npz"
    _write(p, indices=x, context_tokens=np.int64(3000), format_version=np.int64(1))
    with pytest.raises(RecordError, match="step 7 layer 0"):
        load_trace(p)


def test_duplicate_ids(tmp_path):
    x = _good()
    x[2, 1, 1] = x[2, 1, 0]
    p = tmp_path / "t.npz"
    _write(p, indices=x, context_tokens=np.int64(3000), format_version=np.int64(1))
    with pytest.raises(RecordError, match="twice"):
        load_trace(p)


def test_newer_format_refused(tmp_path):
    p = tmp_path / "t.npz"
    _write(p, indices=_good(), context_tokens=np.int64(3000),
           format_version=np.int64(TRACE_FORMAT_VERSION + 1))
    with pytest.raises(RecordError, match="newer") as ei:
        load_trace(p)
    assert "upgrade sactool" in ei.value.hint


def test_pickled_objects_refused(tmp_path):
    p = tmp_path / "t.npz"
    _write(p, indices=np.array([{"a": 1}], dtype=object), context_tokens=np.int64(3000),
           format_version=np.int64(1))
    with pytest.raises(RecordError):
        load_trace(p)


def test_float_indices_refused(tmp_path):
    p = tmp_path / "t.npz"
    _write(p, indices=_good().astype(np.float32), context_tokens=np.int64(3000), format_version=np.int64(1))
    with pytest.raises(RecordError, match="integers"):
        load_trace(p)
