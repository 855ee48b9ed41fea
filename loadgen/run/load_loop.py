"""The load loop: the dispatcher sleeps until the schedule's next send time and fires one
task per request (or starts a session); nothing it does waits on a response, a scrape or
a sink, so the send times stay on schedule (lateness is recorded: ``sent_at -
scheduled_at``). Each request's task publishes one record, whatever happens to it; the
drain waits for the requests in flight as the drain policy says.
"""

from __future__ import annotations

import asyncio
import math

from rampwatch.core.text import server_text
from rampwatch.core.timeline import CANCELLED, Event, RequestRecord
from rampwatch.loadgen.run.steering import RunSteering
from rampwatch.loadgen.run.workers import Sender
from rampwatch.loadgen.transport.client import RequestCancelled
from rampwatch.loadgen.transport.redirects import REDIRECT_STATUSES
from rampwatch.loadgen.workload.requests_ahead import BuilderLost, BuildFailed
from rampwatch.loadgen.workload.schedule_spec import USERS_KIND
from rampwatch.loadgen.workload.sessions import SessionDriver

# A request's record with one of these classes was redirected and not followed
# (``loadgen.transport.redirects``).
_REDIRECT_CLASSES = frozenset(f"http_{status}" for status in REDIRECT_STATUSES)


class LoadLoop(RunSteering):
    """The dispatcher, each request's task from its send time to its record, and the drain."""

    async def _dispatch(self, client: Sender, semaphore: asyncio.Semaphore | None) -> None:
        assert self._schedule_changed is not None and self._none_in_flight is not None
        while not self._stopping:
            # Waited for before a send time is handed out: a hold or rate change while the
            # builder process is behind re-times the send as usual.
            await self.requests.wait_ready()
            send_at = self.schedule.next_send_time()
            if send_at is None:
                return
            # A control call withdraws the send time it handed out; the next call to
            # next_send_time() returns the same request re-timed at the new rate
            # (math.inf while held at rate 0, so only a change wakes us).
            self._schedule_changed.clear()
            delay = send_at - self.now()
            if delay > 0:
                timeout = None if math.isinf(delay) else delay
                try:
                    await asyncio.wait_for(self._schedule_changed.wait(), timeout=timeout)
                except TimeoutError:
                    if self._restart is not None:
                        # The pause for a restart was applied in the loop turn this send
                        # came due in (a loop running late): nothing is sent until the
                        # restart is over. A send time already due at the pause was kept
                        # by the schedule; it is taken back and comes again at the resume.
                        if send_at <= self._restart[0]:
                            self.schedule.withdraw()
                        continue
                else:
                    continue
            if self._stopping:
                return
            if self.sessions is not None:
                self.sessions.start_session(send_at)
                continue
            try:
                request = self.requests.take()
            except BuilderLost as lost:
                self._builder_lost(str(lost))
                return
            except BuildFailed as failed:  # stops as a lost builder does: no traceback
                self._build_failed(failed)
                return
            self._launch(client, semaphore, request, send_at)

    def _build_failed(self, failed: BuildFailed) -> None:
        """A request (or a session's turn) that could not be built: no further one can be
        built in order; the run stops with one line (an ``error`` event, the usual stop)."""
        self._stop_on_error(f"{failed}: the run stops here", {"request_build_failed": True})

    def _builder_lost(self, message: str) -> None:
        """The process building the run's requests ahead is gone (killed, out of memory):
        no further request can be built in order, so the run stops as for a lost load
        worker (an ``error`` event, the usual stop: in-flight requests drain, the
        recording and the summary are kept)."""
        self._stop_on_error(f"{message}: the run stops here", {"request_builder_lost": True})

    async def _run_sessions(self, sessions: SessionDriver, client, semaphore) -> None:
        """A session workload's dispatch: sessions start at the schedule's send times (open
        loop) or users are kept at its value (kind users); no turn after the schedule's
        planned end, or, with a number of sessions, none after the last session's end."""
        sessions.send_turn = lambda request, at, on_record: self._launch(client, semaphore, request, at, on_record)
        sessions.build_failed = self._build_failed
        assert self._schedule_changed is not None
        if self.schedule.kind == USERS_KIND:
            await sessions.run_users(self.schedule, self._schedule_changed, lambda: self._stopping)
        else:
            await self._dispatch(client, semaphore)
            # A schedule of N sessions (num_requests) lets each finish; one of a duration
            # sends no turn after its planned end.
            counted = "num_requests" in self.schedule.spec
            deadline = None if counted else self.schedule.planned_end_s(self.now())
            await sessions.wind_down(deadline, self._schedule_changed, lambda: self._stopping)
        sessions.end_all()

    def _launch(self, client, semaphore, request, scheduled_at: float, on_record=None) -> asyncio.Task:
        """One request's task, tracked in flight (drained, cancelled) until it ends."""
        assert self._none_in_flight is not None
        self._offered_total += 1
        request_id = self._next_id
        self._next_id += 1
        task = asyncio.create_task(self._one_request(client, semaphore, request, request_id, scheduled_at, on_record))
        self._in_flight.add(task)
        self._none_in_flight.clear()
        task.add_done_callback(self._request_done)
        return task

    def _request_done(self, task: asyncio.Task) -> None:
        self._in_flight.discard(task)
        if not self._in_flight and self._none_in_flight is not None:
            self._none_in_flight.set()

    async def _send(self, client, request, request_id: int, scheduled_at: float) -> RequestRecord:
        """One request sent: counted in flight from its send to its end."""
        self._sent_total += 1
        self._sending[request_id] = self.now()
        self._peak_in_flight = max(self._peak_in_flight, len(self._sending))
        try:
            return await client.send(request, request_id, scheduled_at)
        finally:
            del self._sending[request_id]

    def _publish(self, record: RequestRecord, on_record=None) -> None:
        """A request's record to ``on_record`` (a session's turn takes its answer there),
        then to the sinks."""
        if on_record is not None:
            on_record(record)
        self.sink.on_request(record)
        if not self._redirect_told and record.error_class in _REDIRECT_CLASSES:
            # Said once: each such request's record carries it too.
            self._redirect_told = True
            self.sink.on_event(Event(record.end_at, "info", f"requests redirected: {record.error}"))

    async def _one_request(
        self, client, semaphore, request, request_id: int, scheduled_at: float, on_record=None
    ) -> None:
        try:
            if semaphore is None:
                record = await self._send(client, request, request_id, scheduled_at)
            else:
                self._client_queued += 1
                try:
                    await semaphore.acquire()
                except asyncio.CancelledError:
                    # Cancelled while waiting for a slot: never sent, but scheduled, so it
                    # is recorded (cancelled, sent and ended now) rather than lost.
                    now = self.now()
                    waited = request.unanswered(
                        request_id,
                        scheduled_at,
                        now,
                        now,
                        CANCELLED,
                        "cancelled by the run while waiting for a concurrency slot",
                    )
                    self._publish(waited, on_record)
                    raise
                finally:
                    self._client_queued -= 1
                try:
                    record = await self._send(client, request, request_id, scheduled_at)
                finally:
                    semaphore.release()
        except RequestCancelled as cancelled:
            self._publish(cancelled.record, on_record)
            raise
        except Exception as exc:  # a client bug must cost one failed request, never a lost one
            now = self.now()
            record = request.unanswered(
                request_id,
                scheduled_at,
                min(now, max(scheduled_at, 0.0)),
                now,
                "client_error",
                server_text(f"{type(exc).__name__}: {exc}", self.connection.secrets())[:500],
            )
        self._publish(record, on_record)

    async def _drain(self) -> None:
        """Wait for in-flight requests as the drain policy says (``wait``: without limit,
        as vllm bench does; ``cap:S``: at most S seconds; ``cancel``: not at all), but only
        ``stop_grace_s`` once a stop is requested — also a stop that arrives while already
        draining. What the policy cancels is part of the plan: recorded as cancelled, it
        does not make the run interrupted."""
        assert self._schedule_changed is not None and self._none_in_flight is not None
        loop = asyncio.get_running_loop()
        policy = self.options.drain
        # The policy is the plan for the schedule's end; a stop that cut the schedule short
        # gives its whole grace period, whatever the policy (cancel would give none).
        deadline = None if policy.limit_s is None or self._stopping else loop.time() + policy.limit_s
        # Two waiters, not one per request: asyncio.wait over thousands of queued requests
        # re-registers a callback on each of them every time one finishes.
        while self._in_flight and not self._stopping:
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                # A request sent at the schedule's last moment may not have started yet: a
                # task cancelled before its first step would leave no record. One pass of
                # the loop starts it, so that its cancel is recorded.
                await asyncio.sleep(0)
                why = (
                    "the drain policy cancels"
                    if policy.mode == "cancel"
                    else f"the drain's {policy.cap_s:g} s cap is over"
                )
                pending = set(self._in_flight)
                self._cancel(list(pending), why, interrupts=False, data={"drain": str(policy)})
                await asyncio.gather(*pending, return_exceptions=True)
                return
            self._schedule_changed.clear()
            waiters = {
                asyncio.ensure_future(self._none_in_flight.wait()),
                asyncio.ensure_future(self._schedule_changed.wait()),
            }
            try:
                await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
        pending = set(self._in_flight)
        grace = self.options.stop_grace_s
        if deadline is not None:  # the policy's cap still holds after a stop
            grace = max(0.0, min(grace, deadline - loop.time()))
        if pending:
            done, pending = await asyncio.wait(pending, timeout=grace)
        if pending:
            self._cancel(list(pending), f"the {self.options.stop_grace_s:g} s grace period is over")
            await asyncio.gather(*pending, return_exceptions=True)
