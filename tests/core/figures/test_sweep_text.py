"""A sweep's figures in words: the table's cells and columns, the text plane's labels and
the verdict."""

import pytest

from rampwatch.core.figures.sweep import choose_best, mark_pareto
from rampwatch.core.figures.sweep_text import (
    NOT_REACHED,
    format_pareto,
    format_table,
    place_labels,
    table_cells,
    verdict_text,
)
from tests.core.figures.sweep_rows import ISSUE_SWEEP, config


@pytest.mark.parametrize(
    ("figures", "knee", "limit"),
    [
        (
            {"knee_rps": 11.5, "knee_rps_pm": 1.24, "reached": True, "limit": "KV cache full"},
            "11.5 ±1.2",
            "KV cache full",
        ),
        ({"knee_rps": None, "reached": False, "peak_offered_rps": 24.0}, ">24.0", NOT_REACHED),
        (
            {"knee_rps": None, "reached": True, "slo_broken_at_end": "TTFT p99 900 ms > 500 ms"},
            "none",
            "SLO broken, no knee",
        ),
        (
            {"knee_rps": 11.0, "knee_rps_pm": 1.2, "reached": True, "spread": {"knee_rps": [10.0, 12.0]}},
            "11.0 ±1.2 (10.0–12.0)",
            "—",
        ),
    ],
)
def test_the_table_says_the_knee_with_its_uncertainty_and_an_unloaded_configuration(figures, knee, limit):
    rows = [{"index": 0, "config": "--max-num-seqs 8", "status": "done", **figures}]
    header, cells = table_cells(rows)
    assert cells[header.index("knee rps")] == knee and cells[header.index("limit")] == limit


def test_labels_of_close_points_do_not_print_as_one_number():
    placed = place_labels([(3, 10, "2"), (3, 11, "3*"), (3, 10, "4")], width=20, height=6)
    cells = [(r, c + k) for r, c, label in placed for k in range(len(label))]
    assert len(cells) == len(set(cells))  # no cell written twice
    for (r, c, _), (r2, c2, _) in zip(placed, placed[1:], strict=False):
        assert r != r2 or abs(c - c2) > 1  # and a blank between neighbours on a line
    assert placed[0] == (3, 10, "2")  # the first keeps its place


def test_the_text_plane_brackets_an_unloaded_configuration():
    rows = [dict(row, index=i, config=f"c{i}") for i, row in enumerate(ISSUE_SWEEP)]
    mark_pareto(rows)
    text = format_pareto(rows)
    assert "(3)" in text and "4*" in text and "* on the Pareto front: #4" in text
    assert "(n): not loaded to its limit" in text


def test_format_table_marks_the_front_and_says_why_a_row_failed():
    rows = [
        {
            "index": 0,
            "config": "--max-num-seqs 8",
            "status": "done",
            "pareto": True,
            "knee_rps": 4.0,
            "limit": "batch-size cap",
        },
        {
            "index": 1,
            "config": "--max-num-seqs 64",
            "status": "failed",
            "reason": "server exited with code 1 during startup: OOM",
        },
    ]
    text = format_table(rows)
    lines = text.splitlines()
    assert lines[1].startswith("1*") and lines[1].endswith("batch-size cap")
    assert lines[2].startswith("2 ") and lines[2].endswith("failed")
    assert lines[3] == "#2 failed: server exited with code 1 during startup: OOM"


def test_the_tokens_per_joule_column_shows_only_with_gpu_power():
    rows = [{"index": 0, "config": "--max-num-seqs 8", "status": "done", "reached": True, "tokens_per_joule": None}]
    assert "tok/J" not in format_table(rows)
    rows.append(
        {"index": 1, "config": "--max-num-seqs 64", "status": "done", "reached": True, "tokens_per_joule": 1.234}
    )
    header, first, second = format_table(rows).splitlines()[:3]
    assert "tok/J" in header and first.split()[-2] == "—" and second.split()[-2] == "1.23"


def verdict_of(rows, repeats=1):
    rows = [
        dict(row, index=i, config=f"--max-num-seqs {4 * 2**i}", command="vllm serve m") for i, row in enumerate(rows)
    ]
    mark_pareto(rows)
    state = {"slo": "ttft_p99<500ms", "rows": rows, "repeats": repeats, **choose_best(rows)}
    return verdict_text(state).splitlines()


@pytest.mark.parametrize(
    ("rows", "repeats", "lines"),
    [
        (
            [
                dict(row, knee_rps=10.0 if row["reached"] else None, knee_rps_pm=1.5, peak_offered_rps=40.0)
                for row in ISSUE_SWEEP
            ],
            1,
            [
                "best under ttft_p99<500ms (of those loaded to their limit, on the Pareto front, the highest max "
                "good-put): #4 --max-num-seqs 32 — 5.5 good req/s, knee 10.0 ±1.5 rps",
                "  vllm serve m",
                "#3 --max-num-seqs 16: not reached; extend the load (kept up to 40.0 rps offered) — not judged",
            ],
        ),
        (
            [config(15.0, 966, 85, reached=False, peak_offered_rps=40.0)],
            1,
            [
                "best under ttft_p99<500ms: none — no configuration was loaded to its limit: extend the load "
                "(a higher end_rps or longer ramp)",
                "#1 --max-num-seqs 4: not reached; extend the load (kept up to 40.0 rps offered) — not judged",
            ],
        ),
        (
            [config(None, None, None, status="failed"), config(0.0, 500, 50, knee_rps=3.0)],
            1,
            ["best under ttft_p99<500ms: none — no configuration loaded to its limit served a request meeting the SLO"],
        ),
        (
            [config(None, None, None, status="failed")],
            1,
            ["best under ttft_p99<500ms: none — no configuration completed"],
        ),
        (
            [
                config(5.5, 1000, 60, knee_rps=8.0, ci95={"max_goodput_rps": 0.5}),
                config(5.2, 900, 70, knee_rps=7.0, ci95={"max_goodput_rps": 0.4}),
            ],
            3,
            [
                "best under ttft_p99<500ms: tied — #1 --max-num-seqs 4 (5.5 ±0.5), #2 --max-num-seqs 8 (5.2 ±0.4) "
                "good req/s: their max good-put intervals over 3 runs overlap, so no single best (more repeats "
                "narrow the intervals)",
            ],
        ),
        (
            [
                config(5.5, 1000, 60, knee_rps=8.0, ci95={"max_goodput_rps": 0.3}),
                config(4.2, 900, 70, knee_rps=7.0, ci95={"max_goodput_rps": 0.4}),
            ],
            3,
            [
                "best under ttft_p99<500ms (of those loaded to their limit, on the Pareto front, the highest max "
                "good-put): #1 --max-num-seqs 4 — 5.5 good req/s, knee 8.0 rps",
                "  vllm serve m",
                "  its max good-put 5.5 ±0.3 req/s (mean ± 95 % over 3 runs) lies above every other loaded "
                "configuration's interval",
            ],
        ),
        (  # the best's p99 at its knee breaks the SLO its good-put was judged by: said, not left to contradict it
            [config(7.6, 1640, 86, knee_rps=10.8, ttft_p99_ms=814.0, ttft_p50_ms=371.0)],
            1,
            [
                "best under ttft_p99<500ms (of those loaded to their limit, on the Pareto front, the highest max "
                "good-put): #1 --max-num-seqs 4 — 7.6 good req/s, knee 10.8 rps",
                "  vllm serve m",
                "  at its knee #1 breaks the SLO (TTFT p99 814 ms > 500 ms): good-put judges each request against "
                "the bounds, so run it at its max good-put (7.6 req/s), not its knee",
            ],
        ),
    ],
)
def test_the_verdict_names_the_best_what_it_cannot_tell_apart_and_what_was_not_judged(rows, repeats, lines):
    assert verdict_of(rows, repeats) == lines


def test_repeated_rows_show_mean_and_interval_in_the_table_and_the_plane():
    rows = [
        dict(
            config(5.5, 1000.0, 60.0, knee_rps=8.0, knee_rps_pm=1.0, ttft_p99_ms=420.0),
            index=0,
            config="--max-num-seqs 4",
            ci95={
                "max_goodput_rps": 0.3,
                "knee_rps": 0.6,
                "output_tps": 40.0,
                "tps_per_user": 2.5,
                "ttft_p99_ms": 31.0,
            },
            spread={"max_goodput_rps": [5.2, 5.8]},
        )
    ]
    mark_pareto(rows)
    table = format_table(rows)
    cells = dict(zip(table_cells(rows)[0], table_cells(rows)[1], strict=True))
    assert cells["knee rps"] == "8.0 ±0.6"  # the repeats' interval, not one run's window
    assert (cells["good-put"], cells["out tok/s"], cells["tok/s/user"], cells["TTFT p99"]) == (
        "5.5 ±0.3", "1000.0 ±40.0", "60.0 ±2.5", "420 ±31"
    )  # fmt: skip
    assert "with repeats: each figure the mean of the runs ± the half-width of its 95 % interval" in table
    assert " #1: tok/s/user 60.0 ±2.5, tok/s/GPU 1000 ±40 (mean ± 95 %)" in format_pareto(rows)


def test_a_sweep_without_repeats_has_no_interval_anywhere():
    rows = [dict(config(5.5, 1000.0, 60.0, knee_rps=8.0), index=0, config="--max-num-seqs 4")]
    mark_pareto(rows)
    assert "±" not in format_table(rows).split("\n\n")[0] and "mean ± 95" not in format_pareto(rows)
    assert "with repeats" not in format_table(rows)


def test_the_end_lines_give_a_repeated_knee_the_runs_interval_as_the_table_does():
    # review: the table said "10.2 ±3.7" (the runs' interval) while the verdict and the
    # "[3/3] done" line said "knee 10.2 ±5.5 rps" (the runs' mean window range)
    from rampwatch.core.figures.sweep_text import knee_text

    row = dict(
        config(8.7, 985.0, 92.0, knee_rps=10.2, knee_rps_pm=5.5),
        index=0,
        config="--max-num-seqs 8",
        ci95={"knee_rps": 3.7, "max_goodput_rps": 9.5},
    )
    cells = dict(zip(*table_cells([row]), strict=True))
    assert cells["knee rps"] == "10.2 ±3.7" and knee_text(row) == "10.2 ±3.7 rps"
    assert knee_text(dict(row, ci95=None)) == "10.2 ±5.5 rps"  # one run: its window's range
