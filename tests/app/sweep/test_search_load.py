"""`load: search` in a sweep file: each configuration searches its max rate under the
sweep's SLO; the table shows it as "max ± step"; bad keys name their line."""

import pytest

from rampwatch.app.sweep.spec import load_sweep
from rampwatch.core.errors import UserError
from rampwatch.core.figures.search import Tolerance
from rampwatch.core.figures.sweep import combine_runs
from rampwatch.core.figures.sweep_text import format_table
from tests.app.sweep.sweep_files import GOOD_SWEEP, write


def with_search(search: str) -> str:
    return GOOD_SWEEP + f"  search: {search}\nslo: ttft_p90<300ms\n"


def test_a_sweep_without_search_has_none(tmp_path):
    assert load_sweep(write(tmp_path, GOOD_SWEEP)).search is None


@pytest.mark.parametrize(
    ("search", "tolerance", "hold"),
    [("true", Tolerance(0.05, True), None), ("{tolerance: 0.5, hold_s: 8}", Tolerance(0.5), 8.0)],
)
def test_load_search_gives_each_configuration_a_search(tmp_path, search, tolerance, hold):
    spec = load_sweep(write(tmp_path, with_search(search)))
    assert spec.search is not None and spec.search.slo.text == "ttft_p90<300ms"
    assert spec.search.tolerance == tolerance and spec.search.hold_s == hold
    assert spec.schedule["kind"] == "linear"  # the ramp brackets each configuration's answer


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (with_search("{tolerance: fast}"), "load.search.tolerance: 'fast': expected a step"),
        (with_search("{hold_s: -1}"), "load.search.hold_s: expected a number > 0"),
        (with_search("{holds: 3}"), "load.search.holds: unknown key"),
        (
            GOOD_SWEEP.replace("  ramp: {start_rps: 1, end_rps: 20, duration_s: 30}", "  rates: [2, 4]\n  hold_s: 5")
            + "  search: true\n",
            "load.search: searches over a ramp",
        ),
    ],
)
def test_a_bad_search_names_its_key(tmp_path, text, says):
    with pytest.raises(UserError) as err:
        load_sweep(write(tmp_path, text))
    assert says in str(err.value), str(err.value)


def test_the_table_shows_the_max_under_the_slo():
    rows = [
        {"index": 0, "config": "a", "status": "done", "search_max": 12.5, "search_plus_minus": 0.62},
        {"index": 1, "config": "b", "status": "done", "search_max": None, "search_failure": "broken at the start"},
    ]
    lines = format_table(rows).splitlines()
    assert "max under SLO" in lines[0]
    assert "12.5 ± 0.62" in lines[1] and "none" in lines[2]
    plain = format_table([{"index": 0, "config": "a", "status": "done"}])
    assert "max under SLO" not in plain


def test_with_repeats_the_max_under_the_slo_is_the_mean_and_interval_of_the_runs_answers():
    runs = [{"status": "done", "search_max": m, "search_plus_minus": 0.5} for m in (10.0, 11.0, 12.0)]
    row = {"index": 0, "config": "a", **combine_runs(runs)}
    assert row["search_max"] == pytest.approx(11.0)
    half = row["ci95"]["search_max"]
    assert half == pytest.approx(4.303 / 3**0.5, rel=1e-3)  # t(0.975, 2) × s / √n, s = 1
    assert f"11.00 ±{half:.2f}" in format_table([row]).splitlines()[1]


def test_with_repeats_a_run_that_could_not_bracket_leaves_no_max():
    runs = [
        {"status": "done", "search_max": 10.0, "search_plus_minus": 0.5},
        {"status": "done", "search_max": None, "search_failure": "the SLO was broken at the start"},
    ]
    row = {"index": 0, "config": "a", **combine_runs(runs)}
    assert row["search_max"] is None and "search_max" not in row["ci95"]
    assert row["search_failure"] == "1 of 2 runs: the SLO was broken at the start"
    assert "none" in format_table([row]).splitlines()[1]
