"""Trace replay run for real: send times honoured on the in-process simulator, and
`rampwatch run trace-replay` headless on the embedded simulator."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rampwatch.core.timeline import NullSink
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.runner import Run
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.loadgen.workload.traces import load_trace
from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import serve

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "scenarios" / "traces" / "mooncake-sample.jsonl"
# How late a send may be: the runner's own bound in tests/loadgen/run/test_runner.py (the
# median), and a looser one for every send on a shared, busy test machine.
MEDIAN_LATENESS_S = 0.05
MAX_LATENESS_S = 0.25


class Ticks(NullSink):
    def __init__(self) -> None:
        self.ticks: list = []

    def on_tick(self, tick) -> None:
        self.ticks.append(tick)


@pytest.mark.timing
@pytest.mark.slow
@pytest.mark.parametrize("speed", [1, 4])
async def test_trace_times_are_honoured_within_the_send_lateness_bound(tmp_path, speed):
    rows = [
        {"timestamp": int(t), "input_length": 24, "output_length": 2, "hash_ids": []}
        for t in np.cumsum(np.random.default_rng(speed).exponential(60.0, 24))  # ~16 rows a second
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.yaml").write_text(
        f"schedule: {{kind: trace, path: t.jsonl, format: mooncake, speed: {speed}}}\nworkload: {{}}\n"
    )
    trace = load_trace(tmp_path / "t.jsonl", "mooncake")
    ticks = Ticks()
    async with serve(SimConfig(hardware="instant", model="tiny")) as url:
        run = Run(
            load_scenario(str(tmp_path / "s.yaml")),
            RunOptions(target=url, model="tiny", tick_interval_s=0.1, scrape_interval_s=0.5, keep_records=True),
            sinks=[ticks],
        )
        result = await run.execute()
    records = sorted(result.requests, key=lambda r: r.id)
    assert len(records) == len(trace) and all(r.ok for r in records)
    assert [r.scheduled_at for r in records] == pytest.approx((trace.times_s / speed).tolist(), abs=1e-9)
    assert [r.prompt_tokens for r in records] == [24] * len(trace)
    lateness = sorted(r.sent_at - r.scheduled_at for r in records)
    assert lateness[0] >= 0 and lateness[len(lateness) // 2] < MEDIAN_LATENESS_S and lateness[-1] < MAX_LATENESS_S
    ramping = [t for t in ticks.ticks if t.state == "ramping"]
    assert ramping and all(t.target_rps > 0 for t in ramping)  # the trace's local rate × the speed


class ChangeAt(NullSink):
    """Sets ``reached`` at the first tick at or after ``t``."""

    def __init__(self, t: float) -> None:
        self.t = t
        self.reached = asyncio.Event()
        self.events: list = []

    def on_tick(self, tick) -> None:
        if tick.t >= self.t:
            self.reached.set()

    def on_event(self, event) -> None:
        self.events.append(event)


@pytest.mark.slow
async def test_a_live_rate_change_scales_the_replays_speed(tmp_path):
    rows = [{"timestamp": 50 * i, "input_length": 16, "output_length": 2} for i in range(60)]  # 20 rows a second
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.yaml").write_text("schedule: {kind: trace, path: t.jsonl, format: mooncake}\nworkload: {}\n")
    sink = ChangeAt(0.5)
    async with serve(SimConfig(hardware="instant", model="tiny")) as url:
        run = Run(
            load_scenario(str(tmp_path / "s.yaml")),
            RunOptions(target=url, model="tiny", tick_interval_s=0.1, scrape_interval_s=0.5, keep_records=True),
            sinks=[sink],
        )
        task = asyncio.create_task(run.execute())
        await sink.reached.wait()
        run.set_rate(80.0)  # 4 × the trace's 20 rows a second
        result = await task
    change = next(e for e in sink.events if e.kind == "set_rate")
    assert change.data["speed"] == pytest.approx(4.0, rel=0.05)
    sent = sorted(r.scheduled_at for r in result.requests)
    assert len(sent) == 60  # every row, none dropped
    before = np.diff([t for t in sent if t < change.t])
    after = np.diff([t for t in sent if t > change.t])
    assert np.median(before) == pytest.approx(0.05) and np.median(after) == pytest.approx(0.05 / 4, rel=0.05)
    assert sent[-1] < 3.0 / 4 + change.t  # well before the trace's own 2.95 s


@pytest.mark.slow
def test_rampwatch_run_trace_replay_headless_on_the_embedded_simulator(tmp_path):
    result_json = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "run", "trace-replay", "--headless", "--no-record"]
        + ["--result-json", str(result_json), "--set", "schedule.speed=2"],
        cwd=tmp_path,  # the scenario's trace is found beside the scenario, wherever the run starts
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(result_json.read_text())
    trace = load_trace(SAMPLE, "mooncake")
    assert result["num_prompts"] == result["completed"] == len(trace) and result["failed"] == 0
    assert result["total_input_tokens"] == int(trace.input_tokens.sum())  # exact with the simulator's tokenizer
    assert result["total_output_tokens"] == int(trace.output_tokens.sum())
    assert result["rampwatch_server"]["prefix_hit_pct"] > 20  # the rows' shared blocks hit the cache


@pytest.mark.slow
def test_a_malformed_trace_line_stops_the_run_with_one_line(tmp_path):
    (tmp_path / "t.jsonl").write_text(
        '{"timestamp": 0, "input_length": 3, "output_length": 1}\n{"timestamp": 5, "x": 1}\n'
    )
    (tmp_path / "s.yaml").write_text("schedule: {kind: trace, path: t.jsonl, format: mooncake}\nworkload: {}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "run", str(tmp_path / "s.yaml"), "--headless", "--no-record"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"rampwatch run: error: {tmp_path / 't.jsonl'}:2: input_length: required field is missing"
    )
