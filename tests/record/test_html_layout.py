"""The HTML reports' layout: fluid width (an 800 px window never scrolls sideways; the
SVGs scale with their frames) and chart labels that never overprint each other."""

from __future__ import annotations

import re

import pytest

from rampwatch.core.timeline import Event
from rampwatch.record.html_report import MARK_CHAR_PX, label_rows, page_style, svg_chart
from rampwatch.record.sweep_report import render_sweep_html
from tests.record.test_html_report import _chart, report


def label_boxes(svg: str, css_class: str) -> list[tuple[float, float, float, str]]:
    """(left, right, baseline, text) of each label of ``css_class``."""
    found = re.findall(rf'<text class="{css_class}" x="([0-9.]+)" y="([0-9.]+)"[^>]*>([^<]*)</text>', svg)
    return [(float(x), float(x) + MARK_CHAR_PX * len(text), float(y), text) for x, y, text in found]


def overlapping(boxes) -> list[tuple[str, str]]:
    return [
        (a[3], b[3])
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if a[2] == b[2] and a[0] < b[1] and b[0] < a[1]
    ]


@pytest.mark.parametrize(
    "labels, rows",
    [
        ([(100.0, "hold"), (400.0, "resume")], [0, 0]),  # far apart: one row
        ([(100.0, "resume"), (108.0, "raised max-num-seqs")], [0, 1]),  # a second apart: stacked
        ([(100.0, "hold"), (105.0, "resume"), (110.0, "knee")], [0, 1, 2]),
        ([(100.0, "hold"), (105.0, "resume"), (200.0, "knee")], [0, 1, 0]),  # row 0 is free again
        ([(300.0, "knee"), (100.0, "hold"), (104.0, "resume")], [0, 0, 1]),  # placed left to right
    ],
)
def test_label_rows(labels, rows):
    assert label_rows(labels) == rows


def test_marks_a_second_apart_do_not_overprint_on_the_report_charts():
    events = [
        Event(50.0, "resume", "resume ramp at 9 req/s"),
        Event(51.0, "mark", "before knee test"),
        Event(51.5, "knee", "knee at 14 rps"),
        Event(51.5, "config", "configuration C2"),
    ]
    rate = _chart(report(events), "Throughput")
    boxes = label_boxes(rate, "mark-label")
    assert sorted(text for *_, text in boxes) == ["C2", "before knee test", "knee", "resume"]
    assert overlapping(boxes) == []


def test_the_report_is_fluid_an_800px_window_does_not_scroll_sideways():
    page = report([Event(50.0, "mark", "m")])
    css = page[page.index("<style>") : page.index("</style>")]
    assert re.search(r"\.chart \{[^}]*width: 100%;[^}]*max-width: 1240px;", css)
    assert re.search(r"\.chart svg \{[^}]*width: 100%;[^}]*height: auto;", css)
    # no element is given a fixed width in px: only maxima
    assert re.findall(r"(?<!max-)width: \d+px", page) == []
    for svg_tag in re.findall(r"<svg [^>]*>", page):
        assert 'width="100%"' in svg_tag and re.search(r'viewBox="0 0 \d+ \d+"', svg_tag)
        assert not re.search(r'\bwidth="\d+"', svg_tag) and not re.search(r'\bheight="\d+"', svg_tag)
    # wide tables and text scroll in their own boxes, not the page
    assert re.search(r"table \{[^}]*max-width: 100%;[^}]*overflow-x: auto;", css)
    assert re.search(r"pre \{[^}]*max-width: 100%;[^}]*overflow-x: auto;", css)


def test_the_sweep_report_shares_the_fluid_page_and_keeps_close_point_labels_apart():
    assert "max-width: 900px" in page_style(900)
    rows = [
        {"index": i, "status": "done", "config": f"c{i}", "tps_per_user": u, "tps_per_gpu": g, "command": "x"}
        for i, (u, g) in enumerate([(40.0, 1000.0), (40.2, 1001.0), (80.0, 500.0)])
    ]
    page = render_sweep_html({"rows": rows, "sweep": "s", "serve": "vllm serve m", "slo": "-", "best": None})
    labels = re.findall(r'<text x="[^"]*" y="[^"]*" font-size="11">(#[^<]*)</text>', page)
    assert sorted(label.split()[0] for label in labels) == ["#1", "#2", "#3"]
    boxes = [
        (float(x), float(y), len(text))
        for x, y, text in re.findall(r'<text x="([^"]*)" y="([^"]*)" font-size="11">(#[^<]*)</text>', page)
    ]
    for i, (x1, y1, n1) in enumerate(boxes):  # no two labels' boxes touch
        for x2, y2, n2 in boxes[i + 1 :]:
            assert x1 + 7 * n1 <= x2 or x2 + 7 * n2 <= x1 or abs(y1 - y2) >= 13
    svg_tag = re.search(r"<svg [^>]*>", page)
    assert svg_tag is not None and 'width="100%"' in svg_tag.group(0)


def test_a_single_chart_keeps_its_drawing_box():
    svg = svg_chart("TTFT", "ms", [0.0, 1.0], [("p99", [1.0, 2.0])], [], 2.0)
    assert 'viewBox="0 0 1240 240"' in svg
