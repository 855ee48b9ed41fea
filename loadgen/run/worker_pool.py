"""A run's requests sent from N local worker processes (``--workers N``).

The controller (the run's process) keeps the schedule and hands each request to worker
``worker_of(id, n)`` at its send time; the worker streams it on its own event loop and
client and hands the record back. On one host ``time.monotonic()`` is one clock for every
process, so a worker times its records as ``time.monotonic() - t0`` with the run's ``t0``:
they are on the run's time axis exactly.

Transport: one socketpair per worker carrying length-prefixed pickled *batches*: every
message queued during one pass of the event loop goes out in one write, and the reader
(an ``asyncio.Protocol``, i.e. the loop's own ``add_reader``) unpickles a whole batch at
once. Requests are handed over at their send time, not ahead of it: a request handed
ahead would have to be withdrawn on every rate change, hold, stop or restart, and the
hand-over costs less than the loop's own lateness (see docs/scale.md).

Faults: a worker that exits turns its requests in flight (and any later one of its share)
into failed records (``client_error``, saying which worker exited and how) and calls
``on_lost`` once (the run records an ``error`` event and stops). A worker that does not
start is a ``UserError`` (one line). Workers end when their socket hits end-of-file: at
the run's end, and when the controller dies, however it dies; they ignore SIGINT and
SIGHUP, which the controller handles for the whole run.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rampwatch.core.errors import UserError
from rampwatch.core.figures.client_lag import ClientCounts
from rampwatch.core.interpreter import module_command
from rampwatch.core.timeline import CANCELLED, RequestRecord
from rampwatch.loadgen.run import eventloop
from rampwatch.loadgen.run.loop_health import WORKER_WINDOW_EVERY_S, ClientHealth
from rampwatch.loadgen.run.workers import ClientSpec, WorkerCore, worker_of
from rampwatch.loadgen.transport.client import RequestCancelled
from rampwatch.loadgen.workload.requests import PreparedRequest

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0  # a spawned interpreter imports the client (aiohttp, uvloop): ~1 s
JOIN_TIMEOUT_S = 5.0
_LENGTH = struct.Struct("!I")

# Messages (tuples, first item the kind). Controller → worker:
START = "start"  # (START, client spec): first, once; the worker builds and starts its client
CLOCK = "clock"  # (CLOCK, the run's t0 on time.monotonic()): once, before the first SEND
SEND = "send"  # (SEND, request, id, scheduled_at)
CANCEL = "cancel"  # (CANCEL, id)
# Worker → controller:
LOADED = "loaded"  # (LOADED, pid): imported, waiting for its START
READY = "ready"  # (READY, pid)
FAILED = "failed"  # (FAILED, message): the worker could not start
RECORD = "record"  # (RECORD, record)
# (LAG, [[bucket, count], …], max ms, ClientCounts.to_dict()): the worker's loop lag since its
# last LAG and its collections so far, every WORKER_WINDOW_EVERY_S from its READY on.
LAG = "lag"


def encode_batch(messages: list[tuple]) -> bytes:
    body = pickle.dumps(messages, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


class _BatchLink(asyncio.Protocol):
    """One end of a worker's socketpair: batches out (one write per loop pass), batches in
    (``on_batch`` per complete frame), ``on_eof`` once when the other end is gone."""

    def __init__(self, on_batch: Callable[[list[tuple]], None], on_eof: Callable[[], None]) -> None:
        self._on_batch = on_batch
        self._on_eof = on_eof
        self._buffer = bytearray()
        self._outbox: list[tuple] = []
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start = 0
        while len(buffer) - start >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(buffer, start)
            end = start + _LENGTH.size + length
            if len(buffer) < end:
                break
            self._on_batch(pickle.loads(memoryview(buffer)[start + _LENGTH.size : end]))
            start = end
        if start:
            del buffer[:start]

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self._on_eof()

    def queue(self, message: tuple) -> None:
        if self.closed or self.transport is None:
            return
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append(message)

    def _flush(self) -> None:
        batch, self._outbox = self._outbox, []
        if batch and not self.closed and self.transport is not None:
            self.transport.write(encode_batch(batch))

    def close(self) -> None:
        self._flush()
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _returns(link: _BatchLink) -> Callable[[], _BatchLink]:
    return lambda: link


# -- the worker process ------------------------------------------------------------------


def worker_main(fd: int) -> None:
    """A worker process's entry point: serve the controller on socket ``fd`` until it ends."""
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)  # the controller stops the run; EOF stops us
    try:
        sock = socket.socket(fileno=fd)
        sock.sendall(encode_batch([(LOADED, os.getpid())]))
        eventloop.run(_serve(sock))
    except Exception as exc:  # one line, never a traceback; the controller reports the exit
        print(f"rampwatch load worker {os.getpid()}: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)


def _compact(record: RequestRecord) -> RequestRecord:
    if isinstance(record.chunk_times, list):
        record.chunk_times = array("d", record.chunk_times)  # 8 bytes a chunk in the pickle
    return record


async def _serve(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    t0_monotonic = 0.0

    def clock() -> float:
        return time.monotonic() - t0_monotonic

    ended = asyncio.Event()
    tasks: set[asyncio.Task] = set()
    core: WorkerCore | None = None

    async def one(req: PreparedRequest, request_id: int, scheduled_at: float) -> None:
        assert core is not None
        try:
            record = await core.send(req, request_id, scheduled_at)
        except asyncio.CancelledError:  # cancelled before its client task took its first step
            now = clock()
            record = req.unanswered(
                request_id, scheduled_at, now, now, CANCELLED, "cancelled by the run before it was sent"
            )
        link.queue((RECORD, _compact(record)))

    started: asyncio.Future[ClientSpec] = loop.create_future()

    def on_batch(batch: list[tuple]) -> None:
        nonlocal t0_monotonic
        for message in batch:
            if message[0] == START:
                started.set_result(message[1])
                continue
            if message[0] == CLOCK:
                t0_monotonic = message[1]
                continue
            assert core is not None
            if message[0] == SEND:
                task = loop.create_task(one(message[1], message[2], message[3]))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            elif message[0] == CANCEL:
                # After the send's own first step (queued before this), which registers it.
                loop.call_soon(core.cancel, message[1])

    def on_eof() -> None:
        ended.set()
        if not started.done():
            started.cancel()  # the controller went away before it said what to do

    link = _BatchLink(on_batch, on_eof)
    await loop.create_connection(lambda: link, sock=sock)
    try:
        spec = await started
    except asyncio.CancelledError:
        return
    try:
        core = WorkerCore(spec, clock)
        await core.start()
    except Exception as exc:
        link.queue((FAILED, f"{type(exc).__name__}: {exc}"))
        link.close()
        return
    # The worker checks itself as the run does: GC kept off its loop, its lag sent.
    health = ClientHealth()
    health.start()

    async def report_lag() -> None:
        while True:
            await asyncio.sleep(WORKER_WINDOW_EVERY_S)
            window = health.take()
            link.queue((LAG, window.lag.pairs(), window.lag.max_ms, window.counts.to_dict()))

    reporter = loop.create_task(report_lag())
    link.queue((READY, os.getpid()))
    try:
        await ended.wait()
        await core.close()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        reporter.cancel()
        health.stop()


# -- the controller's side ---------------------------------------------------------------


@dataclass
class _Pending:
    future: asyncio.Future[RequestRecord]
    request: PreparedRequest
    scheduled_at: float
    handed_at: float


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen
    ready: asyncio.Future[int]  # its pid, once its client is ready
    link: _BatchLink = field(init=False)
    pending: dict[int, _Pending] = field(default_factory=dict)
    pid: int | None = None
    lost: str | None = None  # why it is gone (mid-run)


class WorkerPool:
    """A ``Sender`` over ``workers`` local worker processes (spawned, never forked: the run
    process has threads)."""

    def __init__(
        self,
        workers: int,
        spec: ClientSpec,
        on_lost: Callable[[str], None] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        on_lag: Callable[[Any, list, float, ClientCounts], None] | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("a worker pool needs at least one worker")
        self.workers = workers
        # Each worker's client gets the run's whole connection limit, not limit/N: the run's
        # semaphore (here, in the controller) already caps requests in flight across all
        # workers, and a worker whose share happens to hold more than limit/N long requests
        # at once would otherwise queue them behind its own pool, counted as their latency.
        self.spec = spec
        self.t0: float | None = None  # the run's clock origin (set_clock), on time.monotonic()
        self._started = False
        self.on_lost = on_lost
        self.on_lag = on_lag  # each worker's LAG: (worker index, pairs, max ms, collections)
        self.start_timeout_s = start_timeout_s
        self._workers: list[_Worker] = []
        self._closing = False
        self._lost_reported = False
        self._watchers: set[asyncio.Task] = set()

    def now(self) -> float:
        return 0.0 if self.t0 is None else time.monotonic() - self.t0

    def set_clock(self, t0_monotonic: float) -> None:
        """The run's t = 0: the workers' records are timed from it."""
        self.t0 = t0_monotonic
        for worker in self._workers:
            worker.link.queue((CLOCK, t0_monotonic))

    @property
    def pids(self) -> list[int | None]:
        return [w.pid for w in self._workers]

    async def start(self) -> None:
        """Start the workers (unless already started) and wait until each one's client is
        ready: everything slow (an interpreter's imports, unpickling a tokenizer) happens
        here, before the run's clock starts when the run calls ``LocalWorkers.prepare``."""
        if self._started:
            return
        self._started = True
        loop = asyncio.get_running_loop()
        try:
            spawned = await asyncio.to_thread(spawn_workers, self.workers)
            for index, (process, ours) in enumerate(spawned):
                worker = _Worker(index, process, loop.create_future())
                link = _BatchLink(functools.partial(self._on_batch, worker), functools.partial(self._on_eof, worker))
                worker.link = link
                self._workers.append(worker)
                await loop.create_connection(_returns(link), sock=ours)
                worker.link.queue((START, self.spec))
                if self.t0 is not None:
                    worker.link.queue((CLOCK, self.t0))
            for worker in self._workers:
                try:
                    worker.pid = await asyncio.wait_for(asyncio.shield(worker.ready), self.start_timeout_s)
                except TimeoutError:
                    raise UserError(
                        f"load worker {worker.index} did not start within {self.start_timeout_s:g} s"
                    ) from None
        except BaseException:
            await self.close()
            raise

    def _on_batch(self, worker: _Worker, batch: list[tuple]) -> None:
        for message in batch:
            kind = message[0]
            if kind == RECORD:
                record: RequestRecord = message[1]
                if isinstance(record.chunk_times, array):
                    record.chunk_times = record.chunk_times.tolist()
                pending = worker.pending.pop(record.id, None)
                if pending is not None and not pending.future.done():
                    pending.future.set_result(record)
            elif kind == LAG:
                if self.on_lag is not None:
                    self.on_lag(worker.index, message[1], message[2], ClientCounts.from_dict(message[3]))
            elif kind == READY:
                if not worker.ready.done():
                    worker.ready.set_result(message[1])
            elif kind == FAILED:
                if not worker.ready.done():
                    worker.ready.set_exception(UserError(f"load worker {worker.index} did not start: {message[1]}"))

    def _on_eof(self, worker: _Worker) -> None:
        if not worker.ready.done():
            worker.ready.set_exception(UserError(f"load worker {worker.index} exited while starting"))
            return
        if self._closing:
            return
        task = asyncio.get_running_loop().create_task(self._lost(worker))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _lost(self, worker: _Worker) -> None:
        # Its socket ended: the process is exiting; wait briefly for its exit code.
        code = await _wait(worker.process, JOIN_TIMEOUT_S)
        how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited (exit code {code})"
        message = f"load worker {worker.index} (pid {worker.pid}) {how}: its {len(worker.pending)} request(s) in flight failed"
        worker.lost = f"load worker {worker.index} (pid {worker.pid}) {how}"
        now = self.now()
        for request_id, pending in list(worker.pending.items()):
            if not pending.future.done():
                pending.future.set_result(self._failed(request_id, pending, now, worker.lost))
        worker.pending.clear()
        if not self._lost_reported:
            self._lost_reported = True
            log.error("%s", message)
            if self.on_lost is not None:
                self.on_lost(message)

    def _failed(self, request_id: int, pending: _Pending, now: float, why: str) -> RequestRecord:
        return pending.request.unanswered(request_id, pending.scheduled_at, pending.handed_at, now, "client_error", why)

    async def send(self, req: PreparedRequest, request_id: int, scheduled_at: float) -> RequestRecord:
        worker = self._workers[worker_of(request_id, self.workers)]
        now = self.now()
        pending = _Pending(asyncio.get_running_loop().create_future(), req, scheduled_at, now)
        if worker.lost is not None or worker.link.closed:
            return self._failed(request_id, pending, now, worker.lost or f"load worker {worker.index} is gone")
        worker.pending[request_id] = pending
        worker.link.queue((SEND, req, request_id, scheduled_at))
        try:
            return await asyncio.shield(pending.future)
        except asyncio.CancelledError:
            if pending.future.done():
                raise RequestCancelled(pending.future.result()) from None
            # The run cancelled it: the worker cancels it and answers with its record
            # (cancelled, or complete if it had just ended) — never a lost request.
            worker.link.queue((CANCEL, request_id))
            while not pending.future.done():
                try:
                    await asyncio.shield(pending.future)
                except asyncio.CancelledError:
                    continue
            raise RequestCancelled(pending.future.result()) from None

    async def close(self) -> None:
        """End every worker: close its socket (it finishes on end-of-file), wait for it,
        then terminate (and kill) one that does not go."""
        self._closing = True
        for worker in self._workers:
            worker.link.close()
            if not worker.ready.done():
                worker.ready.cancel()
            elif not worker.ready.cancelled():
                worker.ready.exception()  # reported already (the first failure), or none
        for worker in self._workers:
            process = worker.process
            if await _wait(process, JOIN_TIMEOUT_S) is None:
                process.terminate()
                if await _wait(process, JOIN_TIMEOUT_S) is None:
                    process.kill()
                    await _wait(process, JOIN_TIMEOUT_S)
        for task in list(self._watchers):
            task.cancel()


async def _wait(process: subprocess.Popen, timeout_s: float) -> int | None:
    """A process's exit code, or None if it is still running after ``timeout_s``."""
    try:
        return await asyncio.to_thread(process.wait, timeout_s)
    except subprocess.TimeoutExpired:
        return None


def spawn_workers(workers: int) -> list[tuple[subprocess.Popen, socket.socket]]:
    """Start ``workers`` worker interpreters, each with its end of a socketpair, and wait
    (blocking, up to ``START_TIMEOUT_S``) until each has imported the client; they then
    wait for their ``START``. A fresh interpreter each (never a fork: the
    run process has threads), running this module, not whatever script started the run."""
    spawned: list[tuple[subprocess.Popen, socket.socket]] = []
    for index in range(workers):
        ours, theirs = socket.socketpair()
        try:
            process = subprocess.Popen(
                module_command(__name__, str(theirs.fileno())),
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            ours.close()
            for _, sock in spawned:
                sock.close()  # they end on end-of-file
            raise UserError(f"load worker {index} did not start: {exc}") from None
        finally:
            theirs.close()
        spawned.append((process, ours))
    deadline = time.monotonic() + START_TIMEOUT_S
    for index, (_, ours) in enumerate(spawned):
        try:
            _wait_loaded(ours, deadline)
        except (OSError, ValueError) as exc:
            for _, sock in spawned:
                sock.close()
            why = "it exited" if isinstance(exc, ConnectionError) else exc
            raise UserError(f"load worker {index} did not start: {why}") from None
    return spawned


def _wait_loaded(sock: socket.socket, deadline: float) -> None:
    """Block until a spawned worker says it has imported the client (its LOADED frame)."""
    data = b""
    while len(data) < _LENGTH.size or len(data) < _LENGTH.size + _LENGTH.unpack_from(data)[0]:
        sock.settimeout(max(0.0, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise ValueError(f"no answer within {START_TIMEOUT_S:g} s") from None
        if not chunk:
            raise ConnectionError("it exited")
        data += chunk
    (length,) = _LENGTH.unpack_from(data)
    batch = pickle.loads(data[_LENGTH.size : _LENGTH.size + length])
    if batch[0][0] != LOADED:
        raise ValueError(f"unexpected first message {batch[0][0]!r}")
    sock.setblocking(False)


class LocalWorkers:
    """A run's ``SenderFactory`` over ``workers`` local processes. The run awaits
    ``prepare(spec)`` before its clock starts: the processes start there, in the process
    that runs the load (the live screen forks it), and build their clients (an
    interpreter takes about a second to import the client, a tokenizer as long to
    unpickle). At its t = 0 the run calls this for its ``WorkerPool``, which then only
    tells the workers the clock's origin. ``on_lost`` is told when a worker exits mid-run,
    ``on_lag`` each worker's self-check (``WorkerPool.on_lag``)."""

    def __init__(self, workers: int, on_lost: Callable[[str], None] | None = None) -> None:
        self.workers = workers
        self.on_lost = on_lost
        self.on_lag: Callable[[Any, list, float, ClientCounts], None] | None = None
        self.pool: WorkerPool | None = None  # the run's, once prepared or made

    async def prepare(self, spec: ClientSpec) -> None:
        if self.pool is None:
            self.pool = WorkerPool(self.workers, spec, on_lost=self._lost, on_lag=self._lag)
            await self.pool.start()

    def host_info(self) -> dict[str, object]:
        return {"load_workers": self.workers}

    @property
    def start_notes(self) -> list[tuple[str, dict[str, Any]]]:
        return []

    def __call__(self, spec: ClientSpec, t0_monotonic: float, t0_unix: float) -> WorkerPool:
        if self.pool is None:
            self.pool = WorkerPool(self.workers, spec, on_lost=self._lost, on_lag=self._lag)
        self.pool.set_clock(t0_monotonic)
        return self.pool

    def _lost(self, message: str) -> None:
        if self.on_lost is not None:
            self.on_lost(message)

    def _lag(self, worker: Any, pairs: list, max_ms: float, gc_counts: ClientCounts) -> None:
        if self.on_lag is not None:
            self.on_lag(worker, pairs, max_ms, gc_counts)


if __name__ == "__main__":
    worker_main(int(sys.argv[1]))
