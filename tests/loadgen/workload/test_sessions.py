"""Sessions (``workload.sessions``): each turn carries the answer the server streamed,
think time is outside every latency, open and closed loop arrival, bounded histories,
a stop during think time, and the scenario's errors."""

from __future__ import annotations

import asyncio
import json
import math
import zlib
from pathlib import Path

import numpy as np
import pytest
from aiohttp import web

from rampwatch.core.errors import UserError
from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.timeline import NullSink, Tick
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.runner import Run
from rampwatch.loadgen.workload.prompts import SEPARATOR
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.loadgen.workload.sessions import sample_think, users_for
from rampwatch.record.checkpoint import read_checkpoint


class AnsweringServer:
    """An OpenAI-compatible server whose n-th answer is a known text streamed in pieces
    (spaces, a newline and non-ASCII included, split inside words); it keeps each body."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.url = ""
        self.handler = None  # a test's own answer: (body, request) -> response

    @staticmethod
    def answer(n: int) -> str:
        return f" Answer {n}:\n  ünïcödé — tail{n} "

    @staticmethod
    def pieces(text: str) -> list[str]:
        return [text[i : i + 5] for i in range(0, len(text), 5)]

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if self.handler is not None:
            return await self.handler(body, request)
        return await self.generate_from(body, request)

    async def generate_from(self, body: dict, request: web.Request) -> web.StreamResponse:
        self.bodies.append(body)
        chat = "messages" in body
        text = self.answer(len(self.bodies))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in self.pieces(text):
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            await resp.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
        usage = {"prompt_tokens": 10, "completion_tokens": len(self.pieces(text)), "total_tokens": 20}
        await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


@pytest.fixture
async def server():
    fake = AnsweringServer()
    app = web.Application()
    app.router.add_get("/v1/models", fake.models)
    app.router.add_post("/v1/completions", fake.generate)
    app.router.add_post("/v1/chat/completions", fake.generate)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    yield fake
    await runner.cleanup()


class Sink(NullSink):
    def __init__(self) -> None:
        self.records: list = []
        self.ticks: list[Tick] = []

    def on_request(self, record):
        self.records.append(record)

    def on_tick(self, tick):
        self.ticks.append(tick)


def write_scenario(tmp_path: Path, text: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return str(path)


def sessions_scenario(
    tmp_path: Path,
    schedule: str = "{kind: constant, rate: 10, num_requests: 1}",
    endpoint: str = "chat",
    turns: str = "3",
    think: str = "0",
):
    return load_scenario(
        write_scenario(
            tmp_path,
            f"""endpoint: {endpoint}
schedule: {schedule}
workload:
  system_prompt: {{tokens: 12}}
  input_tokens: 8
  output_tokens: 6
  sessions: {{turns: {turns}, think_time_s: {think}}}
""",
        )
    )


def make_run(url: str, scenario, sink: Sink, **options) -> Run:
    options.setdefault("tick_interval_s", 0.05)
    options.setdefault("scrape_interval_s", 5.0)
    return Run(scenario, RunOptions(target=url, model="tiny", keep_records=True, **options), sinks=[sink])


async def run_to_end(run: Run, limit_s: float = 20.0):
    return await asyncio.wait_for(run.execute(), limit_s)


# -- each turn carries the answer as streamed ------------------------------------------


async def test_chat_turns_carry_the_previous_answer_exactly(server, tmp_path):
    sink = Sink()
    run = make_run(server.url, sessions_scenario(tmp_path), sink)
    await run_to_end(run)

    first, second, third = server.bodies
    assert first["messages"][0]["role"] == "system" and first["messages"][-1]["role"] == "user"
    # turn 2 = turn 1's messages + the assistant's streamed answer + a new user message
    assert second["messages"][:-2] == first["messages"]
    assert second["messages"][-2] == {"role": "assistant", "content": server.answer(1)}
    assert second["messages"][-1]["role"] == "user" and second["messages"][-1]["content"]
    assert third["messages"][:-2] == second["messages"]
    assert third["messages"][-2] == {"role": "assistant", "content": server.answer(2)}
    records = sorted(sink.records, key=lambda r: r.turn)
    assert [(r.session, r.turn) for r in records] == [(0, 1), (0, 2), (0, 3)]
    assert all(r.ok for r in records)
    # The texts were taken for the history, not kept on the records the sinks get.
    assert all(r.generated_text is None for r in records)


async def test_a_reasoning_answer_joins_the_history_without_its_thinking(server, tmp_path):
    """As chat templates drop past thinking: the next turn carries the answer's text only,
    and its prompt count grows by the answer's tokens, not the thinking's."""

    async def thinking_first(body: dict, request: web.Request) -> web.StreamResponse:
        server.bodies.append(body)
        answer = server.pieces(server.answer(len(server.bodies)))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        deltas = [{"role": "assistant", "content": ""}] + [{"reasoning": f" hmm{i}"} for i in range(3)]
        for delta in deltas + [{"content": piece} for piece in answer]:
            await resp.write(f"data: {json.dumps({'choices': [{'index': 0, 'delta': delta}]})}\n\n".encode())
        # no prompt_tokens: the record keeps the count the session expected
        usage = {"completion_tokens": 3 + len(answer), "completion_tokens_details": {"reasoning_tokens": 3}}
        await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    server.handler = thinking_first
    sink = Sink()
    await run_to_end(make_run(server.url, sessions_scenario(tmp_path, turns="2"), sink))
    first, second = server.bodies
    assert second["messages"][-2] == {"role": "assistant", "content": server.answer(1)}
    assert "hmm" not in json.dumps(second["messages"])
    one, two = sorted(sink.records, key=lambda r: r.turn)
    assert one.ok and two.ok and one.reasoning_tokens == 3 and one.reasoning_from_usage
    assert one.answer_tokens == len(server.pieces(server.answer(1)))
    # turn 2's prompt: turn 1's, the answer (as the server counted it), 8 new tokens
    assert two.prompt_tokens == one.prompt_tokens + one.answer_tokens + 8


async def test_completions_turns_append_answer_separator_and_new_text(server, tmp_path):
    sink = Sink()
    run = make_run(server.url, sessions_scenario(tmp_path, endpoint="completions", turns="2"), sink)
    await run_to_end(run)

    first, second = server.bodies
    head = first["prompt"] + server.answer(1) + SEPARATOR
    assert second["prompt"].startswith(head) and len(second["prompt"]) > len(head)
    assert first["max_tokens"] == second["max_tokens"] == 6


async def test_kept_texts_stay_on_the_records(server, tmp_path):
    sink = Sink()
    run = make_run(server.url, sessions_scenario(tmp_path, turns="2"), sink, save_generated_texts=True)
    await run_to_end(run)
    assert sorted(r.generated_text for r in sink.records) == sorted([server.answer(1), server.answer(2)])


async def test_dataset_conversations_drive_the_user_turns(server, tmp_path):
    conversation = [
        {"from": "human", "value": "first question"},
        {"from": "gpt", "value": "one two three"},
        {"from": "human", "value": "second question"},
        {"from": "gpt", "value": "four five six seven eight"},
        {"from": "human", "value": "third, never answered in the file"},
    ]
    single = [{"from": "human", "value": "alone"}, {"from": "gpt", "value": "answer"}]
    (tmp_path / "d.json").write_text(json.dumps([{"conversations": single}, {"conversations": conversation}]))
    scenario = load_scenario(
        write_scenario(
            tmp_path,
            """endpoint: chat
schedule: {kind: constant, rate: 10, num_requests: 1}
workload:
  dataset: {path: d.json, format: sharegpt}
  sessions: {think_time_s: 0}
""",
        )
    )
    sink = Sink()
    await run_to_end(make_run(server.url, scenario, sink))

    # Single-exchange entries are not sessions; the unanswered last turn has no length.
    assert [b["messages"][-1]["content"] for b in server.bodies] == ["first question", "second question"]
    assert server.bodies[1]["messages"][-2] == {"role": "assistant", "content": server.answer(1)}
    sim_words = [b["max_completion_tokens"] for b in server.bodies]
    assert sim_words == [3, 5]  # each gpt turn's token count (the simulator's tokenizer: words)


async def test_messages_conversations_drive_the_turns_with_their_system_message(server, tmp_path):
    line = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "never sent"},
            {"role": "user", "content": "q2"},
        ]
    }
    (tmp_path / "d.jsonl").write_text(json.dumps(line) + "\n" + json.dumps({"messages": line["messages"][1:2]}) + "\n")
    scenario = load_scenario(
        write_scenario(
            tmp_path,
            """endpoint: chat
schedule: {kind: constant, rate: 10, num_requests: 2}
workload:
  dataset: {path: d.jsonl, format: messages}
  output_tokens: 4
  sessions: {think_time_s: 0}
""",
        )
    )
    sink = Sink()
    await run_to_end(make_run(server.url, scenario, sink))

    # Both sessions play the one multi-turn conversation (the one-question line is skipped).
    firsts = [b["messages"] for b in server.bodies if len(b["messages"]) == 2]
    seconds = [b["messages"] for b in server.bodies if len(b["messages"]) == 4]
    assert len(firsts) == len(seconds) == 2
    assert firsts[0] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q1"}]
    assert all(m[2]["role"] == "assistant" and m[2]["content"] != "never sent" for m in seconds)
    assert all(m[3] == {"role": "user", "content": "q2"} for m in seconds)
    assert {b["max_completion_tokens"] for b in server.bodies} == {4}


# -- time -------------------------------------------------------------------------------


async def test_think_time_is_waited_and_counts_in_no_latency(server, tmp_path):
    sink = Sink()
    run = make_run(server.url, sessions_scenario(tmp_path, turns="2", think="0.4"), sink)
    await run_to_end(run)

    first, second = sorted(sink.records, key=lambda r: r.turn)
    assert second.scheduled_at == pytest.approx(first.end_at + 0.4)
    assert second.sent_at >= first.end_at + 0.4
    # Scheduled at the think time's end: neither lateness nor TTFT nor E2E holds it.
    assert second.client_queue_s < 0.1
    assert second.ttft is not None and second.ttft < 0.4
    assert second.e2e < 0.4


async def test_open_loop_sessions_start_at_the_schedules_send_times(server, tmp_path):
    scenario = sessions_scenario(tmp_path, schedule="{kind: poisson, rate: 20, duration_s: 0.5}", turns="2")
    expected = []
    schedule = scenario.build_schedule()
    while (t := schedule.next_send_time()) is not None:
        expected.append(t)
    sink = Sink()
    run = make_run(server.url, scenario, sink)
    await run_to_end(run)

    firsts = sorted(r.scheduled_at for r in sink.records if r.turn == 1)
    assert firsts == pytest.approx(expected)
    assert len({r.session for r in sink.records}) == len(expected)
    final = sink.ticks[-1]
    assert final.sessions_started_total == final.sessions_finished_total == len(expected)
    assert final.active_sessions == 0 and final.offered_total == len(sink.records)


async def test_no_turn_is_sent_after_the_schedules_end(server, tmp_path):
    scenario = sessions_scenario(
        tmp_path, schedule="{kind: constant, rate: 10, duration_s: 0.3}", turns="5", think="0.1"
    )
    sink = Sink()
    run = make_run(server.url, scenario, sink)
    result = await run_to_end(run)
    # Sessions went on turn after turn while the schedule ran, and sent nothing after it.
    assert max(r.turn for r in sink.records) >= 2
    assert all(r.scheduled_at < 0.31 for r in sink.records)
    assert not result.interrupted and sink.ticks[-1].active_sessions == 0


# -- closed loop ------------------------------------------------------------------------


@pytest.mark.slow
async def test_closed_loop_keeps_the_user_count_and_follows_a_step(server, tmp_path):
    scenario = sessions_scenario(tmp_path, schedule="{kind: users, users: 3, duration_s: 60}", think="0.02")

    class Stepper(Sink):
        def on_tick(self, tick):
            super().on_tick(tick)
            if tick.t >= 0.5 and not stepped:
                stepped.append(tick.t)
                run.step_rate(0.3)  # a fraction of a user is one user; the count then holds
            elif stepped and tick.t >= stepped[0] + 0.6:
                run.stop()

    stepped: list[float] = []
    sink = Stepper()
    run = make_run(server.url, scenario, sink)
    await run_to_end(run)

    ramping = [t for t in sink.ticks if t.state in ("ramping", "holding")]
    before = [t.active_sessions for t in ramping if 0.2 <= t.t < stepped[0]]
    after = [t.active_sessions for t in ramping if t.t >= stepped[0] + 0.2]
    assert before and set(before) == {3}
    assert after and set(after) == {4}
    step = next(e for e in run.collector.events if e.kind == "set_rate")
    assert step.message == "hold at 4 users (+1)" and step.data["after_rps"] == 4
    # the users' turns never overlap beyond the users present
    edges = sorted([(r.sent_at, 1) for r in sink.records] + [(r.end_at, -1) for r in sink.records])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    assert peak <= 4
    assert sink.ticks[-1].active_sessions == 0


@pytest.mark.parametrize(("target", "users"), [(0.0, 0), (0.49, 0), (0.5, 1), (2.6, 3), (7.0, 7)])
def test_users_for_a_fractional_target(target, users):
    assert users_for(target) == users


# -- memory and stop -------------------------------------------------------------------


@pytest.mark.slow
async def test_histories_live_only_while_their_session_does(server, tmp_path):
    scenario = sessions_scenario(
        tmp_path, schedule="{kind: constant, rate: 40, duration_s: 0.5}", turns="{dist: uniform, min: 1, max: 4}"
    )

    class Watch(Sink):
        def on_tick(self, tick):
            super().on_tick(tick)
            held.append((len(run.sessions.histories), run.sessions.active))

    held: list[tuple[int, int]] = []
    sink = Watch()
    run = make_run(server.url, scenario, sink)
    await run_to_end(run)

    assert all(histories == active for histories, active in held)
    assert run.sessions.histories == {} and sink.ticks[-1].sessions_finished_total == 20
    assert run.sessions.peak_histories < 20  # sessions ended along the way took theirs
    assert all(r.generated_text is None for r in sink.records)


async def test_stop_during_think_time_ends_at_once_and_loses_no_request(server, tmp_path):
    scenario = sessions_scenario(tmp_path, schedule="{kind: constant, rate: 10, duration_s: 60}", think="30")

    class StopAfterFirst(Sink):
        def on_request(self, record):
            super().on_request(record)
            run.stop()

    sink = StopAfterFirst()
    run = make_run(server.url, scenario, sink)
    result = await run_to_end(run, limit_s=10)

    assert result.duration_s < 5  # not the 30 s think time
    final = sink.ticks[-1]
    assert final.offered_total == final.sent_total == len(sink.records) == len(result.requests)
    assert final.sessions_started_total == final.sessions_finished_total >= 1
    assert all(r.turn == 1 for r in sink.records)


# -- the scenario -----------------------------------------------------------------------

BASE = """endpoint: chat
schedule: {kind: constant, rate: 1, duration_s: 5}
workload:
  input_tokens: 8
  output_tokens: 6
"""


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("  sessions: {turns: 2, thinking: 1}\n", 6, "workload.sessions.thinking: unknown key"),
        ("  sessions:\n    think_time_s: 1\n", 6, "workload.sessions.turns: required key is missing"),
        ("  sessions:\n    turns: 2\n    think_time_s: {dist: gamma}\n", 8, "workload.sessions.think_time_s.dist"),
        ("  sessions:\n    turns: 2\n    think_time_s: -1\n", 8, "expected a number >= 0"),
        ("  sessions:\n    turns: 2\n    think_time_s: {dist: uniform, min: 3, max: 1}\n", 8, "max: expected"),
        ("  sessions: {turns: 0}\n", 6, "workload.sessions.turns: expected an integer >= 1"),
        ("  sessions: {turns: 2}\n  conversations: {count: 2, turns: 2}\n", 7, "cannot be combined"),
    ],
)
def test_bad_sessions_name_the_file_line_and_key(tmp_path, body, line, message):
    path = write_scenario(tmp_path, BASE + body)
    with pytest.raises(UserError) as err:
        load_scenario(path)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{path}:{line}: ") and message in text, text


def test_users_schedule_needs_sessions_and_a_user_count(tmp_path):
    path = write_scenario(tmp_path, BASE.replace("constant, rate: 1", "users, users: 2"))
    with pytest.raises(UserError, match=r":2: schedule.kind: users \(a closed loop\) needs workload.sessions"):
        load_scenario(path)
    path = write_scenario(tmp_path, (BASE + "  sessions: {turns: 2}\n").replace("constant, rate: 1", "users"))
    with pytest.raises(UserError, match=r":2: schedule.users: required key is missing"):
        load_scenario(path)
    with pytest.raises(UserError, match=r"--end-rps: schedule kind 'users' ramps users"):
        load_scenario(path, flags={"end_rps": 3})


@pytest.mark.parametrize(
    ("spec", "low", "high"),
    [
        ({"dist": "fixed", "value": 2.0}, 2.0, 2.0),
        ({"dist": "uniform", "min": 1.0, "max": 3.0}, 1.0, 3.0),
        ({"dist": "exponential", "mean": 1.0, "max": 2.5}, 0.0, 2.5),
        ({"dist": "lognormal", "median": 1.0, "sigma": 0.5}, 0.0, math.inf),
    ],
)
def test_think_times_stay_in_their_distributions_bounds(spec, low, high):
    rng = np.random.default_rng(0)
    values = [sample_think(spec, rng) for _ in range(500)]
    assert low <= min(values) and max(values) <= high
    if spec["dist"] != "fixed":
        assert len(set(values)) > 100


def test_the_shipped_scenario_is_a_chat_session_workload():
    scenario = load_scenario("multi-turn-chat")
    sessions = scenario.workload["sessions"]
    assert scenario.endpoint == "chat" and scenario.workload["system_prompt"]
    assert sessions["turns"] == {"dist": "uniform", "min": 2, "max": 6}
    assert sessions["think_time_s"]["max"] <= 5


# -- the series ------------------------------------------------------------------------


def test_session_series_come_from_the_ticks_and_old_checkpoints_restore():
    builder = SeriesBuilder()
    totals = [(0.5, 2, 2, 0), (1.5, 3, 5, 2), (2.5, 1, 5, 4)]
    for t, active, started, finished in totals:
        builder.on_tick(
            Tick(
                t,
                1.0,
                "ramping",
                active_sessions=active,
                sessions_started_total=started,
                sessions_finished_total=finished,
            )
        )
    _, series = builder.series(3.0)
    assert list(series["sessions_active"]) == [2, 3, 1]
    assert sum(series["sessions_started_per_s"]) == pytest.approx(5)
    assert sum(series["sessions_finished_per_s"]) == pytest.approx(4)

    meta, arrays = builder.export_state()
    restored = SeriesBuilder.from_state(None, meta, arrays)
    assert restored.series(3.0)[1]["sessions_started_per_s"].tolist() == series["sessions_started_per_s"].tolist()
    # A checkpoint written before sessions existed: no session series in it.
    for key in ("session_counts", "session_totals"):
        meta.pop(key)
    meta["last"] = [pair for pair in meta["last"] if pair[0] != "sessions_active"]
    old = read_checkpoint(None, meta, arrays)
    old.on_tick(Tick(3.5, 1.0, "ramping"))
    _, after = old.series(4.0)
    assert after["sessions_started_per_s"].tolist() == [0.0] * 4 and after["sessions_active"][3] == 0


# -- a server restart -------------------------------------------------------------------


@pytest.mark.parametrize(
    "schedule", ["{kind: constant, rate: 20, duration_s: 60}", "{kind: users, users: 2, duration_s: 60}"]
)
async def test_a_restart_ends_the_sessions_and_the_load_resumes_with_new_ones(server, tmp_path, schedule):
    scenario = sessions_scenario(tmp_path, schedule=schedule, turns="100", think="0.01")
    at: dict[str, float] = {}

    class Restarter(Sink):
        def on_request(self, record):
            super().on_request(record)
            if "pause" not in at and record.turn >= 3:
                at["pause"] = run.now()
                asyncio.get_running_loop().call_soon(run.pause_for_restart)
            elif "resume" in at and record.session >= at["first_new"] and record.turn >= 2 and "stop" not in at:
                at["stop"] = run.now()
                run.stop()

        def on_event(self, event):
            if event.data.get("restart") == "drained":
                at["resume"] = run.now()
                at["first_new"] = run.sessions._next_id
                asyncio.get_running_loop().call_soon(run.resume_after_restart, "serve", [], "current")

    sink = Restarter()
    run = make_run(server.url, scenario, sink)
    result = await run_to_end(run)

    assert "stop" in at and all(r.ok for r in sink.records), [r.error for r in sink.records if not r.ok]
    old = [r for r in sink.records if r.session < at["first_new"]]
    new = [r for r in sink.records if r.session >= at["first_new"]]
    # The sessions under way at the pause sent no turn after it; new ones started after.
    assert max(r.sent_at for r in old) <= at["resume"] and min(r.sent_at for r in new) >= at["resume"]
    assert min(r.turn for r in new) == 1
    assert sorted(r.id for r in result.requests) == list(range(len(result.requests)))
    assert sink.ticks[-1].sessions_started_total == sink.ticks[-1].sessions_finished_total


def test_a_dataset_without_multi_turn_conversations_is_one_line_naming_it(tmp_path):
    single = [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}]
    (tmp_path / "d.json").write_text(json.dumps(single))
    path = write_scenario(
        tmp_path,
        """endpoint: chat
schedule: {kind: constant, rate: 1, duration_s: 1}
workload:
  dataset: {path: d.json}
  sessions: {think_time_s: 1}
""",
    )
    with pytest.raises(UserError) as err:
        Run(load_scenario(path), RunOptions(target="http://127.0.0.1:9", model="tiny"))
    assert str(err.value).startswith(f"{tmp_path / 'd.json'}: no conversation with two or more user turns")
    assert "\n" not in str(err.value)


async def test_a_failed_turn_ends_its_session_and_is_counted_for_its_turn(server, tmp_path):
    async def fail_second(body: dict, request: web.Request) -> web.StreamResponse:
        if len(body["messages"]) > 2:  # system + user: turn 1; more: a later turn
            server.bodies.append(body)
            return web.json_response({"error": {"message": "overloaded"}}, status=503)
        return await server.generate_from(body, request)

    server.handler = fail_second
    sink = Sink()
    run = make_run(server.url, sessions_scenario(tmp_path, turns="4"), sink)
    await run_to_end(run)
    first, second = sorted(sink.records, key=lambda r: r.turn)
    assert first.ok and not second.ok and (second.session, second.turn) == (0, 2)
    assert sink.ticks[-1].sessions_finished_total == 1  # no turn 3 after the failed turn 2


# -- the shipped scenario, as a user runs it ------------------------------------------


@pytest.mark.slow
def test_multi_turn_chat_runs_headless_and_its_recording_replays_the_sessions(tmp_path):
    import subprocess
    import sys

    from rampwatch.app.session import serving_sim
    from rampwatch.record.analysis import final_snapshot
    from rampwatch.record.reader import open_recording
    from rampwatch.sim.config import SimConfig

    recording = tmp_path / "run.rwrec"
    # Active sessions are sampled at each tick: on the instant server a session lives about
    # as long as its think times, so they must be long enough that a tick sees one.
    with serving_sim(SimConfig(hardware="instant", model="tiny")) as sim:
        proc = subprocess.run(
            [sys.executable, "-m", "rampwatch.app.cli", "run", "multi-turn-chat", "--headless"]
            + ["--target", sim.url, "--duration", "3", "--start-rps", "4", "--end-rps", "8"]
            + ["--set", "workload.sessions.think_time_s=0.4", "--record", str(recording)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 0, proc.stderr
    with open_recording(recording) as rec:
        records = rec.requests
        ticks = rec.ticks
        snap = final_snapshot(rec)
    assert records and all(r.session is not None and r.turn is not None for r in records)
    assert max(r.turn for r in records) >= 2 and all(r.generated_text is None for r in records)
    # Each session's turns are 1..n, without a gap.
    turns: dict[int, list[int]] = {}
    for r in records:
        turns.setdefault(r.session, []).append(r.turn)
    assert all(sorted(t) == list(range(1, len(t) + 1)) for t in turns.values())
    started = ticks[-1].sessions_started_total
    assert started == len(turns) == ticks[-1].sessions_finished_total
    assert sum(snap.series["sessions_started_per_s"]) == pytest.approx(started)
    assert max(snap.series["sessions_active"]) >= 1
    # The result JSON's rate is of requests, and sessions are not a request rate.
    result = json.loads(recording.with_suffix(".json").read_text())
    assert result["request_rate"] == "inf" and result["completed"] == len(records)
    # Its figures by turn, and the run's own count of the sessions that ended.
    assert [row["turn"] for row in result["per_turn"]][:2] == ["1", "2"]
    assert result["sessions"]["sessions"] == len(turns) == result["sessions"]["finished"]


@pytest.mark.slow
async def test_a_closed_loop_user_waits_after_a_failed_turn(server, tmp_path):
    async def refuse(body: dict, request: web.Request) -> web.Response:
        server.bodies.append(body)
        return web.json_response({"error": {"message": "overloaded"}}, status=503)

    server.handler = refuse
    scenario = sessions_scenario(tmp_path, schedule="{kind: users, users: 2, duration_s: 1.5}", think="0")
    sink = Sink()
    await run_to_end(make_run(server.url, scenario, sink))
    # Two users, each failing at once and then waiting 1 s: two sessions each, not thousands.
    assert len(sink.records) == 4 and not any(r.ok for r in sink.records)
    assert all(r.turn == 1 for r in sink.records)


@pytest.mark.slow
async def test_max_concurrency_caps_the_turns_in_flight(server, tmp_path):
    scenario = sessions_scenario(tmp_path, schedule="{kind: users, users: 4, duration_s: 0.6}", think="0")
    scenario.max_concurrency = 2
    sink = Sink()
    result = await run_to_end(make_run(server.url, scenario, sink))
    edges = sorted([(r.sent_at, 1) for r in result.requests] + [(r.end_at, -1) for r in result.requests])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    assert peak <= 2 and max(t.peak_in_flight or 0 for t in sink.ticks) <= 2
    assert any(t.client_queued > 0 for t in sink.ticks)  # the other users' turns waited for a slot


def test_ticks_of_older_recordings_read_with_no_sessions():
    from rampwatch.record.format import decode_meta, encode_meta

    tick = Tick(1.0, 2.0, "ramping", active_sessions=3, sessions_started_total=5, sessions_finished_total=2)
    _, (back,), _ = decode_meta(encode_meta([], [tick], []))
    assert back == tick
    old = tick.to_dict()  # a meta block as written before sessions: ticks without their keys
    for key in ("active_sessions", "sessions_started_total", "sessions_finished_total"):
        del old[key]
    payload = zlib.compress(json.dumps({"samples": [], "ticks": [old], "events": []}).encode())
    _, (before,), _ = decode_meta(payload)
    assert (before.active_sessions, before.sessions_started_total, before.sessions_finished_total) == (0, 0, 0)


# -- a turn that cannot be built stops the run, as an open-loop request does -----------


@pytest.mark.parametrize(
    ("schedule", "failing_turn"),
    [
        ("{kind: constant, rate: 20, duration_s: 30}", 1),  # the first turn: built by the dispatcher
        ("{kind: constant, rate: 20, duration_s: 30}", 2),  # a later turn: in a session's task
        ("{kind: users, users: 2, duration_s: 30}", 1),  # a closed-loop user's session
        ("{kind: users, users: 2, duration_s: 30}", 2),
    ],
)
async def test_a_turn_that_cannot_be_built_stops_the_run_with_one_line(
    server, tmp_path, monkeypatch, schedule, failing_turn
):
    from rampwatch.loadgen.workload.sessions import Conversation

    built = Conversation.next_request

    def next_request(self):
        if self.id == 1 and self.turn + 1 == failing_turn:  # session 1's turn: a bug, bad data, MemoryError
            self.turn += 1
            raise KeyError("prompt")
        return built(self)

    monkeypatch.setattr(Conversation, "next_request", next_request)
    unretrieved: list[dict] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: unretrieved.append(context))
    sink = Sink()
    result = await run_to_end(make_run(server.url, sessions_scenario(tmp_path, schedule=schedule, turns="3"), sink))
    errors = [e for e in result.events if e.kind == "error"]
    assert [e.message for e in errors] == [
        f"building session 1's turn {failing_turn} failed: KeyError: 'prompt': the run stops here"
    ]
    assert errors[0].data == {"request_build_failed": True}
    assert result.interrupted and result.duration_s < 10  # stopped, not run to the schedule's 30 s
    last = sink.ticks[-1]  # the session that failed is not left under way
    assert last.sessions_started_total == last.sessions_finished_total > 1
    assert unretrieved == []  # nothing left in a task for asyncio to print
