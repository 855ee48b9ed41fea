"""The HTML report's charts and marks table, checked on the generated SVG/HTML text."""

from __future__ import annotations

import math
import re

import pytest

from rampwatch.core.figures.summary import summarise_requests
from rampwatch.core.timeline import SERIES_NAMES, Event
from rampwatch.record.html_report import line_segments, render_html, robust_top, svg_chart
from tests.tui.fakes import fake_snapshot

NAN = math.nan


@pytest.mark.parametrize(
    ("values", "top"),
    [
        ([1.0] * 99 + [1000.0], 2.0),  # one spike: the axis follows the rest (1.5 × 1.0 → 2)
        (list(range(1, 101)), 200.0),  # a ramp: its maximum (×1.05 → 105 → nice 200)
        ([10.0, 20.0, 30.0, NAN, None], 50.0),
        ([], 1.0),
        ([NAN, None], 1.0),
        ([0.0, 0.0], 1.0),
    ],
)
def test_robust_top(values, top):
    assert robust_top(values) == top


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1, 2, NAN, 4], [[(0, 1), (1, 2), (3, 4)]]),  # an empty cell is bridged
        ([1, None, None, None, None, None, 7], [[(0, 1), (6, 7)]]),  # 5 empty seconds: bridged
        ([1, None, None, None, None, None, None, 8], [[(0, 1)], [(7, 8)]]),  # 6: a real gap
        ([NAN, NAN], []),
        ([NAN, 3, NAN], [[(1, 3)]]),
    ],
)
def test_line_segments(values, expected):
    times = [float(i) for i in range(len(values))]
    assert line_segments(times, values) == [[(float(t), float(v)) for t, v in seg] for seg in expected]


def test_a_spike_is_clipped_with_a_marker_and_the_axis_is_not_stretched():
    times = [float(i) for i in range(60)]
    values = [50.0 + (i % 5) for i in range(60)]
    values[30] = 5000.0
    svg = svg_chart("TTFT", "ms", times, [("p99", values)], [], 60.0)
    ticks = [float(t) for t in re.findall(r'text-anchor="end">([0-9.e+]+)</text>', svg)]
    assert max(ticks) == 100.0  # 1.5 × ~54, not 5000
    clipped = re.findall(r'<path class="clipped"[^>]*><title>([^<]*)</title>', svg)
    assert clipped == ["p99 5000 ms at 30 s (above the axis)"]
    assert svg.count("<polyline") == 1  # one unbroken line through the spike


def test_without_a_spike_nothing_is_clipped():
    times = [float(i) for i in range(60)]
    svg = svg_chart("Rate", "req/s", times, [("sent", [i / 3 for i in range(60)])], [], 60.0)
    assert 'class="clipped"' not in svg


def report(events):
    snap = fake_snapshot(120.0)
    snap.series["kv_usage_pct"] = [min(v, 30.0) for v in snap.series["kv_usage_pct"]]
    snap.series["prefix_hit_pct"] = [20.0] * len(snap.times)
    for i in range(40, 43):  # empty cells, as a CSV of a second without completions has
        snap.series["ttft_p99"][i] = NAN
    summary = summarise_requests(None, [], [], [], idle_duration_s=120.0)
    return render_html(snap, summary, "summary", events, "t", "s")


def _chart(page: str, title: str) -> str:
    return next(svg for svg in page.split("<svg")[1:] if f'aria-label="{title}"' in svg)


def test_percent_axes_are_fixed_at_100_and_gaps_of_empty_cells_are_bridged():
    page = report([])
    kv = _chart(page, "KV cache and prefix cache")
    assert max(float(t) for t in re.findall(r'text-anchor="end">([0-9.]+)</text>', kv)) == 100.0
    ttft = _chart(page, "Time to first token")
    assert ttft.count("<polyline") == 3  # p50, p90, p99: one line each, the empty cells bridged


def test_the_knee_line_and_the_marks_table_carry_the_review_that_settled_the_knee():
    knee = Event(78.0, "knee", "batch-size cap at ~14 req/s offered → try --kv-cache-dtype fp8")
    review = Event(
        108.0,
        "info",
        "knee revised with the 30 s after it: KV cache full → try --kv-cache-dtype fp8",
        {"knee_review": True, "knee_t": 78.0, "explanation": {"limit": "kv_full"}, "revised": True},
    )
    page = report([knee, review])
    tips = re.findall(r'<line class="mark-knee"[^>]*><title>([^<]*)</title>', page)
    assert tips and all(t.startswith("batch-size cap") and "then knee revised with the 30 s" in t for t in tips)
    table = page[page.index("<h2>Marks</h2>") : page.index("<h2>Summary</h2>")]
    assert re.findall(r'<tr class="mark-([a-z_]+)"><td>([0-9.]+) s</td><td>([^<]*)</td>', table) == [
        ("knee", "78.0", "knee"),
        ("info", "108.0", "knee review"),
    ]


def test_marks_table_lists_knee_holds_resumes_rate_changes_marks():
    events = [
        Event(0.0, "start", "run started"),
        Event(40.0, "hold", "hold at 7.3 req/s", {"before_rps": 7.3, "after_rps": 7.3}),
        Event(45.0, "set_rate", "hold at 9 req/s", {"before_rps": 7.3, "after_rps": 9.0}),
        Event(50.0, "resume", "resume ramp at 9 req/s", {"before_rps": 9.0, "after_rps": 9.0}),
        Event(33.0, "scrape_error", "timeout"),
        Event(78.0, "knee", "knee at 14 rps"),
        Event(90.0, "mark", "raised max-num-seqs"),
        Event(120.0, "stop", "run finished"),
    ]
    page = report(events)
    table = page[page.index("<h2>Marks</h2>") : page.index("<h2>Summary</h2>")]
    rows = re.findall(r'<tr class="mark-([a-z_]+)"><td>([0-9.]+) s</td><td>([^<]*)</td><td>([^<]*)</td>', table)
    assert [(kind, float(t), shown) for kind, t, shown, _ in rows] == [
        ("start", 0.0, "start"),
        ("hold", 40.0, "hold"),
        ("set_rate", 45.0, "rate change"),
        ("resume", 50.0, "resume"),
        ("knee", 78.0, "knee"),
        ("mark", 90.0, "mark"),
        ("stop", 120.0, "stop"),
    ]
    assert "hold at 9 req/s (7.3 → 9 req/s)" in table
    # the charts draw the knee, holds, resumes and marks, not the rate changes
    rate = _chart(page, "Throughput")
    assert rate.count('stroke-dasharray="5,3"') == 4


def test_series_names_the_report_draws_exist():
    from rampwatch.record.html_report import CHARTS

    assert {name for chart in CHARTS for name, _label in chart[2]} <= set(SERIES_NAMES)


def test_gpu_charts_only_in_a_run_with_gpu_telemetry():
    from rampwatch.record.html_report import GPU_CHARTS
    from tests.tui.gpu_fakes import with_gpus

    assert {name for chart in GPU_CHARTS for name, _label in chart[2]} <= set(SERIES_NAMES)
    summary = summarise_requests(None, [], [], [], idle_duration_s=120.0)
    without = render_html(fake_snapshot(120.0), summary, "summary", [], "t", "s")
    assert 'aria-label="GPU power"' not in without and 'aria-label="GPU utilisation"' not in without
    page = render_html(with_gpus(fake_snapshot(120.0)), summary, "summary", [], "t", "s")
    power = _chart(page, "GPU power")
    assert "<polyline" in power and "<polyline" in _chart(page, "GPU utilisation")


def test_the_multimodal_cache_chart_only_in_a_run_with_images():
    from rampwatch.record.html_report import IMAGE_CHARTS

    summary = summarise_requests(None, [], [], [], idle_duration_s=120.0)
    snapshot = fake_snapshot(120.0)
    assert "Multimodal processor cache" not in render_html(snapshot, summary, "summary", [], "t", "s")
    snapshot.series["mm_cache_hit_pct"] = [50.0] * len(snapshot.times)
    assert IMAGE_CHARTS[0][0] in render_html(snapshot, summary, "summary", [], "t", "s")


def test_reasoning_charts_and_rows_only_in_a_reasoning_run():
    from rampwatch.core.figures.series import SeriesBuilder
    from rampwatch.core.figures.series_reasoning import REASONING_SERIES
    from rampwatch.record.html_report import REASONING_CHARTS
    from tests.core.figures.reasoning_records import Reasoning
    from tests.record.helpers import CaptureSink
    from tests.synthetic import SyntheticRun, play_synthetic

    assert {n for chart in REASONING_CHARTS for n, _ in chart[2]} <= {*SERIES_NAMES, *REASONING_SERIES}
    builder, capture = SeriesBuilder(), CaptureSink()
    play_synthetic(SyntheticRun(duration_s=30.0, start_rps=2, end_rps=8, seed=4), Reasoning(builder, capture))
    summary = summarise_requests(None, capture.requests, [], [])
    page = render_html(builder.snapshot(), summary, "summary", [], "t", "s")
    ttfa = _chart(page, "Time to first token vs first answer")
    assert ttfa.count("<polyline") == 3 and "TTFA p99" in ttfa
    assert "<polyline" in _chart(page, "Reasoning share of output tokens")
    assert "<tr><th>p99_ttfa_ms</th>" in page and "<tr><th>reasoning_share</th>" in page
    plain = report([])
    assert "first answer" not in plain and "ttfa" not in plain and "reasoning" not in plain


def test_where_ttft_went_rows_only_in_a_run_with_phase_marks():
    from tests.core.figures.test_phases import _run, marked

    with_marks = render_html(fake_snapshot(120.0), summarise_requests(None, _run(), [], []), "summary", [], "t", "s")
    assert "<th>ttft_phase_mean_first_token_ms</th>" in with_marks
    assert "<th>ttft_phase_waited_for_slot</th><td>1</td>" in with_marks
    plain = summarise_requests(None, [marked(i, float(i)) for i in range(3)], [], [])
    assert "ttft_phase" not in render_html(fake_snapshot(120.0), plain, "summary", [], "t", "s")
