"""One streamed answer turned into a record's fields: ``StreamState`` applies the SSE
events of a response as they arrive (first token, chunk times, finish reason, usage,
an error event, ``[DONE]``), ``StreamExchange`` feeds it from ``http_stream``'s callbacks,
and ``usage_counts`` reads the token counts of the final usage chunk. Both transports of
``loadgen.transport.client`` share them, so the same bytes give the same record."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from rampwatch.core.text import printable
from rampwatch.core.timeline import MAX_TOKEN_COUNT, RequestRecord
from rampwatch.loadgen.transport import redirects, sse
from rampwatch.loadgen.transport.reasoning import ReasoningWatch, thinking_of_chunk

_TOKEN_MARK = sse.TOKEN_MARK
_FINISH_MARK = sse.FINISH_MARK
_USAGE_MARK = sse.USAGE_MARK
MAX_ERROR_BODY = 64 * 1024
# A finish reason is a word ("stop", "length"); a longer one is cut here.
_MAX_FINISH_REASON = 100
# How much of an answer that is not an event stream its failure shows.
HEAD_SHOWN = 120


def token_count(usage: dict[str, Any], key: str) -> int | None:
    """``usage[key]`` as a token count: None when absent or null, ValueError naming the
    field when it is not a whole number from 0 to ``MAX_TOKEN_COUNT``."""
    value = usage.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 12.0 from a server that writes JSON numbers as floats
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKEN_COUNT:
        shown = repr(value)
        raise ValueError(f"usage.{key}: {shown[:40]} is not a token count")
    return value


def usage_counts(usage: dict[str, Any]) -> tuple[int | None, int]:
    """(prompt tokens or None when not given, completion tokens) from a stream's usage."""
    return token_count(usage, "prompt_tokens"), token_count(usage, "completion_tokens") or 0


def cached_prompt_tokens(usage: dict[str, Any]) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens``: the prompt tokens the server's prefix
    cache served (None when it does not say, or says something that is not a count)."""
    details = usage.get("prompt_tokens_details")
    if not isinstance(details, dict):
        return None
    try:
        return token_count(details, "cached_tokens")
    except ValueError:
        return None


class StreamExchange:
    """One request's ``http_stream.ResponseHandler``: feeds the body to the SSE decoder and
    the stream state as each network read arrives; ``finished`` resolves once the
    record's outcome is known (``[DONE]``, an error event, the end of the body, an error)."""

    __slots__ = (
        "rec",
        "state",
        "clock",
        "finished",
        "decoder",
        "error",
        "response_started",
        "reason",
        "error_body",
        "error_body_size",
        "redirected",
        "body_ended",
        "oversized",
        "mark",
    )

    def __init__(
        self,
        rec: RequestRecord,
        state: StreamState,
        clock: Callable[[], float],
        finished: asyncio.Future[None],
        mark: Callable[[str], None] | None = None,
    ) -> None:
        self.rec = rec
        self.state = state
        self.clock = clock
        self.finished = finished
        self.decoder = sse.SSEDecoder()
        self.error: BaseException | None = None
        self.response_started = False
        self.reason = ""
        self.error_body: list[bytes] = []
        self.error_body_size = 0
        self.redirected: tuple[int, str] | None = None  # (status, Location)
        self.body_ended: asyncio.Future[None] | None = None
        self.oversized = False  # an event passed the decoder's cap: the connection is dropped
        self.mark = mark  # marks the head's arrival (``headers_at``)

    def on_head(self, status: int, reason: str, headers: dict[str, str]) -> None:
        if self.finished.done():
            return
        if self.mark is not None:  # where TTFT went: loadgen.transport.phases
            self.mark("headers_at")
        self.response_started = True
        location = headers.get("location")
        if status in redirects.REDIRECT_STATUSES and location:
            self.redirected = (status, location)
            self.finished.set_result(None)
            return
        self.rec.status = status
        self.reason = reason
        self.state.received(headers)

    def on_body(self, pieces: list[bytes]) -> None:
        if self.finished.done():
            return
        if self.rec.status != 200:
            for piece in pieces:
                if self.error_body_size < MAX_ERROR_BODY:
                    piece = piece[: MAX_ERROR_BODY - self.error_body_size]
                    self.error_body.append(piece)
                    self.error_body_size += len(piece)
            return
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        state = self.state
        tokens = self.decoder.token_events_only(data)
        if tokens:
            now = self.clock()
            if state.watching:
                state.watching = state.reasoning.see_read(data, tokens, now)  # type: ignore[union-attr]
            state.token_events(tokens, self.rec, now)
            state.last_fast_read = data
            if state.keep_text:
                state.raw_chunks.append(data)  # whole events; text() splits them
            return
        if state.head is None:
            state.head = data[:HEAD_SHOWN]
        try:
            events = self.decoder.feed(data)
        except sse.EventTooLarge as exc:  # the request fails; the rest of its body is not read
            state.error_message = str(exc)
            self.oversized = True
            self.finished.set_result(None)
            return
        if state.consume(events, self.rec, self.clock):
            self.finished.set_result(None)

    def on_end(self) -> None:
        if self.body_ended is not None and not self.body_ended.done():
            self.body_ended.set_result(None)
        if self.finished.done():
            return
        if self.rec.status == 200:
            self.state.consume(self.decoder.flush(), self.rec, self.clock)
        self.finished.set_result(None)

    def on_error(self, exc: BaseException, response_started: bool) -> None:
        if self.body_ended is not None and not self.body_ended.done():
            self.body_ended.set_result(None)
        if self.finished.done():
            return
        self.error = exc
        self.response_started = response_started
        self.finished.set_result(None)


class StreamState:
    """Per-request parse state; token chunks cost a byte search and an append.

    ``raw_chunks`` (kept only for a fallback tokenizer) holds event payloads and, from
    ``token_events_only`` reads, whole ``data: ...\n\n`` runs of token events."""

    __slots__ = (
        "done",
        "usage",
        "error_message",
        "keep_text",
        "raw_chunks",
        "last_fast_read",
        "content_type",
        "content_encoding",
        "head",
        "reasoning",
        "watching",
    )

    def __init__(self, keep_text: bool, chat: bool = False) -> None:
        self.done = False
        self.usage: dict[str, Any] | None = None
        self.error_message: str | None = None
        self.keep_text = keep_text
        self.raw_chunks: list[bytes] = []
        self.last_fast_read: bytes | None = None  # the last read token_events_only took
        # What the answer said it is, and its first bytes (from a read that was not all
        # token events): what a stream without [DONE] is described by.
        self.content_type = ""
        self.content_encoding = ""
        self.head: bytes | None = None
        # A chat stream's thinking chunks, looked at until its first answer chunk
        # (loadgen.transport.reasoning); None for completions, which never think.
        self.reasoning = ReasoningWatch() if chat else None
        self.watching = chat

    def received(self, headers: Mapping[str, str]) -> None:
        """The answer's head: its content type and encoding (``headers``: lower-case names,
        or aiohttp's case-insensitive ones)."""
        self.content_type = headers.get("content-type") or ""
        self.content_encoding = headers.get("content-encoding") or ""

    def unfinished(self, got_tokens: bool) -> str:
        """Why a stream that ended without ``[DONE]`` failed, saying what came instead: an
        encoded body, something that is not an event stream, or a stream cut short."""
        encoding = self.content_encoding.strip().lower()
        if encoding not in ("", "identity"):
            return (
                f"the stream came {encoding}-encoded (rampwatch asks for identity and does not decode it); "
                "no [DONE] read"
            )
        kind = self.content_type.split(";")[0].strip().lower()
        if not got_tokens and kind != "text/event-stream":
            first = " ".join((self.head or b"").decode("utf-8", "replace").split())[:HEAD_SHOWN]
            shown = f": {first!r}" if first else " (an empty body)"
            return f"HTTP 200 with {kind or 'no content type'}, not an event stream{shown}"
        return "connection closed before [DONE]"

    def settle_fast_reads(self, rec: RequestRecord) -> None:
        """Finish reason and usage from the last token event of the fast path's last read,
        where the event-by-event path did not already find them (a later usage chunk
        is the final word on usage)."""
        if self.last_fast_read is None:
            return
        payload = sse.last_token_payload(self.last_fast_read)
        self.last_fast_read = None
        if (rec.finish_reason is None and _FINISH_MARK in payload) or (self.usage is None and _USAGE_MARK in payload):
            self._read_full_chunk(payload, rec, keep_known=True)

    def consume(self, events: list[bytes], rec: RequestRecord, clock: Callable[[], float]) -> bool:
        """Apply events; True once the stream is over (``[DONE]`` or an error event)."""
        if not events:
            return False
        now = clock()
        chunk_times = rec.chunk_times
        for payload in events:
            # sse.classify_event's token test, inlined: this runs once per streamed chunk
            body = None
            if _TOKEN_MARK in payload:
                kind = sse.EVENT_TOKEN
            else:
                kind = sse.classify_event(payload)
                if kind == sse.EVENT_OTHER:  # not compact JSON: decode it to know
                    body = sse.decode_json(payload)
                    kind = sse.classify_decoded(body)
            if kind == sse.EVENT_TOKEN:
                if rec.first_token_at is None:
                    rec.first_token_at = now
                else:
                    chunk_times.append(now)
                if self.keep_text:
                    self.raw_chunks.append(payload)
                if self.watching:
                    self.watching = self.reasoning.see(payload, now, body)  # type: ignore[union-attr]
                if body is not None:
                    self._apply_chunk(body, rec)
                elif _FINISH_MARK in payload or _USAGE_MARK in payload:
                    self._read_full_chunk(payload, rec)
            elif kind == sse.EVENT_USAGE:
                body = body or sse.decode_json(payload)
                if body and isinstance(body.get("usage"), dict):
                    self.usage = body["usage"]
            elif kind == sse.EVENT_DONE:
                self.done = True
                return True
            elif kind == sse.EVENT_ERROR:
                body = body or sse.decode_json(payload)
                self.error_message = sse.error_message(body) or payload[:200].decode("utf-8", "replace")
                return True
        return False

    @staticmethod
    def token_events(count: int, rec: RequestRecord, now: float) -> None:
        """``count`` plain token events arrived in one read at ``now`` (what ``consume``
        does for each of them, without the per-event work)."""
        if rec.first_token_at is None:
            rec.first_token_at = now
            count -= 1
        if count == 1:
            rec.chunk_times.append(now)
        elif count:
            rec.chunk_times.extend([now] * count)

    def _read_full_chunk(self, payload: bytes, rec: RequestRecord, keep_known: bool = False) -> None:
        """Finish reason and usage from a token chunk's JSON; ``keep_known`` leaves the
        ones already found alone (for a chunk read after later events)."""
        self._apply_chunk(sse.decode_json(payload), rec, keep_known)

    def _apply_chunk(self, body: dict[str, Any] | None, rec: RequestRecord, keep_known: bool = False) -> None:
        if not body:
            return
        choices = body.get("choices")
        first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        if first.get("finish_reason") and not (keep_known and rec.finish_reason is not None):
            # a word such as "stop" from a well-behaved server; shown and recorded as it is
            rec.finish_reason = printable(str(first["finish_reason"])[:_MAX_FINISH_REASON], one_line=True)
        # continuous usage stats: keep the latest
        if isinstance(body.get("usage"), dict) and not (keep_known and self.usage is not None):
            self.usage = body["usage"]

    def _bodies(self) -> list[dict[str, Any]]:
        """The kept token events, decoded."""
        payloads: list[bytes] = []
        for item in self.raw_chunks:  # event payloads, or whole reads of token events
            if item.startswith(b"data: "):
                payloads += [event[6:] for event in item[:-2].split(b"\n\n")]
            else:
                payloads.append(item)
        return [body for body in map(sse.decode_json, payloads) if body]

    def text(self) -> str:
        """The answer's text (a reasoning model's thinking left out, as vLLM's
        ``generated_text`` leaves it)."""
        parts = []
        for body in self._bodies():
            for choice in body.get("choices") or []:
                piece = choice.get("text")
                if piece is None:
                    piece = (choice.get("delta") or {}).get("content")
                if piece:
                    parts.append(piece)
        return "".join(parts)

    def thinking_text(self) -> str:
        """A reasoning model's thinking text, all of it (``loadgen.transport.reasoning``)."""
        return "".join(thinking_of_chunk(body) for body in self._bodies())
