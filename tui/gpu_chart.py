"""GPU utilisation (left axis, %) and power (right axis, W) from NVML or a DCGM exporter;
memory and SM clock on its bottom line. Shown only when the run has GPU telemetry."""

from rampwatch.core.timeline import Snapshot
from rampwatch.tui.gpu_view import gpu_legend_note, has_gpu
from rampwatch.tui.timeseries_chart import COLOURS, SeriesSpec, TimeSeriesChart


class GpuChart(TimeSeriesChart):
    TITLE = "GPU"
    Y_LABEL = "%"
    Y_TOP = 100.0
    Y_RIGHT_LABEL = "W"
    LEGEND_LEFT = ""
    LEGEND_RIGHT = "W"
    SERIES = (
        SeriesSpec("gpu_util_pct", "util %", COLOURS["green"]),
        SeriesSpec("gpu_power_w", "power", COLOURS["orange"], right_axis=True),
    )

    def message_for(self, snapshot: Snapshot) -> str | None:
        if not has_gpu(snapshot):
            return "no GPU telemetry"
        return super().message_for(snapshot)

    def draw(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        super().draw(snapshot, compare)
        note = gpu_legend_note(snapshot)
        self.border_subtitle = f"{self.border_subtitle} · {note}" if self.border_subtitle else note
