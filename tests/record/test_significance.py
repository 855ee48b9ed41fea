"""The bootstrap interval for B − A (record.significance)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rampwatch.record.significance import Delta, Samples, bootstrap_delta, statistic_of, weighted_statistic


@pytest.mark.parametrize(
    ("values", "weights", "statistic", "expected"),
    [
        ([1.0, 2.0, 3.0, 4.0], [1, 1, 1, 1], "mean", 2.5),
        ([1.0, 2.0, 3.0, 4.0], [0, 0, 0, 2], "mean", 4.0),
        ([1.0, 2.0, 3.0, 4.0], [3, 0, 0, 1], "mean", 1.75),
        ([1.0, 2.0, 3.0, 4.0], [1, 1, 1, 1], "p50", 2.0),
        ([1.0, 2.0, 3.0, 4.0], [1, 1, 1, 1], "p75", 3.0),
        ([1.0, 2.0, 3.0, 4.0], [1, 1, 1, 1], "p100", 4.0),
        ([1.0, 2.0, 3.0, 4.0], [1, 1, 1, 1], "p0", 1.0),
        ([1.0, 2.0, 3.0, 4.0], [0, 0, 2, 2], "p50", 3.0),
        (list(range(1, 101)), [1] * 100, "p99", 99.0),
        (list(range(1, 1001)), [1] * 1000, "p99.9", 999.0),
    ],
)
def test_weighted_statistic(values, weights, statistic, expected):
    assert weighted_statistic(np.array(values, dtype=float), np.array(weights), statistic) == expected


def test_weighted_statistic_of_no_weight_is_nan_and_bad_names_raise():
    assert math.isnan(weighted_statistic(np.array([1.0]), np.array([0]), "mean"))
    with pytest.raises(ValueError):
        weighted_statistic(np.array([1.0]), np.array([1]), "median")
    with pytest.raises(ValueError):
        weighted_statistic(np.array([1.0]), np.array([1]), "p101")


def test_samples_sort_drop_nan_and_number_groups():
    s = Samples.of([3.0, math.nan, 1.0, 2.0], groups=np.array([7, 7, 9, 7]))
    assert s.values.tolist() == [1.0, 2.0, 3.0]
    assert s.groups is not None and s.groups.tolist() == [1, 0, 0] and s.n_groups == 2
    assert statistic_of(s, "mean") == 2.0


def normal(mean: float, n: int, seed: int) -> Samples:
    return Samples.of(np.random.default_rng(seed).normal(mean, 10.0, n))


def test_a_real_shift_is_outside_noise_and_no_shift_is_within():
    shifted = bootstrap_delta(normal(100, 400, 1), normal(110, 400, 2), "mean")
    assert shifted.low > 0 and shifted.delta == pytest.approx(10, abs=2.5)
    assert shifted.verdict(higher_is_better=False) == "worse"
    assert shifted.verdict(higher_is_better=True) == "better"
    same = bootstrap_delta(normal(100, 400, 1), normal(100, 400, 3), "p50")
    assert same.low < 0 < same.high
    assert same.verdict(higher_is_better=False) == "within noise"


def test_the_interval_covers_the_true_difference_about_as_often_as_it_claims():
    hits = 0
    for i in range(40):
        d = bootstrap_delta(normal(100, 200, 2 * i), normal(103, 200, 2 * i + 1), "mean", resamples=300, seed=i)
        hits += d.low <= 3.0 <= d.high
    assert 33 <= hits <= 40  # 95% of 40 = 38; a binomial spread around it


def test_seeded_and_deterministic():
    a, b = normal(100, 300, 5), normal(104, 300, 6)
    assert bootstrap_delta(a, b, "p99", seed=4) == bootstrap_delta(a, b, "p99", seed=4)
    assert bootstrap_delta(a, b, "p99", seed=4) != bootstrap_delta(a, b, "p99", seed=5)


def test_groups_that_move_together_widen_the_interval():
    """Ten requests of 100 ITLs each, every request at its own speed: resampling requests
    (the groups) admits the spread between requests; resampling gaps alone would not."""
    rng = np.random.default_rng(0)

    def run(seed: int) -> tuple[np.ndarray, np.ndarray]:
        r = np.random.default_rng(seed)
        speeds = r.normal(20.0, 5.0, 10)
        return np.repeat(speeds, 100) + rng.normal(0, 0.5, 1000), np.repeat(np.arange(10), 100)

    (va, ga), (vb, gb) = run(1), run(2)
    grouped = bootstrap_delta(Samples.of(va, ga), Samples.of(vb, gb), "mean")
    loose = bootstrap_delta(Samples.of(va), Samples.of(vb), "mean")
    assert (grouped.high - grouped.low) > 5 * (loose.high - loose.low)


def test_too_few_samples_give_no_interval():
    d = bootstrap_delta(Samples.of([1.0, 2.0]), normal(10, 100, 1), "mean")
    assert math.isnan(d.low) and math.isnan(d.high) and not d.has_interval
    assert d.verdict(True) == "too few samples"
    empty = bootstrap_delta(Samples.of([]), Samples.of([]), "p99")
    assert math.isnan(empty.a) and empty.verdict(False) == "too few samples"


def test_thinning_keeps_whole_groups_and_bounds_the_work():
    values = np.arange(100_000, dtype=float)
    groups = np.repeat(np.arange(1000), 100)
    s = Samples.of(values, groups).thinned(10_000, np.random.default_rng(0))
    assert 9_000 <= len(s) <= 11_000 and len(s) % 100 == 0
    assert s.n_groups == len(s) // 100
    d = bootstrap_delta(Samples.of(values), Samples.of(values + 10_000.0), "mean", max_values=5_000)
    assert d.delta == pytest.approx(10_000.0) and 0 < d.low < d.high


@pytest.mark.parametrize(
    ("low", "high", "higher_is_better", "verdict"),
    [
        (1.0, 2.0, True, "better"),
        (1.0, 2.0, False, "worse"),
        (-2.0, -1.0, True, "worse"),
        (-2.0, -1.0, False, "better"),
        (-1.0, 1.0, True, "within noise"),
        (0.0, 1.0, True, "within noise"),
    ],
)
def test_verdict_only_outside_noise(low, high, higher_is_better, verdict):
    assert Delta(1.0, 2.0, 1.0, low, high).verdict(higher_is_better) == verdict


def test_a_recordings_samples_give_its_summary_figures():
    """The samples a comparison resamples are the summary's own values (one definition)."""
    from pathlib import Path

    from rampwatch.record.analysis import comparison_samples, summarise
    from rampwatch.record.reader import open_recording

    with open_recording(Path(__file__).resolve().parents[1] / "data" / "small.rwrec") as rec:
        samples, summary = comparison_samples(rec), summarise(rec).to_dict()
    for key, (name, statistic) in {
        "mean_ttft_ms": ("ttft_ms", "mean"),
        "mean_tpot_ms": ("tpot_ms", "mean"),
        "mean_itl_ms": ("itl_ms", "mean"),
        "mean_e2el_ms": ("e2el_ms", "mean"),
    }.items():
        assert statistic_of(samples[name], statistic) == pytest.approx(summary[key], rel=1e-9), key
    for key, (name, statistic) in {"p99_ttft_ms": ("ttft_ms", "p99"), "median_itl_ms": ("itl_ms", "p50")}.items():
        assert statistic_of(samples[name], statistic) == pytest.approx(summary[key], rel=0.01), key
    failed = summary["failed"] / (summary["failed"] + summary["completed"]) * 100
    assert statistic_of(samples["error_pct"], "mean") == pytest.approx(failed)
    assert statistic_of(samples["completed_per_s"], "mean") == pytest.approx(summary["request_throughput"], rel=0.02)
    assert sum(samples["completed_per_s"].values) == summary["completed"]


def test_a_long_recordings_itls_are_those_of_a_share_of_its_requests_whole(monkeypatch):
    from pathlib import Path

    import rampwatch.record.analysis as analysis
    from rampwatch.record.reader import open_recording

    with open_recording(Path(__file__).resolve().parents[1] / "data" / "small.rwrec") as rec:
        chunks = {r.id: len(r.chunk_times) for r in rec.requests if r.ok and r.chunk_times}
        everything = analysis.comparison_samples(rec)["itl_ms"]
        monkeypatch.setattr(analysis, "MAX_ITL_REQUESTS", 100)
        share = analysis.comparison_samples(rec)["itl_ms"]
    assert everything.n_groups == len(chunks) and len(everything) == sum(chunks.values())
    assert 50 <= share.n_groups <= 150  # ~100 of the 653 requests
    sizes = np.bincount(share.groups)
    assert set(sizes.tolist()) <= set(chunks.values())  # every kept request with all its gaps


def test_a_change_outside_noise_but_under_one_percent_is_negligible():
    # 0.5% of A's figure, with an interval well clear of 0
    assert Delta(100.0, 100.5, 0.5, 0.3, 0.7).verdict(higher_is_better=False) == "negligible"
    assert Delta(100.0, 101.5, 1.5, 1.3, 1.7).verdict(higher_is_better=False) == "worse"
    assert Delta(100.0, 100.5, 0.5, -0.1, 1.1).verdict(higher_is_better=False) == "within noise"


def test_batched_statistics_equal_one_set_of_weights_at_a_time():
    from rampwatch.record.significance import weighted_statistics

    rng = np.random.default_rng(7)
    values = np.sort(rng.normal(50, 10, 300))
    weights = rng.integers(0, 4, (25, 300))
    weights[3] = 0  # a row without weight
    for statistic in ("mean", "p50", "p90", "p99", "p100"):
        batch = weighted_statistics(values, weights, statistic)
        one_by_one = [weighted_statistic(values, w, statistic) for w in weights]
        assert np.allclose(batch, one_by_one, equal_nan=True), statistic
        assert math.isnan(batch[3])
    # integer weights: the same as repeating each value that many times
    repeated = np.repeat(values, weights[0])
    assert weighted_statistic(values, weights[0], "mean") == pytest.approx(repeated.mean())
    assert weighted_statistic(values, weights[0], "p50") == np.percentile(repeated, 50, method="inverted_cdf")
    assert weighted_statistic(values, weights[0], "p99") == np.percentile(repeated, 99, method="inverted_cdf")


def test_cancelled_requests_are_not_errors_in_a_comparison(tmp_path):
    """A drain policy that cancels is not a server failing: the resampled error rate is
    the summary's (failed over ended), so `compare` of a waited and a cancelled drain
    sees the same 0 % on both sides, not "B worse" on errors."""
    import dataclasses
    from pathlib import Path

    from rampwatch.core.timeline import CANCELLED
    from rampwatch.record.analysis import comparison_samples, summarise
    from rampwatch.record.reader import open_recording
    from rampwatch.record.writer import RecordingWriter
    from tests.synthetic import SyntheticRun, play_synthetic

    class CancelEveryThird:
        def __init__(self, writer):
            self.writer, self.n = writer, 0

        def on_request(self, record):
            self.n += 1
            if self.n % 3 == 0:
                record = dataclasses.replace(record, error_class=CANCELLED, error="cancelled: drain over")
            self.writer.on_request(record)

        def __getattr__(self, name):
            return getattr(self.writer, name)

    path = Path(tmp_path) / "cancelled.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=None)
    play_synthetic(
        SyntheticRun(duration_s=20.0, end_rps=6, mean_chunks=10, error_rate=0.0, seed=5), CancelEveryThird(writer)
    )
    with open_recording(path) as rec:
        samples, summary = comparison_samples(rec), summarise(rec).to_dict()
    assert summary["failed"] == 0 and summary["completed"] > 0
    assert statistic_of(samples["error_pct"], "mean") == 0.0
    assert len(samples["error_pct"].values) == summary["completed"]
