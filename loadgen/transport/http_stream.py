"""A lean HTTP/1.1 client transport for streamed responses, built on ``asyncio.Protocol``.

Why it exists: an SSE token stream arrives as one small TCP segment per event. A
stream-reader client (aiohttp) wakes the reading task and resolves a future for every
segment; here each network read is parsed synchronously in ``data_received`` and handed
to the request's ``ResponseHandler`` on the spot, so a streamed chunk costs one callback.

Scope: plain ``http://``, one request at a time per connection (no pipelining),
``Content-Length``, ``Transfer-Encoding: chunked`` and read-until-close bodies, 1xx
interim responses skipped. Connections are kept alive and reused per (host, port)
unless the server says ``Connection: close`` (or speaks HTTP/1.0 without keep-alive), a
body is left unfinished, or anything goes wrong.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Protocol


class HttpProtocolError(Exception):
    """The server's bytes are not a well-formed HTTP/1.1 response."""


class ConnectTimeout(OSError):
    """No TCP connection within the connect timeout."""


class ConnectionClosed(ConnectionError):
    """The connection ended before the response was complete."""


_MAX_HEAD = 64 * 1024
_MAX_CHUNK_LINE = 4096
# Size of each network read on asyncio's own loop. Its default is a fresh 256 KiB bytes
# object per recv, which glibc serves with mmap/munmap and page faults: at one SSE event
# per read that cost more system time than the recv itself. Below glibc's mmap threshold
# a read is an ordinary heap allocation. (A BufferedProtocol avoids the allocation too,
# but costs two more Python calls and a copy per read.)
READ_BUFFER_SIZE = 64 * 1024


class ChunkedDecoder:
    """Incremental ``Transfer-Encoding: chunked`` decoder.

    ``feed(data)`` returns the body bytes found in ``data`` (a list of slices, possibly
    empty); ``done`` turns True after the terminating zero-size chunk and its trailer
    section; bytes after that end are kept in ``tail``. Chunk extensions and trailer
    fields are ignored. Raises ``HttpProtocolError`` on a malformed size line.
    """

    __slots__ = ("_state", "_remaining", "_line", "done", "tail")

    _SIZE, _DATA, _DATA_END, _TRAILER = range(4)  # feed's fast path relies on _SIZE == 0

    def __init__(self) -> None:
        self._state = self._SIZE
        self._remaining = 0
        self._line = b""  # an incomplete size/trailer line, or part of a chunk's CRLF
        self.done = False
        self.tail = b""

    def feed(self, data: bytes) -> list[bytes]:
        if not self._state and not self._line and not self.done:
            # Exactly one whole chunk: the usual read of a token stream.
            nl = data.find(b"\r\n", 0, 18)
            if nl > 0:
                size_line = data[:nl]
                if size_line.isalnum():
                    try:
                        size = int(size_line, 16)
                    except ValueError:
                        size = 0
                    if size and nl + size + 4 == len(data) and data.endswith(b"\r\n"):
                        return [data[nl + 2 : -2]]
        out: list[bytes] = []
        if self.done:
            self.tail += data
            return out
        pos, end = 0, len(data)
        append = out.append
        while pos < end:
            state = self._state
            if state == self._SIZE and not self._line:
                # Whole chunks (size line, data, CRLF) inside this read, one iteration each:
                # the common case, an SSE stream with one event per chunk.
                while True:
                    nl = data.find(b"\r\n", pos)
                    if nl < 0:
                        break
                    size_line = data[pos:nl]
                    if not size_line.isalnum():
                        break  # extensions or garbage: the general path below decides
                    try:
                        size = int(size_line, 16)
                    except ValueError:
                        break
                    start = nl + 2
                    stop = start + size
                    if not size or stop + 2 > end:
                        break
                    if data[stop : stop + 2] != b"\r\n":
                        raise HttpProtocolError("chunk data not followed by CRLF")
                    append(data[start:stop])
                    pos = stop + 2
                if pos >= end:
                    break
            if state == self._DATA:
                take = min(self._remaining, end - pos)
                out.append(data[pos : pos + take] if take != end - pos or pos else data)
                pos += take
                self._remaining -= take
                if not self._remaining:
                    self._state = self._DATA_END
            elif state == self._DATA_END:
                need = 2 - len(self._line)
                got = data[pos : pos + need]
                pos += len(got)
                self._line += got
                if len(self._line) == 2:
                    if self._line != b"\r\n":
                        raise HttpProtocolError("chunk data not followed by CRLF")
                    self._line = b""
                    self._state = self._SIZE
            else:  # a size line or a trailer line
                nl = data.find(b"\n", pos)
                if nl < 0:
                    self._line += data[pos:]
                    if len(self._line) > _MAX_CHUNK_LINE:
                        raise HttpProtocolError("chunk size line too long")
                    return out
                line = self._line + data[pos:nl] if self._line else data[pos:nl]
                self._line = b""
                pos = nl + 1
                if line.endswith(b"\r"):
                    line = line[:-1]
                if state == self._TRAILER:
                    if not line:
                        self.done = True
                        self.tail = data[pos:]
                        return out
                    continue
                size_text = line.split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise HttpProtocolError(f"bad chunk size line {line[:40]!r}") from None
                if size < 0 or not size_text.isalnum():
                    raise HttpProtocolError(f"bad chunk size line {line[:40]!r}")
                if size == 0:
                    self._state = self._TRAILER
                else:
                    self._remaining = size
                    self._state = self._DATA
        return out


def parse_head(head: bytes) -> tuple[int, str, dict[str, str], str]:
    """``(status, reason, headers, version)`` from a response head (without the blank line).

    Header names are lower-cased; repeated fields are joined with ``", "``.
    """
    lines = head.split(b"\r\n") if b"\r\n" in head else head.split(b"\n")
    status_line = lines[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit() or len(parts[1]) != 3:
        raise HttpProtocolError(f"bad status line {status_line[:80]!r}")
    headers: dict[str, str] = {}
    for raw in lines[1:]:
        if not raw:
            continue
        name, sep, value = raw.decode("latin-1").partition(":")
        if not sep:
            raise HttpProtocolError(f"bad header line {raw[:80]!r}")
        key = name.strip().lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return int(parts[1]), parts[2] if len(parts) > 2 else "", headers, parts[0]


def build_request(method: str, target: str, host: str, headers: dict[str, str], body: bytes) -> bytes:
    """An HTTP/1.1 request with ``Host``, ``Content-Length`` and ``Connection: keep-alive``."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines += [f"Content-Length: {len(body)}", "Connection: keep-alive", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


class ResponseHandler(Protocol):
    """What a request gives its connection; every method runs inside ``data_received``
    or ``connection_lost``, so it must not block."""

    def on_head(self, status: int, reason: str, headers: dict[str, str]) -> None: ...

    def on_body(self, pieces: list[bytes]) -> None: ...

    def on_end(self) -> None: ...

    def on_error(self, exc: BaseException, response_started: bool) -> None: ...


class HttpConnection(asyncio.Protocol):
    """One keep-alive TCP connection; carries one request at a time."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False  # has completed a response before the current request
        self.handler: ResponseHandler | None = None
        self.got_bytes = False  # any byte of the current response arrived
        self._head_buf = b""
        self._in_head = True
        self._chunked: ChunkedDecoder | None = None
        self._remaining: int | None = None  # Content-Length body bytes still to come
        self._until_close = False
        self._keep_alive = True

    # -- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if hasattr(transport, "max_size"):  # asyncio's selector transport; uvloop reuses its own buffer
            transport.max_size = READ_BUFFER_SIZE

    def data_received(self, data: bytes) -> None:
        handler = self.handler
        if handler is None:  # nothing was asked: a server must not talk now
            self.close()
            return
        self.got_bytes = True
        try:
            if self._in_head:
                body = self._read_head(data)
                if body is None or self.handler is None:
                    return
                data = body
            if self._chunked is not None:
                pieces = self._chunked.feed(data)
                if pieces:
                    handler.on_body(pieces)
                if self._chunked.done:
                    self._message_end(clean=not self._chunked.tail)
            elif self._remaining is not None:
                if len(data) >= self._remaining:
                    piece, extra = data[: self._remaining], data[self._remaining :]
                    self._remaining = 0
                    if piece:
                        handler.on_body([piece])
                    self._message_end(clean=not extra)
                else:
                    self._remaining -= len(data)
                    handler.on_body([data])
            elif data:
                handler.on_body([data])
        except HttpProtocolError as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        handler = self.handler
        self._pool._forget(self)
        if handler is None:
            return
        if self._until_close and not self._in_head and exc is None:
            self.handler = None
            handler.on_end()
            return
        self.handler = None
        handler.on_error(exc or ConnectionClosed("connection closed by the server"), not self._in_head)

    # -- requests ---------------------------------------------------------------------
    def send(self, request: bytes, handler: ResponseHandler) -> None:
        assert self.transport is not None and self.handler is None
        self.handler = handler
        self.got_bytes = False
        self._head_buf = b""
        self._in_head = True
        self._chunked = None
        self._remaining = None
        self._until_close = False
        self.transport.write(request)

    def abandon(self) -> None:
        """The request gave up (cancelled, timed out): the connection cannot be reused."""
        self.handler = None
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()
        self._pool._forget(self)

    # -- parsing ----------------------------------------------------------------------
    def _read_head(self, data: bytes) -> bytes | None:
        """Consume head bytes; returns the body bytes that follow, or None (need more)."""
        while True:
            buf = self._head_buf + data if self._head_buf else data
            end = buf.find(b"\r\n\r\n")
            sep = 4
            if end < 0:
                end, sep = buf.find(b"\n\n"), 2
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise HttpProtocolError("response head too large")
                self._head_buf = buf
                return None
            self._head_buf = b""
            status, reason, headers, version = parse_head(buf[:end])
            data = buf[end + sep :]
            if 100 <= status < 200 and status != 101:
                continue  # interim response (100 Continue, 103 Early Hints)
            break
        self._in_head = False
        connection = headers.get("connection", "").lower()
        if version == "HTTP/1.0":
            self._keep_alive = "keep-alive" in connection
        else:
            self._keep_alive = "close" not in connection
        encoding = headers.get("transfer-encoding", "").lower()
        handler = self.handler
        assert handler is not None
        handler.on_head(status, reason, headers)
        if self.handler is None:
            return None
        if status in (204, 304):
            self._remaining = 0
        elif encoding:
            if encoding.rsplit(",", 1)[-1].strip() != "chunked":
                raise HttpProtocolError(f"unsupported transfer-encoding {encoding!r}")
            self._chunked = ChunkedDecoder()
        elif "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                raise HttpProtocolError("bad content-length") from None
            if self._remaining < 0:
                raise HttpProtocolError("bad content-length")
        else:
            self._until_close = True
            self._keep_alive = False
        if self._remaining == 0:
            self._message_end(clean=not data)
            return None
        return data

    def _message_end(self, clean: bool) -> None:
        handler, self.handler = self.handler, None
        self.reused = True
        if clean and self._keep_alive and not self.closed:
            self._pool._release(self)
        else:
            self.close()
        if handler is not None:
            handler.on_end()

    def _fail(self, exc: BaseException) -> None:
        handler, self.handler = self.handler, None
        started = not self._in_head
        self.close()
        if handler is not None:
            handler.on_error(exc, started)


class ConnectionPool:
    """Keep-alive connections to one (host, port); at most ``limit`` open (0: no limit)."""

    def __init__(self, host: str, port: int, limit: int = 0, connect_timeout_s: float = 10.0) -> None:
        self.host = host
        self.port = port
        self.limit = max(0, int(limit))
        self.connect_timeout_s = connect_timeout_s
        self._idle: deque[HttpConnection] = deque()
        self._open: set[HttpConnection] = set()
        self._opening = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.connections_made = 0

    @property
    def open_count(self) -> int:
        return len(self._open) + self._opening

    @property
    def idle_count(self) -> int:
        return len(self._idle)

    async def acquire(self, on_phase: Callable[[str], None] | None = None) -> HttpConnection:
        """An idle connection, else a new one (waiting for a slot when at the limit).
        ``on_phase`` hears ``"slot_at"`` when a wait for a slot ended and ``"connected_at"``
        when a new connection is ready (``loadgen.transport.phases``)."""
        waited = False
        while True:
            while self._idle:
                conn = self._idle.pop()  # most recently used: least likely to be stale
                if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                    if waited and on_phase is not None:
                        on_phase("slot_at")
                    return conn
                conn.close()
            if not self.limit or self.open_count < self.limit:
                if waited and on_phase is not None:
                    on_phase("slot_at")
                conn = await self._connect()
                if on_phase is not None:
                    on_phase("connected_at")
                return conn
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            waited = True
            try:
                await waiter
            except BaseException:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif not waiter.cancelled():
                    self._wake_one()  # pass the slot we were handed to someone else
                raise

    async def _connect(self) -> HttpConnection:
        loop = asyncio.get_running_loop()
        self._opening += 1
        try:
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    _, conn = await loop.create_connection(lambda: HttpConnection(self), self.host, self.port)
            except TimeoutError:
                raise ConnectTimeout(
                    f"no connection to {self.host}:{self.port} within {self.connect_timeout_s:g} s"
                ) from None
        finally:
            self._opening -= 1
            self._wake_one()
        if conn.closed:  # the server hung up before we could use it
            raise ConnectionClosed("connection closed right after it was opened")
        self._open.add(conn)
        self.connections_made += 1
        return conn

    def _release(self, conn: HttpConnection) -> None:
        if conn in self._open:
            self._idle.append(conn)
        self._wake_one()

    def _forget(self, conn: HttpConnection) -> None:
        self._open.discard(conn)
        try:
            self._idle.remove(conn)
        except ValueError:
            pass
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        for conn in list(self._open):
            conn._fail(ConnectionClosed("client closed"))  # a request still waiting ends now
        self._idle.clear()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionClosed("client closed"))
        self._waiters.clear()
