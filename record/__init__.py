"""Session recordings: format, writer, reader and replay timeline, exports.

Names are imported lazily so that building the CLI parser stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Recording": "record.reader",
    "open_recording": "record.reader",
    "RecordingWriter": "record.writer",
    "default_recording_path": "record.writer",
    "redact_options": "loadgen.redact",
    "ReplayTimeline": "record.replay",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'record' has no attribute {name!r}")
