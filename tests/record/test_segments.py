"""Configuration segments: a run split at its ``config`` events, each segment's figures
the one summary of the requests sent within it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from rampwatch.core.figures.segments import (
    ConfigSegment,
    SegmentSummaries,
    argument_rows,
    config_event,
    config_segments,
    segment_index,
    segment_table,
)
from rampwatch.core.figures.summary import Summary, summarise_requests
from rampwatch.core.timeline import Event, RequestRecord, RunHeader, ServerSample
from rampwatch.record.analysis import configuration_segments
from rampwatch.record.reader import open_recording
from rampwatch.record.writer import RecordingWriter
from tests.record.helpers import CaptureSink
from tests.record.test_commands import rampwatch
from tests.synthetic import SyntheticRun, play_synthetic


def segment_summaries(
    header: RunHeader | None,
    segments: Sequence[ConfigSegment],
    records: Sequence[RequestRecord],
    samples: Sequence[ServerSample],
    events: Sequence[Event],
    **builder_options: Any,
) -> list[Summary]:
    """Each segment's ``Summary`` from requests held in memory, to check the recording's against."""
    accumulator = SegmentSummaries(segments, **builder_options)
    accumulator.add_records(records)
    return accumulator.build(header, samples, events)


FIRST = "vllm serve tiny --max-num-seqs 8"
SECOND = "vllm serve tiny --max-num-seqs 64"
THIRD = "vllm serve tiny --max-num-seqs 64 --enforce-eager"
CONFIGS = [
    (20.0, SECOND, [("max_num_seqs", "8", "64")]),
    (40.0, THIRD, [("enforce_eager", None, True)]),
]


def synthetic(**overrides) -> SyntheticRun:
    options = dict(duration_s=60.0, start_rps=2.0, end_rps=20.0, seed=3, serve=FIRST, configs=CONFIGS)
    options.update(overrides)
    return SyntheticRun(**options)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("segments") / "two-restarts.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None)
    capture = CaptureSink()

    class Both(CaptureSink):
        def on_start(self, header):
            writer.on_start(header)
            capture.on_start(header)

        def on_request(self, record):
            writer.on_request(record)
            capture.on_request(record)

        def on_scrape(self, sample):
            writer.on_scrape(sample)
            capture.on_scrape(sample)

        def on_tick(self, tick):
            writer.on_tick(tick)
            capture.on_tick(tick)

        def on_event(self, event):
            writer.on_event(event)
            capture.on_event(event)

        def on_finish(self, t):
            writer.on_finish(t)
            capture.on_finish(t)

    play_synthetic(synthetic(), Both())
    writer.close()
    return path, capture


def test_boundaries_commands_and_diffs_from_the_config_events(recorded):
    path, capture = recorded
    with open_recording(path) as recording:
        segments = config_segments(recording.header, recording.events, recording.duration_s)
        end = recording.duration_s
    assert [(s.label, s.start_s, s.end_s) for s in segments] == [
        ("C1", 0.0, 20.0),
        ("C2", 20.0, 40.0),
        ("C3", 40.0, end),
    ]
    assert [s.command for s in segments] == [FIRST, SECOND, THIRD]
    assert segments[1].diff == [("max_num_seqs", "8", "64")]
    assert segments[2].diff == [("enforce_eager", None, True)]
    assert [s.resume for s in segments] == [None, "current", "current"]


def test_each_segment_is_the_summary_of_the_requests_sent_in_it(recorded):
    path, capture = recorded
    with open_recording(path) as recording:
        segments, summaries = configuration_segments(recording)
        recorded_requests = recording.requests
    assert len(summaries) == 3
    total = 0
    for segment, summary in zip(segments, summaries, strict=True):
        mine = [
            r
            for r in recorded_requests
            if segment.start_s <= r.sent_at < segment.end_s or (segment.index == 3 and r.sent_at >= segment.start_s)
        ]
        samples = [
            s
            for s in capture.samples
            if segment.start_s <= s.t < segment.end_s or (segment.index == 3 and s.t >= segment.start_s)
        ]
        expected = summarise_requests(recording.header, mine, samples, [], idle_duration_s=0.0)
        assert mine, "every segment has requests"
        total += len(mine)
        assert summary.completed == expected.completed
        assert summary.failed == expected.failed
        assert summary.total_output_tokens == expected.total_output_tokens
        assert summary.request_throughput == pytest.approx(expected.request_throughput)
        assert summary.output_throughput == pytest.approx(expected.output_throughput)
        for metric in ("ttft", "itl"):
            for p in ("p50", "p99"):
                assert summary.latency(metric).percentiles[p] == pytest.approx(
                    expected.latency(metric).percentiles[p], rel=1e-9, abs=1e-9
                )
        assert summary.server["max_kv_usage_pct"] == pytest.approx(expected.server["max_kv_usage_pct"])
    assert total == len(recorded_requests), "every request in exactly one segment"
    # A request ending after a restart but sent before it stays with the old configuration.
    straddling = [r for r in recorded_requests if r.sent_at < 20.0 <= r.end_at]
    assert straddling
    assert summaries[0].completed + summaries[0].failed == sum(1 for r in recorded_requests if r.sent_at < 20.0)


def test_the_knee_belongs_to_the_segment_it_was_marked_in(recorded):
    path, capture = recorded
    knees = [e for e in capture.events if e.kind == "knee"]
    assert len(knees) == 1
    with open_recording(path) as recording:
        segments, summaries = configuration_segments(recording)
    holder = segment_index([s.start_s for s in segments], knees[0].t)
    assert [s.knee_rps is not None for s in summaries] == [i == holder for i in range(3)]


def test_in_memory_and_recording_paths_agree(recorded):
    path, capture = recorded
    segments = config_segments(capture.header, capture.events, capture.finish_t)
    in_memory = segment_summaries(capture.header, segments, capture.requests, capture.samples, capture.events)
    with open_recording(path) as recording:
        _, from_file = configuration_segments(recording)
    for a, b in zip(in_memory, from_file, strict=True):
        assert a.completed == b.completed and a.failed == b.failed
        assert a.ttft.percentiles["p99"] == pytest.approx(b.ttft.percentiles["p99"], abs=2e-3)  # ms; stored to 1 µs


def test_a_run_without_restarts_is_one_segment_from_its_header():
    header = RunHeader("0", 0.0, "http://x", "m", "s", options={"serve": FIRST})
    (only,) = config_segments(header, [Event(3.0, "mark", "m")], 30.0)
    assert (only.start_s, only.end_s, only.command, only.diff) == (0.0, 30.0, FIRST, [])
    (unnamed,) = config_segments(RunHeader("0", 0.0, "http://x", "m", "s"), [], 30.0)
    assert unnamed.command is None


def test_malformed_config_data_reads_as_unknown():
    events = [Event(5.0, "config", "x", {"command": 3, "diff": [["a", 1], "junk", ["b", 1, 2]], "resume": "sideways"})]
    _, second = config_segments(None, events, 10.0)
    assert (second.command, second.diff, second.resume) == (None, [("b", 1, 2)], None)


@pytest.mark.parametrize(
    ("diffs", "expected"),
    [
        ([[("max_num_seqs", "8", "64")]], [("--max-num-seqs", ["8", "64"])]),
        # a value carries forward until changed again; the first change's old value back-fills
        (
            [[("max_num_seqs", "8", "64")], [("enforce_eager", None, True)], [("max_num_seqs", "64", "128")]],
            [("--max-num-seqs", ["8", "64", "64", "128"]), ("--enforce-eager", ["(unset)", "(unset)", "on", "on"])],
        ),
        ([[]], []),
    ],
)
def test_argument_rows(diffs, expected):
    segments = [ConfigSegment(1, 0, 1, None)] + [
        ConfigSegment(i, i - 1, i, None, diff) for i, diff in enumerate(diffs, start=2)
    ]
    assert argument_rows(segments) == expected


def test_table_puts_the_arguments_first(recorded):
    path, _ = recorded
    with open_recording(path) as recording:
        table = segment_table(*configuration_segments(recording))
    assert table.columns == ["C1", "C2", "C3"]
    assert [label for label, _ in table.rows[:2]] == ["--max-num-seqs", "--enforce-eager"]
    assert table.rows[0][1] == ["8", "64", "64"]
    assert table.argument_count == 2
    text = table.text()
    assert f"C2: {SECOND}" in text and "TTFT p99 ms" in text


def test_config_event_says_what_changed_and_how_the_run_went_on():
    event = config_event(12.5, SECOND, [("max_num_seqs", "8", "64")], "start", 9.0)
    assert event.kind == "config"
    assert event.message == "server restarted: --max-num-seqs 8 → 64; resumed from the start of the ramp"
    assert event.data == {
        "command": SECOND,
        "diff": [["max_num_seqs", "8", "64"]],
        "resume": "start",
        "restart_started_at": 9.0,
    }


@pytest.mark.slow
def test_report_prints_the_configurations_side_by_side(recorded):
    path, _ = recorded
    out = rampwatch("report", str(path))
    assert out.returncode == 0, out.stderr
    section = out.stdout[out.stdout.index("\nConfigurations (") :]
    lines = section.splitlines()
    assert lines[2].split() == ["C1", "C2", "C3"]
    assert lines[3].split() == ["--max-num-seqs", "8", "64", "64"]
    assert lines[4].split() == ["--enforce-eager", "(unset)", "(unset)", "on"]
    assert f"C3: {THIRD}" in section
    assert "restart      server restarted: --max-num-seqs 8 → 64; resumed at the current rate" in out.stdout
    as_json = json.loads(rampwatch("report", str(path), "--json").stdout)
    assert [c["label"] for c in as_json["configurations"]] == ["C1", "C2", "C3"]
    assert as_json["configurations"][1]["diff"] == [["max_num_seqs", "8", "64"]]
    assert sum(c["completed"] for c in as_json["configurations"]) == as_json["completed"]


@pytest.mark.slow
def test_html_report_has_a_configurations_section_and_boundaries(recorded, tmp_path):
    path, _ = recorded
    out = rampwatch("export", str(path), "--format", "html", "-o", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "r.html").read_text()
    section = page[page.index('<h2 id="configurations">') : page.index("<h2>Steps</h2>")]
    assert "<th></th><th>C1</th><th>C2</th><th>C3</th>" in section
    assert '<tr class="argument"><th>--max-num-seqs</th><td>8</td><td>64</td><td>64</td></tr>' in section
    assert f"<code>{SECOND}</code>" in section
    # every chart draws both restarts, labelled with the configuration they start
    assert page.count('<line class="mark-config"') == 2 * page.count("<svg")
    assert page.count(">C2</text>") == page.count("<svg") == page.count(">C3</text>")


@pytest.mark.slow
def test_one_configuration_shows_nothing_new(tmp_path):
    path = tmp_path / "plain.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None)
    play_synthetic(synthetic(configs=[], duration_s=20.0), writer)
    writer.close()
    assert "Configurations" not in rampwatch("report", str(path)).stdout
    assert "configurations" not in json.loads(rampwatch("report", str(path), "--json").stdout)
    rampwatch("export", str(path), "--format", "html", "-o", str(tmp_path / "r.html"))
    page = (tmp_path / "r.html").read_text()
    assert "Configurations" not in page and "mark-config" not in page


def test_the_screens_table_is_the_reports_within_the_live_histograms(recorded):
    from rampwatch.core.figures.series import SeriesBuilder

    path, capture = recorded
    builder = SeriesBuilder()
    play_synthetic(synthetic(), builder)
    live = builder.snapshot().configurations
    with open_recording(path) as recording:
        exact = segment_table(*configuration_segments(recording))
    assert live.columns == exact.columns and live.commands == exact.commands
    rows, exact_rows = dict(live.rows), dict(exact.rows)
    for label in ("--max-num-seqs", "--enforce-eager", "time", "requests sent", "failed", "knee req/s"):
        assert rows[label] == exact_rows[label], label
    for label in ("TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "completed req/s"):
        for a, b in zip(rows[label], exact_rows[label], strict=True):
            assert float(a) == pytest.approx(float(b), rel=0.02), label


def test_checkpoints_keep_each_configurations_summary_and_older_ones_have_none():
    from rampwatch.core.figures.series import SeriesBuilder

    first, whole = SeriesBuilder(), SeriesBuilder()
    capture = CaptureSink()
    play_synthetic(synthetic(), capture)
    for builder, until in ((first, 45.0), (whole, float("inf"))):
        builder.on_start(capture.header)
        items = sorted(
            [(e.t, 0, e) for e in capture.events]
            + [(r.end_at, 1, r) for r in capture.requests]
            + [(s.t, 2, s) for s in capture.samples]
            + [(k.t, 3, k) for k in capture.ticks],
            key=lambda x: (x[0], x[1]),
        )
        for t, kind, item in items:
            if t > until:
                break
            (builder.on_event, builder.on_request, builder.on_scrape, builder.on_tick)[kind](item)
    meta, arrays = first.export_state()
    assert len(meta["config_segments"]["starts"]) == 3
    restored = SeriesBuilder.from_state(capture.header, meta, arrays)
    assert restored.snapshot(45.0).configurations == first.snapshot(45.0).configurations
    del meta["config_segments"]  # a checkpoint from before restarts existed
    assert SeriesBuilder.from_state(capture.header, meta, arrays).snapshot(45.0).configurations is None
