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
- A reasoning model's chat stream (``delta.reasoning`` / ``delta.reasoning_content``
  before ``delta.content``): TTFT stays the first chunk of any kind; ``first_answer_at``
  is the first answer chunk and ``reasoning_tokens`` the thinking's share of the
  completion tokens (``loadgen.transport.reasoning`` says where it comes from).

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
same fields, and errors map to the same classes (``loadgen.transport.stream_state``).
The ``/v1/models`` probe and the server information a recording keeps are
``loadgen.transport.server_probe``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from rampwatch.core.text import server_text
from rampwatch.core.timeline import CLIENT_LIMIT, RequestRecord
from rampwatch.loadgen.transport import http_stream, phases, reasoning, redirects, sse
from rampwatch.loadgen.transport.connection import Connection
from rampwatch.loadgen.transport.open_files import out_of_files
from rampwatch.loadgen.transport.server_probe import (
    ModelsAnswer,
    describe_error,
    fetch_server_info,
    normalize_base_url,
    probe_models,
)
from rampwatch.loadgen.transport.stream_state import (
    HEAD_SHOWN,
    MAX_ERROR_BODY,
    StreamExchange,
    StreamState,
    cached_prompt_tokens,
    usage_counts,
)
from rampwatch.loadgen.workload.encoded_payload import EncodedPayload
from rampwatch.loadgen.workload.requests import PreparedRequest

ENDPOINT_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
_MAX_MESSAGE = 500
TRANSPORT_ENV = "RAMPWATCH_HTTP_CLIENT"
# How long a stream that sent [DONE] may take to end its HTTP body before its
# connection is dropped instead of reused.
_BODY_END_GRACE_S = 1.0
# body_bytes: the field a frame's payload is found by; a frame not built yet
_PAYLOAD_MARK = "\x00payload"
_NO_FRAME: Any = object()
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
        # body_bytes's JSON around an encoded payload, per LoRA adapter (None: the model)
        self._body_frames: dict[str | None, tuple[bytes, bytes] | None] = {}
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
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=timeout,
                auto_decompress=False,
                trace_configs=[phases.trace_config(self.clock)],
            )
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
        body: dict[str, Any] = {"model": req.adapter or self.model}  # a LoRA adapter is a model of its own
        body.update(req.payload)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        return body

    def body_bytes(self, req: PreparedRequest) -> bytes:
        """The JSON of ``build_body(req)``, as ``http_stream`` sends it. A payload encoded
        ahead (``EncodedPayload``: a request with images is megabytes) is spliced between
        the client's fields, never decoded: the same bytes, copies only."""
        payload = req.payload
        if isinstance(payload, EncodedPayload):
            frame = self._body_frames.get(req.adapter, _NO_FRAME)
            if frame is _NO_FRAME:
                frame = self._body_frames[req.adapter] = self._body_frame(req)
            if frame is not None:
                return payload.within(*frame)
        return _body_bytes(self.build_body(req))

    def _body_frame(self, req: PreparedRequest) -> tuple[bytes, bytes] | None:
        """The JSON of ``build_body`` around the payload's fields, split where they go
        (found by a payload of one marker field): the same for every request to the same
        model. None where orjson cannot encode it (the usual path then says what it can)."""
        try:
            framed = orjson.dumps(self.build_body(dataclasses.replace(req, payload={_PAYLOAD_MARK: None})))
        except TypeError:
            return None
        head, _, tail = framed.rpartition(orjson.dumps({_PAYLOAD_MARK: None})[1:-1])
        return head, tail

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
            self.body_bytes(req),
        )
        state = StreamState(keep_text=self._keep_text or req.keep_text, chat=req.endpoint == "chat")
        conn: http_stream.HttpConnection | None = None
        exchange: StreamExchange | None = None
        mark = phases.marker(rec, clock)
        try:
            async with asyncio.timeout(self.request_timeout_s):
                for _attempt in range(2):
                    conn = await pool.acquire(mark)
                    exchange = StreamExchange(rec, state, clock, asyncio.get_running_loop().create_future(), mark)
                    conn.send(payload, exchange)
                    rec.request_sent_at = clock()
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
            self._fail(rec, "connect", describe_error(exc))
            return rec
        except OSError as exc:  # refused, unreachable, name resolution; out of descriptors
            rec.end_at = clock()
            self._fail_connect(rec, exc, f"cannot connect to {pool.host}:{pool.port}: {describe_error(exc)}")
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
            self._fail(rec, kind, describe_error(exchange.error))
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
        state = StreamState(keep_text=self._keep_text or req.keep_text, chat=req.endpoint == "chat")
        try:
            async with redirects.request(
                session,
                "POST",
                self.url_for(req.endpoint),
                json=self.build_body(req),
                headers=self._headers,
                trace_request_ctx=rec,
            ) as resp:
                rec.status = resp.status
                if resp.status != 200:
                    raw = b""  # read() returns what has arrived so far: loop to the end
                    while len(raw) < MAX_ERROR_BODY:
                        part = await resp.content.read(MAX_ERROR_BODY - len(raw))
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
                        state.head = data[:HEAD_SHOWN]
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
            self._fail(rec, "connect", describe_error(exc) or f"no connection within {self.connect_timeout_s:g} s")
            return rec
        except TimeoutError as exc:
            rec.end_at = clock()
            self._fail(
                rec, "timeout", describe_error(exc) or f"no complete response within {self.request_timeout_s:g} s"
            )
            return rec
        except aiohttp.ClientConnectorError as exc:
            rec.end_at = clock()
            self._fail_connect(rec, exc, describe_error(exc))
            return rec
        except redirects.RedirectRefused as exc:
            return self._refused(rec, exc)
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            rec.end_at = clock()
            if rec.status is None:
                self._fail_connect(rec, exc, describe_error(exc))
            else:
                self._fail(rec, "stream_aborted", describe_error(exc))
            return rec
        except aiohttp.ClientError as exc:
            rec.end_at = clock()
            self._fail(rec, "connect" if rec.status is None else "stream_aborted", describe_error(exc))
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

    def _finish(self, rec: RequestRecord, state: StreamState, keep_text: bool = False) -> None:
        self._settle(rec, state)
        self._keep_generated(rec, state, keep_text)

    def _settle(self, rec: RequestRecord, state: StreamState) -> None:
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
        if state.reasoning is not None:
            self._settle_reasoning(rec, state)

    def _settle_reasoning(self, rec: RequestRecord, state: StreamState) -> None:
        """A chat stream's thinking: its first answer chunk and thinking tokens
        (``loadgen.transport.reasoning``); counted without usage, the thinking is part of
        the completion tokens, as the server counts it."""
        assert state.reasoning is not None
        tokenizer = self.fallback_tokenizer
        counting = tokenizer is not None and bool(state.raw_chunks)
        count = (lambda: count_tokens(tokenizer, state.thinking_text())) if counting else None
        counted = reasoning.settle(rec, state.reasoning, state.usage, count)
        if not rec.tokens_from_usage and counting:
            rec.completion_tokens += counted

    def _text(self, rec: RequestRecord, state: StreamState) -> str:
        """The answer's text, decoded once per request."""
        if rec.generated_text is None:
            rec.generated_text = state.text()
        return rec.generated_text

    def _keep_generated(self, rec: RequestRecord, state: StreamState, keep: bool = False) -> None:
        if self.keep_generated_text or keep:
            self._text(rec, state)
        else:  # decoded for the token count only: not kept
            rec.generated_text = None


def _body_bytes(body: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(body)  # a tenth of json.dumps's time for a long prompt
    except TypeError:  # a lone surrogate (e.g. from a dataset's JSON): json escapes it
        return json.dumps(body).encode()


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
