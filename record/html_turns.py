"""The HTML report's "Turns" section for a session workload: the figures by turn index
(``loadgen.turns``) as a table, and a small inline SVG of TTFT p50 (left axis, ms) and
the prefix-cache hit rate (right axis, 0–100 %) by turn, so that "TTFT falls and the hit
rate rises from turn 2" is seen at a glance."""

from __future__ import annotations

import html
from collections.abc import Sequence

from rampwatch.loadgen.turns import NO_HIT_RATE_HINT, TEXT_COLUMNS, TURNS_NOTE, TurnTable, sessions_line

SVG_W, SVG_H = 620, 220
PAD_L, PAD_R, PAD_T, PAD_B = 60, 60, 30, 34
TTFT_COLOUR, HIT_COLOUR = "#1f77b4", "#2ca02c"


def _nice_top(v: float) -> float:
    """The axis top: 1, 2, 2.5 or 5 times a power of ten at or above ``v``."""
    if v <= 0:
        return 1.0
    exp = 1.0
    while exp * 10 < v:
        exp *= 10
    while exp > v:
        exp /= 10
    return next(m * exp for m in (1, 2, 2.5, 5, 10) if v <= m * exp)


def _polyline(points: Sequence[tuple[float, float]], colour: str, dash: str = "") -> list[str]:
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
    plot_w, plot_h = SVG_W - PAD_L - PAD_R, SVG_H - PAD_T - PAD_B
    ttfts = [None if r.ttft_ms is None else r.ttft_ms["p50"] for r in rows]
    top = _nice_top(max((v for v in ttfts if v is not None), default=1.0) * 1.05)

    def x(i: int) -> float:
        return PAD_L + plot_w * (i + 0.5) / len(rows)

    def y(fraction: float) -> float:
        return PAD_T + plot_h * (1 - fraction)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_W}" height="{SVG_H}" viewBox="0 0 {SVG_W} {SVG_H}" '
        f'role="img" aria-label="TTFT p50 and prefix-cache hit rate by turn">',
        f'<rect x="0" y="0" width="{SVG_W}" height="{SVG_H}" fill="#ffffff"/>',
        f'<text x="{PAD_L}" y="18" font-size="14" font-weight="bold">By turn: '
        f'<tspan fill="{TTFT_COLOUR}">TTFT p50 (ms)</tspan> · <tspan fill="{HIT_COLOUR}">hit rate (%)</tspan></text>',
    ]
    for k in range(5):
        yy = y(k / 4)
        out.append(f'<line x1="{PAD_L}" x2="{PAD_L + plot_w}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#e4e4e4"/>')
        out.append(
            f'<text x="{PAD_L - 6}" y="{yy + 4:.1f}" font-size="11" text-anchor="end" fill="{TTFT_COLOUR}">'
            f"{top * k / 4:g}</text>"
        )
        out.append(
            f'<text x="{PAD_L + plot_w + 6}" y="{yy + 4:.1f}" font-size="11" fill="{HIT_COLOUR}">{25 * k}</text>'
        )
    for i, row in enumerate(rows):
        out.append(
            f'<text x="{x(i):.1f}" y="{PAD_T + plot_h + 16}" font-size="11" text-anchor="middle">'
            f"{html.escape(row.turn)}</text>"
        )
    out.append(
        f'<text x="{PAD_L + plot_w / 2:.1f}" y="{SVG_H - 2}" font-size="11" text-anchor="middle">turn</text>'
        f'<rect x="{PAD_L}" y="{PAD_T}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>'
    )
    out += _polyline([(x(i), y(v / top)) for i, v in enumerate(ttfts) if v is not None], TTFT_COLOUR)
    hits = [(x(i), y(r.hit_rate_pct / 100)) for i, r in enumerate(rows) if r.hit_rate_pct is not None]
    out += _polyline(hits, HIT_COLOUR, ' stroke-dasharray="5,3"')
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
        f'<section class="chart" style="width: {SVG_W}px">{turns_svg(table)}</section>'
        f'<table class="turns"><tr>{head}</tr>{body}</table>'
        f"<p>{html.escape(sessions_line(table.sessions))}</p>{hint}"
    )
