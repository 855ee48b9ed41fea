"""A self-contained HTML report: inline SVG charts and the summary table, no scripts,
no network access needed to view it.

The y-axes are robust: their top follows the bulk of the values (``robust_top``), so one
spike does not flatten the rest of a chart; a point above the top is drawn at the top
with a ▲ marker whose tooltip gives its value. Percent charts are fixed at 0–100 %. A few
empty bins (a second without a completion has no latency) do not break a line
(``line_segments``); a longer stretch without data does. The knee section says which
limit the knee hit and what to try next; the marks table lists the run's timeline: start,
knee, holds, resumes, rate changes, marks and the stop."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from rampwatch.core.figures.adapters import ADAPTER_NOTE
from rampwatch.core.figures.classes import CLASS_NOTE
from rampwatch.core.figures.knee_explanation import KneeExplanation
from rampwatch.core.figures.search import figures_text, search_result
from rampwatch.core.figures.segments import CONFIG_EVENT, SEGMENT_NOTE, SegmentTable
from rampwatch.core.figures.steps import STEP_TABLE_NOTE, step_cells, step_columns
from rampwatch.core.figures.summary import Summary, knee_review
from rampwatch.core.figures.turns import NO_HIT_RATE_HINT, TEXT_COLUMNS, TURNS_NOTE, TurnTable, sessions_line
from rampwatch.core.timeline import Event, Snapshot
from rampwatch.record.analysis import MARK_KIND_NAMES, mark_note, timeline_marks

WIDTH, HEIGHT = 1240, 240
PAD_L, PAD_R, PAD_T, PAD_B = 70, 170, 30, 34
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")

# Empty bins a line is drawn across; a longer stretch without data breaks it.
MAX_BRIDGED_GAP_S = 5.0
BIN_S = 1.0
# The y-axis top: this percentile of a chart's values times the margin, unless the values
# all fit below that (then their maximum).
ROBUST_PERCENTILE = 98.0
ROBUST_MARGIN = 1.5
# Lines on every chart (the marks table lists ``analysis.timeline_marks``).
CHART_MARK_KINDS = ("knee", "hold", "resume", "mark", "config")
MARK_COLOURS = {"knee": "#d62728", "hold": "#17becf", "resume": "#17becf", "mark": "#555555", "config": "#2ca02c"}
MARK_LABELS = {"knee": "knee", "hold": "hold", "resume": "resume"}

# (title, unit, [(series name, label)], scale, fixed y top or None)
CHARTS: list[tuple[str, str, list[tuple[str, str]], float, float | None]] = [
    (
        "Throughput",
        "req/s",
        [("target_rps", "target"), ("sent_rps", "sent"), ("completed_rps", "completed"), ("error_rps", "errors")],
        1.0,
        None,
    ),
    ("Output tokens", "tok/s", [("client_output_tps", "client"), ("server_generation_tps", "server")], 1.0, None),
    (
        "Queue depth",
        "requests",
        [("running", "running"), ("waiting", "waiting"), ("in_flight", "in flight")],
        1.0,
        None,
    ),
    (
        "KV cache and prefix cache",
        "%",
        [("kv_usage_pct", "KV usage"), ("prefix_hit_pct", "prefix hit rate")],
        1.0,
        100.0,
    ),
    ("Time to first token", "ms", [("ttft_p50", "p50"), ("ttft_p90", "p90"), ("ttft_p99", "p99")], 1000.0, None),
    ("Inter-token latency", "ms", [("itl_p50", "p50"), ("itl_p90", "p90"), ("itl_p99", "p99")], 1000.0, None),
]
# Only for a reasoning run (``Snapshot.reasoning``): the first token against the first answer
# token, and how much of the output was thinking.
REASONING_CHARTS: list[tuple[str, str, list[tuple[str, str]], float, float | None]] = [
    (
        "Time to first token vs first answer",
        "ms",
        [("ttft_p50", "TTFT p50"), ("ttfa_p50", "TTFA p50"), ("ttfa_p99", "TTFA p99")],
        1000.0,
        None,
    ),
    ("Reasoning share of output tokens", "%", [("reasoning_share_pct", "reasoning")], 1.0, 100.0),
]
# Only for a run with GPU telemetry (NVML, a DCGM exporter): the GPUs' utilisation (mean
# over them) and power (summed); memory, clock and tokens per joule are in the summary.
GPU_CHARTS: list[tuple[str, str, list[tuple[str, str]], float, float | None]] = [
    ("GPU utilisation", "%", [("gpu_util_pct", "mean over GPUs")], 1.0, 100.0),
    ("GPU power", "W", [("gpu_power_w", "all GPUs")], 1.0, None),
]
# Only for a run whose server counted a multimodal cache query (a series only then:
# core.figures.series_server.ServerSeries.optional_series).
IMAGE_CHARTS: list[tuple[str, str, list[tuple[str, str]], float, float | None]] = [
    ("Multimodal processor cache", "%", [("mm_cache_hit_pct", "hit rate")], 1.0, 100.0),
]

# Only for a server that speculates (its spec-decode series, core.figures.speculation).
SPEC_CHARTS: list[tuple[str, str, list[tuple[str, str]], float, float | None]] = [
    ("Speculative decoding: draft acceptance", "%", [("spec_acceptance_pct", "accepted / drafted")], 1.0, 100.0),
    ("Mean acceptance length", "tokens", [("spec_accept_len", "per step, bonus token included")], 1.0, None),
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


def _finite(v: float | None) -> bool:
    return v is not None and math.isfinite(v)


def robust_top(values: Sequence[float | None]) -> float:
    """The y-axis top for ``values``: their maximum, unless that lies beyond
    ``ROBUST_MARGIN`` × their ``ROBUST_PERCENTILE``th percentile — then that, so that one
    spike does not squash the rest of the chart (points above are drawn clipped)."""
    finite = np.array([v for v in values if _finite(v)], dtype=np.float64)
    if finite.size == 0:
        return 1.0
    peak = float(finite.max())
    bulk = float(np.percentile(finite, ROBUST_PERCENTILE)) * ROBUST_MARGIN
    return _nice_max(min(peak, bulk) * 1.05 if bulk > 0 else peak * 1.05)


def line_segments(
    times: Sequence[float], values: Sequence[float | None], max_gap_s: float = MAX_BRIDGED_GAP_S
) -> list[list[tuple[float, float]]]:
    """The (t, v) runs of a series of one-second bins to draw as lines: missing values
    (None, NaN — an empty cell) are skipped, and a line breaks only where more than
    ``max_gap_s`` seconds of bins between two points are empty."""
    segments: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    for t, v in zip(times, values):
        if not _finite(v):
            continue
        if current and t - current[-1][0] - BIN_S > max_gap_s + 1e-9:
            segments.append(current)
            current = []
        current.append((t, float(v)))  # type: ignore[arg-type]
    if current:
        segments.append(current)
    return segments


# The marks' labels: at most this many characters, each ~MARK_CHAR_PX wide at font-size 10
# (an overestimate, so that close labels go to another row rather than touch), in rows
# MARK_ROW_PX apart.
MARK_LABEL_CHARS = 24
MARK_CHAR_PX = 6.5
MARK_ROW_PX = 12


def label_rows(labels: Sequence[tuple[float, str]]) -> list[int]:
    """The row each label (its left x, its text) goes on, in order, so that no two
    labels on a row overlap: the first row where it starts past the previous label's end."""
    row_ends: list[float] = []
    rows = [0] * len(labels)
    for index in sorted(range(len(labels)), key=lambda i: labels[i][0]):
        left, text = labels[index]
        row = next((i for i, end in enumerate(row_ends) if left >= end), len(row_ends))
        if row == len(row_ends):
            row_ends.append(0.0)
        row_ends[row] = left + MARK_CHAR_PX * len(text) + 4
        rows[index] = row
    return rows


def svg_chart(
    title: str,
    unit: str,
    times: Sequence[float],
    lines: Sequence[tuple[str, Sequence[float]]],
    marks: Sequence[Event],
    t_max: float,
    y_top: float | None = None,
) -> str:
    """One time-series chart (``y_top``: a fixed axis top, else ``robust_top``). Points
    above the top are drawn at it with a ▲; knee, holds, resumes and marks are vertical
    lines; a restart (``config``) is a solid line labelled with its configuration, C2, C3, …"""
    plot_w = WIDTH - PAD_L - PAD_R
    plot_h = HEIGHT - PAD_T - PAD_B
    y_max = y_top if y_top is not None else robust_top([v for _, vals in lines for v in vals])
    t_max = max(t_max, 1.0)

    def x(t: float) -> float:
        return PAD_L + plot_w * t / t_max

    def y(v: float) -> float:
        return PAD_T + plot_h * (1 - v / y_max)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" {fluid_size(WIDTH, HEIGHT)} role="img" aria-label="{html.escape(title)}">',
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
        for seg in line_segments(times, values):
            points = [f"{x(t):.1f},{y(min(max(v, 0.0), y_max)):.1f}" for t, v in seg]
            if len(points) == 1:
                cx, cy = points[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{color}"/>')
            else:
                out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{" ".join(points)}"/>')
            for t, v in seg:
                if v > y_max:  # drawn at the top; the marker's tooltip has the value
                    xx = x(t)
                    out.append(
                        f'<path class="clipped" d="M{xx - 4:.1f},{PAD_T + 7} L{xx + 4:.1f},{PAD_T + 7} '
                        f'L{xx:.1f},{PAD_T} Z" fill="{color}"><title>{html.escape(label)} '
                        f"{_fmt_tick(round(v, 3))} {html.escape(unit)} at {t:.0f} s (above the axis)</title></path>"
                    )
        ly = PAD_T + 14 + 18 * i
        out.append(
            f'<line x1="{WIDTH - PAD_R + 12}" x2="{WIDTH - PAD_R + 32}" y1="{ly - 4}" y2="{ly - 4}" '
            f'stroke="{color}" stroke-width="3"/>'
        )
        out.append(f'<text x="{WIDTH - PAD_R + 38}" y="{ly}" font-size="12">{html.escape(label)}</text>')
    configs = 1
    labels: list[tuple[float, str, str]] = []  # (x, text, colour)
    for e in (m for m in marks if m.kind in CHART_MARK_KINDS):
        color = MARK_COLOURS.get(e.kind, "#555555")
        xx = x(e.t)
        label = MARK_LABELS.get(e.kind) or e.message or "mark"
        dash = ' stroke-dasharray="5,3"'
        if e.kind == CONFIG_EVENT:
            configs += 1
            label, dash = f"C{configs}", ""
        out.append(
            f'<line class="mark-{html.escape(e.kind)}" x1="{xx:.1f}" x2="{xx:.1f}" y1="{PAD_T}" y2="{PAD_T + plot_h}" '
            f'stroke="{color}" stroke-width="1.5"{dash}><title>{html.escape(e.message)}</title></line>'
        )
        labels.append((xx + 3, label[:MARK_LABEL_CHARS], color))
    rows = label_rows([(lx, text) for lx, text, _ in labels])
    for (lx, text, color), row in zip(labels, rows, strict=True):
        out.append(
            f'<text class="mark-label" x="{lx:.1f}" y="{PAD_T + 11 + MARK_ROW_PX * row}" font-size="10" '
            f'fill="{color}">{html.escape(text)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return "-" if math.isnan(v) else f"{v:,.2f}"
    if v is None:
        return "-"
    return html.escape(str(v))


def configurations_section(table: SegmentTable) -> str:
    """ "Configurations": one column per configuration, the differing engine arguments
    first, then each one's figures; its serve command under the table."""
    head = "".join(f"<th>{html.escape(col)}</th>" for col in table.columns)
    body = "".join(
        f'<tr class="{"argument" if i < table.argument_count else "figure"}"><th>{html.escape(label)}</th>'
        + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells)
        + "</tr>"
        for i, (label, cells) in enumerate(table.rows)
    )
    commands = "".join(
        f"<li><b>{html.escape(col)}</b> <code>{html.escape(cmd)}</code></li>"
        for col, cmd in zip(table.columns, table.commands, strict=True)
        if cmd
    )
    return (
        f'<h2 id="configurations">Configurations</h2><p class="sub">{html.escape(SEGMENT_NOTE)}</p>'
        f"<table><tr><th></th>{head}</tr>{body}</table><ul>{commands}</ul>"
    )


# The Classes section's charts: one line per class of a mixture.
CLASS_CHARTS = (
    ("Completed per class", "req/s", "completed_rps", 1.0),
    ("TTFT p99 per class", "ms", "ttft_p99", 1000.0),
    ("ITL p99 per class", "ms", "itl_p99", 1000.0),
    ("E2E latency p99 per class", "ms", "e2el_p99", 1000.0),
)


def classes_section(
    table: SegmentTable,
    snapshot: Snapshot,
    marks: Sequence[Event],
    t_max: float,
    title: str = "Classes",
    note: str = CLASS_NOTE,
    charts_shown: bool = True,
) -> str:
    """ "Classes": a mixture's classes side by side, then charts with a line per class
    (the same for a run's LoRA adapters: ``title`` "Adapters"; the live series group by
    adapter only in a run without a mixture, so a mixture's adapters have no charts)."""
    head = "".join(f"<th>{html.escape(col)}</th>" for col in table.columns)
    body = "".join(
        f"<tr><th>{html.escape(label)}</th>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>"
        for label, cells in table.rows
    )
    charts = "".join(
        '<section class="chart">'
        + svg_chart(
            chart_title,
            unit,
            snapshot.times,
            [(c.name, [v * scale for v in c.series.get(name, [])]) for c in snapshot.classes],
            marks,
            t_max,
            None,
        )
        + "</section>"
        for chart_title, unit, name, scale in CLASS_CHARTS
        if snapshot.classes and charts_shown
    )
    return (
        f'<h2 id="{title.lower()}">{html.escape(title)}</h2><p class="sub">{html.escape(note)}</p>'
        f"<table><tr><th></th>{head}</tr>{body}</table>{charts}"
    )


def adapters_section(
    table: SegmentTable | None,
    classes: SegmentTable | None,
    snapshot: Snapshot,
    marks: Sequence[Event],
    t_max: float,
) -> str:
    """ "Adapters": a run's LoRA adapters side by side (``core.figures.adapters``); nothing
    without adapters."""
    if table is None:
        return ""
    return classes_section(table, snapshot, marks, t_max, "Adapters", ADAPTER_NOTE, charts_shown=classes is None)


def with_knee_reviews(marks: Sequence[Event]) -> list[Event]:
    """The marks, a knee's text followed by the review that settled its explanation: a
    chart's knee line (its tooltip) would otherwise give only what the knee read at first,
    under a knee section that says another limit."""
    out = []
    for e in marks:
        review = knee_review(marks, e) if e.kind == "knee" else None
        out.append(e if review is None else replace(e, message=f"{e.message}; then {review.message}"))
    return out


def search_html(result: dict[str, Any] | None) -> str:
    """rampwatch search's answer and its holds (empty for a run without a search)."""
    if result is None:
        return ""
    unit = "req/s" if result.get("by") == "rate" else "users"
    holds = result.get("holds")
    rows = "".join(
        f"<tr><td>{i}</td><td>{_cell(h.get('level'))} {unit}</td><td>{_cell(h.get('seconds'))}</td>"
        f"<td>{_cell(h.get('requests'))}</td><td>{html.escape(figures_text(h.get('figures')))}</td>"
        f"<td>{'PASS' if h.get('passed') is True else 'FAIL'}</td></tr>"
        for i, h in enumerate(holds if isinstance(holds, list) else [], 1)
        if isinstance(h, dict)
    )
    return (
        f'<h2>Search</h2><p class="knee">{html.escape(str(result.get("line", "")))}</p>'
        f'<p class="sub">{html.escape(str(result.get("hold_rule", "")))}</p>'
        f"<table><tr><th>hold</th><th>level</th><th>s</th><th>requests</th><th>SLO figures</th><th>verdict</th></tr>{rows}</table>"
    )


def knee_section(summary: Summary) -> str:
    """Why the knee: the limit, its evidence and what to try next (empty without a knee)."""
    why = KneeExplanation.from_dict(summary.knee_explanation)
    if summary.knee_rps is None or why is None:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in why.lines())
    return (
        f'<h2>Knee</h2><p class="knee">at {summary.knee_rps:.1f} req/s offered: '
        f"<b>{html.escape(why.title)}</b></p><ul>{items}</ul>"
    )


# The "Turns" section of a session workload: the figures by turn index (``core.figures.turns``)
# as a table, and a small inline SVG of TTFT p50 (left axis, ms) and the prefix-cache hit
# rate (right axis, 0–100 %) by turn, so that "TTFT falls and the hit rate rises from
# turn 2" is seen at a glance.
TURNS_W, TURNS_H = 620, 220
TURNS_PAD_L, TURNS_PAD_R, TURNS_PAD_T, TURNS_PAD_B = 60, 60, 30, 34
TTFT_COLOUR, HIT_COLOUR = "#1f77b4", "#2ca02c"


def _turn_polyline(points: Sequence[tuple[float, float]], colour: str, dash: str = "") -> list[str]:
    """A line through the points (a gap where a turn has no value is left as one), a dot on each."""
    out = []
    if len(points) > 1:
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{coords}"/>')
    out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in points]
    return out


def turns_svg(table: TurnTable) -> str:
    """TTFT p50 and hit rate by turn."""
    rows = table.rows
    plot_w, plot_h = TURNS_W - TURNS_PAD_L - TURNS_PAD_R, TURNS_H - TURNS_PAD_T - TURNS_PAD_B
    ttfts = [None if r.ttft_ms is None else r.ttft_ms["p50"] for r in rows]
    top = _nice_max(max((v for v in ttfts if v is not None), default=1.0) * 1.05)

    def x(i: int) -> float:
        return TURNS_PAD_L + plot_w * (i + 0.5) / len(rows)

    def y(fraction: float) -> float:
        return TURNS_PAD_T + plot_h * (1 - fraction)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" {fluid_size(TURNS_W, TURNS_H)} '
        f'role="img" aria-label="TTFT p50 and prefix-cache hit rate by turn">',
        f'<rect x="0" y="0" width="{TURNS_W}" height="{TURNS_H}" fill="#ffffff"/>',
        f'<text x="{TURNS_PAD_L}" y="18" font-size="14" font-weight="bold">By turn: '
        f'<tspan fill="{TTFT_COLOUR}">TTFT p50 (ms)</tspan> · <tspan fill="{HIT_COLOUR}">hit rate (%)</tspan></text>',
    ]
    for k in range(5):
        yy = y(k / 4)
        out.append(
            f'<line x1="{TURNS_PAD_L}" x2="{TURNS_PAD_L + plot_w}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#e4e4e4"/>'
        )
        out.append(
            f'<text x="{TURNS_PAD_L - 6}" y="{yy + 4:.1f}" font-size="11" text-anchor="end" fill="{TTFT_COLOUR}">'
            f"{top * k / 4:g}</text>"
        )
        out.append(
            f'<text x="{TURNS_PAD_L + plot_w + 6}" y="{yy + 4:.1f}" font-size="11" fill="{HIT_COLOUR}">{25 * k}</text>'
        )
    for i, row in enumerate(rows):
        out.append(
            f'<text x="{x(i):.1f}" y="{TURNS_PAD_T + plot_h + 16}" font-size="11" text-anchor="middle">'
            f"{html.escape(row.turn)}</text>"
        )
    out.append(
        f'<text x="{TURNS_PAD_L + plot_w / 2:.1f}" y="{TURNS_H - 2}" font-size="11" text-anchor="middle">turn</text>'
        f'<rect x="{TURNS_PAD_L}" y="{TURNS_PAD_T}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>'
    )
    out += _turn_polyline([(x(i), y(v / top)) for i, v in enumerate(ttfts) if v is not None], TTFT_COLOUR)
    hits = [(x(i), y(r.hit_rate_pct / 100)) for i, r in enumerate(rows) if r.hit_rate_pct is not None]
    out += _turn_polyline(hits, HIT_COLOUR, ' stroke-dasharray="5,3"')
    out.append("</svg>")
    return "\n".join(out)


def turns_section(table: TurnTable) -> str:
    """ "Turns": the chart, the table by turn and the session totals."""
    head = "".join(f"<th>{html.escape(name)}</th>" for name, _ in TEXT_COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell(row))}</td>" for _, cell in TEXT_COLUMNS) + "</tr>"
        for row in table.rows
    )
    hint = "" if table.hit_rate_reported else f'<p class="warn">{html.escape(NO_HIT_RATE_HINT)}</p>'
    return (
        f'<h2 id="turns">Turns</h2><p class="sub">{html.escape(TURNS_NOTE)}</p>'
        f'<section class="chart" style="max-width: {TURNS_W}px">{turns_svg(table)}</section>'
        f'<table class="turns"><tr>{head}</tr>{body}</table>'
        f"<p>{html.escape(sessions_line(table.sessions))}</p>{hint}"
    )


def fluid_size(width: int, height: int) -> str:
    """An inline SVG's size attributes: drawn in a ``width`` × ``height`` box (its
    viewBox) and scaled to its frame's width by the page's CSS, legends and labels with it."""
    return f'viewBox="0 0 {width} {height}" width="100%" preserveAspectRatio="xMinYMin meet"'


def page_style(chart_width: int) -> str:
    """The CSS every rampwatch HTML page shares (the run report, the sweep report): the
    page, headings, chart frames at most ``chart_width`` px wide and as wide as the
    window below that (their SVGs scale), tables and preformatted text. Nothing makes
    the page wider than the window: a wide table or text scrolls in its own box."""
    return f"""body {{ font-family: system-ui, sans-serif; margin: 20px; color: #222; background: #fafafa; }}
h1 {{ font-size: 20px; margin-bottom: 2px; }}
.sub {{ color: #666; margin-top: 0; }}
.chart {{ background: #fff; border: 1px solid #ddd; margin: 10px 0; width: 100%; max-width: {chart_width}px; box-sizing: border-box; }}
.chart svg {{ display: block; width: 100%; height: auto; }}
table {{ border-collapse: collapse; background: #fff; margin: 10px 0; display: block; max-width: 100%; overflow-x: auto; }}
td, th {{ border: 1px solid #ddd; padding: 3px 8px; font-size: 13px; }}
pre {{ background: #fff; border: 1px solid #ddd; padding: 8px; font-size: 12px; max-width: 100%; overflow-x: auto; box-sizing: border-box; }}
.cols {{ display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; max-width: 100%; }}
.cols > * {{ min-width: 0; }}"""


def render_html(
    snapshot: Snapshot,
    summary: Summary,
    summary_text: str,
    marks: Sequence[Event],
    title: str,
    subtitle: str,
    warnings: Sequence[str] = (),
    configurations: SegmentTable | None = None,
    turns: TurnTable | None = None,
    classes: SegmentTable | None = None,
    adapters: SegmentTable | None = None,
) -> str:
    """The page; ``configurations``: the side-by-side table of a run restarted with other
    engine arguments (``core.figures.segments``), None for a run with one configuration;
    ``turns``: a session workload's figures by turn (``core.figures.turns``), None without;
    ``classes``: a mixture's classes side by side (``core.figures.classes``), None otherwise."""
    t_max = max(snapshot.times[-1] + 1 if snapshot.times else 0.0, snapshot.t)
    chart_marks = with_knee_reviews(marks)
    charts = []
    with_gpu = snapshot.last_good_gpu_t is not None
    with_images = "mm_cache_hit_pct" in snapshot.series
    with_spec = "spec_acceptance_pct" in snapshot.series
    optional = (
        (GPU_CHARTS if with_gpu else []) + (SPEC_CHARTS if with_spec else []) + (IMAGE_CHARTS if with_images else [])
    )
    thinking = REASONING_CHARTS if snapshot.reasoning is not None else []
    series = {**snapshot.series, **(snapshot.reasoning or {})}
    for chart_title, unit, names, scale, y_top in CHARTS + thinking + optional:
        lines = []
        for name, label in names:
            values = series.get(name)
            if values is None:
                continue
            lines.append((label, [v * scale if v is not None else v for v in values]))
        charts.append(
            f'<section class="chart">{svg_chart(chart_title, unit, snapshot.times, lines, chart_marks, t_max, y_top)}</section>'
        )
    figures = summary.to_dict()
    figures.update(figures.pop("reasoning", None) or {})  # a reasoning run's figures, as rows
    phases = figures.pop("ttft_phases", None) or {}  # where TTFT went (core.figures.phases), as rows
    figures.update({f"ttft_phase_{key}": value for key, value in phases.items()})
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{_cell(v)}</td></tr>"
        for k, v in figures.items()
        if not isinstance(v, (dict, list))
    )
    mark_rows = "".join(
        f'<tr class="mark-{html.escape(e.kind)}"><td>{e.t:.1f} s</td><td>{html.escape(MARK_KIND_NAMES.get(e.kind, e.kind))}</td>'
        f"<td>{html.escape(mark_note(e))}</td></tr>"
        for e in timeline_marks(marks)
    )
    warn = "".join(f'<p class="warn">{html.escape(w)}</p>' for w in warnings)
    knee = knee_section(summary)
    columns = step_columns(snapshot.steps)  # speculative decoding's columns only where the server speculates
    step_head = "".join(f"<th>{html.escape(name)}</th>" for name, _ in columns)
    step_rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cells[name])}</td>" for name, _ in columns) + "</tr>"
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
{page_style(WIDTH)}
td, th {{ text-align: left; }}
td {{ text-align: right; font-variant-numeric: tabular-nums; }}
.warn {{ color: #a15c00; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="sub">{html.escape(subtitle)}</p>
{warn}
{"".join(charts)}
{configurations_section(configurations) if configurations is not None else ""}
{turns_section(turns) if turns is not None else ""}
{classes_section(classes, snapshot, marks, t_max) if classes is not None else ""}{adapters_section(adapters, classes, snapshot, marks, t_max)}
{steps}
{knee}{search_html(search_result(marks))}
<h2>Marks</h2>
<table><tr><th>time</th><th>kind</th><th>note</th></tr>{mark_rows}</table>
<h2>Summary</h2>
<div class="cols"><pre>{html.escape(summary_text)}</pre><table>{rows}</table></div>
</body></html>
"""
