import math

import pytest

from rampwatch.core.timeline import Event
from rampwatch.tui.chart_data import (
    chart_key,
    downsample,
    errors_by_class,
    format_count,
    format_duration,
    format_ms,
    last_value,
    markers,
    metrics_url,
    nice_upper,
    rate_step,
    segments,
    x_range,
    y_upper,
)
from rampwatch.tui.position_bar import bar_cells
from tests.tui.fakes import fake_snapshot

NAN = float("nan")


def test_segments_split_at_missing_values():
    times = [0, 1, 2, 3, 4, 5]
    values = [NAN, 1.0, 2.0, NAN, None, 5.0]
    assert segments(times, values) == [([1.0, 2.0], [1.0, 2.0]), ([5.0], [5.0])]


def test_segments_of_an_all_missing_series_is_empty():
    assert segments([0, 1], [NAN, NAN]) == []


@pytest.mark.parametrize(
    "value, top",
    [
        (0.0, 1.0),
        (0.7, 1.0),
        (1.0, 1.0),
        (1.9, 2.0),
        (2.1, 2.5),
        (3.0, 5.0),
        (7.2, 10.0),
        (99.0, 100.0),
        (120.0, 200.0),
    ],
)
def test_nice_upper(value, top):
    assert nice_upper(value) == pytest.approx(top)


def test_y_upper_ignores_missing_and_has_headroom():
    assert y_upper([[NAN, 4.0], [9.6]]) == pytest.approx(20.0)  # 9.6 * 1.05 > 10
    assert y_upper([[NAN]]) == 1.0


def test_x_range_covers_planned_time_then_grows_past_it():
    early = fake_snapshot(10.0)
    assert x_range(early) == (0.0, 120.0)
    late = fake_snapshot(10.0)
    late.planned_duration_s = 5.0
    assert x_range(late) == (0.0, 10.0)
    late.t, late.times = 300.0, [float(i) for i in range(300)]
    assert x_range(late) == (0.0, 300.0)


def test_x_range_takes_the_longer_of_two_compared_runs():
    a = fake_snapshot(30.0)
    b = fake_snapshot(30.0)
    b.planned_duration_s = 400.0
    assert x_range(a, b) == (0.0, 400.0)


def test_markers_number_marks_and_keep_knee_and_holds():
    events = [
        Event(1.0, "start"),
        Event(5.0, "mark", "a"),
        Event(7.0, "hold"),
        Event(9.0, "resume"),
        Event(12.0, "knee"),
        Event(15.0, "mark", "b"),
        Event(16.0, "error"),
    ]
    got = [(m.t, m.kind, m.label) for m in markers(events)]
    assert got == [
        (5.0, "mark", "M1"),
        (7.0, "hold", "H"),
        (9.0, "resume", "R"),
        (12.0, "knee", "K"),
        (15.0, "mark", "M2"),
    ]


@pytest.mark.parametrize(
    "seconds, text", [(0, "00:00"), (59.9, "00:59"), (95, "01:35"), (3725, "1:02:05"), (None, "--:--"), (NAN, "--:--")]
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds, text", [(0.0123, "12.3 ms"), (0.4101, "410 ms"), (NAN, "–"), (None, "–")])
def test_format_ms(seconds, text):
    assert format_ms(seconds) == text


def test_last_value_skips_trailing_gaps():
    assert last_value([1.0, 2.0, NAN, NAN]) == 2.0
    assert last_value([NAN]) is None


@pytest.mark.parametrize(
    "rate, step", [(0.0, 0.5), (3.0, 0.5), (8.0, 0.5), (12.0, 1.0), (25.0, 2.0), (60.0, 5.0), (150.0, 10.0)]
)
def test_rate_step_is_a_round_tenth_of_the_rate(rate, step):
    assert rate_step(rate) == step


def test_configured_rate_step_wins():
    assert rate_step(150.0, configured=3.0) == 3.0


def test_metrics_url_names_the_scraped_url_or_the_target():
    assert metrics_url(fake_snapshot(10.0)) == "http://127.0.0.1:8000/metrics"
    no_urls = fake_snapshot(10.0, metrics=False)
    assert metrics_url(no_urls) == "http://127.0.0.1:8000/metrics"
    no_urls.header.target = "http://host:9000/"
    assert metrics_url(no_urls) == "http://host:9000/metrics"


def test_errors_by_class_prefers_the_summary():
    snap = fake_snapshot(110.0)
    assert errors_by_class(snap) == {"http_503": 4}
    snap.summary["errors_by_class"] = {"timeout": 2}
    assert errors_by_class(snap) == {"timeout": 2}


def test_bar_cells_shows_progress_and_markers():
    bar = bar_cells(50.0, 100.0, 20, [(80.0, "K"), (10.0, "M")])
    assert len(bar) == 20
    assert bar[16] == "K" and bar[2] == "M"
    assert bar[9] == "●"
    assert bar[:2] == "━━" and bar[12:16] == "────"


def test_bar_cells_handles_empty_recordings():
    assert bar_cells(0.0, 0.0, 5, []) == "●────"
    assert bar_cells(1.0, 1.0, 0, []) == ""


def test_fake_run_has_a_knee_where_throughput_flattens():
    snap = fake_snapshot(120.0)
    completed = snap.series["completed_rps"]
    assert max(completed) < 15.0 < max(snap.series["offered_rps"])
    assert not math.isnan(snap.series["kv_usage_pct"][-1])
    assert math.isnan(fake_snapshot(120.0, metrics=False).series["kv_usage_pct"][-1])


def test_stats_show_the_curated_summary_figures_in_order():
    from rampwatch.tui.stats_panel import summary_rows

    rows = summary_rows({"p99_ttft_ms": 410.0, "duration": 95.0, "server": {"x": 1}, "std_itl_ms": 3.0})
    assert rows == [("duration s", "95.0"), ("TTFT p99 ms", "410.0")]


def test_stats_show_an_unknown_summary_whole_without_nested_values():
    from rampwatch.tui.stats_panel import summary_rows

    assert summary_rows({"a_b": 1, "nested": {"x": 1}}) == [("a b", "1")]


def test_current_value_skips_the_bin_still_filling():
    from rampwatch.tui.chart_data import current_value

    snap = fake_snapshot(10.0)
    snap.t = 9.5  # bin 9 covers 9..10 and is not complete
    snap.series["sent_rps"][9] = 0.0
    snap.series["sent_rps"][8] = 7.0
    assert current_value(snap, "sent_rps") == 7.0
    snap.series["sent_rps"][8] = NAN
    assert current_value(snap, "sent_rps") == snap.series["sent_rps"][7]
    assert current_value(snap, "no_such_series") is None


def test_a_bin_is_complete_only_a_moment_after_its_end():
    from rampwatch.tui.chart_data import current_value

    snap = fake_snapshot(10.0)
    snap.series["offered_rps"][9] = 0.0  # its closing tick (at 10.00x) not read yet
    snap.series["offered_rps"][8] = 7.0
    assert current_value(snap, "offered_rps") == 7.0  # exactly on the boundary
    snap.t = 10.2
    assert current_value(snap, "offered_rps") == 0.0


@pytest.mark.parametrize(
    "right, max_ticks, ticks, labels",
    [
        (66.0, 6, [0, 15, 30, 45, 60], ["0:00", "0:15", "0:30", "0:45", "1:00"]),  # one format at every length
        (20.0, 6, [0, 5, 10, 15, 20], ["0:00", "0:05", "0:10", "0:15", "0:20"]),
        (120.0, 5, [0, 30, 60, 90, 120], ["0:00", "0:30", "1:00", "1:30", "2:00"]),
        (600.0, 6, [0, 120, 240, 360, 480, 600], ["0:00", "2:00", "4:00", "6:00", "8:00", "10:00"]),
        (7200.0, 3, [0, 3600, 7200], ["0:00", "1:00:00", "2:00:00"]),
    ],
)
def test_time_ticks(right, max_ticks, ticks, labels):
    from rampwatch.tui.chart_data import time_ticks

    assert time_ticks(right, max_ticks) == (ticks, labels)


def test_downsample_keeps_short_series_as_they_are():
    times, values = downsample([0.0, 1.0, 2.0], [1.0, NAN, 3.0], 10)
    assert times == [0.0, 1.0, 2.0]
    assert values[0] == 1.0 and math.isnan(values[1]) and values[2] == 3.0


def test_downsample_merges_groups_by_mean_or_peak_and_keeps_gaps():
    times = [float(i) for i in range(9)]
    values = [1.0, 2.0, 3.0, NAN, NAN, NAN, 10.0, NAN, 40.0]
    t_mean, mean = downsample(times, values, 3)
    assert t_mean == [0.0, 3.0, 6.0]
    assert mean[0] == 2.0 and math.isnan(mean[1]) and mean[2] == 25.0
    _, peak = downsample(times, values, 3, "max")
    assert peak[0] == 3.0 and math.isnan(peak[1]) and peak[2] == 40.0


def test_downsample_never_exceeds_the_point_budget():
    times = [float(i) for i in range(3600)]
    t, v = downsample(times, [1.0] * 3600, 184)
    assert 92 < len(t) <= 184 and len(t) == len(v)


def test_chart_key_changes_with_a_new_bin_or_event_but_not_within_a_bin():
    a, b = fake_snapshot(60.2), fake_snapshot(60.7)  # same bins, the newest still filling
    assert chart_key(a, None, 80, 20) == chart_key(b, None, 80, 20)
    assert chart_key(a, None, 80, 20) != chart_key(fake_snapshot(61.2), None, 80, 20)
    with_knee = fake_snapshot(78.5)
    before_knee = fake_snapshot(78.5)
    before_knee.events = [e for e in before_knee.events if e.kind != "knee"]
    assert chart_key(with_knee, None, 80, 20) != chart_key(before_knee, None, 80, 20)
    assert chart_key(a, None, 80, 20) != chart_key(a, None, 100, 20)


@pytest.mark.parametrize(
    "series, lo, hi, ticks",
    [
        ([[12.0, 450.0]], 1, 3, [10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]),
        ([[0.5, 4000.0]], -1, 4, [0.1, 1.0, 10.0, 100.0, 1000.0, 10000.0]),  # > 2 decades: decades only
        ([[100.0, 100.0]], 2, 3, [100.0, 200.0, 500.0, 1000.0]),  # one value still spans a decade
        ([[0.0, NAN, -3.0, 30.0]], 1, 2, [10.0, 20.0, 50.0, 100.0]),  # zeros and gaps left out
        ([[0.0, NAN]], 0, 1, [1.0, 2.0, 5.0, 10.0]),  # nothing drawable
    ],
)
def test_log_axis(series, lo, hi, ticks):
    from rampwatch.tui.chart_data import compact_number, log_axis

    axis = log_axis(series)
    assert (axis.lo_exp, axis.hi_exp) == (lo, hi)
    assert axis.ticks == pytest.approx(ticks)
    assert axis.labels[-1] == compact_number(10.0**hi)


@pytest.mark.parametrize(
    "value, text", [(0.1, "0.1"), (5.0, "5"), (500.0, "500"), (1000.0, "1k"), (2500.0, "2.5k"), (1e6, "1M")]
)
def test_compact_number(value, text):
    from rampwatch.tui.chart_data import compact_number

    assert compact_number(value) == text


@pytest.mark.parametrize(
    "top, labels",
    [
        (10.0, ["0", "2", "4", "6", "8", "10"]),
        (200.0, ["0", "50", "100", "150", "200"]),
        (2500.0, ["0", "500", "1k", "1.5k", "2k", "2.5k"]),
    ],
)
def test_linear_ticks(top, labels):
    from rampwatch.tui.chart_data import linear_ticks

    ticks, got = linear_ticks(top)
    assert got == labels and ticks[0] == 0.0 and ticks[-1] == top


def test_log10_or_missing_turns_what_log_cannot_draw_into_gaps():
    from rampwatch.tui.chart_data import log10_or_missing, segments

    values = log10_or_missing([10.0, 0.0, None, 1000.0, -1.0, 0.1])
    assert [ys for _, ys in segments(range(6), values)] == [[1.0], [3.0], [-1.0]]


def test_recent_rate_is_the_mean_of_the_last_five_complete_seconds():
    from rampwatch.tui.chart_data import recent_rate

    snap = fake_snapshot(10.0)
    snap.t = 9.95  # bins 0…9; bin 9 is still filling
    snap.series["completed_rps"] = [1.0, 1.0, 1.0, 1.0, 2.0, 4.0, NAN, 6.0, 8.0, 0.0]
    assert recent_rate(snap, "completed_rps") == pytest.approx((2 + 4 + 6 + 8) / 4)  # bins 4…8, the gap skipped
    assert recent_rate(snap, "completed_rps", window_s=1) == 8.0
    short = fake_snapshot(3.0)
    short.t = 2.95
    short.series["completed_rps"] = [3.0, 5.0, 0.0]
    assert recent_rate(short, "completed_rps") == 4.0  # fewer than five seconds so far
    assert recent_rate(snap, "no_such_series") is None


async def test_stats_now_rates_are_five_second_means():
    from rampwatch.tui.stats_panel import NOW_TITLE, StatsPanel

    snap = fake_snapshot(10.0)
    snap.t = 9.95
    snap.series["completed_rps"] = [0.0] * 4 + [10.0, 20.0, 30.0, 40.0, 50.0, 99.0]
    snap.series["ttft_p50"] = [0.1] * 8 + [0.2, 0.3]
    now, _ = StatsPanel().rows(snap)
    assert ("completed rps", "30.0") in now  # bins 4…8
    assert ("TTFT p50", "200 ms") in now  # percentiles: the newest complete second's (a 10 s window)
    assert NOW_TITLE == "last 5 s"


@pytest.mark.parametrize(
    "value,shown",
    [(76.0, "76"), (1.0, "1"), (0.0, "0"), (1234.0, "1,234"), (2.6, "3"), (None, "–"), (math.nan, "–")],
)
def test_request_counts_are_shown_whole(value, shown):
    assert format_count(value) == shown
