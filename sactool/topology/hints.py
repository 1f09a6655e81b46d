"""The commands probe prints as hints, built from what it read (kernel and tool facts they rest on).

Each command is quoted ('…') inside its hint, so a script can run exactly what a user is told
(scripts/live-cxl does, on a real kernel)."""

from __future__ import annotations

from sactool.host.sysfs import SysfsReader

NDCTL_RAM_REGIONS = 77
"""ndctl (cxl-cli) creates volatile (ram) regions from release 77 on; 76.1 (Debian 12) prints "created 0
regions" and exits 0 (seen in the QEMU-CXL captures, shared/fixtures/qemu-cxl README)."""


def create_region_command(memdev: str, decoder: str) -> str:
    """The cxl-cli command that maps ``memdev``'s volatile capacity as a 1-way ram region under ``decoder``
    (``-m``: the arguments are memdevs; the root decoder must be named, or cxl-cli says
    "no root decoder specified")."""
    return f"cxl create-region -t ram -d {decoder} -m {memdev}"


AUTO_ONLINE = "sys/devices/system/memory/auto_online_blocks"


def auto_online_policy(r: SysfsReader) -> str | None:
    """``/sys/devices/system/memory/auto_online_blocks``: what the kernel does with hot-added memory
    blocks (``offline``, ``online``, ``online_movable``, ``online_kernel``); None when unreadable."""
    v = r.text(AUTO_ONLINE)
    return v.strip() if v else None


def system_ram_steps(name: str, policy: str | None) -> str:
    """The commands that turn DAX device ``name`` into system RAM under the kernel's auto-online
    ``policy``: daxctl (76 and 81) refuses "kernel policy will auto-online memory, aborting" (rc 240)
    unless the policy is ``offline`` — it onlines the blocks itself (movable) once it is."""
    cmd = f"'daxctl reconfigure-device --mode=system-ram {name}'"
    if policy == "offline":
        return f"{cmd} (auto_online_blocks is offline: daxctl onlines the memory itself, movable)"
    if policy is None:
        return (f"{cmd}; if daxctl says 'kernel policy will auto-online memory, aborting', first "
                f"'echo offline > /{AUTO_ONLINE}'")
    return (f"auto_online_blocks is {policy}, so daxctl refuses ('kernel policy will auto-online memory, "
            f"aborting'): first 'echo offline > /{AUTO_ONLINE}', then {cmd} (it onlines the memory "
            f"movable; write {policy} back afterwards if other hot-plug relies on it)")
