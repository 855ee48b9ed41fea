"""A run's requests built ahead of their send times, in a process of their own when
building them is costly.

Building a request (a prompt synthesised to an exact token count: several tokenizer
encodes and decodes) takes ~0.6 ms for a 256-token ``random`` prompt, ~1.2 ms for 1,024
tokens and ~8 ms for a long trace row. Built at its send time on the run's event loop,
that held the loop for as long, delaying every send and read behind it
(``bench/bench_loop_stalls.py``). A thread would not do: the tokenizer releases the GIL
for each short encode and takes it back at once, and a thread that does that starves
the loop's thread of the GIL for far longer than the build (CPython's GIL hand-over
favours the thread that just released it).

So the factory's first ``PROBE_REQUESTS`` requests are built here, timed (but the first,
which warms caches up); if they took ``AHEAD_ABOVE_S`` of CPU or more each, the factory (its state after them) goes to a fresh
interpreter that builds the rest in order and streams them back, pickled, ahead of
their use, each payload already encoded as JSON (``encoded_payload``: the client splices
those bytes into its body, so megabytes of images are never decoded nor encoded on the
loop); the loop only unpickles each at its take (~10 µs). The sequence is the factory's
own, request for request, either way. A process that cannot start leaves the building
here, as before.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import pickle
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from rampwatch.core.errors import UserError
from rampwatch.core.interpreter import module_command
from rampwatch.core.text import printable
from rampwatch.loadgen.workload.encoded_payload import encode_payload
from rampwatch.loadgen.workload.requests import PreparedRequest

log = logging.getLogger(__name__)

PROBE_REQUESTS = 5  # built here before the run's clock starts: the first untimed
AHEAD_ABOVE_S = 0.0003  # a mean build time (CPU) from which the builder process pays for itself
AHEAD = 64  # requests unpickled and waiting; more wait in the socket's buffers
# ... and at most this many bytes of them: a request with images is megabytes
# (loadgen.workload.images), and 64 of them would hold hundreds.
AHEAD_BYTES = 64 * 1024 * 1024
READ_BUFFER = 256 * 1024  # the builder's socket is read in this much (asyncio's own read size)
START_TIMEOUT_S = 60.0  # a fresh interpreter imports numpy and the tokenizer: ~1-2 s
# A payload is sent encoded (encoded_payload) from this size of its JSON: below it, the
# splice's fixed cost (~1 µs) is more than decoding and encoding it (a 256-token prompt's
# ~2 KB is; bench/bench_image_requests.py --part splice).
ENCODE_FROM_BYTES = 16 * 1024
_LENGTH = struct.Struct("!I")
# A frame from the builder: its length (of all that follows), a tag, then a request's
# pickle (R), or (B) a request whose encoded payload goes out of band (``_request_frame``:
# read where it was received, never copied on the loop), or the factory's error (E).
_REQUEST, _REQUEST_BUFFERS, _ERROR = b"R", b"B", b"E"


class RequestsAhead:
    """The requests of ``factory`` (a ``RequestFactory``-like: ``next_request()``), in its
    order. ``start()`` (before the run's clock starts) decides where they are built;
    ``wait_ready()`` then ``take()`` hand them out; ``close()`` ends the builder."""

    def __init__(self, factory: Any, ahead_above_s: float = AHEAD_ABOVE_S) -> None:
        self.factory = factory
        self.ahead_above_s = ahead_above_s
        # Built requests; those from the builder still pickled (how to unpickle it, its
        # frame): each is unpickled at its take, so that a burst of arrivals costs the loop
        # no long callback.
        self._ready: collections.deque[PreparedRequest | tuple[Callable[[Any], Any], bytes | memoryview]] = (
            collections.deque()
        )
        self._arrived: asyncio.Event | None = None
        self._failure: BaseException | None = None
        self._process: subprocess.Popen | None = None
        self._transport: asyncio.Transport | None = None
        self._paused = False
        self._ready_bytes = 0  # of the pickles waiting in _ready
        self._taken = 0  # requests asked of take(): the failing one is named by its number

    @property
    def in_process_of_its_own(self) -> bool:
        return self._process is not None

    async def start(self) -> None:
        try:
            # The first one warms the factory's caches up (milliseconds, once): not timed.
            self._ready.append(self.factory.next_request())
            started = time.thread_time()  # CPU time: a busy machine does not make them costly
            for _ in range(PROBE_REQUESTS - 1):
                self._ready.append(self.factory.next_request())
        except Exception as exc:  # e.g. a trace shorter than the probe: raised at its take
            self._failure = exc
            return
        # Images (``RequestFactory.costly``) go there whatever the probe measured.
        costly = bool(getattr(self.factory, "costly", False))
        if not costly and (time.thread_time() - started) / (PROBE_REQUESTS - 1) < self.ahead_above_s:
            return
        try:
            payload = pickle.dumps(self.factory, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a factory that cannot travel (a test's fake): built here
            log.info("requests built on the run's loop: the factory cannot be pickled (%s)", exc)
            return
        # The builder sends its requests with their payloads encoded (encoded_payload):
        # these too, before the run's clock starts.
        for request in self._ready:
            if isinstance(request, PreparedRequest):
                encode_in_place(request)
        try:
            await self._spawn(payload)
        except (OSError, UserError, BuilderLost) as exc:
            # Nothing was taken from it: the factory here goes on from the same state.
            log.warning("requests built on the run's loop: %s", exc)
            await self.close()
            while len(self._ready) > PROBE_REQUESTS:
                self._ready.pop()
            self._ready_bytes = 0
            self._arrived, self._failure = None, None

    async def _spawn(self, payload: bytes) -> None:
        self._process, ours = await asyncio.to_thread(spawn_builder, payload)
        loop = asyncio.get_running_loop()
        self._arrived = asyncio.Event()
        self._transport, _ = await loop.create_connection(lambda: _BuiltRequests(self), sock=ours)
        try:  # the first one built there: it has imported and unpickled everything
            await asyncio.wait_for(self.wait_ready(min_ready=PROBE_REQUESTS + 1), START_TIMEOUT_S)
        except TimeoutError:
            raise UserError(f"the request builder process did not answer within {START_TIMEOUT_S:g} s") from None
        if isinstance(self._failure, BuilderLost):
            raise self._failure

    async def wait_ready(self, min_ready: int = 1) -> None:
        """Return once ``take`` can answer (a request, or the factory's error, raised
        there: where a request built here would have raised it): at once when they are
        built here or the builder process is ahead."""
        while self._arrived is not None and len(self._ready) < min_ready and self._failure is None:
            self._arrived.clear()
            await self._arrived.wait()

    def take(self) -> PreparedRequest:
        """The next request (``wait_ready`` first when building ahead). The factory's
        failure, here or in the builder process, is raised as ``BuildFailed``: no further
        request can be built in order, and the run stops on it (``BuilderLost`` alike)."""
        self._taken += 1
        if not self._ready:
            if isinstance(self._failure, BuilderLost):
                raise self._failure
            if self._failure is not None:
                raise BuildFailed.of(self._taken, self._failure) from self._failure
            if self._arrived is not None:
                raise RuntimeError("take() before wait_ready(): no request built yet")
            try:
                return self.factory.next_request()
            except Exception as exc:  # a bug or bad data in the factory, MemoryError
                raise BuildFailed.of(self._taken, exc) from exc
        request = self._ready.popleft()
        if not isinstance(request, PreparedRequest):
            self._ready_bytes -= len(request[1])
        if (
            self._paused
            and len(self._ready) <= AHEAD // 2
            and self._ready_bytes <= AHEAD_BYTES // 2
            and self._transport is not None
        ):
            self._paused = False
            self._transport.resume_reading()
        if isinstance(request, PreparedRequest):
            return request
        unpickle, frame = request
        return unpickle(frame)

    def _received(self, tag: bytes, body: bytes | memoryview) -> None:
        if tag != _ERROR:
            self._ready.append((pickle.loads if tag == _REQUEST else _unframed, body))
            self._ready_bytes += len(body)
            full = len(self._ready) >= AHEAD or self._ready_bytes >= AHEAD_BYTES
            if full and not self._paused and self._transport is not None:
                self._paused = True  # the builder blocks once the socket's buffers are full
                self._transport.pause_reading()
        else:  # the factory raised there: raised here, where it would have been
            try:
                self._failure = pickle.loads(body)
            except Exception as exc:  # an exception class that cannot be rebuilt from its args
                self._failure = RuntimeError(f"an error that could not be read back ({type(exc).__name__}: {exc})")
        if self._arrived is not None:
            self._arrived.set()

    def _lost(self, why: str) -> None:
        if self._failure is None:
            self._failure = BuilderLost(f"the request builder process {why}")
        if self._arrived is not None:
            self._arrived.set()

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()  # the builder ends at the socket's end
            self._transport = None
        process, self._process = self._process, None
        if process is not None:
            try:
                await asyncio.to_thread(process.wait, 5.0)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait)


class BuilderLost(RuntimeError):
    """The builder process exited or its socket broke before the run closed it."""


class BuildFailed(RuntimeError):
    """The factory raised building a request (a bug, a dataset row it cannot use, no
    memory for an image): the message names the request and the error, in one line."""

    @classmethod
    def of(cls, number: int | str, error: BaseException) -> BuildFailed:
        """``number``: the request's (1-based), or what names it (a session's turn)."""
        # A UserError is already a line for the user; anything else is named by its type.
        what = str(error) if isinstance(error, UserError) else f"{type(error).__name__}: {error}".rstrip(": ")
        name = f"request {number}" if isinstance(number, int) else number
        return cls(f"building {name} failed: {printable(what, one_line=True)}")


class _BuiltRequests(asyncio.BufferedProtocol):
    """The builder process's frames, whole, to the owner. The socket is read into one
    buffer, reused; a frame larger than it (a request with images: megabytes) is read
    straight into a buffer of its own size: no copy of it on the loop but the socket's
    (read into the transport's chunks and joined, a 15 MB frame cost the loop ~10 ms)."""

    def __init__(self, owner: RequestsAhead) -> None:
        self.owner = owner
        self.buffer = bytearray(READ_BUFFER)
        self.start = 0  # the first byte of self.buffer not handed over yet
        self.end = 0  # the bytes read into self.buffer
        self.large: bytearray | None = None  # a frame larger than self.buffer, being read
        self.large_filled = 0

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.large is not None:
            return memoryview(self.large)[self.large_filled :]
        return memoryview(self.buffer)[self.end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self.large is not None:
            self.large_filled += nbytes
            if self.large_filled == len(self.large):
                frame, self.large = self.large, None
                self.owner._received(bytes(frame[:1]), memoryview(frame)[1:])
            return
        self.end += nbytes
        buffer, start = self.buffer, self.start
        while self.end - start >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(buffer, start)
            begin, end = start + _LENGTH.size, start + _LENGTH.size + length
            if end > self.end:
                if end - start > len(buffer):  # read the rest of it into its own buffer
                    self.large = bytearray(length)
                    self.large_filled = self.end - begin
                    self.large[: self.large_filled] = memoryview(buffer)[begin : self.end]
                    start = self.end
                break
            self.owner._received(bytes(buffer[begin : begin + 1]), bytes(memoryview(buffer)[begin + 1 : end]))
            start = end
        # What is left (part of a frame) moves to the front: the next read has room.
        if start:
            left = self.end - start
            buffer[:left] = buffer[start : self.end]  # a copy: the two may overlap
            start, self.end = 0, left
        self.start = start

    def eof_received(self) -> bool | None:
        self.owner._lost("exited")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._lost("exited" if exc is None else f"was lost: {exc}")


def spawn_builder(payload: bytes) -> tuple[subprocess.Popen, socket.socket]:
    """A fresh interpreter running ``builder_main`` (never a fork: the run process has
    threads, and a fork would hold copies of its connections), handed the pickled factory."""
    ours, theirs = socket.socketpair()
    try:
        process = subprocess.Popen(
            module_command(__name__, str(theirs.fileno())),
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
        )
    except OSError:
        ours.close()
        raise
    finally:
        theirs.close()
    ours.sendall(_LENGTH.pack(len(payload)) + payload)
    return process, ours


def encode_in_place(request: PreparedRequest) -> PreparedRequest:
    """``request`` with its payload encoded as JSON where it can be (``encoded_payload``)
    and that pays (``ENCODE_FROM_BYTES``): the run's loop then neither unpickles its
    strings nor encodes them again."""
    encoded = encode_payload(request.payload)
    if encoded is not None and len(encoded.json) >= ENCODE_FROM_BYTES:
        request.payload = encoded
    return request


def _request_frame(request: PreparedRequest) -> tuple[bytes, list[Any]]:
    """A built request's frame after its tag: its pickle (``_REQUEST``), or, where its
    payload is encoded, [the count and lengths of the buffers and the pickle, each
    buffer] (``_REQUEST_BUFFERS``: the payload's bytes out of band, not in the pickle)."""
    buffers: list[pickle.PickleBuffer] = []
    pickled = pickle.dumps(request, protocol=5, buffer_callback=buffers.append)
    if not buffers:
        return _REQUEST, [pickled]
    raws = [buffer.raw() for buffer in buffers]
    head = _LENGTH.pack(len(raws)) + b"".join(_LENGTH.pack(len(raw)) for raw in raws)
    return _REQUEST_BUFFERS, [head + pickled, *raws]


def _unframed(body: bytes | memoryview) -> Any:
    """The request of a ``_REQUEST_BUFFERS`` frame; its buffers are views of ``body``, not copies."""
    view = memoryview(body)
    (count,) = _LENGTH.unpack_from(view)
    lengths = [_LENGTH.unpack_from(view, _LENGTH.size * (1 + i))[0] for i in range(count)]
    end = len(view) - sum(lengths)
    buffers = []
    at = end
    for length in lengths:
        buffers.append(view[at : at + length])
        at += length
    return pickle.loads(view[_LENGTH.size * (1 + count) : end], buffers=buffers)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def builder_main(fd: int) -> None:
    """The builder process: the factory arrives pickled, its requests go back in order
    until the run closes the socket (or the factory raises: that goes back, then the end)."""
    # The run stops this process (a terminal's Ctrl-C, or a TERM sent to the process
    # group, reaches it too): it ends at the socket's end.
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    try:
        (length,) = _LENGTH.unpack(_read_exactly(sock, _LENGTH.size))
        factory = pickle.loads(_read_exactly(sock, length))
        while True:
            tag = _REQUEST
            try:
                built: Any = encode_in_place(factory.next_request())
            except Exception as exc:
                tag, built = _ERROR, exc
            try:
                if tag == _ERROR:
                    parts = [pickle.dumps(built, protocol=pickle.HIGHEST_PROTOCOL)]
                else:
                    tag, parts = _request_frame(built)
            except Exception as exc:  # what cannot travel fails there: its text does
                failed = built if tag == _ERROR else exc
                tag = _ERROR
                parts = [pickle.dumps(RuntimeError(f"{type(failed).__name__}: {failed}"))]
            sock.sendall(_LENGTH.pack(1 + sum(len(part) for part in parts)) + tag + parts[0])
            for buffer in parts[1:]:  # an encoded payload: sent as it is, not joined
                sock.sendall(buffer)
            if tag == _ERROR:
                return
    except (EOFError, OSError):
        return  # the run has ended


if __name__ == "__main__":
    builder_main(int(sys.argv[1]))
