"""Streaming OpenAI-compatible client: one request in, one ``RequestRecord`` out.

Timing follows ``vllm bench serve`` (``vllm/benchmarks/lib/endpoint_request_func.py``):

- ``sent_at`` is read just before the HTTP request starts (after any concurrency wait,
  which the caller records as ``scheduled_at``; the gap is the client queue time).
- The *first token* is the first event whose ``choices`` list is not empty. For
  completions that includes chunks whose ``text`` is empty (vLLM streams an empty text
  while a multi-byte character is incomplete); for chat it includes the role-only first
  chunk, which vLLM emits in the same engine step as the first token. ``vllm bench serve``
  counts both the same way, so TTFT here equals its TTFT.
- Every later event with non-empty ``choices`` appends one arrival time to
  ``chunk_times``; ITLs are the gaps between successive such events (chunks, not tokens).
  The arrival time is read once per network read, when the read is parsed, and given to
  every event in it (vLLM reads ``perf_counter()`` per event, after its JSON decode): it is
  when the client got to the bytes, so the event loop's other work delays it.
- On success ``end_at`` is the arrival of the last token chunk (vLLM's ``latency``; the
  trailing usage chunk and ``[DONE]`` do not move it), so E2E and
  TPOT = (E2E - TTFT) / (completion_tokens - 1) match vLLM's numbers.
- Token counts come from the final ``usage`` chunk (``stream_options.include_usage``).
  If the server sends none, completion tokens are counted with ``fallback_tokenizer``
  over the streamed text (``tokens_from_usage=False``); without a tokenizer they stay 0.
  The prompt count then falls back to ``PreparedRequest.expected_prompt_tokens``.
  Chunks are never counted as tokens: chunks may hold zero or several tokens.

A request succeeds when the status is 200, at least one token chunk arrived and the
stream ended with ``[DONE]``. Otherwise ``error_class`` is one of:
``http_<status>`` (message from the server's JSON error body), ``connect`` (refused,
unreachable, or no connection within ``connect_timeout_s``), ``timeout`` (no complete
response within ``request_timeout_s``), ``stream_aborted`` (body ended or broke before ``[DONE]``),
``stream_error`` (an error event inside the stream, or ``[DONE]`` without any token),
``cancelled`` (see ``RequestCancelled``), ``client_limit`` (the client ran out of file
descriptors opening a connection: its own limit, ``loadgen.transport.open_files``). The API key only ever goes into the
``Authorization`` header; messages are scrubbed of it before they reach a record.

Transports: for a plain ``http://`` target the streamed requests go through
``loadgen.transport.http_stream`` (an ``asyncio.Protocol`` that parses every network read inside
``data_received``: no task wake-up per streamed chunk); ``https://`` targets, URLs with
credentials, redirects within the server's origin (``loadgen.transport.redirects``: one to another
origin fails the request as ``http_<status>``) and ``RAMPWATCH_HTTP_CLIENT=aiohttp`` use
aiohttp. Both produce
the same records: the same decoder and stream state turn the same body bytes into the
same fields, and errors map to the same classes.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from rampwatch.core.errors import ModelNotServed, TargetUnreachable, UserError
from rampwatch.core.redact import redact_text
from rampwatch.core.text import printable, server_text
from rampwatch.core.timeline import CLIENT_LIMIT, MAX_TOKEN_COUNT, RequestRecord
from rampwatch.loadgen.transport import http_stream, redirects, sse
from rampwatch.loadgen.transport.connection import Connection
from rampwatch.loadgen.transport.open_files import out_of_files
from rampwatch.loadgen.workload.requests import PreparedRequest

_TOKEN_MARK = sse.TOKEN_MARK
_FINISH_MARK = sse.FINISH_MARK
_USAGE_MARK = sse.USAGE_MARK
ENDPOINT_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
_MAX_ERROR_BODY = 64 * 1024
_MAX_MESSAGE = 500
# A finish reason is a word ("stop", "length"); a longer one is cut here.
_MAX_FINISH_REASON = 100
# How much of an answer that is not an event stream its failure shows.
_HEAD_SHOWN = 120
TRANSPORT_ENV = "RAMPWATCH_HTTP_CLIENT"
# How long a stream that sent [DONE] may take to end its HTTP body before its
# connection is dropped instead of reused.
_BODY_END_GRACE_S = 1.0
# aiohttp >= 3.10 tells a connect timeout apart from a read timeout
_CONNECT_TIMEOUT: tuple[type[BaseException], ...] = tuple(
    cls for cls in (getattr(aiohttp, "ConnectionTimeoutError", None),) if cls is not None
)


class RequestCancelled(asyncio.CancelledError):
    """Raised by ``StreamingClient.send`` when its task is cancelled mid-request.

    It *is* a ``CancelledError`` (cancellation keeps propagating as asyncio expects) and
    carries the finished ``record`` (``error_class="cancelled"``, or the complete record
    when the stream had already ended and only the HTTP body's close was awaited) so the
    caller can publish it::

        try:
            record = await client.send(req, i, scheduled_at)
        except RequestCancelled as cancelled:
            sink.on_request(cancelled.record)
            raise
    """

    def __init__(self, record: RequestRecord) -> None:
        super().__init__("request cancelled")
        self.record = record


def normalize_base_url(base_url: str) -> str:
    """``http://h:8000/``, ``http://h:8000/v1`` -> ``http://h:8000`` (paths add ``/v1/...``)."""
    url = base_url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    return url


def count_tokens(tokenizer: Any, text: str) -> int:
    """Count ``text`` with a callable ``str -> int`` or an object with ``encode``.

    Works with ``transformers`` tokenizers (``encode(text, add_special_tokens=False)``)
    and ``tokenizers.Tokenizer`` (``encode(...).ids``).
    """
    if not text:
        return 0
    encode = getattr(tokenizer, "encode", None)
    if encode is None:
        return int(tokenizer(text))
    try:
        out = encode(text, add_special_tokens=False)
    except TypeError:
        out = encode(text)
    ids = getattr(out, "ids", out)
    return len(ids)


class StreamingClient:
    """The streaming transport (or one ``aiohttp.ClientSession``) shared by all requests of a run.

    ``clock`` returns seconds on the run's axis (e.g. ``lambda: time.monotonic() - t0``);
    every timestamp in a record comes from it. ``connection_limit`` caps the open
    connections and should equal the run's maximum concurrency; 0 means no limit (an
    open-loop run: a pool limit would queue requests inside the client, where the wait
    would be hidden in TTFT). ``transport`` says which transport ``send`` uses:
    ``"http_stream"`` (plain ``http://``, the default) or ``"aiohttp"`` (``https://``,
    URLs with credentials, or ``RAMPWATCH_HTTP_CLIENT=aiohttp``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        connection_limit: int = 100,
        request_timeout_s: float = 600,
        clock: Callable[[], float] = time.monotonic,
        fallback_tokenizer: Any = None,
        connect_timeout_s: float = 10.0,
        connection: Connection | None = None,
        keep_generated_text: bool = False,
    ) -> None:
        """``connection`` (headers, TLS) wins over ``api_key`` when given."""
        self.base_url = normalize_base_url(base_url)
        self.model = model
        self.connection_limit = max(0, int(connection_limit))
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.clock = clock
        self.fallback_tokenizer = fallback_tokenizer
        # Each record then carries its answer's text (vLLM's `generated_texts`). The stream
        # keeps its raw token events for it; the text is decoded once, when the request ends.
        self.keep_generated_text = keep_generated_text
        self._keep_text = fallback_tokenizer is not None or keep_generated_text
        self.connection = connection if connection is not None else Connection(api_key=api_key or None)
        self._secrets = self.connection.secrets()
        # identity: a compressed stream is buffered by the compressor, which would move the
        # token times rampwatch measures (a --header Accept-Encoding still wins)
        self._headers = {
            "Content-Type": "application/json",
            "Accept-Encoding": "identity",
            **self.connection.request_headers(),
        }
        self._session: aiohttp.ClientSession | None = None
        self._pool: http_stream.ConnectionPool | None = None
        self._started = False
        self._target = _stream_target(self.base_url)
        forced = os.environ.get(TRANSPORT_ENV, "").strip().lower()
        self.transport = "aiohttp" if self._target is None or forced == "aiohttp" else "http_stream"

    def __repr__(self) -> str:  # never shows the key
        return f"StreamingClient({self.base_url!r}, model={self.model!r})"

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        if self.transport == "http_stream":
            assert self._target is not None
            host, port, _, _ = self._target
            self._pool = http_stream.ConnectionPool(
                host,
                port,
                limit=self.connection_limit,
                connect_timeout_s=min(self.connect_timeout_s, self.request_timeout_s),
            )
        else:
            self._open_session()

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self.connection_limit,
                limit_per_host=self.connection_limit,
                keepalive_timeout=60,
                ssl=self.connection.ssl(),
            )
            timeout = aiohttp.ClientTimeout(
                total=self.request_timeout_s, sock_connect=min(self.connect_timeout_s, self.request_timeout_s)
            )
            # as http_stream: an encoded stream is not decoded but failed, naming its encoding
            self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False)
        return self._session

    async def close(self) -> None:
        self._started = False
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> StreamingClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def fetch_server_info(
        self,
        timeout_s: float = 5.0,
        require_model: bool = False,
        answer: ModelsAnswer | None = None,
        extras_timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """``/v1/models``, ``/version`` and the cache config; see ``fetch_server_info``."""
        return await fetch_server_info(
            self.base_url,
            timeout_s=timeout_s,
            connection=self.connection,
            model=self.model if require_model else None,
            answer=answer,
            extras_timeout_s=extras_timeout_s,
        )

    async def check_reachable(self, timeout_s: float = 5.0) -> int:
        """Raise ``TargetUnreachable`` unless the server answers; see ``check_reachable``."""
        return (await probe_models(self.base_url, timeout_s=timeout_s, connection=self.connection)).status

    def url_for(self, endpoint: str) -> str:
        return self.base_url + ENDPOINT_PATHS[endpoint]

    def _scrub(self, text: str) -> str:
        return server_text(text, self._secrets)[:_MAX_MESSAGE]

    def build_body(self, req: PreparedRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model}
        body.update(req.payload)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        return body

    async def send(self, req: PreparedRequest, request_id: int, scheduled_at: float) -> RequestRecord:
        """Send one streaming request and return its record; never raises except on
        cancellation (``RequestCancelled``). Call ``start()`` first."""
        if not self._started:
            raise RuntimeError("StreamingClient.start() was not called")
        rec = RequestRecord(
            id=request_id,
            scheduled_at=scheduled_at,
            sent_at=self.clock(),
            end_at=0.0,
            prompt_tokens=req.expected_prompt_tokens,
            scenario_tag=req.tag,
            **req.labels(),
        )
        if self._pool is not None:
            return await self._send_stream(req, rec)
        return await self._send_aiohttp(req, rec)

    async def _send_stream(self, req: PreparedRequest, rec: RequestRecord) -> RequestRecord:
        """``send`` over ``http_stream``: the stream is parsed in the protocol's callbacks."""
        assert self._pool is not None and self._target is not None
        pool, clock = self._pool, self.clock
        _, _, host_header, prefix = self._target
        payload = http_stream.build_request(
            "POST",
            prefix + ENDPOINT_PATHS[req.endpoint],
            host_header,
            self._headers,
            _body_bytes(self.build_body(req)),
        )
        state = _StreamState(keep_text=self._keep_text or req.keep_text)
        conn: http_stream.HttpConnection | None = None
        exchange: _StreamExchange | None = None
        try:
            async with asyncio.timeout(self.request_timeout_s):
                for _attempt in range(2):
                    conn = await pool.acquire()
                    exchange = _StreamExchange(rec, state, clock, asyncio.get_running_loop().create_future())
                    conn.send(payload, exchange)
                    await exchange.finished
                    # A reused connection the server had already closed: nothing was
                    # answered, so the request never started; send it on a fresh one.
                    if (
                        exchange.error is not None
                        and not exchange.response_started
                        and conn.reused
                        and not conn.got_bytes
                    ):
                        continue
                    break
        except asyncio.CancelledError:
            if conn is not None:
                conn.abandon()
            rec.end_at = clock()
            self._fail(rec, "cancelled", "request cancelled by the run")
            raise RequestCancelled(rec) from None
        except TimeoutError:
            if conn is not None:
                conn.abandon()
            rec.end_at = clock()
            self._fail(rec, "timeout", f"no complete response within {self.request_timeout_s:g} s")
            return rec
        except http_stream.ConnectTimeout as exc:
            rec.end_at = clock()
            self._fail(rec, "connect", _describe(exc))
            return rec
        except OSError as exc:  # refused, unreachable, name resolution; out of descriptors
            rec.end_at = clock()
            self._fail_connect(rec, exc, f"cannot connect to {pool.host}:{pool.port}: {_describe(exc)}")
            return rec
        assert exchange is not None and conn is not None
        if exchange.redirected is not None:
            conn.abandon()
            status, location = exchange.redirected
            refused = redirects.refusal(status, self.url_for(req.endpoint), location)
            if refused is not None:
                return self._refused(rec, refused)
            return await self._send_aiohttp(req, rec)
        if exchange.error is not None:
            rec.end_at = clock()
            kind = "stream_aborted" if exchange.response_started else "connect"
            self._fail(rec, kind, _describe(exchange.error))
            return rec
        if rec.status != 200:
            raw = b"".join(exchange.error_body)
            rec.end_at = clock()
            msg = sse.error_message(sse.decode_json(raw)) or exchange.reason or raw[:200].decode("utf-8", "replace")
            self._fail(rec, f"http_{rec.status}", msg or f"HTTP {rec.status}")
            return rec
        self._finish(rec, state, req.keep_text)
        if exchange.oversized:
            conn.abandon()
        elif conn.handler is exchange:
            # [DONE] came before the end of the HTTP body (vLLM ends it right after): wait
            # for it so the connection goes back to the pool instead of a new one opening.
            exchange.body_ended = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(_BODY_END_GRACE_S):
                    await exchange.body_ended
            except TimeoutError:
                conn.abandon()
            except asyncio.CancelledError:  # the record is complete: hand it over as it is
                conn.abandon()
                raise RequestCancelled(rec) from None
        return rec

    async def _send_aiohttp(self, req: PreparedRequest, rec: RequestRecord) -> RequestRecord:
        session = self._open_session()
        clock = self.clock
        state = _StreamState(keep_text=self._keep_text or req.keep_text)
        try:
            async with redirects.request(
                session, "POST", self.url_for(req.endpoint), json=self.build_body(req), headers=self._headers
            ) as resp:
                rec.status = resp.status
                if resp.status != 200:
                    raw = b""  # read() returns what has arrived so far: loop to the end
                    while len(raw) < _MAX_ERROR_BODY:
                        part = await resp.content.read(_MAX_ERROR_BODY - len(raw))
                        if not part:
                            break
                        raw += part
                    rec.end_at = clock()
                    msg = sse.error_message(sse.decode_json(raw)) or resp.reason or raw[:200].decode("utf-8", "replace")
                    self._fail(rec, f"http_{resp.status}", msg or f"HTTP {resp.status}")
                    return rec
                state.received(resp.headers)
                decoder = sse.SSEDecoder()
                async for data in resp.content.iter_any():
                    if state.head is None:
                        state.head = data[:_HEAD_SHOWN]
                    try:
                        events = decoder.feed(data)
                    except sse.EventTooLarge as exc:  # leaving the response closes its connection
                        state.error_message = str(exc)
                        break
                    if state.consume(events, rec, clock):
                        break
                else:
                    state.consume(decoder.flush(), rec, clock)
        except asyncio.CancelledError:
            rec.end_at = clock()
            self._fail(rec, "cancelled", "request cancelled by the run")
            raise RequestCancelled(rec) from None
        except _CONNECT_TIMEOUT as exc:  # no connection within connect_timeout_s: unreachable
            rec.end_at = clock()
            self._fail(rec, "connect", _describe(exc) or f"no connection within {self.connect_timeout_s:g} s")
            return rec
        except TimeoutError as exc:
            rec.end_at = clock()
            self._fail(rec, "timeout", _describe(exc) or f"no complete response within {self.request_timeout_s:g} s")
            return rec
        except aiohttp.ClientConnectorError as exc:
            rec.end_at = clock()
            self._fail_connect(rec, exc, _describe(exc))
            return rec
        except redirects.RedirectRefused as exc:
            return self._refused(rec, exc)
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            rec.end_at = clock()
            if rec.status is None:
                self._fail_connect(rec, exc, _describe(exc))
            else:
                self._fail(rec, "stream_aborted", _describe(exc))
            return rec
        except aiohttp.ClientError as exc:
            rec.end_at = clock()
            self._fail(rec, "connect" if rec.status is None else "stream_aborted", _describe(exc))
            return rec
        self._finish(rec, state, req.keep_text)
        return rec

    def _refused(self, rec: RequestRecord, refused: redirects.RedirectRefused) -> RequestRecord:
        """A redirect the policy does not follow: the server's answer, as an HTTP error."""
        rec.end_at = self.clock()
        rec.status = refused.status
        self._fail(rec, f"http_{refused.status}", str(refused))
        return rec

    def _fail_connect(self, rec: RequestRecord, exc: BaseException, message: str) -> None:
        """No connection: ``client_limit`` when the client is out of file descriptors (its
        own limit, not the server), else ``connect``."""
        if out_of_files(exc):
            self._fail(rec, CLIENT_LIMIT, f"the client is out of open files (ulimit -n), not the server: {message}")
        else:
            self._fail(rec, "connect", message)

    def _fail(self, rec: RequestRecord, error_class: str, message: str) -> None:
        rec.error_class = error_class
        rec.error = self._scrub(message)

    def _finish(self, rec: RequestRecord, state: _StreamState, keep_text: bool = False) -> None:
        self._settle(rec, state)
        self._keep_generated(rec, state, keep_text)

    def _settle(self, rec: RequestRecord, state: _StreamState) -> None:
        now = self.clock()
        state.settle_fast_reads(rec)
        if state.error_message is not None:
            rec.end_at = now
            self._fail(rec, "stream_error", state.error_message)
        elif not state.done:
            rec.end_at = now
            self._fail(rec, "stream_aborted", state.unfinished(rec.first_token_at is not None))
        elif rec.first_token_at is None:
            rec.end_at = now
            self._fail(rec, "stream_error", "stream ended without any token chunk")
        else:
            rec.end_at = rec.chunk_times[-1] if rec.chunk_times else rec.first_token_at
        if state.usage is not None:
            try:
                prompt_tokens, completion_tokens = usage_counts(state.usage)
            except ValueError as exc:  # the answer cannot be counted: it is not a success
                if rec.error_class is None:
                    self._fail(rec, "stream_error", str(exc))
                rec.tokens_from_usage = False
                return
            if prompt_tokens is not None:
                rec.prompt_tokens = prompt_tokens
            rec.completion_tokens = completion_tokens
            rec.tokens_from_usage = True
            rec.cached_tokens = cached_prompt_tokens(state.usage)
        else:
            rec.tokens_from_usage = False
            if self.fallback_tokenizer is not None and state.raw_chunks:
                rec.completion_tokens = count_tokens(self.fallback_tokenizer, self._text(rec, state))

    def _text(self, rec: RequestRecord, state: _StreamState) -> str:
        """The answer's text, decoded once per request."""
        if rec.generated_text is None:
            rec.generated_text = state.text()
        return rec.generated_text

    def _keep_generated(self, rec: RequestRecord, state: _StreamState, keep: bool = False) -> None:
        if self.keep_generated_text or keep:
            self._text(rec, state)
        else:  # decoded for the token count only: not kept
            rec.generated_text = None


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


def _body_bytes(body: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(body)  # a tenth of json.dumps's time for a long prompt
    except TypeError:  # a lone surrogate (e.g. from a dataset's JSON): json escapes it
        return json.dumps(body).encode()


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _stream_target(base_url: str) -> tuple[str, int, str, str] | None:
    """``(host, port, Host header, path prefix)`` when ``http_stream`` can serve the URL."""
    parts = urlsplit(base_url)
    if parts.scheme.lower() != "http" or not parts.hostname or parts.username or parts.password:
        return None
    try:
        port = parts.port or 80
    except ValueError:
        return None
    if parts.query or parts.fragment:
        return None
    return parts.hostname, port, parts.netloc, parts.path.rstrip("/")


class _StreamExchange:
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
    )

    def __init__(
        self, rec: RequestRecord, state: _StreamState, clock: Callable[[], float], finished: asyncio.Future[None]
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

    def on_head(self, status: int, reason: str, headers: dict[str, str]) -> None:
        if self.finished.done():
            return
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
                if self.error_body_size < _MAX_ERROR_BODY:
                    piece = piece[: _MAX_ERROR_BODY - self.error_body_size]
                    self.error_body.append(piece)
                    self.error_body_size += len(piece)
            return
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        state = self.state
        tokens = self.decoder.token_events_only(data)
        if tokens:
            state.token_events(tokens, self.rec, self.clock())
            state.last_fast_read = data
            if state.keep_text:
                state.raw_chunks.append(data)  # whole events; text() splits them
            return
        if state.head is None:
            state.head = data[:_HEAD_SHOWN]
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


class _StreamState:
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
    )

    def __init__(self, keep_text: bool) -> None:
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
            first = " ".join((self.head or b"").decode("utf-8", "replace").split())[:_HEAD_SHOWN]
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

    def text(self) -> str:
        parts = []
        payloads: list[bytes] = []
        for item in self.raw_chunks:  # event payloads, or whole reads of token events
            if item.startswith(b"data: "):
                payloads += [event[6:] for event in item[:-2].split(b"\n\n")]
            else:
                payloads.append(item)
        for payload in payloads:
            body = sse.decode_json(payload)
            if not body:
                continue
            for choice in body.get("choices") or []:
                piece = choice.get("text")
                if piece is None:
                    piece = (choice.get("delta") or {}).get("content")
                if piece:
                    parts.append(piece)
        return "".join(parts)


@dataclass(frozen=True)
class ModelsAnswer:
    """What ``GET /v1/models`` answered."""

    url: str
    status: int
    models: list[dict[str, Any]] | None  # the ``data`` list; None unless a 200 with an OpenAI models list


async def probe_models(
    base_url: str, api_key: str | None = None, timeout_s: float = 5.0, connection: Connection | None = None
) -> ModelsAnswer:
    """``GET /v1/models``: the one request that asks a server whether it is there and
    what it serves. Any HTTP answer (even 401/404) is returned; raises
    ``TargetUnreachable("cannot reach <url> : <reason>")`` when nothing answers within
    ``timeout_s``. ``connection`` (headers, TLS) wins over ``api_key``."""
    connection = connection if connection is not None else Connection(api_key=api_key)
    base = normalize_base_url(base_url)
    url = base + "/v1/models"
    shown = redact_text(url)  # what messages and the answer name: credentials masked
    try:
        connector = aiohttp.TCPConnector(ssl=connection.ssl())
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout_s), connector=connector
        ) as session:
            async with redirects.request(session, "GET", url, headers=connection.request_headers()) as resp:
                models = None
                if resp.status == 200:
                    try:
                        body = await resp.json(content_type=None)
                    except ValueError:
                        body = None
                    if isinstance(body, dict) and isinstance(body.get("data") or [], list):
                        models = body.get("data") or []
                return ModelsAnswer(shown, resp.status, models)
    except TimeoutError:
        raise TargetUnreachable(f"cannot reach {redact_text(base)} : no answer within {timeout_s:g} s") from None
    except redirects.RedirectRefused as exc:  # it answered: not "cannot reach"
        raise UserError(f"{shown}: {exc}") from None
    except aiohttp.ClientError as exc:
        raise TargetUnreachable(
            f"cannot reach {redact_text(base)} : "
            f"{server_text(str(exc), connection.secrets()) or type(exc).__name__}{_tls_hint(exc)}"
        ) from None


def _tls_hint(exc: BaseException) -> str:
    """What to do about a certificate the client could not verify."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return " (pass --ca-cert PEM with the server's CA, or --insecure to skip verification)"
    return ""


async def check_reachable(base_url: str, timeout_s: float = 5.0, api_key: str | None = None) -> int:
    """The HTTP status of ``/v1/models`` (``probe_models``); raises ``TargetUnreachable``
    when nothing answers."""
    return (await probe_models(base_url, api_key, timeout_s)).status


async def first_model(
    base_url: str, api_key: str | None = None, timeout_s: float = 10.0, connection: Connection | None = None
) -> str:
    """The id of the first model the server lists, for a run without ``--model``; any
    failure is a one-line ``TargetUnreachable`` naming the URL."""
    return first_model_of(await probe_models(base_url, api_key, timeout_s, connection))


def first_model_of(answer: ModelsAnswer, key_from: str | None = None) -> str:
    """``first_model`` of an answer already at hand. The server answered, so a failure
    here is not "unreachable": a refusal (401/403) names the credentials (``key_from``:
    where the key sent came from, None when none was), any other answer without a models
    list (a gateway without the route: 404) asks for ``--model``."""
    if answer.status in (401, 403):
        why = (
            f"the server refused the API key sent (from {key_from})"
            if key_from
            else "the server refused the request (does it expect --api-key or a --header?)"
        )
        raise UserError(f"{answer.url}: HTTP {answer.status}: {why}")
    if answer.status != 200:
        raise ModelNotServed(
            f"{answer.url}: HTTP {answer.status}: the server answered without its models; pass --model"
        )
    if answer.models is None:
        raise ModelNotServed(f"{answer.url}: not an OpenAI-compatible models list; pass --model")
    if not answer.models:
        raise ModelNotServed(f"{answer.url}: the server lists no models; pass --model")
    return answer.models[0]["id"]


# At most this many served models are named when --model is not among them.
MAX_MODELS_NAMED = 10


def served_model_ids(models: list[Any]) -> list[str]:
    return [str(m["id"]) for m in models if isinstance(m, dict) and m.get("id") is not None]


def check_model_served(model: str, answer: ModelsAnswer) -> None:
    """Raise ``ModelNotServed`` when the server lists its models and ``model`` is not one
    of them (matched as vLLM does, by id, exactly). A server without a usable list
    (404, not OpenAI's shape) proves nothing: no error."""
    if answer.status != 200 or answer.models is None:
        return
    ids = served_model_ids(answer.models)
    if model in ids:
        return
    named = ", ".join(printable(repr(i[:100]), one_line=True) for i in ids[:MAX_MODELS_NAMED])
    more = f" and {len(ids) - MAX_MODELS_NAMED} more" if len(ids) > MAX_MODELS_NAMED else ""
    served = f"it serves {named}{more}" if ids else "it lists no models"
    raise ModelNotServed(f"--model {printable(repr(model), one_line=True)} is not served by {answer.url}: {served}")


async def fetch_server_info(
    base_url: str,
    api_key: str | None = None,
    timeout_s: float = 5.0,
    *,
    connection: Connection | None = None,
    model: str | None = None,
    answer: ModelsAnswer | None = None,
    extras_timeout_s: float | None = None,
) -> dict[str, Any]:
    """What the recording's header keeps about the server, from one ``/v1/models`` probe
    (``probe_models``) and ``/version`` and ``/metrics`` (asked together, each given
    ``extras_timeout_s``, default ``timeout_s``).

    Keys: ``models`` (the ``/v1/models`` data list), ``version`` (``/version``'s value),
    ``cache_config`` (labels of ``vllm:cache_config_info`` from ``/metrics``) and
    ``errors`` ({path: reason} for whatever failed). With ``model``, the probe is also
    the run's start check: raises ``TargetUnreachable`` when nothing answers and
    ``ModelNotServed`` when the list lacks ``model``; without, it never raises. ``answer``:
    a ``/v1/models`` answer the caller already has (it asked for the model's name), used
    instead of asking again.
    """
    from rampwatch.loadgen.server.scrape import cache_config_from_metrics

    connection = connection if connection is not None else Connection(api_key=api_key)
    secrets = connection.secrets()
    base = normalize_base_url(base_url)
    headers = connection.request_headers()
    info: dict[str, Any] = {"models": [], "version": None, "cache_config": {}, "errors": {}}
    try:
        if answer is None:
            answer = await probe_models(base, timeout_s=timeout_s, connection=connection)
        if answer.status != 200:
            info["errors"]["/v1/models"] = f"HTTP {answer.status}"
        elif answer.models is None:
            info["errors"]["/v1/models"] = "not an OpenAI-compatible models list"
        else:
            info["models"] = answer.models
        if model is not None:
            check_model_served(model, answer)
    except TargetUnreachable as exc:
        if model is not None:
            raise
        info["errors"]["/v1/models"] = str(exc)

    async def read(session: aiohttp.ClientSession, path: str) -> None:
        try:
            async with redirects.request(session, "GET", base + path, headers=headers) as resp:
                if resp.status != 200:
                    info["errors"][path] = f"HTTP {resp.status}"
                    return
                if path == "/metrics":
                    info["cache_config"] = cache_config_from_metrics(await resp.text())
                    return
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            info["errors"][path] = server_text(_describe(exc), secrets)
            return
        info["version"] = body.get("version") if isinstance(body, dict) else body

    try:
        connector = aiohttp.TCPConnector(ssl=connection.ssl())
        # Both asked at once, each for at most extras_timeout_s: a /metrics that hangs
        # delays the run's start by that, not by the sum of the waits.
        timeout = aiohttp.ClientTimeout(total=extras_timeout_s if extras_timeout_s is not None else timeout_s)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            await asyncio.gather(read(session, "/version"), read(session, "/metrics"))
    except Exception as exc:  # the header must be written whatever the server does
        info["errors"]["session"] = type(exc).__name__
    return info
