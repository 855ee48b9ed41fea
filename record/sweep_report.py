"""A sweep's HTML report (``OUTPUT_DIR/sweep.html``, written at the sweep's end): the
Pareto plane — tok/s per user across, tok/s per GPU up, the front joined by a line — and
the table, in ``html_report``'s style (inline SVG, no scripts, no network)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from rampwatch.loadgen.sweep import table_cells
from rampwatch.record.html_report import (
    MARK_CHAR_PX,
    PAD_B,
    PAD_L,
    PAD_T,
    PALETTE,
    _fmt_tick,
    _nice_max,
    fluid_size,
    page_style,
)

WIDTH, HEIGHT = 900, 460
PAD_R = 40
FRONT_COLOUR = "#d62728"


# A point label's line height at font-size 11 (its width: html_report's MARK_CHAR_PX a character).
LABEL_LINE_PX = 13


def point_labels(labels: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Labels (x, baseline y, text) with those that would overlap an earlier one merged
    into it ("#2,#3", at the first one's place): close points never overprint."""
    out: list[tuple[float, float, str]] = []
    for lx, ly, text in labels:
        for i, (ox, oy, other) in enumerate(out):
            overlaps_x = lx < ox + MARK_CHAR_PX * len(other) + 2 and ox < lx + MARK_CHAR_PX * len(text) + 2
            if overlaps_x and abs(ly - oy) < LABEL_LINE_PX:
                out[i] = (ox, oy, f"{other},{text}")
                break
        else:
            out.append((lx, ly, text))
    return out


def pareto_svg(rows: list[dict[str, Any]]) -> str:
    points = [
        r
        for r in rows
        if r.get("status") == "done" and r.get("tps_per_user") is not None and r.get("tps_per_gpu") is not None
    ]
    plot_w, plot_h = WIDTH - PAD_L - PAD_R, HEIGHT - PAD_T - PAD_B
    x_max = _nice_max(max((r["tps_per_user"] for r in points), default=1.0) * 1.1 or 1.0)
    y_max = _nice_max(max((r["tps_per_gpu"] for r in points), default=1.0) * 1.1 or 1.0)

    def x(v: float) -> float:
        return PAD_L + plot_w * v / x_max

    def y(v: float) -> float:
        return PAD_T + plot_h * (1 - v / y_max)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" {fluid_size(WIDTH, HEIGHT)} role="img" aria-label="Pareto front">',
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<text x="{PAD_L}" y="18" font-size="14" font-weight="bold">Pareto front: output tok/s per GPU vs tok/s per user</text>',
    ]
    for i in range(5):
        yy, xx = y(y_max * i / 4), x(x_max * i / 4)
        out.append(f'<line x1="{PAD_L}" x2="{PAD_L + plot_w}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#e4e4e4"/>')
        out.append(
            f'<text x="{PAD_L - 6}" y="{yy + 4:.1f}" font-size="11" text-anchor="end">{_fmt_tick(y_max * i / 4)}</text>'
        )
        out.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{PAD_T}" y2="{PAD_T + plot_h}" stroke="#f0f0f0"/>')
        out.append(
            f'<text x="{xx:.1f}" y="{PAD_T + plot_h + 16}" font-size="11" text-anchor="middle">{_fmt_tick(x_max * i / 4)}</text>'
        )
    out.append(f'<rect x="{PAD_L}" y="{PAD_T}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>')
    out.append(
        f'<text x="{PAD_L + plot_w / 2:.0f}" y="{HEIGHT - 4}" font-size="12" text-anchor="middle">tok/s per user (at the knee)</text>'
    )
    front = sorted((r for r in points if r.get("pareto")), key=lambda r: r["tps_per_user"])
    if len(front) > 1:
        path = " ".join(f"{x(r['tps_per_user']):.1f},{y(r['tps_per_gpu']):.1f}" for r in front)
        out.append(f'<polyline class="front" fill="none" stroke="{FRONT_COLOUR}" stroke-width="1.5" points="{path}"/>')
    placed = []
    for r in points:
        colour = FRONT_COLOUR if r.get("pareto") else PALETTE[0]
        cx, cy = x(r["tps_per_user"]), y(r["tps_per_gpu"])
        tip = f"#{r['index'] + 1} {r['config']}: {r['tps_per_user']:.1f} tok/s/user, {r['tps_per_gpu']:.0f} tok/s/GPU"
        out.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{colour}"><title>{html.escape(tip)}</title></circle>'
        )
        placed.append((cx + 7, cy - 6, f"#{r['index'] + 1}"))
    for lx, ly, text in point_labels(placed):
        out.append(f'<text class="point-label" x="{lx:.1f}" y="{ly:.1f}" font-size="11">{text}</text>')
    out.append("</svg>")
    return "\n".join(out)


def render_sweep_html(state: dict[str, Any]) -> str:
    rows = state["rows"]
    cells = table_cells(rows)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cells[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row_cells) + "</tr>" for row_cells in cells[1:]
    )
    notes = "".join(
        f"<li>#{r['index'] + 1} {html.escape(str(r.get('status')))}: {html.escape(str(r.get('reason')))}</li>"
        for r in rows
        if r.get("status") != "done" and r.get("reason")
    )
    best = state.get("best")
    best_html = (
        "<p>No configuration completed with a request meeting the SLO.</p>"
        if best is None
        else f"<p>Best under the SLO (highest max good-put): #{best + 1}</p><pre>"
        + html.escape(rows[best].get("vllm_command") or rows[best]["command"])
        + "</pre>"
    )
    recordings = "".join(
        f"<li>#{r['index'] + 1}: {html.escape(str(r['recording']))}</li>" for r in rows if r.get("recording")
    )
    title = f"rampwatch sweep: {state.get('sweep')}"
    subtitle = f"{len(rows)} configurations of {state.get('serve')} · SLO {state.get('slo')} · * on the Pareto front"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
{page_style(WIDTH)}
td, th {{ text-align: right; }}
td:nth-child(2), th:nth-child(2), td:last-child {{ text-align: left; white-space: nowrap; }}
pre {{ white-space: pre-wrap; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p class="sub">{html.escape(subtitle)}</p>
<section class="chart">{pareto_svg(rows)}</section>
<h2>Configurations</h2>
<table><tr>{head}</tr>{body}</table>
<ul>{notes}</ul>
{best_html}
<h2>Recordings</h2><ul>{recordings}</ul>
</body></html>
"""


def write_sweep_report(state: dict[str, Any], path: Path) -> None:
    path.write_text(render_sweep_html(state), encoding="utf-8")
