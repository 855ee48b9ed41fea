"""loadgen.transport.http_stream: chunked decoding as a pure function, response heads, the pool."""

import asyncio
import random

import pytest

from rampwatch.loadgen.transport import http_stream
from rampwatch.loadgen.transport.http_stream import (
    ChunkedDecoder,
    ConnectionPool,
    HttpProtocolError,
    build_request,
    parse_head,
)


def chunked(pieces: list[bytes], trailer: bytes = b"") -> bytes:
    out = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    return out + b"0\r\n" + trailer + b"\r\n"


def decode_in_pieces(wire: bytes, cuts: list[int]) -> tuple[bytes, ChunkedDecoder]:
    decoder, body, pos = ChunkedDecoder(), [], 0
    for cut in [*cuts, len(wire)]:
        body += decoder.feed(wire[pos:cut])
        pos = cut
    return b"".join(body), decoder


PAYLOADS = [b'data: {"choices":[{"text":"a"}]}\n\n', b"x" * 300, b"\r\n", b"data: [DONE]\n\n", b"0\r\n\r\n"]


@pytest.mark.parametrize("seed", range(40))
def test_chunked_body_survives_random_splits(seed):
    rng = random.Random(seed)
    payloads = [rng.choice(PAYLOADS)[: rng.randint(1, 300)] for _ in range(rng.randint(1, 12))]
    trailer = b"X-Trailer: 1\r\n" if seed % 3 == 0 else b""
    wire = chunked(payloads, trailer)
    cuts = sorted(rng.sample(range(1, len(wire)), min(len(wire) - 1, rng.randint(0, 40))))
    body, decoder = decode_in_pieces(wire, cuts)
    assert body == b"".join(payloads)
    assert decoder.done and decoder.tail == b""


def test_every_single_byte_split():
    wire = chunked([b"hello", b"a" * 17, b"world\r\n"])
    body, decoder = decode_in_pieces(wire, list(range(1, len(wire))))
    assert body == b"helloaaaaaaaaaaaaaaaaaworld\r\n" and decoder.done


def test_not_done_until_the_terminating_chunk_and_blank_line():
    wire = chunked([b"abc"])
    decoder = ChunkedDecoder()
    assert decoder.feed(wire[:-2]) == [b"abc"]
    assert not decoder.done
    decoder.feed(wire[-2:] + b"HTTP/1.1 200")
    assert decoder.done and decoder.tail == b"HTTP/1.1 200"


def test_extensions_and_upper_case_hex():
    body, decoder = decode_in_pieces(b"A;name=value\r\n0123456789\r\n0\r\n\r\n", [3])
    assert body == b"0123456789" and decoder.done


@pytest.mark.parametrize("wire", [b"zz\r\nabc\r\n", b"3\r\nabcXY", b"-3\r\nabc\r\n", b"+3\r\nabc\r\n", b"\r\n"])
def test_malformed_chunks_raise(wire):
    with pytest.raises(HttpProtocolError):
        ChunkedDecoder().feed(wire)


def test_parse_head():
    head = b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nSet-Cookie: a\r\nset-cookie: b\r\nContent-Length: 12"
    status, reason, headers, version = parse_head(head)
    assert (status, reason, version) == (404, "Not Found", "HTTP/1.1")
    assert headers["content-type"] == "application/json" and headers["set-cookie"] == "a, b"
    assert parse_head(b"HTTP/1.1 200\r\n")[:2] == (200, "")
    with pytest.raises(HttpProtocolError):
        parse_head(b"SSH-2.0-OpenSSH\r\n")
    with pytest.raises(HttpProtocolError):
        parse_head(b"HTTP/1.1 200 OK\r\nno colon here")


def test_build_request():
    raw = build_request("POST", "/v1/completions", "h:8000", {"Content-Type": "application/json"}, b'{"a":1}')
    head, body = raw.split(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/completions HTTP/1.1" and b"Host: h:8000" in lines
    assert b"Content-Length: 7" in lines and b"Connection: keep-alive" in lines and body == b'{"a":1}'


class Recorder:
    """A ResponseHandler that keeps what it is told."""

    def __init__(self):
        self.head, self.body, self.ended, self.error = None, b"", False, None
        self.done = asyncio.get_running_loop().create_future()

    def on_head(self, status, reason, headers):
        self.head = (status, reason, headers)

    def on_body(self, pieces):
        self.body += b"".join(pieces)

    def on_end(self):
        self.ended = True
        self.done.set_result(None)

    def on_error(self, exc, response_started):
        self.error = (exc, response_started)
        self.done.set_result(None)


async def serve(responder):
    """A raw TCP server: ``responder(request_bytes, connection_index)`` -> (bytes, close?)."""
    state = {"connections": 0}

    async def handle(reader, writer):
        index = state["connections"]
        state["connections"] += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                answer, close = responder(head, index)
                writer.write(answer)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], state


async def roundtrip(pool: ConnectionPool) -> Recorder:
    conn = await pool.acquire()
    recorder = Recorder()
    conn.send(build_request("POST", "/", "x", {}, b"{}"), recorder)
    await asyncio.wait_for(recorder.done, 5)
    return recorder


async def test_pool_reuses_keep_alive_connections_and_reads_content_length():
    server, port, state = await serve(lambda head, i: (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", False))
    pool = ConnectionPool("127.0.0.1", port, limit=2)
    for _ in range(3):
        rec = await roundtrip(pool)
        assert rec.ended and rec.body == b"hello" and rec.head[0] == 200
    assert state["connections"] == 1 and pool.connections_made == 1 and pool.idle_count == 1
    pool.close()
    server.close()


async def test_connection_close_header_drops_the_connection():
    answer = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
    server, port, state = await serve(lambda head, i: (answer, True))
    pool = ConnectionPool("127.0.0.1", port)
    for _ in range(3):
        assert (await roundtrip(pool)).body == b"ok"
    assert state["connections"] == 3 and pool.idle_count == 0
    pool.close()
    server.close()


async def test_body_until_close_and_interim_response():
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\nall of it"
    server, port, state = await serve(lambda head, i: (answer, True))
    pool = ConnectionPool("127.0.0.1", port)
    rec = await roundtrip(pool)
    assert rec.head[0] == 200 and rec.body == b"all of it" and rec.ended and rec.error is None
    pool.close()
    server.close()


async def test_truncated_chunked_body_is_an_error_after_the_head():
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel"
    server, port, state = await serve(lambda head, i: (answer, True))
    pool = ConnectionPool("127.0.0.1", port)
    rec = await roundtrip(pool)
    assert rec.body == b"hel" and not rec.ended
    assert rec.error is not None and rec.error[1] is True  # the response had started
    assert pool.open_count == 0
    pool.close()
    server.close()


async def test_limit_makes_the_next_request_wait_for_a_free_connection():
    server, port, state = await serve(lambda head, i: (b"HTTP/1.1 204 No Content\r\n\r\n", False))
    pool = ConnectionPool("127.0.0.1", port, limit=1)
    first = await pool.acquire()
    waiting = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    recorder = Recorder()
    first.send(build_request("POST", "/", "x", {}, b"{}"), recorder)
    second = await asyncio.wait_for(waiting, 5)
    assert second is first and recorder.ended and recorder.head[0] == 204
    pool.close()
    server.close()


async def test_connect_timeout(monkeypatch):
    loop = asyncio.get_running_loop()

    async def never(*args, **kwargs):
        await asyncio.sleep(10)

    monkeypatch.setattr(loop, "create_connection", never)
    pool = ConnectionPool("127.0.0.1", 9, connect_timeout_s=0.1)
    with pytest.raises(http_stream.ConnectTimeout):
        await pool.acquire()
    assert pool.open_count == 0


async def test_reads_on_asyncio_loop_are_sized_below_the_mmap_threshold():
    from rampwatch.loadgen.transport.http_stream import READ_BUFFER_SIZE

    body = b"x" * (3 * READ_BUFFER_SIZE)  # arrives in several reads, each at most the buffer
    server, port, _ = await serve(
        lambda head, i: (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body, False)
    )
    pool = ConnectionPool("127.0.0.1", port)
    conn = await pool.acquire()
    assert conn.transport.max_size == READ_BUFFER_SIZE < 128 * 1024
    recorder = Recorder()
    conn.send(build_request("POST", "/", "x", {}, b"{}"), recorder)
    await asyncio.wait_for(recorder.done, 5)
    assert recorder.ended and recorder.body == body
    pool.close()
    server.close()
