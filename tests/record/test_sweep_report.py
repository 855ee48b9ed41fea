"""sweep.html: the plot's labels and points, and the verdict as the sweep's end words it."""

import html
import re

from rampwatch.core.figures.sweep import mark_pareto
from rampwatch.core.figures.sweep_text import verdict_text
from rampwatch.record.sweep_report import LABEL_CHAR_W, LABEL_H, label_positions, render_sweep_html


def row(i, out, per_user, reached=True, goodput=5.0):
    return {
        "index": i,
        "config": f"--max-num-seqs {4 * 2**i}",
        "command": f"rampwatch sim --max-num-seqs {4 * 2**i}",
        "status": "done",
        "reached": reached,
        "knee_rps": 5.0 if reached else None,
        "peak_offered_rps": 20.0,
        "max_goodput_rps": goodput,
        "output_tps": out,
        "tps_per_user": per_user,
        "gpus": 1,
    }


def boxes(placed, labels):
    return [
        (x, y - LABEL_H + 3, x + LABEL_CHAR_W * len(text), y + 3) for (x, y), text in zip(placed, labels, strict=True)
    ]


def test_labels_of_close_points_do_not_overlap():
    # sweep-sim's #2 and #3 landed a few pixels apart and printed as "#2#3"
    points = [(400.0, 200.0, "#2"), (404.0, 201.0, "#3"), (402.0, 199.0, "#4 (not reached)")]
    placed = label_positions(points)
    assert placed[0] == (407.0, 194.0)  # the first keeps its place: up and right of its point
    b = boxes(placed, [p[2] for p in points])
    for i in range(len(b)):
        for j in range(i):
            overlap = b[i][0] < b[j][2] and b[j][0] < b[i][2] and b[i][1] < b[j][3] and b[j][1] < b[i][3]
            assert not overlap, (points[i], points[j])


def test_the_report_draws_an_unloaded_configuration_hollow_and_states_the_rule():
    rows = [row(0, 900.0, 60.0), row(1, 800.0, 90.0, reached=False, goodput=9.0), row(2, 1100.0, 70.0)]
    mark_pareto(rows)
    state = {"sweep": "s", "serve": "rampwatch sim", "slo": "ttft_p99<500ms", "rows": rows, "best": 2}
    state["not_reached"] = [1]
    page = render_sweep_html(state)
    circles = re.findall(r"<circle [^>]*>", page)
    assert len(circles) == 3 and sum('fill="#ffffff"' in c for c in circles) == 1
    assert "#2 (not reached)" in page
    assert "a configuration whose load never reached its limit is never best" in page
    assert all(html.escape(line) in page for line in verdict_text(state).splitlines())


def test_repeated_configurations_get_interval_whiskers_and_the_repeats_legend():
    rows = [row(0, 1000.0, 60.0), row(1, 900.0, 70.0)]
    mark_pareto(rows)
    plain = render_sweep_html({"rows": rows, "slo": "ttft_p99<500ms", "best": 0})
    assert 'class="ci"' not in plain and "with repeats" not in plain
    rows[0]["ci95"] = {"tps_per_user": 2.0, "output_tps": 50.0, "max_goodput_rps": 0.4}
    page = render_sweep_html({"rows": rows, "slo": "ttft_p99<500ms", "best": 0})
    assert page.count('class="ci"') == 2  # across (tok/s/user) and up (tok/s per GPU), for #1 only
    assert "with repeats: each figure the mean of the runs ± the half-width of its 95 % interval" in html.unescape(page)
    assert "60.0 ±2.0" in page


def test_a_searched_sweep_states_the_search_rule_and_its_verdict():
    from rampwatch.core.figures.search_best import SEARCH_BEST_RULE, choose_search_best
    from rampwatch.core.figures.sweep import BEST_RULE

    rows = [row(0, 900.0, 60.0), row(1, 1000.0, 50.0)]
    rows[0].update(search_max=8.0, search_plus_minus=0.5, search_failure=None)
    rows[1].update(search_max=None, search_plus_minus=None, search_failure="the SLO was already broken at the start")
    mark_pareto(rows)
    state = {"rows": rows, "slo": "ttft_p90<300ms", "search": {"by": "rate"}, **choose_search_best(rows)}
    page = html.unescape(render_sweep_html(state))
    assert SEARCH_BEST_RULE in page and BEST_RULE not in page
    assert "best under ttft_p90<300ms: #1 --max-num-seqs 4 — max 8 req/s (± 0.5)" in page
    assert "#2 --max-num-seqs 8: no max under the SLO — the SLO was already broken at the start — not judged" in page
