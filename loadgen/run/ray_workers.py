"""Load from a Ray cluster: the run's workers are Ray actors, spread over the cluster's nodes.

The split is ``loadgen.run.workers``'s: the run (the controller) keeps the schedule, the
request factory, the one ``/metrics`` scrape, the series and the recording; request ``i``
goes to actor ``worker_of(i, n)`` at its send time, the actor streams it on its own
``WorkerCore`` (its own event loop: Ray runs an actor with async methods on one) and its
record comes back as the call's result.

Clocks. A record's times are the actor's: it maps its own ``time.monotonic()`` onto the
run's axis through the run's wall-clock origin and its node's estimated wall-clock offset
from the controller (``estimate_offset``: NTP-style pings, the offset seen at the smallest
round trip). TTFT, ITL and E2E are differences of one node's clock, so a skew never enters
a latency; it only moves a record along the run's axis and into its lateness. A run refuses
to start when a node's offset exceeds ``--max-clock-offset``.

A dead actor (its process or node lost): each request it had in flight, and each one sent
to it afterwards, becomes a failed record (``worker_lost``, naming the worker and its
node); ``on_lost`` is told once per actor (the run records an ``error`` event and stops:
the other actors alone would send only part of the schedule).

Ray is imported only here, and only when a run uses it (``import_ray``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from rampwatch.core.errors import UserError
from rampwatch.core.figures.client_lag import ClientCounts
from rampwatch.core.timeline import RequestRecord
from rampwatch.loadgen.run.loop_health import WORKER_WINDOW_EVERY_S, ClientHealth
from rampwatch.loadgen.run.workers import ClientSpec, WorkerCore, worker_of
from rampwatch.loadgen.transport.client import RequestCancelled
from rampwatch.loadgen.workload.requests import PreparedRequest

RAY_MISSING = "--ray: Ray is not installed: pip install 'rampwatch[ray]'"
WORKER_LOST = "worker_lost"
# NTP-style pings per node: the one with the smallest round trip gives the offset.
CLOCK_PINGS = 8
DEFAULT_MAX_CLOCK_OFFSET_MS = 10.0
# How long the actors may take to be placed and to answer their first call.
PLACEMENT_TIMEOUT_S = 60.0
# How long a cancelled request's actor may take to hand back the cancelled record.
CANCEL_ANSWER_TIMEOUT_S = 5.0
# Concurrent calls one async actor takes: every in-flight request is one call.
ACTOR_MAX_CONCURRENCY = 100_000


class RayUnreachable(UserError):
    """No Ray cluster at the address given (exit 3, as for an unreachable server)."""

    exit_code = 3


def ray_installed() -> bool:
    """Whether Ray can be imported, without importing it."""
    return importlib.util.find_spec("ray") is not None


def import_ray() -> Any:
    if not ray_installed():
        raise UserError(RAY_MISSING)
    import ray

    return ray


# -- clocks ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClockEstimate:
    """A node's wall clock minus the controller's, and the round trip it was seen at (the
    estimate's error is at most half of it)."""

    offset_s: float
    rtt_s: float


def estimate_offset(pings: Sequence[tuple[float, float, float]]) -> ClockEstimate:
    """The offset of a remote clock from pings ``(sent, remote, received)``: ``sent`` and
    ``received`` on the local clock around the call that read ``remote``. The remote read
    happened within the round trip, assumed at its middle: offset = remote − (sent +
    received)/2, taken at the smallest round trip, where that assumption errs least."""
    if not pings:
        raise ValueError("no clock pings")
    sent, remote, received = min(pings, key=lambda p: p[2] - p[0])
    return ClockEstimate(offset_s=remote - (sent + received) / 2, rtt_s=received - sent)


def check_clock_offsets(offsets: dict[str, ClockEstimate], max_offset_s: float) -> None:
    """Refuse a run whose nodes' clocks differ from the controller's by more than the
    bound: the first such node, by name, in one line."""
    for node, estimate in offsets.items():
        if abs(estimate.offset_s) > max_offset_s:
            raise UserError(
                f"--max-clock-offset {max_offset_s * 1000:g}: Ray node {node}'s clock is "
                f"{estimate.offset_s * 1000:+.2f} ms off this host's (round trip {estimate.rtt_s * 1000:.1f} ms); "
                "synchronise the clocks (chrony/NTP) or raise the bound"
            )


def offset_text(offsets: dict[str, ClockEstimate]) -> str:
    return ", ".join(
        f"{node} {e.offset_s * 1000:+.2f} ms (±{e.rtt_s * 500:.2f})" for node, e in sorted(offsets.items())
    )


# -- the address ---------------------------------------------------------------------------
def address_endpoint(address: str) -> tuple[str, int] | None:
    """The host and port a ``--ray`` address connects to (None for ``auto``): ``ray://HOST:PORT``
    (the Ray client, default port 10001) or ``HOST:PORT`` (the cluster's GCS)."""
    if address == "auto":
        return None
    url = urlsplit(address if "://" in address else f"gcs://{address}")
    if url.scheme not in ("ray", "gcs") or not url.hostname:
        raise UserError(f"--ray {address!r}: expected auto, ray://HOST:PORT or HOST:PORT")
    try:
        port = url.port
    except ValueError:
        raise UserError(f"--ray {address!r}: the port is not a number") from None
    if port is None:
        if url.scheme != "ray":
            raise UserError(f"--ray {address!r}: expected HOST:PORT (the head node's GCS port, e.g. 6379)")
        port = 10001
    return url.hostname, port


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A TCP connect to the cluster's address, before anything starts: Ray's own connect
    retries an unreachable address for a minute."""
    endpoint = address_endpoint(address)
    if endpoint is None:
        return
    try:
        socket.create_connection(endpoint, timeout=timeout_s).close()
    except OSError as exc:
        raise RayUnreachable(f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc})") from None


# -- the actor -------------------------------------------------------------------------------
class RayWorker:
    """A worker's side as a Ray actor (made one by ``ray.remote`` when a run uses Ray; Ray
    gives an actor with async methods its own event loop). The class is pickled by
    reference: rampwatch must be importable on every node."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.core: WorkerCore | None = None
        self.sent = 0
        self.health: ClientHealth | None = None

    def where(self) -> dict[str, Any]:
        import ray

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
        }

    def wall_clock(self) -> float:
        return time.time()

    async def start(self, spec: ClientSpec, t0_unix: float, offset_s: float) -> None:
        # The run's t = 0 on this node's clock is t0_unix + offset; a monotonic clock
        # anchored once on it, so that a wall-clock step during the run moves nothing.
        origin = time.monotonic() - (time.time() - (t0_unix + offset_s))
        self.core = WorkerCore(spec, lambda: time.monotonic() - origin)
        await self.core.start()
        # The actor checks itself as a local worker does: GC kept off its loop, its lag
        # taken by the pool (``take_health``).
        self.health = ClientHealth()
        self.health.start()

    def take_health(self) -> tuple[list[list[int]], float, dict[str, Any]]:
        """The actor loop's lag samples since the last call, and its collections so far."""
        if self.health is None:
            return [], 0.0, {}
        window = self.health.take()
        return window.lag.pairs(), window.lag.max_ms, window.counts.to_dict()

    async def send(self, req: PreparedRequest, request_id: int, scheduled_at: float) -> RequestRecord:
        assert self.core is not None, "start() first"
        self.sent += 1
        return await self.core.send(req, request_id, scheduled_at)

    def cancel(self, request_id: int) -> None:
        if self.core is not None:
            self.core.cancel(request_id)

    async def close(self) -> int:
        """Cancel what is still in flight, close the client; the number of requests sent."""
        if self.core is not None:
            await self.core.close()
        if self.health is not None:
            self.health.stop()
        return self.sent


@dataclass
class WorkerPlace:
    index: int
    node_id: str
    ip: str
    hostname: str

    @property
    def node(self) -> str:
        return f"{self.hostname} ({self.ip})"


class RayPool:
    """The run's sender factory and sender over N Ray actors.

    ``prepare()`` (before the run's clock starts, in the process that executes the run):
    connects, places the actors (``SPREAD`` over the nodes, one CPU each), measures each
    node's clock offset and checks the bound. Called as a ``SenderFactory`` it returns
    itself; ``start()`` starts each actor's client on the run's time axis; ``send`` sends
    request ``i`` through actor ``worker_of(i, n)``; ``close()`` ends the actors and
    disconnects (a cluster is the user's: it is never stopped)."""

    def __init__(
        self,
        address: str,
        workers: int | None = None,
        max_clock_offset_s: float = DEFAULT_MAX_CLOCK_OFFSET_MS / 1000,
        announce: Callable[[str], None] | None = None,
    ) -> None:
        self.address = address
        self.workers = workers
        self.max_clock_offset_s = max_clock_offset_s
        self.announce = announce or (lambda line: None)
        self.on_lost: Callable[[str], None] | None = None  # the run's, set by the run
        # The run's, set by the run: each actor's self-check, taken every WORKER_WINDOW_EVERY_S.
        self.on_lag: Callable[[Any, list, float, Any], None] | None = None
        self._health_poll: asyncio.Task | None = None
        self.places: list[WorkerPlace] = []
        self.offsets: dict[str, ClockEstimate] = {}
        self.sent_by_worker: list[int] = []
        self._ray: Any = None
        self._actors: list[Any] = []
        self._lost: dict[int, str] = {}
        self._spec: ClientSpec | None = None
        self._t0_unix = 0.0

    # -- before the run ----------------------------------------------------------------------
    async def prepare(self, spec: ClientSpec) -> None:
        ray = import_ray()
        await asyncio.to_thread(check_reachable, self.address)
        try:
            self._connect(ray)  # in the main thread: Ray sets its signal handlers there
            await self._place(ray)
            await self._measure_clocks()
        except BaseException:
            await self.close()
            raise
        check = self.offsets
        self.announce(f"Ray: {_workers_on_nodes(len(self._actors), len(check))}; clock offsets {offset_text(check)}")
        try:
            check_clock_offsets(check, self.max_clock_offset_s)
        except UserError:
            await self.close()
            raise

    def _connect(self, ray: Any) -> None:
        import logging

        # Ray's driver sets a SIGTERM handler that exits at once; the run's own (a graceful
        # stop, as for Ctrl-C) is put back.
        on_sigterm = signal.getsignal(signal.SIGTERM)
        try:
            # The actors' output stays in the cluster's logs: a screen must not get it.
            ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING)
        except ConnectionError as exc:
            where = "no running Ray cluster found on this host" if self.address == "auto" else "no Ray cluster there"
            raise RayUnreachable(f"--ray {self.address}: {where} ({exc})") from None
        finally:
            signal.signal(signal.SIGTERM, on_sigterm)
        self._ray = ray

    async def _place(self, ray: Any) -> None:
        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1]
        n = self.workers or max(1, len(nodes))
        actor_class = ray.remote(RayWorker).options(
            num_cpus=1, scheduling_strategy="SPREAD", max_concurrency=ACTOR_MAX_CONCURRENCY
        )
        self._actors = [actor_class.remote(i) for i in range(n)]
        pending = [actor.where.remote() for actor in self._actors]
        ready, _ = await asyncio.to_thread(ray.wait, pending, num_returns=n, timeout=PLACEMENT_TIMEOUT_S)
        if len(ready) < n:
            cpus = sum(node.get("Resources", {}).get("CPU", 0) for node in nodes)
            raise UserError(
                f"--workers {n}: the Ray cluster at {self.address} placed {len(ready)} of {n} workers in "
                f"{PLACEMENT_TIMEOUT_S:g} s (each takes one CPU; the cluster has {cpus:g}); give fewer"
            )
        try:
            answers = await asyncio.gather(*pending)
        except ray.exceptions.RayError as exc:
            raise UserError(f"--ray {self.address}: a worker did not start: {_first_line(exc)}") from None
        self.places = [WorkerPlace(i, a["node_id"], a["ip"], a["hostname"]) for i, a in enumerate(answers)]
        self.sent_by_worker = [0] * n

    async def _measure_clocks(self) -> None:
        # One actor per node is asked: the offset is the node's clock's.
        first_on_node: dict[str, int] = {}
        for place in self.places:
            first_on_node.setdefault(place.node, place.index)
        for node, index in first_on_node.items():
            pings = []
            for _ in range(CLOCK_PINGS):
                sent = time.time()
                remote = await self._actors[index].wall_clock.remote()
                pings.append((sent, remote, time.time()))
            self.offsets[node] = estimate_offset(pings)

    # -- what the run sees --------------------------------------------------------------------
    def __call__(self, spec: ClientSpec, t0_monotonic: float, t0_unix: float) -> RayPool:
        self._spec, self._t0_unix = spec, t0_unix
        return self

    def host_info(self) -> dict[str, Any]:
        """The run header's ``host_info`` entries: how many workers, and each one's node and clock."""
        return {"load_workers": len(self.places), "workers": self.workers_info}

    @property
    def workers_info(self) -> list[dict[str, Any]]:
        """The run header's ``host_info["workers"]``: each worker's node and its clock."""
        return [
            {
                "worker": p.index,
                "transport": "ray",
                "node_id": p.node_id,
                "ip": p.ip,
                "hostname": p.hostname,
                "clock_offset_ms": round(self.offsets[p.node].offset_s * 1000, 3),
                "clock_rtt_ms": round(self.offsets[p.node].rtt_s * 1000, 3),
            }
            for p in self.places
        ]

    @property
    def start_notes(self) -> list[tuple[str, dict[str, Any]]]:
        """The run's first ``info`` events: where the workers are and the clock offsets."""
        text = (
            f"Ray cluster {self.address}: {_workers_on_nodes(len(self.places), len(self.offsets))}; "
            f"clock offsets from this host: {offset_text(self.offsets)}"
        )
        return [(text, {"ray_workers": self.workers_info})]

    async def start(self) -> None:
        assert self._spec is not None, "call the pool as a sender factory first"
        spec = self._spec
        await asyncio.gather(
            *(
                actor.start.remote(spec, self._t0_unix, self.offsets[place.node].offset_s)
                for actor, place in zip(self._actors, self.places)
            )
        )
        self._health_poll = asyncio.get_running_loop().create_task(self._poll_health())

    async def _poll_health(self) -> None:
        """Each live actor's self-check to the run, every WORKER_WINDOW_EVERY_S (a lost actor's is left)."""
        while True:
            await asyncio.sleep(WORKER_WINDOW_EVERY_S)
            live = [(i, a) for i, a in enumerate(self._actors) if i not in self._lost]
            answers = await asyncio.gather(
                *(_awaitable(a.take_health.remote()) for _, a in live), return_exceptions=True
            )
            for (index, _), answer in zip(live, answers):
                if isinstance(answer, tuple) and self.on_lag is not None:
                    pairs, max_ms, counts = answer
                    self.on_lag(index, pairs, max_ms, ClientCounts.from_dict(counts))

    async def send(self, req: PreparedRequest, request_id: int, scheduled_at: float) -> RequestRecord:
        index = worker_of(request_id, len(self._actors))
        if index in self._lost:
            return self._lost_record(req, request_id, scheduled_at, self._lost[index])
        actor = self._actors[index]
        ref = actor.send.remote(req, request_id, scheduled_at)
        try:
            record = await ref
        except asyncio.CancelledError:
            actor.cancel.remote(request_id)
            try:
                record = await asyncio.wait_for(_awaitable(ref), CANCEL_ANSWER_TIMEOUT_S)
            except (asyncio.CancelledError, TimeoutError, self._ray.exceptions.RayError):
                record = self._lost_record(req, request_id, scheduled_at, "cancelled on its Ray worker")
                record.error_class = "cancelled"
            raise RequestCancelled(record) from None
        except self._ray.exceptions.RayError as exc:
            return self._lost_record(req, request_id, scheduled_at, self._worker_lost(index, exc))
        self.sent_by_worker[index] += 1
        return record

    def _worker_lost(self, index: int, exc: BaseException) -> str:
        if index not in self._lost:
            place = self.places[index]
            self._lost[index] = f"Ray worker {index} on {place.node} lost: {_first_line(exc)}"
            if self.on_lost is not None:
                self.on_lost(self._lost[index])
        return self._lost[index]

    def _lost_record(self, req: PreparedRequest, request_id: int, scheduled_at: float, message: str) -> RequestRecord:
        now = time.time() - self._t0_unix
        return req.unanswered(request_id, scheduled_at, now, now, WORKER_LOST, message)

    async def close(self) -> None:
        """End the actors (each cancels what it still has in flight) and disconnect."""
        if self._health_poll is not None:
            self._health_poll.cancel()
            await asyncio.gather(self._health_poll, return_exceptions=True)
        if self._ray is None:
            return
        ray, actors = self._ray, self._actors
        self._actors, self._ray = [], None
        live = [(i, a) for i, a in enumerate(actors) if i not in self._lost]
        if self._spec is not None and live:
            answers = await asyncio.gather(*(_awaitable(a.close.remote()) for _, a in live), return_exceptions=True)
            counts = [a if isinstance(a, int) else None for a in answers]
            self.announce(
                "Ray workers sent: "
                + ", ".join(f"worker {i} on {self.places[i].node}: {c}" for (i, _), c in zip(live, counts))
            )
        for actor in actors:
            ray.kill(actor)
        # Disconnects this driver; a cluster started by `ray start` keeps running.
        ray.shutdown()


async def _awaitable(ref: Any) -> Any:
    return await ref


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _workers_on_nodes(workers: int, nodes: int) -> str:
    return f"{workers} worker{'s' if workers != 1 else ''} on {nodes} node{'s' if nodes != 1 else ''}"
