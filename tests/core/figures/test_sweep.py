"""A sweep's figures: good requests and good-put, a configuration's row from its records,
the mean and 95 % interval of repeats, the Pareto front and the best configuration."""

import math

import pytest

from rampwatch.core.figures.slo import parse_slo
from rampwatch.core.figures.sweep import (
    choose_best,
    combine_runs,
    config_row,
    good_requests,
    knee_uncertainty,
    mark_pareto,
    max_window_rate,
    pareto_front,
    peak_target_rps,
)
from rampwatch.core.timeline import Event
from tests.core.figures.sweep_rows import ISSUE_SWEEP, config, req


@pytest.mark.parametrize(
    ("points", "front"),
    [
        ([(1, 1), (2, 2)], [False, True]),
        ([(1, 3), (3, 1), (2, 2)], [True, True, True]),
        ([(1, 3), (3, 1), (1, 1)], [True, True, False]),
        ([(2, 2), (2, 2)], [True, True]),  # equal points do not dominate each other
        ([(2, 2), (2, 1)], [True, False]),  # as good on one axis, worse on the other
        ([(None, 5), (1, 1)], [False, True]),
        ([(math.nan, 5), (1, 1)], [False, True]),
    ],
)
def test_pareto_front(points, front):
    assert pareto_front(points) == front


@pytest.mark.parametrize(
    ("rows", "best", "not_reached"),
    [
        (ISSUE_SWEEP, 3, [2]),  # the one on the front: never the unloaded #3
        ([config(3.0, 900, 50), config(5.0, 1000, 60)], 1, []),
        ([config(9.0, 500, 50, status="failed"), config(5.0, 400, 40)], 1, []),
        ([config(0.0, 500, 50)], None, []),  # no good request
        ([config(15.0, 966, 85, reached=False), config(9.0, 900, 80, reached=False)], None, [0, 1]),
        # more good-put but dominated on both axes of the front: not best
        ([config(10.0, 1000, 50), config(8.0, 1100, 60)], 1, []),
        # both on the front (one faster per user, one more throughput): the higher good-put
        ([config(6.0, 1500, 40), config(8.0, 1000, 90)], 1, []),
        # the same figures: fewer GPUs are more tok/s per GPU, hence the front
        ([config(5.0, 1000, 60, gpus=2), config(5.0, 1000, 60, gpus=1)], 1, []),
        # the SLO broken without a knee is a limit reached
        ([config(4.0, 800, 70, reached=True, slo_broken_at_end="TTFT p99 900 ms > 500 ms")], 0, []),
    ],
)
def test_the_best_is_on_the_front_of_the_configurations_loaded_to_their_limit(rows, best, not_reached):
    rows = [dict(row, index=i) for i, row in enumerate(rows)]
    mark_pareto(rows)
    verdict = choose_best(rows)
    assert (verdict["best"], verdict["not_reached"]) == (best, not_reached)
    if best is not None:
        assert rows[best]["pareto"] and rows[best]["reached"]  # never dominated, never unloaded


def test_an_unloaded_configuration_is_off_the_front_whatever_its_figures():
    rows = [dict(row, index=i) for i, row in enumerate(ISSUE_SWEEP)]
    mark_pareto(rows)
    assert [row["pareto"] for row in rows] == [False, False, False, True]


@pytest.mark.parametrize(
    ("intervals", "best", "tied"),
    [
        ([(5.5, 0.5), (4.75, 0.8), (1.5, 0.5)], None, [0, 1]),  # #2 reaches into #1's interval: tied
        ([(5.5, 0.5), (3.95, 0.5), (1.5, 0.5)], 0, []),  # #1's interval lies above every other's
        ([(5.5, 0.5), (5.1, None), (1.5, 0.5)], None, [0, 1]),  # a figure without interval is its value
        ([(5.5, 0.5), (5.2, 0.1), (5.1, 0.5)], None, [0, 1, 2]),  # every overlapping one is named
    ],
)
def test_a_best_is_declared_only_when_its_good_put_interval_lies_above_every_other(intervals, best, tied):
    rows = [
        dict(
            config(mean, 1000 - 100 * i, 60 + 10 * i),
            index=i,
            ci95={} if half is None else {"max_goodput_rps": half},
        )
        for i, (mean, half) in enumerate(intervals)
    ]
    mark_pareto(rows)
    assert all(row["pareto"] for row in rows)
    verdict = choose_best(rows)
    assert (verdict["best"], verdict["tied"]) == (best, tied)


def test_a_configuration_off_the_front_by_its_means_still_ties_when_its_interval_reaches_the_leaders():
    # #2 is dominated by #1's means (fewer tok/s per GPU and per user) but its good-put
    # interval (3.5 ± 1.9) reaches into #1's (4.0 ± 1.0): the front is no verdict on noise
    rows = [
        dict(config(4.0, 1000, 60), index=0, ci95={"max_goodput_rps": 1.0}),
        dict(config(3.5, 900, 50), index=1, ci95={"max_goodput_rps": 1.9}),
        dict(config(1.0, 800, 40), index=2, ci95={"max_goodput_rps": 0.5}),
    ]
    mark_pareto(rows)
    assert [row["pareto"] for row in rows] == [True, False, False]
    assert choose_best(rows) == {"best": None, "not_reached": [], "tied": [0, 1]}


def test_without_repeats_the_best_is_the_highest_good_put_however_close():
    rows = [dict(config(5.5, 1000, 60), index=0), dict(config(5.49, 900, 70), index=1)]
    mark_pareto(rows)
    assert choose_best(rows) == {"best": 0, "not_reached": [], "tied": []}


def test_combine_runs_gives_means_intervals_spreads_and_reached_only_when_every_run_was():
    runs = [
        {"knee_rps": 10.0, "knee_rps_pm": 1.0, "max_goodput_rps": 5.0, "output_tps": 900.0, "reached": True,
         "limit": "batch-size cap", "limit_key": "batch_cap", "try_next": "--max-num-seqs 16", "peak_kv_pct": 3.0},
        {"knee_rps": 12.0, "knee_rps_pm": 1.4, "max_goodput_rps": 6.0, "output_tps": 1000.0, "reached": True,
         "limit": "batch-size cap", "limit_key": "batch_cap", "try_next": "--max-num-seqs 16", "peak_kv_pct": 5.0},
        {"knee_rps": 11.0, "knee_rps_pm": 1.2, "max_goodput_rps": 7.0, "output_tps": 920.0, "reached": True,
         "limit": "undetermined", "limit_key": "undetermined", "try_next": None, "peak_kv_pct": 4.0},
    ]  # fmt: skip
    row = combine_runs(runs)
    assert (row["knee_rps"], row["knee_rps_pm"], row["max_goodput_rps"]) == (11.0, pytest.approx(1.2), 6.0)
    assert row["output_tps"] == pytest.approx(940.0)  # the mean, not the median (920)
    # s = 1 over 3 runs: t(0.975, 2) · 1 / sqrt(3)
    assert row["ci95"]["knee_rps"] == pytest.approx(4.303 / math.sqrt(3), rel=1e-4)
    assert row["ci95"]["max_goodput_rps"] == pytest.approx(4.303 / math.sqrt(3), rel=1e-4)
    assert set(row["ci95"]) == {"knee_rps", "knee_rps_pm", "max_goodput_rps", "output_tps", "peak_kv_pct"}
    assert row["n_runs"] == 3
    assert row["spread"] == {"knee_rps": [10.0, 12.0], "max_goodput_rps": [5.0, 7.0], "output_tps": [900.0, 1000.0]}
    assert (row["limit"], row["try_next"], row["reached"]) == ("batch-size cap", "--max-num-seqs 16", True)
    assert not combine_runs([*runs[:2], {**runs[2], "reached": False, "knee_rps": None}])["reached"]
    assert combine_runs(runs[:1]) == runs[0]


def test_combine_runs_interval_contains_each_run_when_centred_on_their_mean():
    runs = [{"max_goodput_rps": v, "reached": True} for v in (4.0, 5.0, 9.0)]
    row = combine_runs(runs)
    lo, hi = (
        row["max_goodput_rps"] - row["ci95"]["max_goodput_rps"],
        row["max_goodput_rps"] + row["ci95"]["max_goodput_rps"],
    )
    assert row["max_goodput_rps"] == pytest.approx(6.0) and lo < 6.0 < hi


@pytest.mark.parametrize(
    ("schedule", "t", "peak"),
    [
        ({"kind": "linear", "start_rps": 1.0, "end_rps": 21.0, "duration_s": 40.0}, 20.0, 11.0),
        ({"kind": "linear", "start_rps": 1.0, "end_rps": 21.0, "duration_s": 40.0}, 45.0, 21.0),  # drained past it
        ({"kind": "steps", "steps": [{"rate": 2.0, "duration_s": 10}, {"rate": 4.0, "duration_s": 10}]}, 12.0, 4.0),
        ({"kind": "steps", "steps": [{"rate": 2.0, "duration_s": 10}, {"rate": 4.0, "duration_s": 10}]}, 5.0, 2.0),
    ],
)
def test_peak_target_rps(schedule, t, peak):
    assert peak_target_rps(schedule, t) == pytest.approx(peak)


@pytest.mark.parametrize(
    ("knee", "offered_range", "pm"),
    [(11.5, [10.3, 12.7], 1.2), (11.5, [11.0, 14.5], 3.0), (11.5, None, None), (None, [1, 2], None)],
)
def test_knee_uncertainty_covers_the_window_on_either_side(knee, offered_range, pm):
    assert knee_uncertainty(knee, offered_range) == (None if pm is None else pytest.approx(pm))


@pytest.mark.parametrize(
    ("times", "window", "rate"),
    [([], 10.0, 0.0), ([0.0, 1.0, 2.0], 10.0, 0.3), ([0, 1, 2, 20, 20.5, 21, 21.5], 2.0, 2.0), ([0, 10], 10.0, 0.1)],
)
def test_max_window_rate(times, window, rate):
    assert max_window_rate(times, window) == pytest.approx(rate)


def test_good_requests_follow_vllm_goodput():
    slo = parse_slo("ttft_p99<500ms,itl_p99<50ms")
    records = [
        req(0, 0.0, 0.2, 0.2 + 10 * 0.04),  # good
        req(1, 0.0, 0.6, 0.6 + 10 * 0.04),  # TTFT over
        req(2, 0.0, 0.2, 0.2 + 10 * 0.06),  # TPOT over
        req(3, 0.0, None, 1.0, ok=False),  # failed
        req(4, 0.0, 0.5, 0.5 + 10 * 0.05),  # equal to both limits: good, as --goodput
    ]
    assert good_requests(records, slo).tolist() == [True, False, False, False, True]


def test_config_row_reads_the_knee_window_and_its_explanation():
    slo = parse_slo("ttft_p99<500ms,itl_p99<50ms")
    records = [req(i, i * 0.5, 0.125, i * 0.5 + 0.375) for i in range(40)]  # 2 req/s, 0..20 s (binary-exact times)
    knee = Event(
        15.0,
        "knee",
        "knee",
        {"offered_rps": 2.0, "onset_t": 10.0, "explanation": {"limit": "batch_cap", "try": "--max-num-seqs 16"}},
    )
    row = config_row(records, [], [knee], slo)
    assert row["knee_rps"] == 2.0 and row["knee_t"] == 10.0
    assert row["limit"] == "batch-size cap" and row["try_next"] == "--max-num-seqs 16"
    assert row["ttft_p50_ms"] == pytest.approx(125.0)
    assert row["itl_p50_ms"] == pytest.approx(25.0)
    # delivered from the onset (10 s) to the last answer (19.875 s): 20 requests of 11 tokens
    assert row["output_tps"] == pytest.approx(20 * 11 / 9.875)
    assert row["tps_per_user"] == pytest.approx(11 / 0.375)
    assert row["max_goodput_rps"] == pytest.approx(2.0)
    # the seconds after the knee settled another limit: the row gives the settled one
    review = Event(
        45.0,
        "info",
        "knee revised",
        {
            "knee_review": True,
            "knee_t": 15.0,
            "explanation": {"limit": "kv_full", "try": "--gpu-memory-utilization 0.95"},
            "revised": True,
        },
    )
    settled = config_row(records, [], [knee, review], slo)
    assert settled["limit"] == "KV cache full" and settled["try_next"] == "--gpu-memory-utilization 0.95"
    no_knee = config_row(records, [], [], slo, load_end_s=20.0)
    assert no_knee["knee_rps"] is None and no_knee["limit"] is None
    # the load's last 10 s: sends up to 19.5 s, answers ending in [9.5, 19.5]: 20 of them (i = 19..38)
    assert no_knee["output_tps"] == pytest.approx(20 * 11 / 10)
