"""A self-contained HTML report: inline SVG charts and the summary table, no scripts,
no network access needed to view it."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

from rampwatch.core.timeline import Event, Snapshot
from rampwatch.loadgen.steps import STEP_COLUMNS, STEP_TABLE_NOTE, step_cells
from rampwatch.loadgen.summary import Summary

WIDTH, HEIGHT = 1240, 240
PAD_L, PAD_R, PAD_T, PAD_B = 70, 170, 30, 34
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")

# (title, unit, [(series name, label)], scale)
CHARTS: list[tuple[str, str, list[tuple[str, str]], float]] = [
    (
        "Throughput",
        "req/s",
        [("target_rps", "target"), ("sent_rps", "sent"), ("completed_rps", "completed"), ("error_rps", "errors")],
        1.0,
    ),
    ("Output tokens", "tok/s", [("client_output_tps", "client"), ("server_generation_tps", "server")], 1.0),
    ("Queue depth", "requests", [("running", "running"), ("waiting", "waiting"), ("in_flight", "in flight")], 1.0),
    ("KV cache and prefix cache", "%", [("kv_usage_pct", "KV usage"), ("prefix_hit_pct", "prefix hit rate")], 1.0),
    ("Time to first token", "ms", [("ttft_p50", "p50"), ("ttft_p90", "p90"), ("ttft_p99", "p99")], 1000.0),
    ("Inter-token latency", "ms", [("itl_p50", "p50"), ("itl_p90", "p90"), ("itl_p99", "p99")], 1000.0),
]


def _nice_max(v: float) -> float:
    if v <= 0 or not math.isfinite(v):
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * exp:
            return m * exp
    return 10 * exp


def _fmt_tick(v: float) -> str:
    return f"{v:g}"


def svg_chart(
    title: str,
    unit: str,
    times: Sequence[float],
    lines: Sequence[tuple[str, Sequence[float]]],
    marks: Sequence[Event],
    t_max: float,
) -> str:
    """One time-series chart; NaN breaks a line. Marks and knee are vertical lines."""
    plot_w = WIDTH - PAD_L - PAD_R
    plot_h = HEIGHT - PAD_T - PAD_B
    finite = [v for _, vals in lines for v in vals if v is not None and math.isfinite(v)]
    y_max = _nice_max(max(finite, default=1.0) * 1.05)
    t_max = max(t_max, 1.0)

    def x(t: float) -> float:
        return PAD_L + plot_w * t / t_max

    def y(v: float) -> float:
        return PAD_T + plot_h * (1 - v / y_max)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{html.escape(title)}">',
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<text x="{PAD_L}" y="18" font-size="14" font-weight="bold">{html.escape(title)} ({html.escape(unit)})</text>',
    ]
    for i in range(5):
        v = y_max * i / 4
        yy = y(v)
        out.append(f'<line x1="{PAD_L}" x2="{PAD_L + plot_w}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#e4e4e4"/>')
        out.append(f'<text x="{PAD_L - 6}" y="{yy + 4:.1f}" font-size="11" text-anchor="end">{_fmt_tick(v)}</text>')
    step = _nice_max(t_max / 8)
    t = 0.0
    while t <= t_max + 1e-9:
        xx = x(t)
        out.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{PAD_T}" y2="{PAD_T + plot_h}" stroke="#f0f0f0"/>')
        out.append(f'<text x="{xx:.1f}" y="{PAD_T + plot_h + 16}" font-size="11" text-anchor="middle">{t:.0f}s</text>')
        t += step
    out.append(f'<rect x="{PAD_L}" y="{PAD_T}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>')
    for i, (label, values) in enumerate(lines):
        color = PALETTE[i % len(PALETTE)]
        segment: list[str] = []
        segments: list[list[str]] = []
        for t, v in zip(times, values):
            if v is None or not math.isfinite(v):
                if segment:
                    segments.append(segment)
                segment = []
                continue
            segment.append(f"{x(t):.1f},{y(min(v, y_max)):.1f}")
        if segment:
            segments.append(segment)
        for seg in segments:
            if len(seg) == 1:
                cx, cy = seg[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{color}"/>')
            else:
                out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{" ".join(seg)}"/>')
        ly = PAD_T + 14 + 18 * i
        out.append(
            f'<line x1="{WIDTH - PAD_R + 12}" x2="{WIDTH - PAD_R + 32}" y1="{ly - 4}" y2="{ly - 4}" '
            f'stroke="{color}" stroke-width="3"/>'
        )
        out.append(f'<text x="{WIDTH - PAD_R + 38}" y="{ly}" font-size="12">{html.escape(label)}</text>')
    for e in marks:
        color = "#d62728" if e.kind == "knee" else "#555555"
        xx = x(e.t)
        label = "knee" if e.kind == "knee" else (e.message or "mark")
        out.append(
            f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{PAD_T}" y2="{PAD_T + plot_h}" stroke="{color}" '
            f'stroke-width="1.5" stroke-dasharray="5,3"><title>{html.escape(e.message)}</title></line>'
        )
        out.append(
            f'<text x="{xx + 3:.1f}" y="{PAD_T + 11}" font-size="10" fill="{color}">{html.escape(label[:24])}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return "-" if math.isnan(v) else f"{v:,.2f}"
    if v is None:
        return "-"
    return html.escape(str(v))


def render_html(
    snapshot: Snapshot,
    summary: Summary,
    summary_text: str,
    marks: Sequence[Event],
    title: str,
    subtitle: str,
    warnings: Sequence[str] = (),
) -> str:
    t_max = max(snapshot.times[-1] + 1 if snapshot.times else 0.0, snapshot.t)
    charts = []
    for chart_title, unit, names, scale in CHARTS:
        lines = []
        for name, label in names:
            values = snapshot.series.get(name)
            if values is None:
                continue
            lines.append((label, [v * scale if v is not None else v for v in values]))
        charts.append(
            f'<section class="chart">{svg_chart(chart_title, unit, snapshot.times, lines, marks, t_max)}</section>'
        )
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{_cell(v)}</td></tr>"
        for k, v in summary.to_dict().items()
        if not isinstance(v, (dict, list))
    )
    mark_rows = "".join(
        f"<tr><td>{e.t:.1f} s</td><td>{html.escape(e.kind)}</td><td>{html.escape(e.message)}</td></tr>" for e in marks
    )
    warn = "".join(f'<p class="warn">{html.escape(w)}</p>' for w in warnings)
    step_head = "".join(f"<th>{html.escape(name)}</th>" for name, _ in STEP_COLUMNS)
    step_rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cells[name])}</td>" for name, _ in STEP_COLUMNS) + "</tr>"
        for cells in (step_cells(row) for row in snapshot.steps)
    )
    steps = (
        f'<h2>Steps</h2><p class="sub">{html.escape(STEP_TABLE_NOTE)}</p><table><tr>{step_head}</tr>{step_rows}</table>'
        if snapshot.steps
        else ""
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 20px; color: #222; background: #fafafa; }}
h1 {{ font-size: 20px; margin-bottom: 2px; }}
.sub {{ color: #666; margin-top: 0; }}
.chart {{ background: #fff; border: 1px solid #ddd; margin: 10px 0; width: {WIDTH}px; }}
table {{ border-collapse: collapse; background: #fff; margin: 10px 0; }}
td, th {{ border: 1px solid #ddd; padding: 3px 8px; font-size: 13px; text-align: left; }}
td {{ text-align: right; font-variant-numeric: tabular-nums; }}
pre {{ background: #fff; border: 1px solid #ddd; padding: 8px; font-size: 12px; }}
.warn {{ color: #a15c00; }}
.cols {{ display: flex; gap: 24px; align-items: flex-start; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="sub">{html.escape(subtitle)}</p>
{warn}
{"".join(charts)}
{steps}
<h2>Marks</h2>
<table><tr><th>time</th><th>kind</th><th>note</th></tr>{mark_rows}</table>
<h2>Summary</h2>
<div class="cols"><pre>{html.escape(summary_text)}</pre><table>{rows}</table></div>
</body></html>
"""
