"""Incremental Server-Sent Events decoding and cheap classification of OpenAI stream events.

``SSEDecoder`` turns network reads (arbitrary byte slices) into the ``data`` payloads of
complete events. Lines may be split across reads; ``\\n``, ``\\r\\n`` and ``\\r`` all end a
line; a ``\\r`` at the very end of a read is held back until the next read shows whether
a ``\\n`` follows. Comment lines (``:``, used as keep-alive pings) and the ``event:``,
``id:``, ``retry:`` fields are ignored. Several ``data:`` lines in one event are joined
with ``\\n`` as the SSE specification says.

``classify_event`` looks at a payload's bytes to decide what it is without decoding the
JSON of every token chunk: only the usage chunk, the chunk that carries a finish reason,
and anything unexpected (errors) are decoded. A JSON string value cannot contain an
unescaped ``"``, so byte patterns such as ``"choices":[]`` cannot match text content.
The patterns are those of compact JSON (vLLM's); an event they do not recognise is
decoded and classified from its object (``classify_decoded``), so spaced or reordered
JSON costs a parse, never a lost token.
"""

from __future__ import annotations

import json
from typing import Any

DONE = b"[DONE]"

# What classify_event returns.
EVENT_TOKEN = "token"  # a chunk with non-empty `choices` (may carry empty text or only a role)
EVENT_USAGE = "usage"  # the trailing `"choices":[]` chunk with `usage`
EVENT_DONE = "done"  # `data: [DONE]`
EVENT_ERROR = "error"  # an error object sent inside the stream
EVENT_OTHER = "other"  # anything else (ignored)

_CHOICES_NONEMPTY = b'"choices":[{'
_CHOICES_EMPTY = b'"choices":[]'
_FINISH_SET = b'"finish_reason":"'
_USAGE_OBJECT = b'"usage":{'
# The same patterns for callers that inline the per-chunk test.
TOKEN_MARK, FINISH_MARK, USAGE_MARK = _CHOICES_NONEMPTY, _FINISH_SET, _USAGE_OBJECT


# The most one event (its data lines, or one line still without its end) may hold: a
# token chunk is a few hundred bytes; a first chunk with prompt logprobs can be megabytes.
MAX_EVENT_BYTES = 16 * 1024 * 1024


class EventTooLarge(ValueError):
    """A stream event passed ``MAX_EVENT_BYTES``: the request fails with this message."""


class SSEDecoder:
    """Feed raw bytes with ``feed``; call ``flush`` once the body has ended.

    A line that arrives over many reads is kept in one buffer and only the new bytes are
    searched for its end, so a long line costs work in proportion to its length, and an
    event that passes ``max_event_bytes`` raises ``EventTooLarge`` as soon as it does."""

    __slots__ = ("_pending", "_scanned", "_data_lines", "_data_bytes", "max_event_bytes")

    def __init__(self, max_event_bytes: int | None = None) -> None:
        self._pending = bytearray()
        self._scanned = 0  # how much of _pending is known to hold no line end
        self._data_lines: list[bytes] = []
        self._data_bytes = 0
        self.max_event_bytes = MAX_EVENT_BYTES if max_event_bytes is None else max_event_bytes

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._pending:
            self._pending += chunk
            if not self._line_ended():
                self._check_size()
                return []
            buf = bytes(self._pending)
            self._pending.clear()
            self._scanned = 0
        else:
            buf = chunk
        if b"\r" not in buf and not self._data_lines:
            events = self._feed_events(buf)
        elif b"\r" in buf:
            held = b""
            if buf.endswith(b"\r"):
                buf, held = buf[:-1], b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            lines = buf.split(b"\n")
            self._pending += lines.pop() + held
            events = self._take_lines(lines)
        else:
            lines = buf.split(b"\n")
            self._pending += lines.pop()
            events = self._take_lines(lines)
        self._check_size()
        return events

    def _line_ended(self) -> bool:
        """Whether the pending bytes past those already searched hold a line end."""
        pending, start = self._pending, self._scanned
        if pending.find(b"\n", start) >= 0 or pending.find(b"\r", start) >= 0:
            return True
        self._scanned = len(pending)
        return False

    def _check_size(self) -> None:
        if len(self._pending) + self._data_bytes > self.max_event_bytes:
            size = self.max_event_bytes / 2**20
            raise EventTooLarge(f"a stream event passed {size:g} MiB, the most rampwatch reads of one event")

    def token_events_only(self, chunk: bytes) -> int:
        """How many events ``chunk`` holds when it is nothing but whole one-line token
        events (``data: {..."choices":[{...}\n\n`` each) and nothing is pending from
        earlier reads; otherwise 0, and the caller must ``feed`` it.

        The common read of a token stream then costs a few byte scans instead of a split
        into per-event payloads. A finish reason or usage inside such events is not
        looked at here: the caller reads them from the last event of the last such read
        once the stream is over (``last_token_payload``), which is where OpenAI-style
        servers put them."""
        if self._pending or self._data_lines or not chunk.startswith(b"data: {"):
            return 0
        if chunk.find(b"\n") == len(chunk) - 2:  # one event: the usual read
            if chunk[-1] != 10 or _CHOICES_NONEMPTY not in chunk or b"\r" in chunk:
                return 0
            return 1
        if not chunk.endswith(b"\n\n"):
            return 0
        n = chunk.count(b"\n\n")
        if (
            chunk.count(b"\n") != 2 * n
            or chunk.count(_CHOICES_NONEMPTY) != n
            or chunk.count(b"\n\ndata: {") != n - 1
            # JSON text cannot hold a raw CR, so any CR is an SSE line end: feed's job
            or b"\r" in chunk
        ):
            return 0
        return n

    def _feed_events(self, buf: bytes) -> list[bytes]:
        """The common case (``\\n`` line ends, nothing half-parsed): split on blank lines,
        so an event that is one ``data:`` line costs a slice, not a per-line loop."""
        parts = buf.split(b"\n\n")
        self._pending += parts.pop()
        events: list[bytes] = []
        for part in parts:
            if part.startswith(b"data: ") and b"\n" not in part:
                events.append(part[6:])
            elif part:
                events.extend(self._take_lines([*part.split(b"\n"), b""]))
        return events

    def flush(self) -> list[bytes]:
        """Events left when the body ends without a final blank line."""
        rest = bytes(self._pending).replace(b"\r", b"")
        self._pending = bytearray()
        self._scanned = 0
        events = self._take_lines(rest.split(b"\n")) if rest else []
        if self._data_lines:
            events.append(b"\n".join(self._data_lines))
            self._data_lines = []
            self._data_bytes = 0
        return events

    def _take_lines(self, lines: list[bytes]) -> list[bytes]:
        events: list[bytes] = []
        data_lines = self._data_lines
        data_bytes = self._data_bytes
        for line in lines:
            if not line:
                if data_lines:
                    events.append(data_lines[0] if len(data_lines) == 1 else b"\n".join(data_lines))
                    data_lines = []
                    data_bytes = 0
                continue
            if line.startswith(b"data:"):
                value = line[5:]
                if value.startswith(b" "):
                    value = value[1:]
                data_lines.append(value)
                data_bytes += len(value) + 1
                if data_bytes > self.max_event_bytes:
                    self._data_bytes = data_bytes
                    self._check_size()
        self._data_lines = data_lines
        self._data_bytes = data_bytes
        return events


def last_token_payload(read: bytes) -> bytes:
    """The data of the last event in a read that ``token_events_only`` accepted."""
    return read[:-2].rsplit(b"\n\n", 1)[-1][6:]


def classify_event(payload: bytes) -> str:
    """Which kind of stream event ``payload`` (one event's data) is, from its bytes alone."""
    if _CHOICES_NONEMPTY in payload:
        return EVENT_TOKEN
    if _CHOICES_EMPTY in payload:
        return EVENT_USAGE if _USAGE_OBJECT in payload else EVENT_OTHER
    stripped = payload.strip()
    if stripped == DONE:
        return EVENT_DONE
    if b'"error"' in stripped or b'"object":"error"' in stripped:
        return EVENT_ERROR
    return EVENT_OTHER


def classify_decoded(body: dict[str, Any] | None) -> str:
    """``classify_event`` for an event whose bytes did not match the compact patterns
    (JSON with spaces, as many servers and proxies write it): the same kinds, from the
    decoded object."""
    if not body:
        return EVENT_OTHER
    choices = body.get("choices")
    if isinstance(choices, list) and choices:
        return EVENT_TOKEN
    if isinstance(choices, list) and isinstance(body.get("usage"), dict):
        return EVENT_USAGE
    if body.get("error") is not None or body.get("object") == "error":
        return EVENT_ERROR
    return EVENT_OTHER


def decode_json(payload: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def error_message(body: dict[str, Any] | None) -> str | None:
    """The server's message from an OpenAI/vLLM error object.

    Accepts ``{"error": {"message": ...}}`` (vLLM >= 0.9, OpenAI), ``{"error": "..."}``
    (TGI, some proxies) and the older vLLM ``{"object": "error", "message": ...}``.
    """
    if not body:
        return None
    err = body.get("error")
    if isinstance(err, dict):
        msg = err.get("message")
        return str(msg) if msg is not None else json.dumps(err)[:500]
    if isinstance(err, str):
        return err
    if body.get("object") == "error" and body.get("message") is not None:
        return str(body["message"])
    if isinstance(body.get("detail"), str):  # FastAPI-style errors
        return body["detail"]
    return None
