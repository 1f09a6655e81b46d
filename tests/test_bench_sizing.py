"""Buffer sizes derived from the machine (sactool.bench.sizing), on recorded trees with constructed
caches (tests/fixtures/trees.add_caches): never from this host's own cache, which differs between
the machines CI runs on (a 480 MiB L3 here, 32 MiB elsewhere)."""

from __future__ import annotations

import pytest

from fixtures.trees import add_caches
from sactool.bench import sizing
from sactool.errors import ExitCode, SactoolError
from sactool.host.sysfs import SysfsReader
from sactool.units import format_bytes

MiB, GiB = 1 << 20, 1 << 30


def _cache(machine, size_kib: int, groups=((0, 1),)):
    root = add_caches(machine("this-machine"), list(groups), size_kib)
    return sizing.last_level_cache(SysfsReader(root), (0, 1))


M = sizing.CACHE_MULTIPLE


@pytest.mark.parametrize("kib", [480 * 1024, 32 * 1024, 1152 * 1024, 4 * 1024])
def test_default_is_the_multiple_of_the_cache_at_least_256mib(machine, kib):
    """The multiple of the cache plus one 2 MiB page (whole records of any size reach the multiple), or
    256 MiB where that is more."""
    want = max(256 * MiB, M * kib * 1024 + 2 * MiB)
    cache = _cache(machine, kib)
    assert cache.bytes == kib * 1024 and cache.level == 3 and cache.instances == 1
    assert cache.source.endswith("cpu0/cache/index3/size")
    rule = sizing.derive(cache, 64 * GiB, where="node0's CPUs")
    assert rule.size_bytes == want and not rule.given and not rule.warnings
    assert rule.cache_share <= 1 / M
    for r in (64, 656, 1152, 4096, 16384, 1 << 21):   # every record size's whole records reach the multiple
        assert want // r * r >= M * kib * 1024
    assert f"{format_bytes(kib * 1024)} last-level cache of node0's CPUs" in rule.rule
    data = rule.to_data()
    assert data["llc"]["bytes"] == kib * 1024 and data["size_bytes"] == want and data["cache_multiple"] == M


def test_two_cache_instances_are_summed(machine):
    """CPUs of two L3 slices (two CCDs, two sub-NUMA clusters) have both caches."""
    cache = _cache(machine, 32 * 1024, groups=((0,), (1,)))
    assert cache.bytes == 64 * MiB and cache.instances == 2
    assert sizing.derive(cache, 64 * GiB, where="x").size_bytes == max(256 * MiB, M * 64 * MiB + 2 * MiB)


def test_a_node_that_cannot_hold_the_default_gets_the_largest_it_holds_with_the_cache_share(machine):
    cache = _cache(machine, 480 * 1024)
    rule = sizing.derive(cache, 2 * GiB + 123, where="node0's CPUs")    # never refused
    assert rule.size_bytes == 2 * GiB and rule.size_bytes % (2 * MiB) == 0
    (w,) = rule.warnings
    assert w["code"] == "gather_size_cache"
    assert "holds 23% of the 2.00 GiB buffer" in w["message"] and "overstated" in w["message"]
    assert "3.75 GiB" in w["message"] and rule.cache_share == pytest.approx(480 / 2048)
    # even a node smaller than the cache gets a buffer: all of it, and the warning says 100%
    small = sizing.derive(cache, 300 * MiB, where="node0's CPUs")
    assert small.size_bytes == 300 * MiB and "holds 100%" in small.warnings[0]["message"]


def test_unreported_cache_uses_the_floor_and_says_so(machine):
    root = machine("this-machine")       # the recording holds no cpuN/cache
    assert sizing.last_level_cache(SysfsReader(root), (0, 1)) is None
    rule = sizing.derive(None, 64 * GiB, where="node0's CPUs")
    assert rule.size_bytes == 256 * MiB and "not reported" in rule.rule and rule.cache_share is None
    assert "not reported" in sizing.check_given(64 * MiB, None, None, where="node0's CPUs", refuse_in_cache=True).rule


def test_an_explicit_size_inside_the_cache_is_refused_with_exit_3(machine):
    cache = _cache(machine, 480 * 1024)
    with pytest.raises(SactoolError) as e:
        sizing.check_given(256 * MiB, cache, 16 * GiB, where="node0's CPUs", refuse_in_cache=True)
    assert e.value.exit_code == ExitCode.UNAVAILABLE
    assert "fits in the 480.00 MiB last-level cache of node0's CPUs" in e.value.message
    assert f"{M * 480 + 2}MiB here" in e.value.hint and "drop --gather-size" in e.value.hint
    # bench may measure a cache on purpose: warned (in_cache), with the share
    rule = sizing.check_given(256 * MiB, cache, 16 * GiB, where="node0's CPUs", refuse_in_cache=False,
                              code="in_cache", option="--size")
    assert rule.given and rule.warnings[0]["code"] == "in_cache" and "holds 100%" in rule.warnings[0]["message"]


def test_an_explicit_size_under_eight_times_the_cache_is_measured_and_warned(machine):
    cache = _cache(machine, 480 * 1024)
    rule = sizing.check_given(1 * GiB, cache, 16 * GiB, where="node0's CPUs", refuse_in_cache=True)
    assert rule.size_bytes == 1 * GiB and rule.given and "holds 47%" in rule.warnings[0]["message"]
    assert not sizing.check_given(4 * GiB, cache, 16 * GiB, where="x", refuse_in_cache=True).warnings


def test_process_room_counts_what_the_process_maps_under_its_limit(machine):
    """``ulimit -v`` in a child: the room is the limit minus what the child already maps."""
    import subprocess
    import sys

    code = ("import resource; from sactool.bench.sizing import process_room; "
            "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, resource.RLIM_INFINITY)); "
            "left, why = process_room(); import mmap; m = mmap.mmap(-1, 1 << 30); left2, _ = process_room(); "
            "print(left, left2, why)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True).stdout
    left, left2, *why = out.split()
    assert 0 < int(left) < 3 << 30 and 1 << 30 <= int(left) - int(left2) < (1 << 30) + (16 << 20) and why[:2] == ["ulimit", "-v"]
    assert sizing.process_room(SysfsReader(machine("this-machine")))[0] is None   # a recording: none


def test_tune_gather_size_over_the_address_space_limit_is_refused_before_any_work(tmp_path):
    """Under ``ulimit -v`` (a real RLIMIT_AS in the child), a --gather-size the process cannot map is
    refused at once with exit 6 and a hint naming --gather-size (it used to fail after the
    simulations, naming --size)."""
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.RLIM_INFINITY))

    r = subprocess.run([sys.executable, "-c", "from sactool.entry import main; main()", "tune", "--context", "4k",
                        "--steps", "4", "--replicates", "1", "--tp", "1", "--pool-bytes", "1GiB", "--gpu-kv-budget",
                        "10GiB", "--gather-size", "8GiB", "--out", str(tmp_path / "p.yaml")],
                       capture_output=True, text=True, timeout=300, preexec_fn=limit)
    assert r.returncode == 6, r.stderr
    assert "--gather-size 8.00 GiB does not fit" in r.stderr and "hint: use --gather-size" in r.stderr
    assert "--size" not in r.stderr.replace("--gather-size", "") and "points" not in r.stderr
    assert not (tmp_path / "p.yaml").exists()
