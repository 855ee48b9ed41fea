"""Sessions: multi-turn conversations whose every turn carries the answers the server
actually streamed (``workload.sessions``).

A *session* is one conversation of N turns (``sessions.turns``, a length distribution;
with a dataset, a conversation of the file). Its first turn carries the workload's system
prompt and document; each later turn is sent ``think_time_s`` after the previous answer
ended, with that answer's streamed text in the history: chat appends an assistant message
with exactly that text and the new user message; completions append the answer to the
previous prompt, then ``prompts.SEPARATOR`` and the new user text. A turn that fails or is
cancelled ends its session.

Arrival. Open loop: each send time of the schedule starts a session (a ramp ramps
sessions per second). Closed loop (schedule kind ``users``): the schedule's value is a
number of concurrent users, each running sessions back to back; a user the target no
longer needs leaves at its next turn boundary (at once while thinking, after the answer
while a turn is in flight); a user whose turn failed waits its think time, one second at
least, before its next session.

Time. A turn's ``scheduled_at`` is the end of the think time before it, so no latency
(lateness, TTFT, end-to-end) includes think time. The run's end, a stop and a server
restart end every session at its next turn boundary: no new turn is sent after them, the
turns in flight get the run's usual grace.

Memory. A session's history lives in its ``Conversation`` only while the session is
active; the answer's text is taken from the record before the record reaches the sinks
and cleared there unless the run keeps texts (``RunOptions.save_generated_texts``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rampwatch.core.errors import UserError
from rampwatch.core.timeline import Event, RequestRecord, RunHeader
from rampwatch.loadgen.workload.prompts import SEPARATOR, compose_exact, join
from rampwatch.loadgen.workload.request_factory import RequestFactory, sample_length
from rampwatch.loadgen.workload.requests import PreparedRequest
from rampwatch.loadgen.workload.requests_ahead import BuildFailed
from rampwatch.loadgen.workload.schedule_spec import USERS_KIND

# A closed-loop user whose turn failed waits at least this long before its next session.
USER_RETRY_S = 1.0

# A closed loop checks its user target this often besides every control change: a ramp of
# users moves by whole users, which this finds within a tenth of a second.
USERS_CHECK_S = 0.1

# Sends one turn: (request, scheduled_at, called with the turn's record before the sinks
# get it) -> the run's task of that request (tracked, drained and cancelled as any other).
SendTurn = Callable[[PreparedRequest, float, Callable[[RequestRecord], None]], "asyncio.Task[None]"]


# A turn's outcome for its session: (ok, the answer's text, when it ended, its tokens).
_Outcome = tuple[bool, str | None, float, int]


def sample_think(spec: dict[str, Any] | None, rng: np.random.Generator) -> float:
    """Seconds of think time drawn from a ``think_time_s`` spec (see ``scenario``)."""
    if not spec:
        return 0.0
    dist = spec["dist"]
    if dist == "fixed":
        value = spec["value"]
    elif dist == "uniform":
        value = float(rng.uniform(spec["min"], spec["max"]))
    elif dist == "exponential":
        value = float(rng.exponential(spec["mean"])) if spec["mean"] > 0 else 0.0
    else:
        value = spec["median"] * math.exp(spec["sigma"] * float(rng.standard_normal()))
    return float(min(max(value, 0.0), spec.get("max", math.inf)))


def users_target(header: RunHeader | None) -> bool:
    """Whether a run's target (``Tick.target_rps``) is a number of users (schedule kind
    ``users``, a closed loop) rather than a rate."""
    schedule = header.scenario.get("schedule") if header is not None and isinstance(header.scenario, dict) else None
    return isinstance(schedule, dict) and schedule.get("kind") == USERS_KIND


def session_target(header: RunHeader | None) -> bool:
    """Whether a run's target rate is of sessions started (an open-loop session
    workload) rather than of requests."""
    workload = header.scenario.get("workload") if header is not None and isinstance(header.scenario, dict) else None
    return isinstance(workload, dict) and bool(workload.get("sessions")) and not users_target(header)


def users_message(event: Event) -> None:
    """A closed loop's steering event says users, not req/s (its ``before_rps`` and
    ``after_rps`` are user counts); a server restart's pause keeps its own message."""
    if event.data.get("applied", True) is False or event.data.get("restart"):
        return
    after = users_for(event.data.get("after_rps", 0.0))
    step = event.data.get("delta_users")
    if event.kind in ("hold", "set_rate"):
        event.message = f"hold at {after} users" + (f" ({step:+d})" if step else "")
    elif event.kind == "resume":
        event.message = f"resume the ramp at {after} users"


def users_for(target: float) -> int:
    """Whole users for a target that a ramp, a hold or ``+``/``-`` may leave fractional."""
    return max(0, int(math.floor(target + 0.5)))


# --------------------------------------------------------------------------- the turns


class Conversation:
    """One session's history and its next turn. ``script`` (a dataset's conversation):
    each turn's user text and the recorded answer whose length sizes its ``max_tokens``."""

    __slots__ = ("_workload", "id", "turns", "turn", "_rng", "_script", "_messages", "_prompt", "_expected", "_doc")

    def __init__(
        self,
        workload: SessionWorkload,
        session_id: int,
        turns: int,
        rng: np.random.Generator,
        script: list[tuple[str, str | None]] | None = None,
        system_extra: str | None = None,
        doc: int | None = None,
    ) -> None:
        self._workload = workload
        self.id = session_id
        self.turns = turns
        self.turn = 0
        self._rng = rng
        self._script = script
        self._doc = doc
        factory = workload.factory
        system = join([x for x in (factory.system_prompt(), system_extra) if x])
        self._expected = factory.count_shared(system) if system else 0
        self._messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system else []
        self._prompt = system

    def next_request(self) -> PreparedRequest | None:
        """The next turn's request (None: the session has had all its turns)."""
        if self.turn >= self.turns:
            return None
        self.turn += 1
        factory, workload = self._workload.factory, self._workload.factory.workload
        out_spec = workload.get("output_tokens")
        if self._script is not None:
            user, answer = self._script[self.turn - 1]
            if out_spec:
                n_out = sample_length(out_spec, self._rng)
            else:  # the loader keeps only turns with an answer when no output_tokens is set
                n_out = max(1, factory.count_of(answer or ""))
            self._expected += factory.count_of(user)
        else:
            n_in = sample_length(workload["input_tokens"], self._rng)
            n_out = sample_length(workload["output_tokens"], self._rng)
            user, count = compose_exact(factory.tokenizer, "", n_in, self._rng)
            self._expected += count
        if self.turn == 1 and self._doc is not None:  # the document opens the first message
            document = factory.document(self._doc)
            self._expected += factory.count_shared(document)
            user = join([document, user])
        extra: dict[str, Any] = {"session": self.id, "turn": self.turn}
        if self._doc is not None:
            extra["doc"] = self._doc
        if factory.endpoint == "chat":
            self._messages.append({"role": "user", "content": user})
            payload: dict[str, Any] = {"messages": list(self._messages), "max_completion_tokens": n_out}
        else:
            self._prompt = join([self._prompt, user]) if self.turn == 1 else self._prompt + SEPARATOR + user
            payload = {"prompt": self._prompt, "max_tokens": n_out}
        request = factory.finish_request(payload, self._expected, n_out, f"session-{self.id}/turn-{self.turn}", extra)
        request.session, request.turn, request.keep_text = self.id, self.turn, True
        return request

    def take_answer(self, text: str, tokens: int) -> None:
        """The previous turn's answer, exactly as streamed (``tokens`` long, as the server
        counted it: not tokenized again), joins the history."""
        if self._workload.factory.endpoint == "chat":
            self._messages.append({"role": "assistant", "content": text})
        else:
            self._prompt += text
        self._expected += tokens

    def think_time(self) -> float:
        return sample_think(self._workload.spec.get("think_time_s"), self._rng)


class SessionWorkload:
    """Makes the run's sessions: the same scenario (seed) gives the same sessions in the
    same order, whatever the timing (each session draws from its own generator)."""

    def __init__(self, factory: RequestFactory) -> None:
        self.factory = factory
        self.spec: dict[str, Any] = factory.workload["sessions"]
        self._seed = factory.scenario.seed
        self._order_rng = np.random.default_rng([self._seed, 103])
        self._order: list[int] = []
        self._scripts: list[tuple[list[tuple[str, str | None]], str | None]] | None = None
        if factory.dataset is not None:
            self._scripts = self._dataset_scripts()

    def _dataset_scripts(self) -> list[tuple[list[tuple[str, str | None]], str | None]]:
        """Each multi-turn conversation of the dataset as (turns, its own system text); a
        conversation without answer lengths stops at its first unanswered turn when the
        workload sets no output_tokens."""
        sized = self.factory.workload.get("output_tokens") is not None
        scripts = []
        for entry in self.factory.dataset or []:
            turns = entry.user_turns()
            if not sized:
                answered = [i for i, (_, answer) in enumerate(turns) if answer is None]
                turns = turns[: answered[0]] if answered else turns
            if len(turns) >= 2:
                scripts.append((turns, entry.system_text()))
        if not scripts:
            path = self.factory.workload["dataset"]["path"]
            raise UserError(
                f"{path}: no conversation with two or more user turns for workload.sessions "
                "(use it without sessions, or a dataset of multi-turn conversations)"
            )
        return scripts

    def new_session(self, session_id: int) -> Conversation:
        rng = np.random.default_rng([self._seed, 102, session_id])
        turns_spec = self.spec.get("turns")
        if self._scripts is not None:
            if not self._order:
                self._order = self._order_rng.permutation(len(self._scripts)).tolist()
            script, system = self._scripts[self._order.pop()]  # from the end: O(1) a session
            turns = len(script) if turns_spec is None else min(len(script), sample_length(turns_spec, rng))
            return Conversation(self, session_id, turns, rng, script=script, system_extra=system)
        probs = self.factory.doc_probs
        doc = None if probs is None else int(rng.choice(len(probs), p=probs))
        return Conversation(self, session_id, sample_length(self.spec["turns"], rng), rng, doc=doc)


# --------------------------------------------------------------------------- the run's part


@dataclass(eq=False)
class _Actor:
    """A task running sessions: one session (open loop) or a user's sessions one after
    the other (closed loop). ``ended`` cuts its think time and stops it at the next turn."""

    ended: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None


class SessionDriver:
    """Runs a run's sessions through its ``send_turn`` (bound by the runner when the run
    starts) and counts them for the ticks."""

    def __init__(self, workload: SessionWorkload, clock: Callable[[], float], keep_texts: bool = False) -> None:
        self.workload = workload
        self.clock = clock
        self.keep_texts = keep_texts
        self.send_turn: SendTurn | None = None
        # Told (once) of a turn that could not be built: the run stops on it, as on a
        # request of the open loop's (bound with send_turn; unbound: raised).
        self.build_failed: Callable[[BuildFailed], None] | None = None
        self._build_failure: BuildFailed | None = None
        self.started_total = 0
        self.finished_total = 0
        self.peak_histories = 0
        self._next_id = 0
        self._actors: list[_Actor] = []
        self.idle = asyncio.Event()  # set while no session is under way
        self.idle.set()
        # The histories of the sessions under way (their count is bounded by the active
        # sessions: a session's conversation leaves this map when it ends).
        self.histories: dict[int, Conversation] = {}

    @property
    def active(self) -> int:
        return self.started_total - self.finished_total

    def _spawn(self, body: Callable[[_Actor], Any]) -> _Actor:
        actor = _Actor()
        actor.task = asyncio.create_task(body(actor), name="rampwatch-session")
        self._actors.append(actor)
        actor.task.add_done_callback(lambda _t: self._actors.remove(actor))
        return actor

    # -- open loop
    def start_session(self, at: float) -> None:
        """A session whose first turn is sent now, at the schedule's send time ``at``
        (sent here, not by the session's task: a send time the schedule handed out is a
        request, even at the schedule's very end)."""
        try:
            first = self._open(at)
        except BuildFailed as failed:
            self._turn_failed(failed)
            return

        async def follow(actor: _Actor) -> None:
            await self._follow(actor, *first)

        self._spawn(follow)

    # -- closed loop
    def set_users(self, target: int) -> None:
        """Start users up to ``target``, or have the newest surplus ones leave."""
        present = [a for a in self._actors if not a.ended.is_set()]
        for _ in range(target - len(present)):
            self._spawn(self._user)
        for actor in present[target:]:
            actor.ended.set()

    async def _user(self, actor: _Actor) -> None:
        while not actor.ended.is_set():
            try:
                conversation, turn, outcome = self._open(self.clock())
            except BuildFailed as failed:
                self._turn_failed(failed)
                return
            if await self._follow(actor, conversation, turn, outcome):
                # A failed turn: the user waits before its next session, so that a server
                # that fails at once is not sent requests as fast as the client can.
                await self._wait_until(actor, self.clock() + max(USER_RETRY_S, conversation.think_time()))

    async def run_users(self, schedule: Any, changed: asyncio.Event, stopping: Callable[[], bool]) -> None:
        """The closed loop's dispatcher: keeps ``users_for(schedule's value)`` users until
        the schedule ends or the run stops (``changed`` is set by every control call)."""
        while not stopping():
            changed.clear()
            now = self.clock()
            if schedule.ended_by(now):
                return
            self.set_users(users_for(schedule.current_rate(now)))
            try:
                await asyncio.wait_for(changed.wait(), timeout=USERS_CHECK_S)
            except TimeoutError:
                pass

    # -- every session
    def _open(self, at: float) -> tuple[Conversation, asyncio.Task, list[_Outcome]]:
        """A new session with its first turn sent (due at ``at``)."""
        session_id = self._next_id
        self._next_id += 1
        conversation = self.workload.new_session(session_id)
        self.started_total += 1
        self.idle.clear()
        self.histories[session_id] = conversation
        self.peak_histories = max(self.peak_histories, len(self.histories))
        try:
            turn, outcome = self._send(conversation, at)
        except BuildFailed:
            self._ended(session_id)  # never under way
            raise
        return conversation, turn, outcome

    def _send(self, conversation: Conversation, at: float) -> tuple[asyncio.Task, list[_Outcome]]:
        """The conversation's next turn sent; ``BuildFailed`` when it cannot be built."""
        assert self.send_turn is not None, "SessionDriver.send_turn is bound when the run starts"
        try:
            request = conversation.next_request()
        except Exception as exc:  # a bug or bad data in the factory, MemoryError: as the open loop's
            raise BuildFailed.of(f"session {conversation.id}'s turn {conversation.turn}", exc) from exc
        assert request is not None  # a session has at least one turn; _follow checks the rest
        outcome: list[_Outcome] = []
        return self.send_turn(request, at, lambda record: outcome.append(self._take(record))), outcome

    async def _follow(
        self,
        actor: _Actor,
        conversation: Conversation,
        turn: asyncio.Task,
        outcome: list[_Outcome],
    ) -> bool:
        """The rest of a session whose turn ``turn`` is in flight: each answer, the think
        time, the next turn, until its last turn, a failed one or the end (``ended``).
        True when a failed turn ended it."""
        try:
            while True:
                await asyncio.wait({turn})  # not ``await turn``: ending this session must not cancel it
                if not outcome or actor.ended.is_set():
                    return not outcome
                ok, text, end_at, tokens = outcome[0]
                if not ok or text is None:
                    return True  # a failed turn ends its session
                if conversation.turn >= conversation.turns:
                    return False
                conversation.take_answer(text, tokens)
                at = end_at + conversation.think_time()
                if not await self._wait_until(actor, at):
                    return False
                try:
                    turn, outcome = self._send(conversation, at)
                except BuildFailed as failed:  # in a session's task: told, not left in it
                    self._turn_failed(failed)
                    actor.ended.set()
                    return False
        finally:
            self._ended(conversation.id)

    def _turn_failed(self, failed: BuildFailed) -> None:
        """A turn that could not be built: ``build_failed`` is told of the first (the run
        stops on it), later ones (sessions building meanwhile) are the same stop."""
        if self.build_failed is None:
            raise failed
        if self._build_failure is None:
            self._build_failure = failed
            self.build_failed(failed)

    def _ended(self, session_id: int) -> None:
        del self.histories[session_id]
        self.finished_total += 1
        if self.active == 0:
            self.idle.set()

    def _take(self, record: RequestRecord) -> _Outcome:
        """The turn's outcome, its answer's text taken off the record unless kept."""
        text = record.generated_text
        if not self.keep_texts:
            record.generated_text = None
        # the answer only: the history holds no thinking (as chat templates drop it)
        return record.ok, text, record.end_at, record.answer_tokens

    async def _wait_until(self, actor: _Actor, at: float) -> bool:
        """Sleep until ``at`` (the end of a think time); False when ended meanwhile."""
        delay = at - self.clock()
        if delay > 0 and not actor.ended.is_set():
            try:
                await asyncio.wait_for(actor.ended.wait(), timeout=delay)
            except TimeoutError:
                pass
        return not actor.ended.is_set()

    async def wind_down(self, deadline: float | None, changed: asyncio.Event, stopping: Callable[[], bool]) -> None:
        """After the open loop's last session start: the sessions go on until the
        schedule's planned end (``deadline``), or, for a schedule bounded by a number of
        sessions (None), until every session has had its last turn; a stop (``changed``
        is set) cuts either short."""
        while not stopping():
            changed.clear()
            timeout = None if deadline is None else deadline - self.clock()
            if (deadline is None and self.idle.is_set()) or (timeout is not None and timeout <= 0):
                return
            waiters = {asyncio.ensure_future(changed.wait())}
            if deadline is None:
                waiters.add(asyncio.ensure_future(self.idle.wait()))
            try:
                await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()

    def end_all(self) -> None:
        """No further turn from any session under way (a stop, the schedule's end, a
        server restart): those thinking end at once, those waiting for an answer when it
        comes. New sessions may start afterwards (after a restart)."""
        for actor in self._actors:
            actor.ended.set()

    async def close(self) -> None:
        """End every session and wait for their tasks (the run has drained their turns)."""
        self.end_all()
        tasks = [a.task for a in self._actors if a.task is not None]
        for task in tasks:  # a session task only waits: cancelling it cancels no request
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        # A task cancelled before it first ran never reached its session's ``finally``.
        for session_id in list(self.histories):
            self._ended(session_id)
