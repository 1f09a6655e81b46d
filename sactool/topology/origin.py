"""Where a topology comes from: this system, a recording of a real machine, or a generated tree.

A recorded tree (``sactool probe --snapshot`` unpacked, or one of the QEMU recordings) may carry a
``SNAPSHOT.json`` manifest at its root. A tree made by a program rather than read from a machine —
the test suite's server-scale tree (``tests/fixtures/servertree.py``) — says so there with
``"generated": true`` and a ``recorded_from`` line naming its generator; probe then says
"GENERATED machine" instead of "RECORDED machine", and the topology record's ``source`` says it.

The manifest is untrusted input like every file of a recording: read beneath the root only (the
tree's own fenced reader), at most :data:`MANIFEST_LIMIT` bytes, and anything but a JSON object
whose ``generated`` is the JSON literal ``true`` leaves the tree a plain recording. It is read
without being *touched* (``SysfsReader.touched``), so a snapshot of a snapshot does not archive the
old manifest beside the new one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sactool.host.files import NotRead

MANIFEST = "SNAPSHOT.json"
MANIFEST_LIMIT = 64 << 10
"""Bytes of ``SNAPSHOT.json`` read at most; a larger file is not a manifest sactool wrote."""
NOTE_LIMIT = 300
"""Characters of the manifest's ``recorded_from`` kept (shown in probe's header)."""

ORIGINS = ("live", "recording", "generated")


@dataclass(frozen=True)
class Origin:
    """``kind``: one of :data:`ORIGINS`; ``note``: the manifest's ``recorded_from`` for a
    generated tree (None otherwise)."""

    kind: str
    note: str | None = None

    @property
    def source(self) -> str:
        """The topology record's ``source`` words."""
        return {"live": "this system", "recording": "recording (not this system)",
                "generated": "generated tree (not a real machine)"}[self.kind]


def read_origin(reader) -> Origin:
    """The origin of what ``reader`` (a :class:`~sactool.host.sysfs.SysfsReader`) reads."""
    if reader.live:
        return Origin("live")
    try:
        raw = reader.tree.read(MANIFEST, limit=MANIFEST_LIMIT + 1)
    except NotRead:
        return Origin("recording")
    if len(raw) > MANIFEST_LIMIT:
        return Origin("recording")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return Origin("recording")
    if not isinstance(data, dict) or data.get("generated") is not True:
        return Origin("recording")
    note = data.get("recorded_from")
    note = note[:NOTE_LIMIT] if isinstance(note, str) and note.strip() else "no generator named"
    return Origin("generated", note)
