"""A sweep's verdict when it searched (``load: search``): the best configuration by its
confirmed max under the SLO (``SEARCH_BEST_RULE``) instead of its max good-put. Pure,
over the rows ``sweep`` figures, each with ``search.search_row``'s figures (and, with
repeats, ``sweep.combine_runs``' mean and ``ci95``); ``sweep.choose_best`` and
``sweep_text.verdict_text`` hand a searched sweep to it.

A configuration's *max interval* is where its true max lies: with one run, the
bisection's own ``[X, X + ±)`` (a hold at X met the SLO, one at X + ± broke it); with
repeats, the runs' mean ± its 95 % half-width. The leader (the highest max; tie: fewer
GPUs, then out tok/s) is best only when its interval lies above every other candidate's;
else the verdict is tied between it and the ones it cannot be told from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def paste_lines(row: dict[str, Any]) -> list[str]:
    """The best configuration's commands, ready to paste: its ``vllm serve`` line (and,
    for a simulator sweep, the simulator's), indented under the verdict."""
    if row.get("vllm_command"):
        return [f"  {row['vllm_command']}", f"  (simulator: {row['command']})"]
    return [f"  {row['command']}"]


SEARCH_BEST_RULE = (
    "best (load: search): of the completed configurations whose search found a max under the SLO, "
    "the highest max (tie: fewer GPUs, then out tok/s), declared only when its interval lies above "
    "every other's (one run: [max, max + ±), the bisection's step; repeats: mean ± 95 %), else tied; "
    "a configuration whose search found no max is not judged"
)
SEARCH_REPEATS_LEGEND = (
    "with repeats: each figure the mean of the runs ± the half-width of its 95 % interval (Student's t); "
    "a best only when its max-under-SLO interval lies above every other's, else tied"
)
NO_RESULT = "its search did not finish"


def rows_searched(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether the rows are a searched sweep's: a completed one carries ``search_max``."""
    return any("search_max" in row for row in rows)


def searched(state: dict[str, Any]) -> bool:
    """Whether a sweep's state is a searched sweep's (its ``search`` plan, or its rows)."""
    return bool(state.get("search")) or rows_searched(state.get("rows") or [])


@dataclass(frozen=True)
class MaxInterval:
    """Where a configuration's true max lies: ``[low, high]``, or ``[low, high)`` when
    ``open_top`` (a bisection's: a hold at ``high`` broke the SLO)."""

    low: float
    high: float
    open_top: bool = False

    def above(self, other: MaxInterval) -> bool:
        """Whether every value of this interval is above every value of ``other``."""
        return self.low > other.high or (other.open_top and self.low >= other.high)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def max_interval(row: dict[str, Any]) -> MaxInterval | None:
    """A row's max interval (the module's definition); None without a max."""
    value = _number(row.get("search_max"))
    if value is None:
        return None
    half = _number((row.get("ci95") or {}).get("search_max"))
    if half is not None:  # repeats: the runs' answers
        return MaxInterval(value - half, value + half)
    step = _number(row.get("search_plus_minus")) or 0.0
    return MaxInterval(value, value + step, open_top=step > 0)


def _rank(row: dict[str, Any]) -> tuple[float, float, float]:
    return (float(row["search_max"]), -float(row.get("gpus") or 1), float(row.get("output_tps") or 0.0))


def choose_search_best(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The searched sweep's verdict by ``SEARCH_BEST_RULE``: ``best`` (an index, or None),
    ``tied`` (the leader first, then the others it cannot be told from, by rank; ``best``
    is then None), ``no_max`` (completed configurations without a max: not judged) and
    ``not_reached`` (empty: a search judges its own load)."""
    done = [i for i, row in enumerate(rows) if row.get("status") == "done"]
    candidates = [i for i in done if max_interval(rows[i]) is not None]
    no_max = [i for i in done if i not in candidates]
    verdict: dict[str, Any] = {"best": None, "not_reached": [], "tied": [], "no_max": no_max}
    if not candidates:
        return verdict
    ranked = sorted(candidates, key=lambda i: _rank(rows[i]), reverse=True)
    leader = ranked[0]
    lead = max_interval(rows[leader])
    assert lead is not None
    overlapping = [i for i in ranked[1:] if not lead.above(max_interval(rows[i]))]  # type: ignore[arg-type]
    if overlapping:
        verdict["tied"] = [leader, *overlapping]
    else:
        verdict["best"] = leader
    return verdict


def _num(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


def search_unit(state: dict[str, Any]) -> str:
    """The searched level's unit as the answers say it (a sweep searches rates today)."""
    return "concurrent" if (state.get("search") or {}).get("by") == "concurrency" else "req/s"


def max_text(row: dict[str, Any], unit: str) -> str:
    """``12.5 req/s (± 0.62)``; with repeats ``12.5 req/s (± 0.41, 95 % over 3 runs)``."""
    half = _number((row.get("ci95") or {}).get("search_max"))
    if half is not None:
        return f"{_num(row['search_max'])} {unit} (± {_num(half)}, 95 % over {row.get('n_runs', '?')} runs)"
    return f"{_num(row['search_max'])} {unit} (± {_num(_number(row.get('search_plus_minus')) or 0.0)})"


def per_gpu_text(row: dict[str, Any], unit: str) -> str:
    gpus = int(row.get("gpus") or 1)
    return f"{_num(float(row['search_max']) / max(1, gpus))} {unit} per GPU on {gpus} GPU{'s' if gpus != 1 else ''}"


_CONFIRMED = re.compile(r"confirmed by a (\d+)-second hold")


def confirmed_text(row: dict[str, Any]) -> str:
    """How the max was confirmed: one run's hold (from its ``search_line``), or a hold in
    each of the repeats."""
    if row.get("n_runs", 1) > 1:
        return f"confirmed by a hold in each of its {row['n_runs']} runs"
    found = _CONFIRMED.search(str(row.get("search_line") or ""))
    seconds = f"{found.group(1)}-second " if found else ""
    return f"confirmed by a {seconds}hold at {_num(float(row['search_max']))}"


def search_verdict_text(state: dict[str, Any]) -> str:
    """A searched sweep's verdict in words: the best as commands ready to paste, or the
    tied ones, or why none; then the configurations whose search found no max."""
    rows = state["rows"]
    slo = state.get("slo")
    unit = search_unit(state)
    best, tied = state.get("best"), state.get("tied") or []
    repeated = any((row.get("ci95") or {}).get("search_max") is not None for row in rows)
    lines = []
    if best is None and tied:
        names = ", ".join(
            f"#{i + 1} {rows[i]['config']} (max {max_text(rows[i], unit)}, {per_gpu_text(rows[i], unit)})" for i in tied
        )
        narrower = "more repeats narrow them" if repeated else "a finer tolerance narrows them"
        lines.append(f"best under {slo}: tied — {names}: their max intervals overlap, so no single best ({narrower})")
    elif best is None:
        if not any(row.get("status") == "done" for row in rows):
            why = "no configuration completed"
        else:
            why = "no configuration's search found a max under the SLO (each says why below)"
        lines.append(f"best under {slo}: none — {why}")
    else:
        row = rows[best]
        lines.append(
            f"best under {slo}: #{best + 1} {row['config']} — max {max_text(row, unit)} {confirmed_text(row)}, "
            f"{per_gpu_text(row, unit)}"
        )
        lines += paste_lines(row)
        others = [i for i in range(len(rows)) if i != best and max_interval(rows[i]) is not None]
        if others:
            runner_up = max(others, key=lambda i: _rank(rows[i]))
            lines.append(
                f"  its max lies above every other's interval; next: #{runner_up + 1} {rows[runner_up]['config']} "
                f"— max {max_text(rows[runner_up], unit)}"
            )
    for i in state.get("no_max") or []:
        why = rows[i].get("search_failure") or NO_RESULT
        lines.append(f"#{i + 1} {rows[i]['config']}: no max under the SLO — {why} — not judged")
    return "\n".join(lines)
