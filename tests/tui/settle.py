"""Waiting for the screen to settle before a snapshot is taken."""

from rampwatch.tui.chart_data import chart_key
from rampwatch.tui.timeseries_chart import TimeSeriesChart


async def charts_settled(pilot) -> None:
    """Wait until every chart on screen shows the picture for its final size (a chart is
    first drawn when the app mounts, possibly before the layout has sized it, and redrawn
    at the next poll), so a screenshot never catches one in between."""
    app = pilot.app
    for _ in range(200):
        await pilot.pause()
        charts = [c for c in app.main_screen.query(TimeSeriesChart) if c.display and c.size.area]
        if charts and all(
            c._message is not None
            or c._drawn_key == chart_key(app.latest, app.compare_snapshot, c.size.width, c.size.height)
            for c in charts
        ):
            await pilot.pause()
            return
    raise AssertionError("the charts did not settle")


async def compared_and_settled(pilot) -> None:
    """``charts_settled``, and the B-vs-A panels filled by the app's worker."""
    from rampwatch.tui.compare_panel import ComparePanel

    for _ in range(200):
        await pilot.pause()
        if all(panel.rows is not None for panel in pilot.app.main_screen.query(ComparePanel)):
            break
    else:
        raise AssertionError("the comparison never arrived")
    await charts_settled(pilot)
    # the panel's growth resizes the events panel below it, which then scrolls to its end
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()
