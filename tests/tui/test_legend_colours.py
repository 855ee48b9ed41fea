"""Every chart's legend shows each series in the colour the chart actually plots it with.

For each chart and each of its series, the chart draws a snapshot in which only that
series has data; the colours of the braille dots in plotext's output (the 24-bit escapes
the terminal receives) must be exactly the colour of that series' swatch in the legend.
"""

import dataclasses
import math

import pytest
from rich.text import Text

from rampwatch.core.timeline import SERIES_NAMES
from rampwatch.tui.app import CHARTS, make_live_app
from rampwatch.tui.timeseries_chart import COMPARE_COLOUR, TimeSeriesChart, hex_colour
from tests.tui.fakes import FakeControl, FrozenSource, fake_snapshot


def only_series(name: str):
    """The fake run at 95 s with every series but ``name`` empty, and no markers. A series
    the fake run has no positive value of (errors, the client queue: drawn only where above
    zero) is given a constant 1 so there is something to draw."""
    snapshot = fake_snapshot(95.0)
    nan = [math.nan] * len(snapshot.times)
    values = snapshot.series.get(name, [])
    if not any(v > 0 for v in values):
        values = [1.0] * len(snapshot.times)
    series = {key: nan for key in snapshot.series} | {name: values}
    return dataclasses.replace(snapshot, series=series, events=[])


def plotted_colours(chart: TimeSeriesChart) -> set[str]:
    """The colours of the braille dots (the plotted lines) in the chart's picture."""
    picture = chart.render()
    assert isinstance(picture, Text)
    colours = set()
    for span in picture.spans:
        text = picture.plain[span.start : span.end]
        style = span.style
        if any("\u2800" < ch <= "\u28ff" for ch in text) and not isinstance(style, str) and style.color:
            colours.add(style.color.get_truecolor().hex)
    return colours


def legend_swatches(chart: TimeSeriesChart) -> list[tuple[str, str]]:
    """(label, the swatch's colour) in legend order, read from the legend the chart puts in
    its title and, when it does not fit, its bottom border (``legend_parts`` is both)."""
    left, right = chart.legend_parts(with_compare=False)
    legend = left + right
    plain = legend.plain
    swatches = []
    for span in legend.spans:
        if plain[span.start : span.end].strip() == "━":
            label = plain[span.end :].split(" ━")[0].split(" │")[0].strip()
            swatches.append((label, str(span.style)))
    return swatches


@pytest.mark.slow
@pytest.mark.parametrize("key,chart_class", [(key, chart) for key, _, chart in CHARTS])
async def test_legend_swatch_is_the_plotted_colour(key, chart_class):
    app = make_live_app(FrozenSource(fake_snapshot(95.0)), FakeControl())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        chart = app.query_one(f"#w-{key}", chart_class)
        swatches = legend_swatches(chart)
        # the legend lists left-axis series, then right-axis ones, as SERIES does
        assert [label for label, _ in swatches] == [spec.label for spec in chart_class.SERIES]
        for spec, (_, colour) in zip(chart_class.SERIES, swatches):
            assert spec.name in SERIES_NAMES
            chart.draw(only_series(spec.name))
            assert plotted_colours(chart) == {colour}, spec.label


@pytest.mark.parametrize("key,chart_class", [(key, chart) for key, _, chart in CHARTS])
def test_series_of_one_chart_have_distinct_colours(key, chart_class):
    colours = [spec.colour for spec in chart_class.SERIES]
    assert len(set(colours)) == len(colours)
    assert COMPARE_COLOUR not in colours  # the compared run stays told apart


def test_hex_colour():
    assert hex_colour((92, 146, 255)) == "#5c92ff"
    assert hex_colour((0, 0, 0)) == "#000000"
