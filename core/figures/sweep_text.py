"""A sweep's figures in words: the table's cells, columns and legend, the knee as the end
lines say it, the verdict (the best configuration as commands ready to paste) and the
Pareto plane as text. Pure, over the rows ``sweep`` figures; what `rampwatch sweep`
prints at its end, and what ``record.sweep_report`` and ``tui.sweep_view`` show."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rampwatch.core.errors import UserError
from rampwatch.core.figures.search_best import (
    SEARCH_BEST_RULE,
    SEARCH_REPEATS_LEGEND,
    paste_lines,
    rows_searched,
    search_verdict_text,
    searched,
)
from rampwatch.core.figures.slo import parse_slo
from rampwatch.core.figures.sweep import BEST_RULE, limit_reached, loaded_to_limit

TABLE_COLUMNS = (
    ("#", "index"),
    ("config", "config"),
    ("max under SLO", "search_max"),  # load: search (core.figures.search)
    ("knee rps", "knee_rps"),
    ("good-put", "max_goodput_rps"),
    ("out tok/s", "output_tps"),
    ("tok/s/user", "tps_per_user"),
    ("TTFT p50", "ttft_p50_ms"),
    ("TTFT p99", "ttft_p99_ms"),
    ("ITL p50", "itl_p50_ms"),
    ("ITL p99", "itl_p99_ms"),
    ("KV peak", "peak_kv_pct"),
    ("preempt", "preemptions"),
    ("tok/J", "tokens_per_joule"),
    ("limit", "limit"),
)
# Shown only when some configuration has it (GPU power known).
OPTIONAL_COLUMNS = ("tokens_per_joule", "search_max")


def search_cell(row: dict[str, Any]) -> str:
    """``load: search``'s answer: ``12.5 ± 0.6``, or ``none`` (it could not bracket one)."""
    if row.get("search_max") is None:
        return "none" if row.get("search_failure") else "—"
    over_repeats = (row.get("ci95") or {}).get("search_max")
    if over_repeats is not None:  # repeats: the interval of the runs' answers, as every other cell
        return _number(row["search_max"], None, over_repeats, digits=2)
    return f"{row['search_max']:.3g} ± {row.get('search_plus_minus') or 0.0:.2g}"


NOT_REACHED = "not reached; extend the load"
TABLE_LEGEND = (
    "knee rps: the offered rate at the knee ± how far the rates its 15 s window averaged reach "
    "(a slower ramp narrows it); >R: no knee up to R req/s offered",
    "* on the Pareto front; " + BEST_RULE,
)


REPEATS_LEGEND = (
    "with repeats: each figure the mean of the runs ± the half-width of its 95 % interval (Student's t); "
    "a best only when its good-put interval lies above every other loaded configuration's (on the front or not), else tied"
)


def legend_lines(rows: Sequence[dict[str, Any]], search: bool = False) -> list[str]:
    """The lines under the table: ``TABLE_LEGEND`` (a searched sweep's states its own
    best rule, ``SEARCH_BEST_RULE``), and with repeats how to read the intervals."""
    search = search or rows_searched(rows)
    legend = [TABLE_LEGEND[0], "* on the Pareto front; " + SEARCH_BEST_RULE] if search else list(TABLE_LEGEND)
    if any(row.get("ci95") for row in rows):
        legend.append(SEARCH_REPEATS_LEGEND if search else REPEATS_LEGEND)
    return legend


def _number(value: float, spread: Sequence[float] | None, ci95: float | None = None, digits: int = 1) -> str:
    """A figure; with repeats ± its 95 % half-width (a sweep.json from before intervals:
    the min–max of the runs after it)."""
    text = f"{value:.{digits}f}"
    if ci95 is not None:
        return f"{text} ±{ci95:.{digits}f}"
    return text if not spread else f"{text} ({spread[0]:.1f}–{spread[1]:.1f})"


def _cell(key: str, row: dict[str, Any]) -> str:
    value = row.get(key)
    done = row.get("status") == "done"
    spread = (row.get("spread") or {}).get(key)
    ci95 = (row.get("ci95") or {}).get(key)
    if key == "index":
        return f"{int(row['index']) + 1}{'*' if row.get('pareto') else ''}"
    if key == "config":
        return str(value)
    if key == "search_max":
        return search_cell(row)
    if key == "limit":
        if not done and row.get("status") is not None:
            return str(row.get("status"))
        if done and not limit_reached(row):
            return NOT_REACHED
        if done and value is None and row.get("slo_broken_at_end"):
            return "SLO broken, no knee"
        return str(value) if value else "—"
    if key == "knee_rps" and done and value is None:
        peak = row.get("peak_offered_rps")
        return f">{peak:.1f}" if peak is not None and not limit_reached(row) else "none"
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if key == "knee_rps":
        if ci95 is not None:  # over repeats: the runs' spread, not one run's window
            return _number(value, None, ci95)
        pm = row.get("knee_rps_pm")
        text = f"{value:.1f}" if pm is None else f"{value:.1f} ±{pm:.1f}"
        return text if not spread else f"{text} ({spread[0]:.1f}–{spread[1]:.1f})"
    if key == "peak_kv_pct":
        return f"{value:.0f}%"
    if key == "preemptions":
        return f"{value:.0f}"
    if key == "tokens_per_joule":
        return f"{value:.2f}"
    if key.endswith("_ms"):
        return f"{value:.0f}" if ci95 is None else _number(value, None, ci95, digits=0)
    return _number(value, spread, ci95)


def table_cells(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The sweep table's text: a header row then one row per configuration (``*`` after
    the number marks the Pareto front). A configuration that failed shows its status in
    the last column and its reason under the table."""
    columns = table_columns(rows)
    out = [[header for header, _ in columns]]
    for row in rows:
        out.append([_cell(key, row) for _, key in columns])
    return out


def table_columns(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """``TABLE_COLUMNS`` less the optional ones no row has a figure for."""
    return [
        (header, key)
        for header, key in TABLE_COLUMNS
        if key not in OPTIONAL_COLUMNS or any(row.get(key) is not None for row in rows)
    ]


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    cells = table_cells(rows)
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = []
    for r in cells:
        line = "  ".join(
            c.ljust(w) if i in (0, 1, len(r) - 1) else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        lines.append(line.rstrip())
    for row in rows:
        if row.get("status") not in ("done", None) and row.get("reason"):
            lines.append(f"#{row['index'] + 1} {row['status']}: {row['reason']}")
    lines += ["", *legend_lines(rows)]
    return "\n".join(lines)


def knee_text(row: dict[str, Any]) -> str:
    """The knee as the end lines say it: its rate and uncertainty, or that the load
    never reached the configuration's limit (and the most it offered)."""
    if row.get("knee_rps") is None:
        if limit_reached(row):
            return "none (the SLO broke first)"
        peak = row.get("peak_offered_rps")
        return NOT_REACHED + ("" if peak is None else f" (kept up to {peak:.1f} rps offered)")
    pm = (row.get("ci95") or {}).get("knee_rps")  # over repeats: the runs' interval, as the table
    if pm is None:
        pm = row.get("knee_rps_pm")
    return f"{row['knee_rps']:.1f}" + ("" if pm is None else f" ±{pm:.1f}") + " rps"


def knee_breaches(row: dict[str, Any], slo: str | None) -> list[str]:
    """The SLO's percentile bounds that the row's figures at its knee break ("TTFT p99
    814 ms > 500 ms"): the table shows them beside a best chosen by good-put, which
    judges each request, so the verdict says so rather than leave them to contradict it."""
    try:
        bounds = parse_slo(slo).bounds if slo else ()
    except UserError:
        return []
    out = []
    for b in bounds:
        value = row.get(f"{b.metric}_p{b.percentile:g}_ms")
        if isinstance(value, (int, float)) and math.isfinite(value) and value > b.limit_ms:
            out.append(f"{b.metric.upper()} p{b.percentile:g} {value:.0f} ms > {b.limit_ms:g} ms")
    return out


def verdict_text(state: dict[str, Any]) -> str:
    """The sweep's verdict by ``sweep.BEST_RULE``: the best configuration as
    commands ready to paste, the ones its repeats cannot tell from it, and the
    configurations whose load never reached their limit (not judged)."""
    if searched(state):  # load: search: by the confirmed max under the SLO
        return search_verdict_text(state)
    best = state.get("best")
    slo = state.get("slo")
    rows = state["rows"]
    not_reached = state.get("not_reached") or []
    lines = []
    tied = state.get("tied") or []
    if best is None and tied:
        repeats = state.get("repeats", 1)
        names = ", ".join(f"#{i + 1} {rows[i]['config']} ({_goodput_text(rows[i])})" for i in tied)
        lines.append(
            f"best under {slo}: tied — {names} good req/s: their max good-put intervals over {repeats} runs overlap, "
            "so no single best (more repeats narrow the intervals)"
        )
    elif best is None:
        if not any(r.get("status") == "done" for r in rows):
            why = "no configuration completed"
        elif not any(loaded_to_limit(r) for r in rows):
            why = "no configuration was loaded to its limit: extend the load (a higher end_rps or longer ramp)"
        else:
            why = "no configuration loaded to its limit served a request meeting the SLO"
        lines.append(f"best under {slo}: none — {why}")
    else:
        row = rows[best]
        lines.append(
            f"best under {slo} (of those loaded to their limit, on the Pareto front, the highest max good-put): "
            f"#{best + 1} {row['config']} — {row['max_goodput_rps']:.1f} good req/s, knee {knee_text(row)}"
        )
        lines += paste_lines(row)
        breaches = knee_breaches(row, slo)
        if breaches:
            lines.append(
                f"  at its knee #{best + 1} breaks the SLO ({', '.join(breaches)}): good-put judges each request "
                f"against the bounds, so run it at its max good-put ({row['max_goodput_rps']:.1f} req/s), not its knee"
            )
        if (row.get("ci95") or {}).get("max_goodput_rps") is not None:
            lines.append(
                f"  its max good-put {_goodput_text(row)} req/s (mean ± 95 % over {state.get('repeats', 1)} runs) "
                "lies above every other loaded configuration's interval"
            )
        for i in state.get("overlap") or []:  # a sweep.json from before intervals
            repeats = state.get("repeats", 1)
            lines.append(
                f"#{best + 1} and #{i + 1} overlap (good-put over {repeats} runs): not distinguishable at {repeats} repeats"
            )
    for i in not_reached:
        lines.append(f"#{i + 1} {rows[i]['config']}: {knee_text(rows[i])} — not judged")
    return "\n".join(lines)


def _goodput_text(row: dict[str, Any]) -> str:
    return _number(row["max_goodput_rps"], None, (row.get("ci95") or {}).get("max_goodput_rps"))


def place_labels(points: Sequence[tuple[int, int, str]], width: int, height: int) -> list[tuple[int, int, str]]:
    """Grid positions (row, column, label) for labels wanted at (row, column): each keeps
    a blank cell from the ones placed before it, moving right, then to the rows above and
    below, so that two close points never print as one number (``23`` for #2 and #3)."""
    taken: set[tuple[int, int]] = set()
    placed = []
    for row, col, label in points:
        spots = [(row + dr, col + dc) for dr in (0, -1, 1, -2, 2) for dc in range(0, width)]
        for r, c in spots:
            cells = {(r, k) for k in range(c - 1, c + len(label) + 1)}
            if 0 <= r < height and 0 <= c and c + len(label) <= width and not cells & taken:
                break
        else:
            r, c = row, col  # no room anywhere: overprint rather than drop a point
        taken |= {(r, k) for k in range(c, c + len(label))}
        placed.append((r, c, label))
    return placed


def format_pareto(rows: Sequence[dict[str, Any]], width: int = 50, height: int = 12) -> str:
    """The Pareto plane as text: tok/s per user across, tok/s per GPU up; each completed
    configuration is its number, ``*`` beside those on the front, in brackets when its
    load never reached its limit (its point is below its capacity)."""
    pts = [
        (row["index"], row["tps_per_user"], row["tps_per_gpu"], bool(row.get("pareto")), limit_reached(row))
        for row in rows
        if row.get("status") == "done" and row.get("tps_per_user") is not None and row.get("tps_per_gpu") is not None
    ]
    if not pts:
        return "Pareto front: no completed configuration with figures"
    xmax = max(p[1] for p in pts) * 1.05 or 1.0
    ymax = max(p[2] for p in pts) * 1.05 or 1.0
    grid = [[" "] * width for _ in range(height)]
    wanted = []
    for index, x, y, on, reached in pts:
        label = f"{index + 1}{'*' if on else ''}"
        wanted.append(
            (
                height - 1 - min(height - 1, int(y / ymax * (height - 1))),
                min(width - 4, int(x / xmax * (width - 4))),
                label if reached else f"({label})",
            )
        )
    for row, col, label in place_labels(wanted, width, height):
        for k, ch in enumerate(label):
            if col + k < width:
                grid[row][col + k] = ch
    lines = [f"tok/s per GPU (top {ymax:.0f})"]
    lines += ["│" + "".join(r).rstrip() for r in grid]
    lines.append("└" + "─" * width)
    front = ", ".join(f"#{p[0] + 1}" for p in pts if p[3]) or "none"
    lines.append(f" tok/s per user → (right edge {xmax:.1f});  * on the Pareto front: {front}")
    if any(not p[4] for p in pts):
        lines.append(" (n): not loaded to its limit — below its capacity, not compared")
    lines += pareto_intervals(rows)
    return "\n".join(lines)


def pareto_intervals(rows: Sequence[dict[str, Any]]) -> list[str]:
    """With repeats: each front point's 95 % intervals on both axes (the plane draws the
    means); nothing for a sweep run once."""
    out = []
    for row in rows:
        ci = row.get("ci95") or {}
        if not row.get("pareto") or row.get("tps_per_user") is None or row.get("tps_per_gpu") is None or not ci:
            continue
        gpu_half = None if ci.get("output_tps") is None else ci["output_tps"] / max(1, row.get("gpus", 1))
        out.append(
            f" #{row['index'] + 1}: tok/s/user {_number(row['tps_per_user'], None, ci.get('tps_per_user'))}, "
            f"tok/s/GPU {_number(row['tps_per_gpu'], None, gpu_half, digits=0)} (mean ± 95 %)"
        )
    return out
