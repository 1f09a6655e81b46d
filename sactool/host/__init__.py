"""Everything sactool reads from /sys and /proc goes through :class:`SysfsReader`."""

from sactool.host.sysfs import SYSFS_ROOT_ENV, Attr, SysfsReader, parse_cpulist, parse_int, parse_hex, parse_kv

__all__ = ["SYSFS_ROOT_ENV", "Attr", "SysfsReader", "parse_cpulist", "parse_int", "parse_hex", "parse_kv"]
