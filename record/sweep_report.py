"""A sweep's HTML report (``OUTPUT_DIR/sweep.html``, written at the sweep's end): the
Pareto plane — tok/s per user across, tok/s per GPU up, the front joined by a line — and
the table, in ``html_report``'s style (inline SVG, no scripts, no network)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from rampwatch.core.figures.search_best import searched
from rampwatch.core.figures.sweep import limit_reached
from rampwatch.core.figures.sweep_text import legend_lines, table_cells, verdict_text
from rampwatch.core.files import private_file
from rampwatch.record.html_report import (
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
LABEL_H, LABEL_CHAR_W = 13.0, 7.0  # a label's box at font-size 11


def label_positions(points: list[tuple[float, float, str]]) -> list[tuple[float, float]]:
    """Where each point's label goes (its text's left end and baseline): up and right of
    the point, or the first of the other spots around it whose box overlaps no label
    placed before it, so that close points never print as one (``#2#3``)."""
    boxes: list[tuple[float, float, float, float]] = []
    out = []
    for cx, cy, text in points:
        w = LABEL_CHAR_W * len(text)
        spots = [(cx + 7, cy - 6), (cx + 7, cy + 14), (cx - 7 - w, cy - 6), (cx - 7 - w, cy + 14)]
        spots += [(cx + 7, cy - 6 - k * LABEL_H) for k in range(1, 6)] + [
            (cx + 7, cy + 14 + k * LABEL_H) for k in range(1, 6)
        ]
        for x, y in spots:
            box = (x, y - LABEL_H + 3, x + w, y + 3)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in boxes):
                break
        else:
            x, y = spots[0]
            box = (x, y - LABEL_H + 3, x + w, y + 3)
        boxes.append(box)
        out.append((x, y))
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
    labels = [f"#{r['index'] + 1}" + ("" if limit_reached(r) else " (not reached)") for r in points]
    centres = [(x(r["tps_per_user"]), y(r["tps_per_gpu"])) for r in points]
    placed = label_positions([(cx, cy, label) for (cx, cy), label in zip(centres, labels, strict=True)])
    for r, (cx, cy), label, (lx, ly) in zip(points, centres, labels, placed, strict=True):
        colour = FRONT_COLOUR if r.get("pareto") else PALETTE[0]
        # a configuration never loaded to its limit: hollow (its point is below its capacity)
        fill = f'fill="{colour}"' if limit_reached(r) else f'fill="#ffffff" stroke="{colour}" stroke-width="1.5"'
        tip = f"#{r['index'] + 1} {r['config']}: {r['tps_per_user']:.1f} tok/s/user, {r['tps_per_gpu']:.0f} tok/s/GPU"
        out.extend(error_bars(r, cx, cy, x, y, colour))
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" {fill}><title>{html.escape(tip)}</title></circle>')
        out.append(f'<text x="{lx:.1f}" y="{ly:.1f}" font-size="11">{html.escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def error_bars(row: dict[str, Any], cx: float, cy: float, x: Any, y: Any, colour: str) -> list[str]:
    """A repeated configuration's 95 % intervals as whiskers through its point: tok/s per
    user across, tok/s per GPU (its output's interval over its GPUs) up; none for one run."""
    ci = row.get("ci95") or {}
    out = []
    if ci.get("tps_per_user") is not None:
        lo, hi = x(row["tps_per_user"] - ci["tps_per_user"]), x(row["tps_per_user"] + ci["tps_per_user"])
        out.append(f'<line class="ci" x1="{lo:.1f}" y1="{cy:.1f}" x2="{hi:.1f}" y2="{cy:.1f}" stroke="{colour}"/>')
    if ci.get("output_tps") is not None:
        half = ci["output_tps"] / max(1, row.get("gpus", 1))
        lo, hi = y(row["tps_per_gpu"] - half), y(row["tps_per_gpu"] + half)
        out.append(f'<line class="ci" x1="{cx:.1f}" y1="{lo:.1f}" x2="{cx:.1f}" y2="{hi:.1f}" stroke="{colour}"/>')
    return out


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
    best_html = "<pre>" + html.escape(verdict_text(state)) + "</pre>"
    legend = "".join(f"<li>{html.escape(line)}</li>" for line in legend_lines(rows, searched(state)))
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
<ul class="legend">{legend}</ul>
{best_html}
<h2>Recordings</h2><ul>{recordings}</ul>
</body></html>
"""


def write_sweep_report(state: dict[str, Any], path: Path) -> None:
    with private_file(path, "w", encoding="utf-8") as fh:
        fh.write(render_sweep_html(state))
