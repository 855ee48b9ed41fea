"""Speculative decoding: the draft acceptance rate (left axis, %) and the mean acceptance
length (right axis, tokens a step gives a request, the bonus token included), over the
series' window; acceptance by draft position on its bottom line. Shown only when the
server speculates (``spec_view.has_spec``), under the latency chart."""

from rampwatch.core.timeline import Snapshot
from rampwatch.tui.spec_view import has_spec, spec_legend_note
from rampwatch.tui.timeseries_chart import COLOURS, SeriesSpec, TimeSeriesChart


class SpecChart(TimeSeriesChart):
    TITLE = "Spec decode"
    Y_LABEL = "%"
    Y_TOP = 100.0
    Y_RIGHT_LABEL = "tok"
    LEGEND_LEFT = ""
    LEGEND_RIGHT = "tok/step"
    SERVER_ONLY = True
    SERIES = (
        SeriesSpec("spec_acceptance_pct", "accept %", COLOURS["cyan"], server=True),
        SeriesSpec("spec_accept_len", "accept len", COLOURS["magenta"], right_axis=True, server=True),
    )

    def message_for(self, snapshot: Snapshot) -> str | None:
        if not has_spec(snapshot):
            return "the server does not speculate"
        return super().message_for(snapshot)

    def draw(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        super().draw(snapshot, compare)
        note = spec_legend_note(snapshot)
        if note:
            self.border_subtitle = f"{self.border_subtitle} · {note}" if self.border_subtitle else note
