"""Trace replay: the three trace formats, windows and local rates, the trace schedule
(speed, speed ramps, live changes) and the requests built from trace rows."""

from __future__ import annotations

import json
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.prompts import SEPARATOR
from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.loadgen.workload.schedule_spec import check_schedule
from rampwatch.loadgen.workload.tokenizers import load_tokenizer
from rampwatch.loadgen.workload.trace_replay import TraceRequests, TraceSchedule, build_trace_schedule
from rampwatch.loadgen.workload.traces import load_trace, local_rate, parse_azure_time, window

SIM = load_tokenizer(None)
SAMPLES = Path(__file__).resolve().parents[3] / "scenarios" / "traces"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def all_times(schedule) -> list[float]:
    out = []
    while (t := schedule.next_send_time()) is not None:
        out.append(t)
        assert len(out) <= 1_000_000
    return out


# --------------------------------------------------------------------------- parsing


def test_mooncake_rows_are_read_in_seconds_with_their_hash_ids(tmp_path):
    path = write(
        tmp_path,
        "t.jsonl",
        jsonl(
            [
                {"timestamp": 1000, "input_length": 700, "output_length": 5, "hash_ids": [4, 5]},
                {"timestamp": 1250, "input_length": 30, "output_length": 0, "hash_ids": []},
                {"timestamp": 3500, "input_length": 1100, "output_length": 9, "hash_ids": [4, 5, 6]},
            ]
        ),
    )
    trace = load_trace(path, "mooncake")
    assert trace.times_s.tolist() == [0.0, 0.25, 2.5]  # ms, from the first row
    assert trace.input_tokens.tolist() == [700, 30, 1100] and trace.output_tokens.tolist() == [5, 0, 9]
    assert [trace.row_hash_ids(i).tolist() for i in range(3)] == [[4, 5], [], [4, 5, 6]]


def test_azure_rows_are_read_from_the_csv_header_in_any_column_order(tmp_path):
    path = write(
        tmp_path,
        "t.csv",
        """
        GeneratedTokens,TIMESTAMP,ContextTokens
        12,2023-11-16 18:15:46.6805900,374
        3,2023-11-16 18:15:47.0000000,96

        40,2023-11-16 18:16:46.6805900,1200
        """,
    )
    trace = load_trace(path, "azure")
    assert trace.times_s.tolist() == pytest.approx([0.0, 0.31941, 60.0], abs=1e-6)
    assert trace.input_tokens.tolist() == [374, 96, 1200] and trace.output_tokens.tolist() == [12, 3, 40]
    assert len(trace.hash_ids) == 0


def test_plain_jsonl_rows_carry_lengths_or_their_own_prompt(tmp_path):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}]
    path = write(
        tmp_path,
        "t.jsonl",
        jsonl(
            [
                {"time": 0.5, "input_tokens": 40, "output_tokens": 8},
                {"time": 1.0, "prompt": "hello there", "output_tokens": 4},
                {"time": 2.0, "messages": messages, "output_tokens": 6},
            ]
        ),
    )
    trace = load_trace(path, "jsonl")
    assert trace.times_s.tolist() == [0.0, 0.5, 1.5]
    assert trace.input_tokens.tolist() == [40, 0, 0] and trace.output_tokens.tolist() == [8, 4, 6]
    assert sorted(trace.prompts) == [1, 2]
    assert trace.prompts[1].prompt == "hello there" and trace.prompts[2].messages == messages


@pytest.mark.parametrize(
    ("name", "fmt", "rows"),
    [("mooncake-sample.jsonl", "mooncake", 32), ("azure-sample.csv", "azure", 40), ("jsonl-sample.jsonl", "jsonl", 24)],
)
def test_the_shipped_samples_parse(name, fmt, rows):
    trace = load_trace(SAMPLES / name, fmt)
    assert len(trace) == rows and trace.times_s[0] == 0 and 2 < trace.span_s < 8
    assert bool(np.all(np.diff(trace.times_s) >= 0))


def test_the_mooncake_sample_reuses_prefix_blocks():
    trace = load_trace(SAMPLES / "mooncake-sample.jsonl", "mooncake")
    firsts = [int(trace.row_hash_ids(i)[0]) for i in range(len(trace))]
    assert len(set(firsts)) < len(firsts) / 4  # rows start with a few shared blocks


@pytest.mark.parametrize(
    ("fmt", "text", "expected"),
    [
        ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1,', ":2: not valid JSON"),
        ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n[1, 2]\n', ":2: expected a JSON object"),
        ("mooncake", '{"input_length": 5, "output_length": 1}\n', ":1: timestamp: required field is missing"),
        ("mooncake", '{"timestamp": "soon", "input_length": 5, "output_length": 1}\n', ":1: timestamp: expected"),
        ("mooncake", '\n\n{"timestamp": 0, "input_length": -5, "output_length": 1}\n', ":3: input_length: expected"),
        ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 2.5}\n', ":1: output_length: expected"),
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": 3}\n',
            ":1: hash_ids: expected",
        ),
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, "x"]}\n',
            ":1: hash_ids[1]: expected an integer, got 'x'",
        ),
        (
            "mooncake",
            '{"timestamp": 0, "input_length": 9223372036854775807, "output_length": 1}\n',
            ":1: input_length: expected a token count (an integer 0–2147483647), got 9223372036854775807",
        ),
        ("mooncake", '{"timestamp": 1e300, "input_length": 3, "output_length": 1}\n', ":1: timestamp: expected"),
        ("jsonl", '{"time": 0, "output_tokens": 3}\n', ":1: input_tokens: required field is missing"),
        ("jsonl", '{"time": -1, "input_tokens": 3, "output_tokens": 3}\n', ":1: time: expected seconds"),
        ("jsonl", '{"time": 0, "prompt": "", "output_tokens": 3}\n', ":1: prompt: expected non-empty text"),
        ("jsonl", '{"time": 0, "messages": [{"role": "x"}], "output_tokens": 3}\n', ":1: messages: expected"),
        ("jsonl", '{"time": 0, "prompt": "a", "messages": [], "output_tokens": 3}\n', ":1: prompt, messages:"),
        ("azure", "TIMESTAMP,ContextTokens\n", ":1: GeneratedTokens: column missing from the CSV header"),
        (
            "azure",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,4,5\nyesterday,4,5\n",
            ":3: TIMESTAMP:",
        ),
        (
            "azure",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,4.5,5\n",
            ":2: ContextTokens: expected",
        ),
        ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,4\n", ":2: expected 3 columns, got 2"),
        (
            "azure",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,4,99999999999\n",
            ":2: GeneratedTokens:",
        ),
    ],
)
def test_a_malformed_line_names_the_file_the_line_and_the_field(tmp_path, fmt, text, expected):
    path = tmp_path / ("t.csv" if fmt == "azure" else "t.jsonl")
    path.write_text(text)
    with pytest.raises(UserError) as err:
        load_trace(path, fmt)
    message = str(err.value)
    assert message.startswith(f"{path}:") and expected in message and "\n" not in message


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("t.jsonl", "", "no rows in this mooncake trace"),
        ("t.jsonl", b"\xff\xfe{}", ":1: not valid JSON"),
        ("missing.jsonl", None, "trace file not found"),
    ],
)
def test_unreadable_traces_are_one_line(tmp_path, name, text, expected):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    with pytest.raises(UserError, match=expected):
        load_trace(path, "mooncake")


def test_rows_out_of_order_are_replayed_in_time_order_keeping_their_blocks(tmp_path):
    rows = [
        {"timestamp": 300, "input_length": 1, "output_length": 3, "hash_ids": [3]},
        {"timestamp": 100, "input_length": 1, "output_length": 1, "hash_ids": [1, 11]},
        {"timestamp": 300, "input_length": 1, "output_length": 4, "hash_ids": []},
        {"timestamp": 200, "input_length": 1, "output_length": 2, "hash_ids": [2]},
    ]
    trace = load_trace(write(tmp_path, "t.jsonl", jsonl(rows)), "mooncake")
    assert trace.times_s.tolist() == pytest.approx([0.0, 0.1, 0.2, 0.2])
    assert trace.output_tokens.tolist() == [1, 2, 3, 4]  # ties keep the file's order
    assert [trace.row_hash_ids(i).tolist() for i in range(4)] == [[1, 11], [2], [3], []]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2023-11-16 18:15:46", 1700158546.0),
        ("2023-11-16 18:15:46.6805900", 1700158546.68059),
        ("2023-11-16T18:15:46.5Z", 1700158546.5),
        ("2023-11-16 18:15:46.123+01:00", 1700154946.123),
    ],
)
def test_azure_timestamps(text, seconds):
    assert parse_azure_time(text) == pytest.approx(seconds, abs=1e-6)


@pytest.mark.slow
def test_a_large_trace_loads_into_compact_columns(tmp_path):
    n = 20_000
    rng = np.random.default_rng(0)
    lines = [
        f'{{"timestamp": {i * 3}, "input_length": {int(rng.integers(1, 8000))}, "output_length": 20, '
        f'"hash_ids": {list(range(i, i + 10))}}}\n'
        for i in range(n)
    ]
    path = tmp_path / "big.jsonl"
    path.write_text("".join(lines))
    tracemalloc.start()
    trace = load_trace(path, "mooncake")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(trace) == n and len(trace.hash_ids) == 10 * n
    # 8 bytes a value: 14 values a row (3 columns, an offset, 10 hash ids) is 112 bytes
    assert trace.nbytes == 112 * n + 8
    assert peak < 4 * trace.nbytes  # growing arrays, no object per row


# --------------------------------------------------------------------------- windows, rates


def test_a_window_replays_part_of_the_trace_from_its_start(tmp_path):
    rows = [{"timestamp": t, "input_length": 1, "output_length": 1, "hash_ids": [t]} for t in range(0, 10_000, 1000)]
    trace = load_trace(write(tmp_path, "t.jsonl", jsonl(rows)), "mooncake")
    part = window(trace, start_s=2.5, duration_s=4.0)  # rows at 3, 4, 5, 6 s
    assert part.times_s.tolist() == [0.5, 1.5, 2.5, 3.5]
    assert [part.row_hash_ids(i).tolist() for i in range(4)] == [[3000], [4000], [5000], [6000]]
    assert window(trace, start_s=8).times_s.tolist() == [0.0, 1.0]
    with pytest.raises(UserError, match=r"the window 20–25 s holds no row of this trace \(its rows span 0–9 s\)"):
        window(trace, start_s=20, duration_s=5)


@pytest.mark.parametrize(
    ("times", "at", "window_s", "rate"),
    [
        (np.arange(0, 100, 0.5), 50.0, 10.0, 2.0),  # 2 rows a second everywhere
        (np.arange(0, 100, 0.5), 0.0, 10.0, 2.0),  # clipped to the trace: [0, 5) s
        (np.arange(0, 100, 0.5), 99.5, 10.0, 11 / 5),  # [94.5, 99.5] s: the last row counts
        (np.concatenate([np.arange(0, 10, 1.0), np.arange(50, 60, 0.25)]), 30.0, 10.0, 0.0),  # a gap
        (np.concatenate([np.arange(0, 10, 1.0), np.arange(50, 60, 0.25)]), 55.0, 10.0, 40 / 9.75),
        (np.zeros(5), 0.0, 10.0, 5.0),  # all at once
    ],
)
def test_local_rate(times, at, window_s, rate):
    assert local_rate(times, at, window_s) == pytest.approx(rate)


# --------------------------------------------------------------------------- schedule


def trace_spec(path: Path, fmt: str = "mooncake", **extra) -> dict:
    spec, problems = check_schedule({"kind": "trace", "path": str(path), "format": fmt, **extra})
    assert not problems
    return spec


def uniform_trace(tmp_path: Path, n: int, gap_ms: int) -> Path:
    rows = [{"timestamp": i * gap_ms, "input_length": 8, "output_length": 2} for i in range(n)]
    return write(tmp_path, "uniform.jsonl", jsonl(rows))


@pytest.mark.parametrize("speed", [1, 4, 0.5])
def test_send_times_are_the_trace_times_over_the_speed(speed):
    schedule = build_trace_schedule(trace_spec(SAMPLES / "mooncake-sample.jsonl", speed=speed))
    trace = load_trace(SAMPLES / "mooncake-sample.jsonl", "mooncake")
    times = all_times(schedule)
    assert times == pytest.approx((trace.times_s / speed).tolist(), abs=1e-9)
    assert schedule.planned_duration_s == pytest.approx(trace.span_s / speed)


def test_a_speed_ramp_warps_time_and_keeps_every_row_in_order(tmp_path):
    path = uniform_trace(tmp_path, 1001, 100)  # 10 rows a second for 100 s
    schedule = build_trace_schedule(trace_spec(path, speed={"start": 1, "end": 4}))
    assert schedule.current_rate(0.0) == pytest.approx(10.0)
    times = all_times(schedule)
    assert len(times) == 1001 and times == sorted(times)
    assert times[-1] == pytest.approx(2 * 100 / (1 + 4))  # the mean speed is 2.5
    # the speed grows linearly in wall time, so does the rate: 10 req/s → 40 req/s
    end = times[-1]
    first = sum(1 for t in times if t < end / 10) / (end / 10)
    last = sum(1 for t in times if t >= 0.9 * end) / (end / 10)
    assert first == pytest.approx(10 * (1 + 0.15), rel=0.05) and last == pytest.approx(10 * (4 - 0.15), rel=0.05)


def test_the_target_rate_is_the_local_rate_times_the_speed(tmp_path):
    rows = [{"timestamp": int(t * 1000), "input_length": 8, "output_length": 2} for t in np.arange(0, 20, 0.5)]
    rows += [{"timestamp": int(t * 1000), "input_length": 8, "output_length": 2} for t in np.arange(20, 40, 0.1)]
    schedule = build_trace_schedule(trace_spec(write(tmp_path, "t.jsonl", jsonl(rows)), speed=2))
    assert schedule.current_rate(5.0) == pytest.approx(2 * 2.0)  # trace second 10: 2 rows/s
    assert schedule.current_rate(15.0) == pytest.approx(2 * 10.0, rel=0.02)  # trace second 30: 10 rows/s


def test_live_rate_changes_scale_the_speed_and_hold_keeps_it(tmp_path):
    path = uniform_trace(tmp_path, 601, 100)  # 10 rows a second for 60 s
    schedule: TraceSchedule = build_trace_schedule(trace_spec(path, speed={"start": 1, "end": 3}))
    times = []
    while (t := schedule.next_send_time()) < 5.0:  # the runner's loop until 5 s
        times.append(t)
    # speed 1 + 2c/30 over the 30 s ramp: trace second 4.9 is where c + c²/30 = 4.9
    assert times[49] == pytest.approx((-30 + (900 + 4 * 4.9 * 30) ** 0.5) / 2)
    event = schedule.set_rate(5.0, 40.0)  # at 10 rows a trace second: speed 4
    assert event.data["speed"] == pytest.approx(4.0) and event.data["after_rps"] == 40.0
    assert event.data["before_rps"] == pytest.approx(10 * schedule._speeds.rate(5.0), rel=0.05)
    after = [schedule.next_send_time() for _ in range(20)]  # the one handed out after 5 s re-timed first
    assert after[0] == pytest.approx(5.0 + (5.9 - (5.0 + 25 / 30)) / 4)
    assert np.diff(after) == pytest.approx(0.1 / 4)  # rows 0.1 trace seconds apart, at speed 4
    assert schedule.current_rate(5.2) == pytest.approx(40.0)
    assert schedule.state == "holding"
    resumed = schedule.resume(6.0)  # the speed ramp goes on from where it was
    assert resumed.data["speed"] == pytest.approx(schedule._speeds.rate(5.0), rel=1e-6)
    hold = schedule.hold(7.0)
    assert hold.data["before_rps"] == hold.data["after_rps"] == pytest.approx(schedule.current_rate(7.0))
    step = schedule.step_rate(8.0, 10.0)
    assert step.data["after_rps"] == pytest.approx(hold.data["after_rps"] + 10.0)
    rest = all_times(schedule)
    assert len(times) + len(after) + len(rest) == 601  # nothing dropped


def test_held_at_zero_for_a_server_restart_the_trace_pauses_and_goes_on(tmp_path):
    path = uniform_trace(tmp_path, 101, 100)
    schedule = build_trace_schedule(trace_spec(path))
    first = [schedule.next_send_time() for _ in range(30)]
    assert schedule.planned_end_s(3.0) == pytest.approx(10.0)
    schedule.set_rate(3.0, 0.0)
    assert schedule.next_send_time() == float("inf")
    assert schedule.planned_end_s(8.0) == pytest.approx(15.0)  # the 7 s left move on while paused
    schedule.set_rate(10.0, 10.0)  # the rate before, at the same place in the trace
    assert schedule.planned_end_s(10.0) == pytest.approx(17.0)
    t = schedule.next_send_time()
    assert t == pytest.approx(10.0 + 0.1 * 30 - 3.0, abs=1e-9) and len(first) + 1 + len(all_times(schedule)) == 101


def test_a_rate_set_inside_a_gap_of_the_trace_uses_its_mean_rate(tmp_path):
    rows = [{"timestamp": t, "input_length": 8, "output_length": 2} for t in (0, 1000, 2000, 60_000, 61_000)]
    schedule = build_trace_schedule(trace_spec(write(tmp_path, "t.jsonl", jsonl(rows))))
    assert [schedule.next_send_time() for _ in range(3)] == [0.0, 1.0, 2.0]
    assert schedule.next_send_time() == 60.0
    assert schedule.current_rate(30.0) == 0.0  # nothing within 5 trace seconds of second 30
    event = schedule.set_rate(30.0, 1.0)  # the trace's mean rate is 5 rows in 61 s
    assert event.data["speed"] == pytest.approx(61 / 5)
    assert schedule.next_send_time() == pytest.approx(30.0 + 30.0 / (61 / 5))


# --------------------------------------------------------------------------- requests


def mooncake_rows(tmp_path: Path, rows: list[dict], prompt_format: str = "text") -> RequestFactory:
    """A factory for these rows, with prefix blocks of 16 tokens."""
    path = write(tmp_path, "t.jsonl", jsonl(rows))
    scenario_file = write(
        tmp_path,
        "s.yaml",
        f"""
        schedule: {{kind: trace, path: {path.name}, format: mooncake, block_tokens: 16}}
        workload: {{ignore_eos: false, prompt_format: {prompt_format}}}
        """,
    )
    return RequestFactory(load_scenario(str(scenario_file)), SIM)


@pytest.mark.parametrize("prompt_format", ["text", "token_ids"])
def test_rows_sharing_hash_ids_share_a_byte_identical_prefix(tmp_path, prompt_format):
    rows = [
        {"timestamp": 0, "input_length": 40, "output_length": 3, "hash_ids": [7, 8, 9]},  # 2 blocks + 8 tokens
        {"timestamp": 1, "input_length": 37, "output_length": 0, "hash_ids": [7, 8, 10]},
        {"timestamp": 2, "input_length": 40, "output_length": 3, "hash_ids": [7, 11, 12]},
        {"timestamp": 3, "input_length": 40, "output_length": 3, "hash_ids": [7, 8, 9]},
    ]
    factory = mooncake_rows(tmp_path, rows, prompt_format)
    requests = [factory.next_request() for _ in rows]
    prompts = [r.payload["prompt"] for r in requests]

    def tokens(p):
        return p if isinstance(p, list) else SIM.encode(p)

    assert [len(tokens(p)) for p in prompts] == [r.expected_prompt_tokens for r in requests] == [40, 37, 40, 40]
    assert [r.max_tokens for r in requests] == [3, 1, 3, 3]  # no output asks for one token
    assert [r.extra["prefix_blocks"] for r in requests] == [2, 2, 2, 2]
    assert all("ignore_eos" not in r.payload for r in requests)
    if prompt_format == "text":
        prefix = " ".join(factory._trace.block(h)[0] for h in (7, 8))
        assert prompts[0].startswith(prefix + SEPARATOR) and prompts[1].startswith(prefix + SEPARATOR)
        assert not prompts[2].startswith(prefix)
        assert prompts[2].startswith(factory._trace.block(7)[0] + " ")
    else:
        assert prompts[0][:32] == prompts[1][:32] and prompts[0][:16] == prompts[2][:16]
        assert prompts[0][16:32] != prompts[2][16:32]
    assert prompts[0] != prompts[3]  # the tail after the shared blocks is each row's own


def test_block_text_is_the_same_in_every_factory_and_built_once(tmp_path, monkeypatch):
    import rampwatch.loadgen.workload.trace_replay as replay

    built: list[int] = []
    synth = replay.synth_counted
    monkeypatch.setattr(replay, "synth_counted", lambda tok, n, rng: built.append(n) or synth(tok, n, rng))
    rows = [{"timestamp": i, "input_length": 32, "output_length": 1, "hash_ids": [1, 2]} for i in range(20)]
    factory = mooncake_rows(tmp_path, rows)
    first = [factory.next_request().payload["prompt"] for _ in rows]
    assert built.count(16) == 2  # two blocks, each built once; no tails (the blocks fill the rows)
    assert len(set(first)) == 1
    again = mooncake_rows(tmp_path, rows).next_request().payload["prompt"]
    assert again == first[0]


def test_the_block_cache_is_bounded(monkeypatch, tmp_path):
    import rampwatch.loadgen.workload.trace_replay as replay

    monkeypatch.setattr(replay, "BLOCK_CACHE_SIZE", 3)
    trace = load_trace(SAMPLES / "mooncake-sample.jsonl", "mooncake")
    requests = TraceRequests(trace, 512, "completions", False, 0, SIM)
    for h in range(10):
        requests.block(h)
    assert list(requests._blocks) == [7, 8, 9]


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_jsonl_prompts_and_messages_are_sent_as_given(tmp_path, endpoint):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "why is the sky blue"}]
    rows = [
        {"time": 0, "prompt": "say hello", "output_tokens": 4},
        {"time": 1, "messages": messages, "output_tokens": 5},
        {"time": 2, "input_tokens": 12, "output_tokens": 6},
    ]
    path = write(tmp_path, "t.jsonl", jsonl(rows))
    scenario_file = write(
        tmp_path,
        "s.yaml",
        f"""
        endpoint: {endpoint}
        schedule: {{kind: trace, path: {path}, format: jsonl}}
        workload: {{extra_body: {{temperature: 0}}}}
        """,
    )
    factory = RequestFactory(load_scenario(str(scenario_file)), SIM)
    a, b, c = (factory.next_request() for _ in rows)
    assert [r.max_tokens for r in (a, b, c)] == [4, 5, 6]
    assert all(r.payload["temperature"] == 0 and r.payload["ignore_eos"] is True for r in (a, b, c))
    if endpoint == "chat":
        assert a.payload["messages"] == [{"role": "user", "content": "say hello"}]
        assert b.payload["messages"] == messages and b.payload["max_completion_tokens"] == 5
        assert c.expected_prompt_tokens == 12 == len(SIM.encode(c.payload["messages"][0]["content"]))
    else:
        assert a.payload["prompt"] == "say hello" and a.expected_prompt_tokens == 2
        assert b.payload["prompt"] == "system: be brief\n\nuser: why is the sky blue"
        assert c.expected_prompt_tokens == 12 == len(SIM.encode(c.payload["prompt"]))


# --------------------------------------------------------------------------- scenarios


def test_the_shipped_trace_scenario_replays_its_sample():
    scenario = load_scenario("trace-replay")
    assert Path(scenario.schedule_spec["path"]) == SAMPLES / "mooncake-sample.jsonl"
    factory = RequestFactory(scenario, SIM)
    trace = load_trace(SAMPLES / "mooncake-sample.jsonl", "mooncake")
    for i in range(len(trace)):
        request = factory.next_request()
        assert request.expected_prompt_tokens == trace.input_tokens[i] == len(SIM.encode(request.payload["prompt"]))
        assert request.max_tokens == trace.output_tokens[i]


@pytest.mark.parametrize(
    ("workload", "schedule", "expected"),
    [
        (
            "{input_tokens: 100}",
            "",
            "s.yaml:3: workload.input_tokens: cannot be combined with schedule.kind trace "
            "(the trace gives each request's prompt and lengths)",
        ),
        ("{documents: {count: 2, tokens: 10}}", "", "s.yaml:3: workload.documents: cannot be combined"),
        ("{sessions: {turns: 2}}", "", "s.yaml:3: workload.sessions: cannot be combined with schedule.kind trace"),
        ("{}", ", speed: 0", "s.yaml:2: schedule.speed: expected a factor > 0"),
        ("{}", ", speed: {start: 1}", "s.yaml:2: schedule.speed: expected a factor > 0"),
        ("{}", ", start_s: -1", "s.yaml:2: schedule.start_s: expected a number >= 0"),
        ("{}", ", start_s: 3600", "the window 3600 s on holds no row of this trace"),
        ("{}", ", format: parquet", "s.yaml:2: schedule.format: expected one of mooncake, azure, jsonl"),
    ],
)
def test_trace_scenario_problems_are_one_line(tmp_path, workload, schedule, expected):
    (tmp_path / "t.jsonl").write_text(jsonl([{"timestamp": 0, "input_length": 3, "output_length": 1}]))
    text = f"name: s\nschedule: {{kind: trace, path: t.jsonl, format: mooncake{schedule}}}\nworkload: {workload}\n"
    if "format: parquet" in text:
        text = text.replace("format: mooncake, format: parquet", "format: parquet")
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(UserError) as err:
        load_scenario(str(tmp_path / "s.yaml"))
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_a_missing_trace_file_and_a_bad_line_are_named(tmp_path):
    (tmp_path / "s.yaml").write_text("schedule: {kind: trace, path: nowhere.jsonl, format: mooncake}\nworkload: {}\n")
    with pytest.raises(UserError, match=r"s.yaml:1: schedule.path: trace file not found: nowhere.jsonl"):
        load_scenario(str(tmp_path / "s.yaml"))
    (tmp_path / "nowhere.jsonl").write_text(
        '{"timestamp": 0, "input_length": 3, "output_length": 1}\n{"timestamp": 1}\n'
    )
    with pytest.raises(UserError, match=r"nowhere.jsonl:2: input_length: required field is missing"):
        load_scenario(str(tmp_path / "s.yaml"))


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"duration": 30}, "--duration: a trace schedule lasts as long as its trace; replay part of it with"),
        ({"start_rps": 3}, "--start-rps: a trace schedule takes its rate from its trace; scale it with"),
        ({"end_rps": 3}, "--end-rps: a trace schedule takes its rate from its trace"),
    ],
)
def test_rate_and_duration_flags_on_a_trace_say_what_to_use_instead(flags, expected):
    with pytest.raises(UserError, match=expected):
        load_scenario("trace-replay", flags=flags)
