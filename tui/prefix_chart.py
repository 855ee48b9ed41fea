"""Prefix-cache hit rate in percent (from /metrics); in a run whose server counted a
multimodal cache query, the multimodal processor cache's hit rate beside it."""

from rampwatch.core.timeline import Snapshot
from rampwatch.tui.timeseries_chart import COLOURS, SeriesSpec, TimeSeriesChart

PREFIX_SERIES: tuple[SeriesSpec, ...] = (SeriesSpec("prefix_hit_pct", "hit rate %", COLOURS["cyan"], server=True),)
# A series only of a run with images (core.figures.series_server.ServerSeries.optional_series).
MM_CACHE_SERIES = SeriesSpec("mm_cache_hit_pct", "MM cache hit %", COLOURS["magenta"], server=True)


class PrefixChart(TimeSeriesChart):
    TITLE = "Prefix cache"
    Y_LABEL = "hit %"
    Y_TOP = 100.0
    SERVER_ONLY = True
    SERIES: tuple[SeriesSpec, ...] = PREFIX_SERIES

    def show_snapshot(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        series = PREFIX_SERIES + ((MM_CACHE_SERIES,) if MM_CACHE_SERIES.name in snapshot.series else ())
        if series != self.SERIES:
            self.SERIES = series
            self._legend_key, self._drawn_key = None, None  # the legend and the plot change
        super().show_snapshot(snapshot, compare)
