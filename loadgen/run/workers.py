"""Load from more than one process: the run's schedule split exactly across workers.

The run (the controller) keeps everything that makes a run one run: the schedule and its
steering, the request factory, the `/metrics` scrape, the series, the knee and the
recording. A worker only sends: it gets each request of its share at its send time,
streams it, and hands its record back. Request ``i`` goes to worker ``worker_of(i, n)``,
so the union of the workers' shares is the single-process schedule, request for request.

What crosses between the controller and a worker is plain data: a ``ClientSpec`` once,
then ``(PreparedRequest, request id, scheduled_at)`` per request one way and its
``RequestRecord`` the other. ``WorkerCore`` is a worker's side on its own event loop,
whatever the transport (a local process's pipe, a Ray actor's calls); a transport's
controller side is a ``Sender``, which the run uses exactly as it uses its own
``StreamingClient``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rampwatch.core.timeline import RequestRecord
from rampwatch.loadgen.transport.client import RequestCancelled, StreamingClient
from rampwatch.loadgen.transport.connection import Connection
from rampwatch.loadgen.workload.requests import PreparedRequest


def worker_of(request_id: int, workers: int) -> int:
    """The worker that sends request ``request_id`` of a run split across ``workers``."""
    return request_id % workers


class Sender(Protocol):
    """What a run sends its requests through: its own ``StreamingClient``, or the
    controller's side of a pool of workers. ``send`` returns the request's record and
    raises ``RequestCancelled`` (carrying the record) when its task is cancelled."""

    async def start(self) -> None: ...

    async def send(self, req: PreparedRequest, request_id: int, scheduled_at: float) -> RequestRecord: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class ClientSpec:
    """What a worker needs to build the run's streaming client (picklable)."""

    target: str
    model: str
    connection: Connection
    connection_limit: int = 0  # per worker; 0: no limit (an open-loop run)
    request_timeout_s: float = 600.0
    keep_generated_text: bool = False
    fallback_tokenizer: Any = None

    def client(self, clock: Callable[[], float]) -> StreamingClient:
        return StreamingClient(
            self.target,
            self.model,
            connection_limit=self.connection_limit,
            request_timeout_s=self.request_timeout_s,
            clock=clock,
            fallback_tokenizer=self.fallback_tokenizer,
            connection=self.connection,
            keep_generated_text=self.keep_generated_text,
        )


class SenderFactory(Protocol):
    """A run's load workers (local processes, Ray actors), as the run drives them: set up
    before its clock starts (``prepare``, which may take seconds), then called with its
    clock's origin (``time.monotonic()`` at the run's t = 0, and ``time.time()`` at the same
    instant) for the run's sender. ``host_info()`` goes into the run's header and
    ``start_notes`` are its first ``info`` events; the run sets ``on_lost``, which is told
    when a worker is lost mid-run, and ``on_lag`` (``loop_health.ClientHealth.merge_worker``)
    with each worker's self-check, where the workers send one."""

    on_lost: Callable[[str], None] | None
    on_lag: Callable[[Any, list, float, Any], None] | None

    async def prepare(self, spec: ClientSpec) -> None: ...

    def __call__(self, spec: ClientSpec, t0_monotonic: float, t0_unix: float) -> Sender: ...

    def host_info(self) -> dict[str, Any]: ...

    @property
    def start_notes(self) -> list[tuple[str, dict[str, Any]]]: ...


class WorkerCore:
    """A worker's side: sends the requests it is given on its own client, keeps each one's
    task so that the controller can cancel it by id, and always answers with a record (a
    cancelled request's record has ``error_class == "cancelled"``)."""

    def __init__(self, spec: ClientSpec, clock: Callable[[], float]) -> None:
        self.client = spec.client(clock)
        self._tasks: dict[int, asyncio.Task[RequestRecord]] = {}

    async def start(self) -> None:
        await self.client.start()

    async def send(self, req: PreparedRequest, request_id: int, scheduled_at: float) -> RequestRecord:
        task = asyncio.ensure_future(self.client.send(req, request_id, scheduled_at))
        self._tasks[request_id] = task
        try:
            return await task
        except RequestCancelled as cancelled:
            return cancelled.record
        finally:
            self._tasks.pop(request_id, None)

    def cancel(self, request_id: int) -> None:
        task = self._tasks.get(request_id)
        if task is not None:
            task.cancel()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        await self.client.close()
