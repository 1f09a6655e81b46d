"""scripts/sglang-integration's own decisions, without its 11 GB environment: which installed sactool
counts as "this checkout", and which plug-ins SGLang's load_plugins() really ran."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def load_script():
    loader = importlib.machinery.SourceFileLoader("sglang_integration", str(REPO / "scripts" / "sglang-integration"))
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("sglang_integration", loader))
    loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def script():
    return load_script()


def test_only_an_editable_install_of_this_checkout_counts(script, tmp_path):
    """direct_url.json (PEP 610) of 'pip install -e .' has dir_info.editable true; 'pip install .' of the
    same directory records the same url without it: a copy that a later edit leaves stale."""
    url = REPO.as_uri()
    here = str(REPO / "sactool" / "__init__.py")
    assert script.checkout_problem({"url": url, "editable": True, "file": here}, REPO) == ""
    assert "non-editable" in script.checkout_problem({"url": url, "editable": False, "file": here}, REPO)
    site = str(tmp_path / "site-packages" / "sactool" / "__init__.py")
    assert "outside" in script.checkout_problem({"url": url, "editable": True, "file": site}, REPO)
    assert "comes from file:///elsewhere" in script.checkout_problem(
        {"url": "file:///elsewhere", "editable": True, "file": here}, REPO)
    assert "an index" in script.checkout_problem({"url": "", "editable": False, "file": site}, REPO)


@pytest.mark.parametrize("mode", ["numa", "devdax"])
def test_the_profiles_it_writes_load_and_validate(script, tmp_path, mode):
    """The script runs outside CI, so a renamed sactool API breaks it silently (59c0732 renamed
    ModelSpec.to_model_ref): the profile it hands the real SGLang is written and loaded here."""
    from sactool.profile import load_profile

    path = tmp_path / f"{mode}.yaml"
    script.write_profile(path, mode, 8, 2, 200_000, 2)
    p = load_profile(path)
    assert p.pool.mode == mode and p.sglang.tp_size == 8 and p.hisparse.host_to_device_ratio == 2


def test_slices_read_back_through_a_second_mapping(script, tmp_path):
    """The script checks a slice's bytes through a second MAP_SHARED mapping at the slice's offset — what
    works on a real /dev/daxX.Y, where read/pread (and msync) return EINVAL — not with pread on the file."""
    import mmap

    f = tmp_path / "dax0.0"
    with open(f, "wb") as fh:
        fh.truncate(8 << 20)
    with open(f, "r+b") as fh:
        m = mmap.mmap(fh.fileno(), 2 << 20, flags=mmap.MAP_SHARED, offset=4 << 20)
    m[0:1], m[(2 << 20) - 1:] = b"A", b"Z"
    try:
        assert script.read_back(str(f), 4 << 20, [0, (2 << 20) - 1]) == [b"A", b"Z"]
        assert script.read_back(str(f), 2 << 20, [0]) == [b"\0"]
    finally:
        m.close()
