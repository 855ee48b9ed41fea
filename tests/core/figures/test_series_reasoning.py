"""A reasoning run's one-second series: TTFA percentiles and the reasoning share, only
when a request reasoned, kept across checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.figures.series_reasoning import REASONING_SERIES, windowed_share_pct
from tests.core.figures.reasoning_records import Reasoning
from tests.synthetic import SyntheticRun, play_synthetic

RUN = SyntheticRun(duration_s=30.0, start_rps=2, end_rps=8, seed=4)


def reasoning_builder(share: float = 0.6) -> SeriesBuilder:
    builder = SeriesBuilder()
    play_synthetic(RUN, Reasoning(builder, share=share, cut_short=0.0))
    return builder


def finite(values) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    return arr[~np.isnan(arr)]


def test_a_plain_run_has_no_reasoning_series():
    builder = SeriesBuilder()
    play_synthetic(RUN, builder)
    assert builder.snapshot().reasoning is None and builder.reasoning is None


def test_the_time_to_first_answer_comes_after_the_first_token_by_the_thinking():
    snapshot = reasoning_builder().snapshot()
    assert snapshot.reasoning is not None and list(snapshot.reasoning) == list(REASONING_SERIES)
    assert all(len(v) == len(snapshot.times) for v in snapshot.reasoning.values())
    ttfa, ttft = np.asarray(snapshot.reasoning["ttfa_p50"]), np.asarray(snapshot.series["ttft_p50"])
    both = ~np.isnan(ttfa) & ~np.isnan(ttft)
    assert both.sum() > 20
    # 60 % of the chunks are thinking: hundreds of ms of it at the synthetic engine's steps
    assert np.all(ttfa[both] > ttft[both] + 0.1)
    assert np.median(ttfa[both] - ttft[both]) > 0.3


@pytest.mark.parametrize("share", [0.3, 0.7])
def test_the_reasoning_share_follows_the_thinking(share):
    shares = finite(reasoning_builder(share).snapshot().reasoning["reasoning_share_pct"])
    assert shares.size > 20
    assert np.median(shares) == pytest.approx(share * 100, abs=5)


def test_a_checkpoint_restores_the_reasoning_series():
    builder = SeriesBuilder()
    stop_at = 15.0
    # the first half, a checkpoint, then the rest fed to both the original and the restored one
    items: list[tuple[str, object]] = []

    class Tee:
        def __getattr__(self, name):
            return lambda item: items.append((name, item))

    play_synthetic(RUN, Reasoning(Tee(), cut_short=0.0))
    restored = None
    for name, item in items:
        t = getattr(item, "t", getattr(item, "end_at", None))
        if restored is None and isinstance(t, float) and t > stop_at and name != "on_start":
            restored = SeriesBuilder.from_state(builder.header, *builder.export_state())
        getattr(builder, name)(item)
        if restored is not None:
            getattr(restored, name)(item)
    assert restored is not None and restored.reasoning is not None
    want, got = builder.snapshot(), restored.snapshot()
    for name in REASONING_SERIES:
        assert got.reasoning[name] == pytest.approx(want.reasoning[name], nan_ok=True), name
    assert got.summary["reasoning"] == want.summary["reasoning"]


def test_the_windowed_share():
    part = np.array([1.0, 0.0, 3.0, 0.0])
    whole = np.array([2.0, 0.0, 4.0, 0.0])
    got = windowed_share_pct(part, whole, window_s=2)
    assert got.tolist()[:3] == pytest.approx([50.0, 50.0, 75.0]) and got[3] == pytest.approx(75.0)
    assert math.isnan(windowed_share_pct(np.zeros(3), np.zeros(3), 2)[0])


def test_the_knees_seconds_carry_the_ttfa_only_in_a_reasoning_run():
    reasoning, plain = SeriesBuilder(), SeriesBuilder()
    play_synthetic(RUN, Reasoning(reasoning, cut_short=0.0), finish=False)
    play_synthetic(RUN, plain, finish=False)
    (_, with_ttfa), *_ = reasoning.take_completed_seconds()[-1:]
    (_, without), *_ = plain.take_completed_seconds()[-1:]
    assert set(with_ttfa) - set(without) == set(REASONING_SERIES)
    assert with_ttfa["ttfa_p50"] > with_ttfa["ttft_p50"]
