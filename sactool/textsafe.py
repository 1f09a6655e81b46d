"""Text from files shown safely on a terminal: a leaf module, so the library's few plain
``stderr`` lines (a fleet rank's last word before it aborts) and :mod:`sactool.render` escape alike."""

from __future__ import annotations

_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))}


def printable(text: str) -> str:
    """``text`` with every C0/C1 control character but tab and newline written out as ``\\xNN``
    (ESC, CR, BEL, DEL, CSI …): what a terminal shows is what the file holds, and a hostile
    string cannot move the cursor, set the title or clear the screen."""
    return text.translate(_CONTROLS)
