"""A searched sweep's verdict (``load: search``): best by the confirmed max under the SLO,
tied unless the leader's max interval lies above every other's, on rows built by hand
with known answers."""

import pytest

from rampwatch.core.figures.search_best import (
    SEARCH_BEST_RULE,
    MaxInterval,
    choose_search_best,
    max_interval,
    search_verdict_text,
    searched,
)
from rampwatch.core.figures.sweep import BEST_RULE, choose_best
from rampwatch.core.figures.sweep_text import format_table, verdict_text


def searched_row(i, value, step=0.5, gpus=1, out=1000.0, status="done", ci=None, failure=None, **more):
    """A configuration's row as a searched sweep writes it (``search_row``'s figures)."""
    row = {
        "index": i,
        "config": f"--max-num-seqs {8 * 2**i}",
        "command": f"vllm serve m --max-num-seqs {8 * 2**i}",
        "status": status,
        "gpus": gpus,
        "output_tps": out,
        "max_goodput_rps": 1.0,
        "reached": True,
        "search_max": value,
        "search_plus_minus": None if value is None else step,
        "search_failure": failure,
        "search_line": None
        if value is None
        else f"max {value} req/s (± {step}) under SLO ttft_p90<300ms, confirmed by a 20-second hold at {value}",
        **more,
    }
    if ci is not None:  # repeats: the runs' answers' interval
        row.update(ci95={"search_max": ci}, n_runs=3)
    return row


@pytest.mark.parametrize(
    ("rows", "best", "tied", "no_max"),
    [
        pytest.param([searched_row(0, 10.0), searched_row(1, 12.0)], 1, [], [], id="clear-winner"),
        pytest.param([searched_row(0, 10.0, 0.6), searched_row(1, 10.4, 0.6)], None, [1, 0], [], id="tie-within-step"),
        # a hold at 10.5 broke #1's SLO and met #2's: a real difference, at the step's edge
        pytest.param([searched_row(0, 10.0, 0.5), searched_row(1, 10.5, 0.5)], 1, [], [], id="at-the-step-edge"),
        pytest.param(
            [searched_row(0, 10.0, ci=1.0), searched_row(1, 11.0, ci=0.8)], None, [1, 0], [], id="tie-within-repeats"
        ),
        pytest.param([searched_row(0, 10.0, ci=0.3), searched_row(1, 11.0, ci=0.3)], 1, [], [], id="apart-in-repeats"),
        # closed intervals that touch cannot be told apart
        pytest.param([searched_row(0, 10.0, ci=0.5), searched_row(1, 11.0, ci=0.5)], None, [1, 0], [], id="touching"),
        pytest.param(
            [searched_row(0, None, failure="the SLO was already broken at the start (1 req/s)"), searched_row(1, 8.0)],
            1,
            [],
            [0],
            id="could-not-bracket",
        ),
        pytest.param(
            [searched_row(0, None, failure="never broken"), searched_row(1, None, failure="broken at the start")],
            None,
            [],
            [0, 1],
            id="none-bracketed",
        ),
        # equal maxima: the one on fewer GPUs leads, but the two cannot be told apart
        pytest.param(
            [searched_row(0, 10.0, gpus=2), searched_row(1, 10.0, gpus=1)], None, [1, 0], [], id="fewer-gpus-leads"
        ),
        pytest.param(
            [searched_row(0, 10.0, out=900.0), searched_row(1, 10.0, out=1100.0)],
            None,
            [1, 0],
            [],
            id="then-out-tok-s",
        ),
        # the leader is tied only with the ones it cannot be told from
        pytest.param(
            [searched_row(0, 9.0), searched_row(1, 12.0), searched_row(2, 11.8)], None, [1, 2], [], id="tied-subset"
        ),
        pytest.param(
            [searched_row(0, 20.0, status="failed"), searched_row(1, 9.0), searched_row(2, 7.0, status="pending")],
            1,
            [],
            [],
            id="only-completed",
        ),
        # a completed configuration without a search result (the search did not finish)
        pytest.param(
            [{"index": 0, "config": "a", "status": "done", "gpus": 1}, searched_row(1, 9.0)], 1, [], [0], id="no-result"
        ),
        pytest.param([], None, [], [], id="empty"),
    ],
)
def test_the_best_is_the_highest_confirmed_max_beyond_the_intervals(rows, best, tied, no_max):
    verdict = choose_search_best(rows)
    assert verdict == {"best": best, "tied": tied, "no_max": no_max, "not_reached": []}
    assert choose_best(rows, search=True) == verdict


def test_a_fewer_gpus_tie_break_decides_the_best_once_beyond_the_others():
    # #2 and #3 share the highest max; #2 (1 GPU) leads, and both are far above #1 —
    # the leader is still tied with #3, never declared over an equal max
    rows = [searched_row(0, 5.0, gpus=1), searched_row(1, 10.0, gpus=1), searched_row(2, 10.0, gpus=4)]
    assert choose_search_best(rows)["tied"] == [1, 2]
    rows[2]["search_max"] = 9.0  # now below the leader's step
    assert choose_search_best(rows)["best"] == 1


@pytest.mark.parametrize(
    ("row", "interval"),
    [
        (searched_row(0, 10.0, 0.5), MaxInterval(10.0, 10.5, open_top=True)),
        (searched_row(0, 10.0, ci=0.4), MaxInterval(9.6, 10.4)),
        (searched_row(0, None), None),
        ({"search_max": 4.0, "search_plus_minus": None}, MaxInterval(4.0, 4.0)),
    ],
)
def test_max_interval(row, interval):
    assert max_interval(row) == interval


def test_without_search_the_verdict_stays_by_good_put():
    rows = [searched_row(0, 12.0, pareto=True), searched_row(1, 10.0, pareto=True)]
    rows[1]["max_goodput_rps"] = 5.0
    assert choose_best(rows) == {"best": 1, "not_reached": [], "tied": []}


def state_of(rows, **more):
    return {"slo": "ttft_p90<300ms", "rows": rows, "search": {"by": "rate"}, **choose_search_best(rows), **more}


def test_the_verdict_names_the_best_its_confirmed_max_and_the_command():
    rows = [searched_row(0, 10.0), searched_row(1, 12.5, 0.62, gpus=2)]
    lines = search_verdict_text(state_of(rows)).splitlines()
    assert lines[0] == (
        "best under ttft_p90<300ms: #2 --max-num-seqs 16 — max 12.5 req/s (± 0.62) confirmed by a 20-second "
        "hold at 12.5, 6.25 req/s per GPU on 2 GPUs"
    )
    assert lines[1] == "  vllm serve m --max-num-seqs 16"
    assert lines[2] == ("  its max lies above every other's interval; next: #1 --max-num-seqs 8 — max 10 req/s (± 0.5)")
    assert verdict_text(state_of(rows)) == "\n".join(lines)  # the sweep's end words it the same


def test_the_verdict_with_repeats_gives_the_interval_of_the_runs():
    rows = [searched_row(0, 10.0, ci=0.3), searched_row(1, 11.0, ci=0.3)]
    first = search_verdict_text(state_of(rows)).splitlines()[0]
    assert (
        "#2 --max-num-seqs 16 — max 11 req/s (± 0.3, 95 % over 3 runs) confirmed by a hold in each of its 3 runs"
        in (first)
    )


@pytest.mark.parametrize(
    ("rows", "says"),
    [
        (
            [searched_row(0, 10.0, gpus=2), searched_row(1, 10.0)],
            "best under ttft_p90<300ms: tied — #2 --max-num-seqs 16 (max 10 req/s (± 0.5), 10 req/s per GPU on 1 GPU), "
            "#1 --max-num-seqs 8 (max 10 req/s (± 0.5), 5 req/s per GPU on 2 GPUs): their max intervals overlap, "
            "so no single best (a finer tolerance narrows them)",
        ),
        (
            [searched_row(0, 10.0, ci=1.0), searched_row(1, 10.5, ci=1.0)],
            "(more repeats narrow them)",
        ),
        (
            [searched_row(0, None, failure="the SLO was already broken at the start (1 req/s)")],
            "best under ttft_p90<300ms: none — no configuration's search found a max under the SLO (each says why below)\n"
            "#1 --max-num-seqs 8: no max under the SLO — the SLO was already broken at the start (1 req/s) — not judged",
        ),
        ([searched_row(0, 10.0, status="failed")], "best under ttft_p90<300ms: none — no configuration completed"),
    ],
)
def test_the_verdict_when_there_is_no_single_best(rows, says):
    assert says in search_verdict_text(state_of(rows))


def test_a_simulator_sweep_pastes_the_vllm_line_first():
    row = searched_row(0, 4.0, vllm_command="vllm serve M --max-num-seqs 8")
    row["command"] = "rampwatch sim --max-num-seqs 8"
    lines = search_verdict_text(state_of([row])).splitlines()
    assert lines[1:] == ["  vllm serve M --max-num-seqs 8", "  (simulator: rampwatch sim --max-num-seqs 8)"]


def test_a_searched_sweep_is_known_by_its_plan_or_its_rows():
    assert searched({"rows": [], "search": {"by": "rate"}})
    assert searched({"rows": [searched_row(0, None)]})
    assert not searched({"rows": [{"index": 0, "status": "done"}]})


def test_the_legend_states_the_search_rule_only_for_a_searched_sweep():
    rows = [searched_row(0, 10.0), searched_row(1, 12.0)]
    legend = format_table(rows)
    assert SEARCH_BEST_RULE in legend and BEST_RULE not in legend
    rows[0].update(ci95={"search_max": 0.3})
    assert "a best only when its max-under-SLO interval lies above every other's" in format_table(rows)
    plain = format_table([{"index": 0, "config": "a", "status": "done"}])
    assert BEST_RULE in plain and SEARCH_BEST_RULE not in plain
