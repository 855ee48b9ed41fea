"""RayPool's controller side over stand-in actors (Ray's own exception types, no cluster):
the split, a lost actor's requests and a cancelled request all end as records."""

from __future__ import annotations

import asyncio

import pytest

from rampwatch.core.timeline import RequestRecord
from rampwatch.loadgen.run.ray_workers import WORKER_LOST, ClockEstimate, RayPool, WorkerPlace
from rampwatch.loadgen.transport.client import RequestCancelled
from rampwatch.loadgen.workload.requests import PreparedRequest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")


class Method:
    def __init__(self, call) -> None:
        self.call = call

    def remote(self, *args):
        return asyncio.ensure_future(self.call(*args))


class StandIn:
    """An actor's handle: ``send`` answers (or dies, or waits until cancelled)."""

    def __init__(self, dead: bool = False) -> None:
        self.dead, self.sent, self.cancelled = dead, [], []
        self.reached = asyncio.Event()  # a call reached the actor
        self.waiting: dict[int, asyncio.Event] = {}
        self.hold = False
        self.send, self.cancel = Method(self._send), Method(self._cancel)

    async def _send(self, req, request_id, scheduled_at):
        if self.dead:
            raise ray.exceptions.RayActorError()
        self.sent.append(request_id)
        self.reached.set()
        if self.hold:
            event = self.waiting.setdefault(request_id, asyncio.Event())
            await event.wait()
            return RequestRecord(request_id, scheduled_at, 1.0, 2.0, error_class="cancelled", error="cancelled")
        return RequestRecord(request_id, scheduled_at, 1.0, 2.0, status=200, first_token_at=1.5)

    async def _cancel(self, request_id):
        self.cancelled.append(request_id)
        self.waiting.setdefault(request_id, asyncio.Event()).set()


def pool_over(actors: list[StandIn]) -> tuple[RayPool, list[str]]:
    lost: list[str] = []
    pool = RayPool("127.0.0.1:6379", workers=len(actors))
    pool._ray, pool._actors = ray, actors
    pool.places = [WorkerPlace(i, f"n{i}", f"10.0.0.{i}", f"node{i}") for i in range(len(actors))]
    pool.offsets = {p.node: ClockEstimate(0.0, 0.001) for p in pool.places}
    pool.sent_by_worker = [0] * len(actors)
    pool.on_lost = lost.append
    return pool, lost


REQ = PreparedRequest("chat", {"messages": []}, 10, 20, request_class="short")


async def test_requests_go_to_their_workers_share():
    actors = [StandIn(), StandIn(), StandIn()]
    pool, lost = pool_over(actors)
    records = [await pool.send(REQ, i, float(i)) for i in range(7)]
    assert [a.sent for a in actors] == [[0, 3, 6], [1, 4], [2, 5]]
    assert pool.sent_by_worker == [3, 2, 2] and all(r.status == 200 for r in records) and not lost


async def test_a_lost_actor_fails_its_requests_with_a_record_and_is_told_once():
    actors = [StandIn(), StandIn(dead=True)]
    pool, lost = pool_over(actors)
    records = [await pool.send(REQ, i, float(i)) for i in range(6)]
    failed = [r for r in records if r.error_class is not None]
    assert [r.id for r in failed] == [1, 3, 5] and all(r.error_class == WORKER_LOST for r in failed)
    assert all(r.error.startswith("Ray worker 1 on node1 (10.0.0.1) lost: ") for r in failed)
    assert all(r.request_class == "short" and r.prompt_tokens == 10 for r in failed)  # the request's labels
    assert len(lost) == 1 and lost[0] == failed[0].error
    assert [r.id for r in records if r.status == 200] == [0, 2, 4]


async def test_a_cancelled_request_is_cancelled_on_its_actor_and_comes_back_as_a_record():
    actor = StandIn()
    actor.hold = True
    pool, _ = pool_over([actor])
    task = asyncio.ensure_future(pool.send(REQ, 0, 0.0))
    await actor.reached.wait()
    task.cancel()
    with pytest.raises(RequestCancelled) as caught:
        await task
    assert actor.cancelled == [0] and caught.value.record.error_class == "cancelled"


async def test_each_actors_self_check_reaches_the_run():
    class Checked(StandIn):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.start = Method(self._start)
            self.take_health = Method(self._take_health)
            self.index = index

        async def _start(self, spec, t0_unix, offset_s):
            return None

        async def _take_health(self):
            return [[40, 100 + self.index]], 1.5 + self.index, {"collections": [3, 0, 0], "max_pause_ms": 0.2}

    pool, _ = pool_over([Checked(0), Checked(1)])
    seen: dict[int, tuple] = {}
    both = asyncio.Event()

    def on_lag(worker, pairs, max_ms, gc_counts):
        seen[worker] = (pairs, max_ms, gc_counts.collections)
        if len(seen) == 2:
            both.set()

    pool.on_lag = on_lag
    pool(object(), 0.0, 0.0)
    await pool.start()
    try:
        await asyncio.wait_for(both.wait(), 10.0)
    finally:
        pool._health_poll.cancel()
    assert seen == {0: ([[40, 100]], 1.5, [3, 0, 0]), 1: ([[40, 101]], 2.5, [3, 0, 0])}
