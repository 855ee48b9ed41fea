"""Current figures (the latest one-second bin) and run-so-far figures (the summary)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from rampwatch.core.figures.lora import lora_now_rows
from rampwatch.core.timeline import Snapshot
from rampwatch.loadgen.workload.sessions import session_target, users_for, users_target
from rampwatch.tui import phases_view, reasoning_view
from rampwatch.tui.chart_data import (
    NOW_WINDOW_S,
    current_value,
    errors_by_class,
    format_count,
    format_ms,
    format_number,
    format_rate,
    recent_client_lag_ms,
    recent_rate,
)
from rampwatch.tui.gpu_view import gpu_now, gpu_stale_since, has_gpu, per_gpu_lines
from rampwatch.tui.health import metrics_stale_since
from rampwatch.tui.spec_view import spec_now_rows, spec_so_far_rows

# (series, label, formatter) for the "now" column. Its rates are means over the last
# NOW_WINDOW_S complete seconds (``RATE_SERIES``); latency percentiles are the newest
# complete second's, which already cover the requests that ended in the last 10 s
# (``core.figures.series``); running, waiting and KV are the newest scrape's.
NOW_TITLE = f"last {NOW_WINDOW_S} s"
NOW_NOTE = f"rates over {NOW_WINDOW_S} s · latency over 10 s"
NOW_ROWS = (
    ("target_rps", "target rps", format_rate),
    ("offered_rps", "offered rps", format_rate),
    ("sent_rps", "sent rps", format_rate),
    ("completed_rps", "completed rps", format_rate),
    ("error_rps", "errors/s", format_rate),
    ("client_output_tps", "output tok/s", format_number),
    ("server_generation_tps", "server gen tok/s", format_number),
    ("ttft_p50", "TTFT p50", format_ms),
    ("ttft_p99", "TTFT p99", format_ms),
    ("itl_p50", "ITL p50", format_ms),
    ("itl_p99", "ITL p99", format_ms),
    ("running", "running", format_count),
    ("waiting", "waiting", format_count),
    ("kv_usage_pct", "KV cache %", format_number),
    ("prefix_hit_pct", "prefix hit %", format_number),
    ("client_queued", "client queued", format_count),
)
SERVER_SERIES = {"server_generation_tps", "running", "waiting", "kv_usage_pct", "prefix_hit_pct"}
RATE_SERIES = {"offered_rps", "sent_rps", "completed_rps", "error_rps", "client_output_tps", "server_generation_tps"}
# Latencies are already over a 10 s window of completions: a gap means nothing completed
# for that long, and the value from before it is not "now" (a dead server's last TTFT).
LATENCY_LOOK_BACK = {"ttft_p50": 2, "ttft_p99": 2, "itl_p50": 2, "itl_p99": 2}


# The run-so-far figures worth a glance, in the headless summary's keys and order; the
# full summary is in `rampwatch report`. Summaries without these keys are shown whole.
SUMMARY_ROWS = (
    ("duration", "duration s"),
    ("completed", "completed"),
    ("failed", "failed"),
    ("cancelled", "cancelled"),
    ("request_throughput", "req/s"),
    ("output_throughput", "output tok/s"),
    ("total_token_throughput", "total tok/s"),
    ("p50_ttft_ms", "TTFT p50 ms"),
    ("p99_ttft_ms", "TTFT p99 ms"),
    ("p50_itl_ms", "ITL p50 ms"),
    ("p99_itl_ms", "ITL p99 ms"),
    ("mean_tpot_ms", "TPOT mean ms"),
    ("p99_e2el_ms", "E2E p99 ms"),
    ("max_concurrent_requests", "peak in flight"),
    ("mean_client_queue_ms", "client queue ms"),
    ("p99_client_queue_time_ms", "client queue p99 ms"),
)


# GPU telemetry's rows, only in a run that has it (``gpu_view.has_gpu``): the GPUs
# together (util averaged, power summed), then each GPU when several. Memory and SM clock
# are on the GPU chart's bottom line: the panel has no room for more rows at 120x40.
GPU_NOW_ROWS = (
    ("gpu_util_pct", "GPU util %"),
    ("gpu_power_w", "GPU power W"),
)
GPU_SUMMARY_ROWS = (("energy_wh", "GPU energy Wh"), ("tokens_per_joule", "output tok/J"))


def gpu_now_rows(snapshot: Snapshot) -> list[tuple[str, str]]:
    if not has_gpu(snapshot):
        return []
    stale = gpu_stale_since(snapshot)
    if stale is not None:
        return [(label, f"stale {snapshot.t - stale:.0f} s") for _, label in GPU_NOW_ROWS]
    rows = [(label, format_number(gpu_now(snapshot, name))) for name, label in GPU_NOW_ROWS]
    if len(snapshot.gpus) > 1:
        rows += per_gpu_lines(snapshot)
    return rows


def summary_label(key: str) -> str:
    return key.replace("_", " ")


def summary_rows(summary: dict) -> list[tuple[str, str]]:
    curated = [(label, format_number(summary[key])) for key, label in SUMMARY_ROWS if key in summary]
    if curated:
        return curated
    return [(summary_label(k), format_number(v)) for k, v in summary.items() if not isinstance(v, (dict, list))]


class StatsPanel(Widget):
    """Side by side "now" and "run so far" when there is room, else one above the other."""

    SIDE_BY_SIDE_MIN_WIDTH = 64

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Stats"
        self.border_subtitle = NOW_NOTE
        self.snapshot: Snapshot | None = None
        self._shown_rows: tuple[list, list] | None = None

    def show_snapshot(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        rows = self.rows(snapshot)
        self.snapshot = snapshot
        if rows == self._shown_rows:
            return
        # The height depends only on how many rows there are: relayout only when that changes.
        relayout = self._shown_rows is None or tuple(map(len, rows)) != tuple(map(len, self._shown_rows))
        self._shown_rows = rows
        self.refresh(layout=relayout)

    def render(self) -> Table | str:
        if self.snapshot is None:
            return "waiting for data…"
        return self.build_table(self.snapshot, side_by_side=self.size.width >= self.SIDE_BY_SIDE_MIN_WIDTH)

    def get_content_height(self, container, viewport, width: int) -> int:
        if self.snapshot is None:
            return 1
        now, so_far = self.rows(self.snapshot)
        if width >= self.SIDE_BY_SIDE_MIN_WIDTH:
            return 1 + max(len(now), len(so_far))
        return 2 + len(now) + len(so_far)

    def rows(self, snapshot: Snapshot) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        now_rows = []
        stale_since = metrics_stale_since(snapshot)
        for name, label, fmt in NOW_ROWS:
            if name == "target_rps" and users_target(snapshot.header):  # a closed loop's target
                label, value = "target users", str(users_for(snapshot.target_rps))
            elif name == "target_rps" and session_target(snapshot.header):  # sessions started
                label, value = "target sessions/s", fmt(snapshot.target_rps)
            elif name == "target_rps":
                value = fmt(snapshot.target_rps)
            elif name in SERVER_SERIES and not snapshot.server_metrics_available:
                value = "no /metrics"
            elif name in SERVER_SERIES and stale_since is not None:
                # The last value seen is not the server's now: say how old it is instead.
                value = f"stale {snapshot.t - stale_since:.0f} s"
            elif name in RATE_SERIES:
                value = fmt(recent_rate(snapshot, name))
            else:
                value = fmt(current_value(snapshot, name, LATENCY_LOOK_BACK.get(name)))
            now_rows.append((label, value))
            if name == "itl_p99":  # a reasoning run's TTFA and share, after the latencies
                now_rows += reasoning_view.now_rows(snapshot)
        if "mm_cache_hit_pct" in snapshot.series:  # a run with images only
            mm = format_number(current_value(snapshot, "mm_cache_hit_pct"))
            if not snapshot.server_metrics_available:
                mm = "no /metrics"
            elif stale_since is not None:
                mm = f"stale {snapshot.t - stale_since:.0f} s"
            now_rows.append(("MM cache hit %", mm))
        now_rows.append(("in flight", str(snapshot.in_flight)))
        lag = recent_client_lag_ms(snapshot)
        if lag is not None:  # only when the client's own delay could show in its figures
            now_rows.append(("client lag (late)", format_ms(lag / 1000.0)))
        now_rows += gpu_now_rows(snapshot)
        now_rows += lora_now_rows(snapshot.lora)  # a server with LoRA adapters (vllm:lora_requests_info)
        now_rows += spec_now_rows(snapshot)  # none where the server does not speculate
        so_far = summary_rows(snapshot.summary or {})
        so_far += reasoning_view.summary_rows(snapshot.summary or {})
        so_far += phases_view.summary_rows(snapshot.summary or {})  # where TTFT went, with marks only
        so_far += [
            (label, format_number(v))
            for key, label in GPU_SUMMARY_ROWS
            if (v := (snapshot.summary or {}).get(key)) is not None
        ]
        so_far += spec_so_far_rows(snapshot)
        for cls, count in sorted(errors_by_class(snapshot).items()):
            so_far.append((f"errors {cls}", f"{count:,}"))
        return now_rows, so_far

    def build_table(self, snapshot: Snapshot, *, side_by_side: bool = True) -> Table:
        now_rows, so_far = self.rows(snapshot)
        table = Table.grid(padding=(0, 1), expand=True)
        if not side_by_side:
            table.add_column("label", ratio=1, no_wrap=True, overflow="ellipsis")
            table.add_column("value", justify="right", no_wrap=True)
            table.add_row(Text(NOW_TITLE, style="bold"), "")
            for label, value in now_rows:
                table.add_row(Text(label, style="dim"), value)
            table.add_row(Text("run so far", style="bold"), "")
            for label, value in so_far:
                table.add_row(Text(label, style="dim"), value)
            return table
        table.add_column("now", ratio=1, no_wrap=True, overflow="ellipsis")
        table.add_column("", justify="right", no_wrap=True)
        table.add_column("run so far", ratio=1, no_wrap=True, overflow="ellipsis")
        table.add_column("", justify="right", no_wrap=True)
        table.add_row(Text(NOW_TITLE, style="bold"), "", Text("run so far", style="bold"), "")
        for i in range(max(len(now_rows), len(so_far))):
            left = now_rows[i] if i < len(now_rows) else ("", "")
            right = so_far[i] if i < len(so_far) else ("", "")
            table.add_row(Text(left[0], style="dim"), left[1], Text(right[0], style="dim"), right[1])
        return table
