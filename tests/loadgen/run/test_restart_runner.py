"""The runner's side of a server restart: pause (no sends, drain with the grace, then
cancel — counted, not lost), the configuration mark, and both ways of resuming; the app
stops and starts the server between the calls (here the in-process simulator stays)."""

from __future__ import annotations

import asyncio
import time

import pytest

from rampwatch.core.figures.server_limits import ServerLimits
from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import serve
from tests.loadgen.run.test_runner import INSTANT, ListSink, make_run, scenario, sends_between

DIFF = [("max_num_seqs", "8", "64")]


async def wait_for_event(sink: ListSink, predicate, timeout_s: float = 10.0):
    async def poll():
        while True:
            found = [e for e in sink.of("event") if predicate(e)]
            if found:
                return found[0]
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(poll(), timeout_s)


@pytest.mark.slow
@pytest.mark.parametrize("resume", ["current", "start"])
async def test_pause_drain_mark_and_resume(resume):
    sink = ListSink()
    async with serve(INSTANT) as url:
        run = make_run(
            url,
            scenario({"kind": "linear", "start_rps": 10, "end_rps": 40, "duration_s": 4, "arrival": "constant"}),
            sink,
        )

        async def restart() -> dict[str, float]:
            at = {}
            await asyncio.sleep(2.0)
            at["rate_before"] = run.schedule.current_rate(run.now())
            at["plan_before"] = run.schedule.planned_end_s(run.now())
            run.pause_for_restart()
            at["pause"] = run.now()
            assert run.state == "restarting"
            drained = await wait_for_event(sink, lambda e: e.data.get("restart") == "drained")
            at["drained"] = drained.t
            await asyncio.sleep(0.5)  # the server restarting
            at["plan_during"] = run.schedule.planned_end_s(run.now())
            run.resume_after_restart("vllm serve tiny --max-num-seqs 64", DIFF, resume)
            at["resume"] = run.now()
            at["rate_after"] = run.schedule.current_rate(run.now())
            at["plan_after"] = run.schedule.planned_end_s(run.now())
            return at

        task = asyncio.create_task(restart())
        result = await run.execute()
        at = await task

    assert not result.interrupted
    assert sends_between(result.requests, at["pause"] + 0.01, at["resume"]) == 0
    assert sends_between(result.requests, at["resume"], result.duration_s) > 0
    # every scheduled request recorded: the ids are 0..n-1 without a gap
    assert sorted(r.id for r in result.requests) == list(range(len(result.requests)))
    # the plan moved on by the time paused
    assert at["plan_during"] > at["plan_before"] + 0.4
    config = next(e for e in sink.of("event") if e.kind == "config")
    assert config.t == pytest.approx(at["resume"], abs=0.05)
    assert config.data["diff"] == [["max_num_seqs", "8", "64"]]
    assert config.data["resume"] == resume
    assert config.data["restart_started_at"] == pytest.approx(at["pause"], abs=0.05)
    if resume == "start":
        assert at["rate_after"] == pytest.approx(10, abs=0.1)
        assert at["plan_after"] == pytest.approx(at["resume"] + 4, abs=0.05)  # the whole ramp again
    else:
        assert at["rate_after"] == pytest.approx(at["rate_before"], rel=0.1)
        assert at["plan_after"] == pytest.approx(at["plan_before"] + at["resume"] - at["pause"], abs=0.05)
    states = [t.state for t in sink.of("tick")]
    assert "restarting" in states and states[-1] == "done"
    kinds = [e.kind for e in sink.of("event") if e.kind in ("set_rate", "resume", "config")]
    assert kinds == ["set_rate", "resume", "config"]


@pytest.mark.slow
async def test_requests_in_flight_get_the_grace_then_are_cancelled_and_counted():
    slow = SimConfig(hardware="l4", model="llama-3.1-8b-fp8", served_model_name="tiny")  # ~30 ms per step
    sink = ListSink()
    async with serve(slow) as url:
        run = make_run(
            url,
            scenario({"kind": "constant", "rate": 10, "duration_s": 3}, output_tokens=2000),
            sink,
            stop_grace_s=0.3,
        )

        async def restart() -> float:
            await asyncio.sleep(1.0)
            run.pause_for_restart()
            paused = run.now()
            await wait_for_event(sink, lambda e: e.data.get("restart") == "drained")
            run.resume_after_restart("sim", DIFF, "current")
            await asyncio.sleep(0.3)
            run.cancel_in_flight()
            return paused

        task = asyncio.create_task(restart())
        result = await run.execute()
        paused = await task

    cancels = [e for e in sink.of("event") if e.kind == "cancel"]
    assert "the server restarts" in cancels[0].message
    before = [r for r in result.requests if r.sent_at <= paused]
    assert before and all(r.error_class == "cancelled" for r in before)
    assert cancels[0].data["requests"] == len(before)


async def test_a_failed_restart_stops_the_run_with_the_reason():
    sink = ListSink()
    async with serve(INSTANT) as url:
        run = make_run(url, scenario({"kind": "constant", "rate": 5, "duration_s": 20}), sink)

        async def restart() -> None:
            await asyncio.sleep(0.5)
            run.pause_for_restart()
            await wait_for_event(sink, lambda e: e.data.get("restart") == "drained")
            run.restart_failed("the server exited during startup with code 2", 2, ["error: bad flag"])
            run.resume_after_restart("sim", DIFF, "current")  # too late: ignored

        task = asyncio.create_task(restart())
        result = await run.execute()
        await task

    error = next(e for e in sink.of("event") if e.kind == "error")
    assert error.message == "the server exited during startup with code 2"
    assert error.data["server_log_tail"] == ["error: bad flag"]
    assert result.interrupted and result.duration_s < 5
    assert not [e for e in sink.of("event") if e.kind == "config"]


@pytest.mark.slow
async def test_steering_during_a_restart_waits_for_it():
    sink = ListSink()
    async with serve(INSTANT) as url:
        run = make_run(url, scenario({"kind": "constant", "rate": 5, "duration_s": 2}), sink)

        async def restart() -> None:
            await asyncio.sleep(0.5)
            run.pause_for_restart()
            run.pause_for_restart()  # a second one changes nothing
            await wait_for_event(sink, lambda e: e.data.get("restart") == "drained")
            run.resume_after_restart("sim", DIFF, "current")
            run.resume_after_restart("sim", DIFF, "current")  # nor a second resume

        task = asyncio.create_task(restart())
        await run.execute()
        await task

    assert [e.kind for e in sink.of("event")].count("config") == 1
    assert [e.data.get("restart") for e in sink.of("event")].count(True) == 1


@pytest.mark.slow
async def test_the_knee_is_judged_against_the_configuration_that_serves():
    """The knee's limits start from the managed server's engine arguments and follow a
    restart's diff (an argument the new command drops goes back to unknown)."""
    sink = ListSink()
    async with serve(INSTANT) as url:
        run = make_run(
            url,
            scenario({"kind": "constant", "rate": 20, "duration_s": 3}),
            sink,
            managed_server={"engine_args": {"model": "tiny", "max_num_seqs": "8", "max_num_batched_tokens": "512"}},
            server_limits=ServerLimits.from_engine_args({"max_num_seqs": "8", "max_num_batched_tokens": "512"}),
        )
        seen = {}

        async def restart() -> None:
            await wait_for_event(sink, lambda e: e.kind == "start")
            seen["before"] = (run.knee.limits.max_num_seqs, run.knee.limits.max_num_batched_tokens)
            run.pause_for_restart()
            await wait_for_event(sink, lambda e: e.data.get("restart") == "drained")
            run.resume_after_restart(
                "vllm serve tiny --max-num-seqs 64", [("max_num_batched_tokens", "512", None), *DIFF], "current"
            )
            seen["after"] = (run.knee.limits.max_num_seqs, run.knee.limits.max_num_batched_tokens)

        task = asyncio.create_task(restart())
        await run.execute()
        await task

    assert seen == {"before": (8, 512), "after": (64, None)}


@pytest.mark.slow
async def test_a_send_due_in_the_loop_turn_the_pause_comes_in_is_not_sent():
    """On a loaded machine the loop runs late: the next send is overdue when the pause is
    applied, in the same loop turn. It is not sent to the server about to stop: nothing is
    sent until the restart is over, and then the load goes on."""
    sink = ListSink()
    async with serve(INSTANT) as url:
        run = make_run(
            url,
            scenario({"kind": "linear", "start_rps": 20, "end_rps": 20, "duration_s": 1, "arrival": "constant"}),
            sink,
        )
        loop = asyncio.get_running_loop()

        async def restart() -> tuple[float, float]:
            await asyncio.sleep(0.3)
            # the loop held up, as on a loaded machine: the next send (one every 50 ms) is overdue
            time.sleep(0.1)  # noqa: ASYNC251
            loop.call_later(0, run.pause_for_restart)  # a timer due after the send's own
            await wait_for_event(sink, lambda e: e.data.get("restart") == "drained")
            run.resume_after_restart("sim", DIFF, "current")
            return next(e.t for e in sink.of("event") if e.data.get("restart") is True), run.now()

        task = asyncio.create_task(restart())
        result = await run.execute()
        paused, resumed = await task

    assert sends_between(result.requests, paused, resumed) == 0
    assert sends_between(result.requests, resumed, result.duration_s) > 0
