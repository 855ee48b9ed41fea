"""`rampwatch run` as a user runs it: a real subprocess against a simulator process."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rampwatch.app.session import serving_sim
from rampwatch.sim.config import FaultConfig, SimConfig

REPO = Path(__file__).resolve().parents[2]
API_KEY = "sk-test-0f9e8d7c6b5a"

# Aggregate keys of `vllm bench serve --save-result` (vllm/benchmarks/serve.py, 0.32).
VLLM_RESULT_KEYS = {
    "date",
    "backend",
    "model_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "generated_texts",
    "errors",
}
METRIC_KEYS = {
    f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "std", "p99")
}


@pytest.fixture(scope="module")
def sim_url():
    with serving_sim(SimConfig(hardware="instant", model="tiny")) as sim:
        yield sim.url


def rampwatch(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "run", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.slow
def test_headless_run_summary_result_json_and_recording(sim_url, tmp_path):
    from rampwatch.record.analysis import summarise
    from rampwatch.record.reader import open_recording

    result_json, recording = tmp_path / "out" / "result.json", tmp_path / "run.rwrec"
    proc = rampwatch(
        "random",
        "--headless",
        "--target",
        sim_url,
        "--duration",
        "3",
        "--start-rps",
        "4",
        "--end-rps",
        "12",
        "--seed",
        "5",
        "--max-concurrency",
        "6",
        "--api-key",
        API_KEY,
        "--gpu-price-per-hour",
        "2.5",
        "--result-json",
        str(result_json),
        "--save-generated-texts",
        "--record",
        str(recording),
        "--progress-interval",
        "1",
        "--metrics-url",
        sim_url + "/metrics",
        "--set",
        "workload.input_tokens=40",
        "--set",
        "schedule.arrival=constant",
        "--set",
        "workload.output_tokens=20",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    progress = [line for line in out.splitlines() if line.startswith("[")]
    assert len(progress) >= 2 and all("target" in line and "TTFT" in line for line in progress)
    for heading in (
        "Serving Benchmark Result",
        "Successful requests:",
        "P99 TTFT (ms):",
        "Server (/metrics)",
        "Avg generation throughput (tok/s):",
        "Send lateness p99 (ms):",
    ):
        assert heading in out
    assert f"result JSON: {result_json}" in out and f"recording: {recording}" in out

    result = json.loads(result_json.read_text())
    assert VLLM_RESULT_KEYS | METRIC_KEYS <= set(result)
    with open_recording(recording) as rec:
        records = list(rec.requests)
        header = rec.header
    # 4 -> 12 req/s over 3 s: 24 requests
    assert 22 <= len(records) == result["num_prompts"] <= 26
    assert header.options["target"] == sim_url and header.options["max_concurrency"] == 6
    records.sort(key=lambda r: r.sent_at)
    order = sorted(range(len(result["start_times"])), key=lambda i: result["start_times"][i])
    ok = [r for r in records if r.ok]
    assert result["completed"] == len(ok) == len(records) and result["failed"] == 0
    assert result["total_output_tokens"] == sum(r.completion_tokens for r in ok) == 20 * len(ok)
    assert result["total_input_tokens"] == sum(r.prompt_tokens for r in ok)
    assert [result["output_lens"][i] for i in order] == [r.completion_tokens for r in records]
    assert [result["ttfts"][i] for i in order] == pytest.approx([r.ttft for r in records], abs=2e-6)  # seconds
    assert [result["latencies"][i] for i in order] == pytest.approx([r.e2e for r in records], abs=2e-6)
    assert [len(result["itls"][i]) for i in order] == [len(r.chunk_times) for r in records]
    # --save-generated-texts: every answer's text (the simulator streams one piece per token)
    assert len(result["generated_texts"]) == len(records) and all(result["generated_texts"])
    ttfts_ms = sorted(1000 * t for t in result["ttfts"])
    assert result["mean_ttft_ms"] == pytest.approx(sum(ttfts_ms) / len(ttfts_ms))
    assert result["median_ttft_ms"] == pytest.approx(float(__import__("numpy").median(ttfts_ms)))
    assert result["duration"] == pytest.approx(max(r.end_at for r in records), abs=1.0)
    # one window, vLLM's (first send to last completion), live and in `rampwatch report`
    # (the recording keeps times to 1 µs)
    assert result["duration"] == pytest.approx(
        max(r.end_at for r in records) - min(r.sent_at for r in records), abs=2e-6
    )
    with open_recording(recording) as rec:
        assert summarise(rec).duration_s == pytest.approx(result["duration"], abs=2e-6)
        # the run's figures are read back from its recording: `rampwatch report`'s, exactly
        reported = summarise(rec).to_dict()
    for key in ("completed", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "request_goodput"):
        assert result[key] == reported[key]
    assert result["rampwatch_send_lateness_ms"] == reported["send_lateness_ms"]
    assert set(reported["send_lateness_ms"]) == {"p50", "p99", "max"}
    assert result["request_throughput"] == pytest.approx(result["completed"] / result["duration"])
    assert result["output_throughput"] == pytest.approx(result["total_output_tokens"] / result["duration"])
    assert result["max_concurrency"] == 6 and result["max_concurrent_requests"] <= 6
    # GPU price: $/h divided by measured tokens per hour, per million
    cost = result["rampwatch_cost"]
    assert cost["per_1m_output_tokens"] == pytest.approx(2.5 / (result["output_throughput"] * 3600) * 1e6)
    assert cost["per_1m_total_tokens"] == pytest.approx(2.5 / (result["total_token_throughput"] * 3600) * 1e6)
    assert "Cost per 1M output tokens:" in out and "Cost per 1M total tokens:" in out
    server = result["rampwatch_server"]
    assert server["available"] and server["backend"] == "vllm" and server["scrapes_ok"] >= 2
    # the simulator counts the same tokens the client does; its rate covers the scraped span only
    assert 0 < server["avg_generation_throughput"] <= 2 * result["output_throughput"]

    # the key stays out of everything the run wrote or printed
    for blob in (proc.stdout, proc.stderr, result_json.read_text(), recording.read_bytes().decode("latin-1")):
        assert API_KEY not in blob


@pytest.mark.slow
def test_without_a_tty_the_run_is_headless(sim_url, tmp_path):
    proc = rampwatch(
        "random",
        "--target",
        sim_url,
        "--duration",
        "1.5",
        "--start-rps",
        "4",
        "--end-rps",
        "4",
        "--no-record",
        "--progress-interval",
        "0.5",
        "--set",
        "workload.output_tokens=8",
    )
    assert proc.returncode == 0, proc.stderr
    assert "Serving Benchmark Result" in proc.stdout
    assert sum(line.startswith("[") for line in proc.stdout.splitlines()) >= 2


@pytest.mark.slow
def test_unreachable_target_is_one_line_naming_the_url(tmp_path):
    url = closed_port_url()
    proc = rampwatch(
        "random", "--headless", "--target", url, "--duration", "2", "--no-record",
        env={**os.environ, "OPENAI_API_KEY": API_KEY},
    )  # fmt: skip
    assert proc.returncode not in (0, 1)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and url in lines[0]
    assert "Traceback" not in proc.stderr and API_KEY not in proc.stderr + proc.stdout


@pytest.mark.slow
def test_error_rate_above_the_limit_fails_the_run(tmp_path):
    faulty = SimConfig(hardware="instant", model="tiny", faults=FaultConfig(error_rate=0.3), seed=1)
    with serving_sim(faulty) as sim:
        args = (
            "random",
            "--headless",
            "--target",
            sim.url,
            "--duration",
            "1.5",
            "--start-rps",
            "20",
            "--end-rps",
            "20",
            "--no-record",
            "--set",
            "schedule.arrival=constant",
            "--set",
            "workload.output_tokens=8",
        )
        strict = rampwatch(*args, "--result-json", str(tmp_path / "strict.json"), "--save-detailed")
        lenient = rampwatch(*args, "--max-error-rate", "0.9")
    assert strict.returncode == 1
    assert "exceeds --max-error-rate 5.0%" in strict.stderr
    result = json.loads((tmp_path / "strict.json").read_text())
    assert 0.1 < result["failed"] / result["num_prompts"] < 0.5
    assert sum(e.startswith("http_500") for e in result["errors"]) == result["failed"]
    assert "Failed requests:" in strict.stdout
    assert lenient.returncode == 0, lenient.stderr


@pytest.mark.slow
def test_sigint_stops_gracefully_and_still_writes_the_summary(tmp_path):
    # ~30 ms per decode step and 4000-token answers: nothing finishes before the stop
    slow = SimConfig(hardware="l4", model="llama-3.1-8b-fp8")
    result_json, recording = tmp_path / "stopped.json", tmp_path / "stopped.rwrec"
    with serving_sim(slow) as sim:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rampwatch.app.cli",
                "run",
                "random",
                "--headless",
                "--target",
                sim.url,
                "--duration",
                "120",
                "--start-rps",
                "5",
                "--end-rps",
                "5",
                "--stop-grace",
                "1",
                "--result-json",
                str(result_json),
                "--save-detailed",
                "--record",
                str(recording),
                "--set",
                "workload.output_tokens=4000",
                "--set",
                "workload.input_tokens=32",
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            banner = proc.stdout.readline()
            assert banner.startswith("rampwatch run:"), banner + proc.stderr.read()
            time.sleep(2.5)
            sent_signal_at = time.monotonic()
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=20)
            stopped_in = time.monotonic() - sent_signal_at
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, err
    assert 1.0 <= stopped_in < 8.0
    assert "Traceback" not in err and "stopping: no new requests" in err
    assert "Serving Benchmark Result" in out and f"result JSON: {result_json}" in out
    result = json.loads(result_json.read_text())
    assert 8 <= result["num_prompts"] <= 20  # 5/s for ~2.5 s, none after the signal
    assert result["completed"] == 0
    assert all(e.startswith("cancelled") for e in result["errors"])
    from rampwatch.record.reader import open_recording

    with open_recording(recording) as rec:
        assert len(rec.requests) == result["num_prompts"]
        assert {r.error_class for r in rec.requests} == {"cancelled"}
        assert any(e.kind == "stop" and e.data.get("interrupted") for e in rec.events)


def test_progress_line_averages_rates_over_the_interval_and_skips_the_filling_second():
    from rampwatch.app.session import progress_line
    from rampwatch.core.timeline import SERIES_NAMES, RunHeader, Snapshot

    nan = float("nan")
    series = {name: [nan] * 6 for name in SERIES_NAMES}
    series["sent_rps"] = [1.0, 2.0, 4.0, 6.0, 8.0, 0.5]  # the last second is still filling
    series["completed_rps"] = [1.0, 2.0, 4.0, nan, 8.0, 0.5]
    series["ttft_p50"] = [0.010, 0.020, 0.030, 0.040, 0.050, 0.900]
    snap = Snapshot(
        t=6.2,
        header=None,
        state="draining",
        target_rps=0.0,
        times=[0, 1, 2, 3, 4, 5],
        series=series,
        in_flight=7,
        events=[],
        summary={},
        server_metrics_available=False,
    )
    line = progress_line(snap, window_s=3)
    assert line.split("]")[1].split()[0] == "draining"
    assert "sent 6.0 " in line  # mean of 4, 6, 8
    assert "done 6.0 " in line  # mean of 4 and 8 (no data in one second)
    assert "in-flight 7" in line and "TTFT p50 50 ms" in line
    assert "sent 8.0 " in progress_line(snap, window_s=1)
    assert "server" not in line
    assert "client queue" not in line  # no requests waiting for a slot: not shown
    series["client_queued"] = [0.0, 0.0, 3.0, 5.0, 12.0, 14.0]
    assert "| client queue 12 |" in progress_line(snap, window_s=3)  # the latest complete second
    assert "sessions" not in line  # not a session workload
    series["sessions_active"] = [0.0] * 6  # what a run without sessions ticks
    assert "sessions" not in progress_line(snap, window_s=3)
    series["sessions_active"] = [0.0, 2.0, 5.0, 9.0, 11.0, 12.0]
    sessions = RunHeader("0", 0.0, "http://x", "m", "s", scenario={"workload": {"sessions": {"turns": 3}}})
    line = progress_line(dataclasses.replace(snap, header=sessions), window_s=3)
    assert "| client queue 12 | sessions 11 active | out" in line


@pytest.mark.parametrize("interval", [1, 5, 10])
def test_a_progress_line_from_the_last_bins_is_the_one_from_the_whole_series(interval):
    """Headless progress asks for the newest bins only (a day's series as lists costs ~1 s):
    the line is the same as from the whole series."""
    from rampwatch.app.session import PROGRESS_SPARE_BINS, progress_line
    from rampwatch.core.figures.series import SeriesBuilder
    from tests.synthetic import SyntheticRun, play_synthetic

    builder = SeriesBuilder()
    play_synthetic(SyntheticRun(duration_s=40, start_rps=5, end_rps=15, seed=2), builder, finish=False)
    now = builder.now - 0.3  # inside a second that is still filling
    last = builder.snapshot(now, last_bins=interval + PROGRESS_SPARE_BINS)
    assert len(last.times) == interval + PROGRESS_SPARE_BINS < len(builder.snapshot(now).times)
    assert progress_line(last, interval) == progress_line(builder.snapshot(now), interval)


def test_a_recording_that_failed_mid_run_is_one_line_and_a_failed_exit(tmp_path, capsys):
    from types import SimpleNamespace

    from rampwatch.app.run_config import RunConfig
    from rampwatch.app.session import PreparedRun, finish_run
    from rampwatch.core.timeline import RequestRecord, RunHeader
    from rampwatch.loadgen.run.result import RequestCounts, RunResult
    from rampwatch.record.writer import RecordingWriter

    header = RunHeader(
        rampwatch_version="0", started_at_unix=0.0, target="http://127.0.0.1:1", model="m", scenario_name="random"
    )
    record = RequestRecord(
        id=0,
        scheduled_at=0.0,
        sent_at=0.0,
        end_at=0.5,
        first_token_at=0.1,
        chunk_times=[0.3, 0.5],
        prompt_tokens=4,
        completion_tokens=3,
    )
    recording = tmp_path / "r.rwrec"  # what was written before the disk filled: read back once it is whole
    writer = RecordingWriter(recording, flush_interval_s=None)
    writer.on_start(header)
    writer.on_request(record)
    writer.close(1.0)
    result = RunResult(
        duration_s=1.0,
        requests=[],
        samples=[],
        events=[],
        header=header,
        recording_error=str(OSError(28, "No space left on device")),
        counts=RequestCounts.of([record]),
    )
    prepared = PreparedRun(
        run=SimpleNamespace(scenario=SimpleNamespace(slo=None)),
        config=RunConfig("random"),
        recording_path=recording,
    )
    assert finish_run(prepared, result) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "r.rwrec" in err[0] and "No space left on device" in err[0]
    result.recording_error = None
    assert finish_run(prepared, result) == 0


@pytest.mark.slow
def test_no_record_still_reads_the_figures_back_from_a_scratch_recording_it_removes(sim_url, tmp_path):
    """--no-record: the records go to a scratch recording in a temporary directory, read
    back for the exact figures and the result JSON, then removed."""
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    result_json = tmp_path / "result.json"
    proc = rampwatch(
        "random", "--headless", "--target", sim_url, "--duration", "2", "--start-rps", "5", "--end-rps", "5",
        "--set", "workload.output_tokens=8", "--no-record", "--result-json", str(result_json), "--save-detailed",
        env={**os.environ, "TMPDIR": str(scratch_root)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(result_json.read_text())
    assert result["completed"] == result["num_prompts"] == len(result["ttfts"]) >= 8
    assert "live figures" not in proc.stdout and "recording:" not in proc.stdout
    assert list(scratch_root.iterdir()) == []  # the scratch recording is gone


@pytest.mark.parametrize("recording_failed", [True, False])
def test_without_a_readable_recording_the_summary_is_the_live_one_said_so_and_a_failed_exit(
    tmp_path, capsys, recording_failed
):
    """A run that kept no records (the default) and whose recording failed mid-run, or
    cannot be read back (here: it is not there): the live bounded summary, marked, the
    result JSON from it, and one line saying why, exit 1."""
    from types import SimpleNamespace

    from rampwatch.app.run_config import RunConfig
    from rampwatch.app.session import PreparedRun, finish_run
    from rampwatch.core.figures.summary import RequestBlock, SummaryBuilder
    from rampwatch.core.timeline import RequestRecord, RunHeader
    from rampwatch.loadgen.run.result import RequestCounts, RunResult

    header = RunHeader(
        rampwatch_version="0", started_at_unix=0.0, target="http://127.0.0.1:1", model="m", scenario_name="random"
    )
    records = [
        RequestRecord(id=i, scheduled_at=0.0, sent_at=0.0, end_at=0.5, first_token_at=0.1 + i / 100,
                      chunk_times=[0.3, 0.5], prompt_tokens=4, completion_tokens=3)
        for i in range(5)
    ]  # fmt: skip
    live = SummaryBuilder(bounded=True)
    live.add_block(RequestBlock.from_records(records))
    result = RunResult(
        duration_s=1.0,
        requests=[],
        samples=[],
        events=[],
        header=header,
        recording_error="stopped at 0.4 s of the run: No space left on device" if recording_failed else None,
        counts=RequestCounts.of(records),
        live_summary=live.build(header),
    )
    prepared = PreparedRun(
        run=SimpleNamespace(scenario=SimpleNamespace(slo=None)),
        config=RunConfig("random"),
        recording_path=tmp_path / "r.rwrec",
        result_json_path=tmp_path / "r.json",
    )
    out = io.StringIO()
    assert finish_run(prepared, result, out=out) == 1
    assert "Successful requests:                     5" in out.getvalue()
    assert "(live figures: percentiles within 1 %, not exact)" in out.getvalue()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "r.rwrec" in err[0]
    assert ("No space left on device" in err[0]) == recording_failed
    assert json.loads((tmp_path / "r.json").read_text())["completed"] == 5


@pytest.mark.slow
def test_the_drain_policy_is_shown_before_the_run_and_its_cancellations_are_counted_not_interrupting(tmp_path):
    slow = SimConfig(hardware="l4", model="llama-3.1-8b-fp8", served_model_name="tiny")
    with serving_sim(slow) as sim:
        proc = rampwatch(
            "random",
            "--headless",
            "--target",
            sim.url,
            "--duration",
            "1",
            "--start-rps",
            "8",
            "--end-rps",
            "8",
            "--set",
            "workload.output_tokens=2000",  # a minute's answers: the drain would wait that long
            "--drain",
            "cap:1",
            "--result-json",
            str(tmp_path / "r.json"),
            "--record",
            str(tmp_path / "r.rwrec"),
        )
    assert proc.returncode == 0, proc.stderr  # the plan, not an interrupted run
    lines = proc.stdout.splitlines()
    plan = next(i for i, line in enumerate(lines) if line.startswith("drain: "))
    assert lines[plan] == "drain: at most 1 s after the schedule, then cancel what is left (--drain)"
    assert plan < next(i for i, line in enumerate(lines) if line.startswith("Successful requests:"))
    result = json.loads((tmp_path / "r.json").read_text())
    assert (
        result["rampwatch_cancelled"] >= 4
        and result["completed"] + result["rampwatch_cancelled"] == result["num_prompts"]
    )
    assert (
        f"the drain policy (cap:1) cancelled {result['rampwatch_cancelled']:,} requests still in flight" in proc.stderr
    )


def test_a_reasoning_runs_progress_line_has_its_time_to_first_answer():
    from rampwatch.app.session.headless import progress_line
    from tests.tui.fakes import fake_snapshot
    from tests.tui.reasoning_fakes import fake_reasoning_snapshot

    line = progress_line(fake_reasoning_snapshot(95.0))
    ttft, ttfa = line.split(" | TTFA p50 ")
    assert "TTFT p50" in ttft and " ms p99 " in ttfa.split(" | ")[0]
    assert int(ttfa.split(" ms")[0]) > int(ttft.split("TTFT p50 ")[1].split(" ms")[0])
    assert "TTFA" not in progress_line(fake_snapshot(95.0))
