"""Speculative decoding's figures: vLLM's definitions, reset-safe windows, the series and
the summary, and nothing of it where the server does not speculate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.figures.speculation import (
    SPEC_SERIES_NAMES,
    acceptance_rate,
    mean_acceptance_length,
    per_position_rates,
    position_deltas,
    positions_text,
    spec_figures,
    spec_series,
)
from rampwatch.core.figures.summary_server import server_figures
from rampwatch.core.timeline import SERIES_NAMES, ServerSample


@pytest.mark.parametrize(
    ("accepted", "draft_tokens", "rate"),
    [(0, 0, None), (0, 30, 0.0), (15, 30, 0.5), (30, 30, 1.0)],
)
def test_acceptance_rate_is_accepted_over_drafted_tokens(accepted, draft_tokens, rate):
    assert acceptance_rate(accepted, draft_tokens) == rate


@pytest.mark.parametrize(
    ("accepted", "drafts", "length"),
    [(0, 0, None), (0, 10, 1.0), (25, 10, 3.5)],  # the bonus token counts: 1 + accepted / drafts
)
def test_mean_acceptance_length_counts_the_bonus_token(accepted, drafts, length):
    assert mean_acceptance_length(accepted, drafts) == length


@pytest.mark.parametrize(
    ("by_position", "drafts", "rates"),
    [
        ({}, 10, None),
        ({"0": 8.0}, 0, None),
        # positions in numeric order, not text order
        ({"10": 1.0, "2": 4.0, "0": 8.0, "1": 6.0}, 10, [0.8, 0.6, 0.4, 0.1]),
    ],
)
def test_per_position_rates_are_over_drafts_in_position_order(by_position, drafts, rates):
    assert per_position_rates(by_position, drafts) == rates


def sample(t, drafts, tokens, accepted, positions, created=1.0, url="u") -> ServerSample:
    return ServerSample(
        t=t,
        url=url,
        ok=True,
        backend="vllm",
        created=created,
        generation_tokens_total=float(accepted + drafts),
        spec_drafts_total=float(drafts),
        spec_draft_tokens_total=float(tokens),
        spec_accepted_tokens_total=float(accepted),
        spec_accepted_by_position={str(i): float(v) for i, v in enumerate(positions)},
    )


@pytest.mark.parametrize(
    ("prev", "cur", "deltas"),
    [
        (sample(1, 10, 30, 15, [8, 5, 2]), sample(2, 20, 60, 30, [16, 10, 4]), [8, 5, 2]),
        # a restart: the counters fell, the increase is the new value
        (sample(1, 10, 30, 15, [8, 5, 2]), sample(2, 4, 12, 6, [3, 2, 1]), [3, 2, 1]),
        # a restart with counters past the old ones: the new _created says so
        (sample(1, 10, 30, 15, [8, 5, 2]), sample(2, 40, 120, 60, [30, 20, 10], created=9.0), [30, 20, 10]),
    ],
)
def test_position_deltas_are_reset_safe(prev, cur, deltas):
    assert position_deltas(prev, cur) == {f"spec_accepted_pos.{i}": float(d) for i, d in enumerate(deltas)}


def test_figures_need_drafts_counted():
    assert spec_figures({"generation_tokens_total": 5.0}) is None
    figures = spec_figures(
        {
            "spec_drafts_total": 10.0,
            "spec_draft_tokens_total": 30.0,
            "spec_accepted_tokens_total": 15.0,
            "spec_accepted_pos.0": 8.0,
            "spec_accepted_pos.1": 5.0,
            "spec_accepted_pos.2": 2.0,
        }
    )
    assert figures == {
        "drafts": 10.0,
        "draft_tokens": 30.0,
        "accepted_tokens": 15.0,
        "acceptance_rate_pct": 50.0,
        "mean_acceptance_length": 2.5,
        "draft_tokens_per_draft": 3.0,
        "per_position_acceptance_pct": [80.0, 50.0, 20.0],
    }
    assert positions_text(figures["per_position_acceptance_pct"]) == "80 / 50 / 20 %"


def test_the_series_are_ratios_of_the_windows_increases():
    drafts = np.array([10.0, 10.0, math.nan, 0.0, 10.0])
    tokens = 3 * np.nan_to_num(drafts)
    accepted = np.array([30.0, 0.0, math.nan, 0.0, 15.0])
    series = spec_series(drafts, tokens, accepted, window_s=2)
    assert set(series) == set(SPEC_SERIES_NAMES)
    np.testing.assert_allclose(series["spec_acceptance_pct"], [100.0, 50.0, 0.0, math.nan, 50.0])
    np.testing.assert_allclose(series["spec_accept_len"], [4.0, 2.5, 1.0, math.nan, 2.5])
    np.testing.assert_allclose(series["spec_draft_len"], [3.0, 3.0, 3.0, math.nan, 3.0])


def spec_run(restart: bool = False) -> list[ServerSample]:
    """A second's scrapes of a server accepting half its 3-token drafts; ``restart``:
    the counters start again from zero (a new _created) half-way."""
    out = []
    for t in range(1, 11):
        if restart and t > 5:
            n, created = t - 5, 2.0
        else:
            n, created = t, 1.0
        out.append(sample(float(t), 10 * n, 30 * n, 15 * n, [8 * n, 5 * n, 2 * n], created=created))
    return out


@pytest.mark.parametrize("restart", [False, True])
def test_the_runs_figures_sum_reset_safe_deltas(restart):
    figures = server_figures(spec_run(restart))["speculation"]
    # 9 seconds' growth: across the restart the increase is the new count (a fall is no
    # negative growth)
    assert figures["drafts"] == 90.0
    assert figures["acceptance_rate_pct"] == pytest.approx(50.0)
    assert figures["mean_acceptance_length"] == pytest.approx(2.5)
    assert figures["per_position_acceptance_pct"] == pytest.approx([80.0, 50.0, 20.0])


def test_a_server_without_speculation_has_no_figures_nor_series():
    plain = [
        ServerSample(t=float(t), url="u", ok=True, backend="vllm", generation_tokens_total=10.0 * t)
        for t in range(1, 6)
    ]
    assert "speculation" not in server_figures(plain)
    builder = SeriesBuilder()
    for s in plain:
        builder.on_scrape(s)
    snapshot = builder.snapshot(6.0)
    assert tuple(snapshot.series) == SERIES_NAMES
    assert "speculation" not in snapshot.summary["server"]


def test_a_speculating_server_adds_its_series_and_summary():
    builder = SeriesBuilder(window_s=3)
    for s in spec_run():
        builder.on_scrape(s)
    snapshot = builder.snapshot(11.0)
    assert tuple(snapshot.series) == SERIES_NAMES + SPEC_SERIES_NAMES
    acceptance = [v for v in snapshot.series["spec_acceptance_pct"] if not math.isnan(v)]
    assert acceptance and all(v == pytest.approx(50.0) for v in acceptance)
    live = snapshot.summary["server"]["speculation"]
    assert live["mean_acceptance_length"] == pytest.approx(2.5)
    assert live["per_position_acceptance_pct"] == pytest.approx([80.0, 50.0, 20.0])
    # a checkpoint keeps them (the per-position counters' spread too)
    meta, arrays = builder.export_state()
    restored = SeriesBuilder.from_state(builder.header, meta, arrays).snapshot(11.0)
    assert restored.summary["server"]["speculation"] == live
    np.testing.assert_array_equal(restored.series["spec_accept_len"], snapshot.series["spec_accept_len"])
    # the knee detector's seconds carry them too
    seconds = builder.take_completed_seconds()
    assert seconds and all("spec_accept_len" in values for _, values in seconds)


def test_the_summary_says_why_the_peak_output_rate_may_read_low_only_when_the_server_speculates():
    from rampwatch.core.figures.speculation import SPEC_PEAK_NOTE
    from rampwatch.core.figures.summary_text import format_summary

    def summary_of(samples: list[ServerSample]) -> str:
        builder = SeriesBuilder(window_s=3)
        for s in samples:
            builder.on_scrape(s)
        return format_summary(builder.run_summary(11.0))

    speculating = summary_of(spec_run())
    assert "\n".join(SPEC_PEAK_NOTE) in speculating
    assert all(len(line) <= 80 for line in SPEC_PEAK_NOTE)
    plain = summary_of([ServerSample(t=float(t), url="u", ok=True, backend="vllm", running=1.0) for t in range(12)])
    assert "counts chunks" not in plain
