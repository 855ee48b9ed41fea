"""Messages the app passes to its widgets."""

from __future__ import annotations

from textual.message import Message

from rampwatch.core.timeline import Snapshot


class SnapshotUpdated(Message):
    """A fresh snapshot to draw. Only the newest matters: a queued one is replaced."""

    def __init__(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.compare = compare

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotUpdated)
