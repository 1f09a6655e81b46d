"""Kernel interfaces for CXL device health that are not plain file reads: the memory device's mailbox
ioctl (``/dev/cxl/memX``) and the poison list, asked for with ``memX/trigger_poison_list`` and read back
from the ``cxl:cxl_poison`` trace event in a private tracefs instance. Live system only; what they return
is decoded (and recorded) by :mod:`sactool.topology.health`."""

from __future__ import annotations

import os
import struct
from typing import Sequence

CXL_MEM_SEND_COMMAND = (3 << 30) | (48 << 16) | (0xCE << 8) | 2
"""``_IOWR(0xCE, 2, struct cxl_send_command)``; the struct is 48 bytes (include/uapi/linux/cxl_mem.h)."""


def mailbox_health_info(devpath: str, command_id: int, out_bytes: int) -> tuple[bytes | None, str]:
    """Send the read-only mailbox command ``command_id`` (an index of the uapi's CXL_CMDS, e.g. 7 = Get Health
    Info) to ``devpath`` (``/dev/cxl/memX``) and take ``out_bytes`` of reply; (payload, "") or (None, why)."""
    import ctypes
    import fcntl

    out = ctypes.create_string_buffer(out_bytes)
    # struct cxl_send_command: id, flags, raw{opcode,rsvd}, retval, in{size,rsvd,payload}, out{size,rsvd,payload}
    cmd = struct.pack("<IIIIIIQIIQ", command_id, 0, 0, 0, 0, 0, 0, out_bytes, 0,
                      ctypes.addressof(out))
    buf = bytearray(cmd)
    try:
        fd = os.open(devpath, os.O_RDWR)
    except OSError as e:
        return None, f"cannot open {devpath}: {e.strerror} (the mailbox needs root)"
    try:
        fcntl.ioctl(fd, CXL_MEM_SEND_COMMAND, buf, True)
    except OSError as e:
        import errno

        if e.errno == errno.ENOTTY:   # drivers/cxl/core/mbox.c: not in the device's enabled commands
            return None, (f"the device does not implement mailbox command {command_id} (the kernel refuses "
                          f"commands missing from its Command Effects Log: ENOTTY on {devpath})")
        return None, f"CXL_MEM_SEND_COMMAND(command {command_id}) on {devpath}: {e.strerror}"
    finally:
        os.close(fd)
    retval = struct.unpack_from("<I", buf, 12)[0]
    size = struct.unpack_from("<I", buf, 32)[0]
    if retval:
        return None, f"the device answered command {command_id} with return code {retval} (CXL 3.1 Table 8-34)"
    if size < out_bytes:
        return None, f"the device's command {command_id} reply is {size} bytes, expected {out_bytes}"
    return out.raw[:out_bytes], ""


def tracefs_root() -> str | None:
    for p in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if os.path.isdir(os.path.join(p, "instances")):
            return p
    return None


def read_poison_live(memdevs: Sequence[str]) -> tuple[str | None, str]:
    """Ask each memdev for its poison list and collect the ``cxl_poison`` events, in a private tracefs
    instance (the user's own tracing is untouched); (trace text, "") or (None, why). Needs root."""
    root = tracefs_root()
    if root is None:
        return None, "tracefs is not mounted (mount -t tracefs tracefs /sys/kernel/tracing)"
    inst = os.path.join(root, "instances", f"sactool-poison-{os.getpid()}")
    try:
        os.mkdir(inst)
    except OSError as e:
        return None, f"cannot create a tracefs instance ({e.strerror}; needs root)"
    try:
        try:
            with open(os.path.join(inst, "events/cxl/cxl_poison/enable"), "w") as f:
                f.write("1")
        except OSError as e:
            return None, f"cannot enable the cxl:cxl_poison trace event: {e.strerror}"
        failed = []
        for m in memdevs:
            try:
                with open(f"/sys/bus/cxl/devices/{m}/trigger_poison_list", "w") as f:
                    f.write("1")
            except OSError as e:
                failed.append(f"{m}: {e.strerror}")
        # the write returns once the device's list was read and every record traced (synchronous)
        with open(os.path.join(inst, "trace"), encoding="utf-8", errors="replace") as f:
            text = f.read(4 << 20)
        if failed and len(failed) == len(memdevs):
            return None, "trigger_poison_list failed: " + "; ".join(failed)
        return text, ("; ".join(failed))
    finally:
        try:
            with open(os.path.join(inst, "events/cxl/cxl_poison/enable"), "w") as f:
                f.write("0")
        except OSError:
            pass
        try:
            os.rmdir(inst)
        except OSError:
            pass
