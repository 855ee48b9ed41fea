"""A line under the header once the run has a knee (wrapped to two or three at narrow
widths, never cut): when, at what offered rate, which
limit it hit and what to try next (``core.figures.knee_explain``). Hidden until then; the
Events panel's knee line opens the whole explanation."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from rampwatch.core.figures.knee_explain import explain_recorded_knee
from rampwatch.core.figures.knee_explanation import KneeExplanation
from rampwatch.core.figures.summary import knee_review
from rampwatch.core.timeline import Event, Snapshot
from rampwatch.tui.chart_data import format_duration


def latest_knee(snapshot: Snapshot) -> Event | None:
    return next((e for e in reversed(snapshot.events) if e.kind == "knee"), None)


def knee_banner_text(knee: Event, why: KneeExplanation) -> Text:
    """``K 01:23 knee at ~42.0 req/s: batch-size cap (running = …) → try --max-num-seqs 128``;
    ``knee at ~42.0 req/s, revised: KV cache full (…)`` once the seconds after the knee
    changed what it said at first (``knee_explain.KneeReview``)."""
    text = Text(end="")  # wrapped by the banner at its width (at most three lines)
    text.append(" K ", style="bold white on red")
    text.append(f" {format_duration(knee.t)} ", style="dim")
    rate = knee.data.get("offered_rps")
    text.append("knee" + (f" at ~{rate:.1f} req/s" if isinstance(rate, (int, float)) else ""))
    if why.provisional:
        text.append(", revised", style="bold yellow")
    text.append(": ")
    text.append(why.title, style="bold")
    text.append(f" ({why.evidence})", style="")
    if why.try_next:
        text.append(" → try ", style="dim")
        text.append(why.try_next, style="bold green")
        if why.try_is == "rampwatch flag":
            text.append(" (a rampwatch flag)", style="dim")
    return text


class KneeBanner(Static):
    """Hidden until a knee; its explanation is worked out once per knee, and again when
    its review settles it (a replay sought back before the review shows the knee's own
    again). A knee without
    a recorded explanation (a recording made before them) is explained from the series
    when ``explain_missing`` (replay); live, every knee carries its own, and one without
    is left unexplained rather than guessed from a series the run may have tailed."""

    def __init__(self, *, explain_missing: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.display = False
        self.explain_missing = explain_missing
        self._shown: tuple[float, bool] | None = None  # the knee's time, and whether its review was in

    def show_snapshot(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        knee = latest_knee(snapshot)
        if knee is None:
            if self._shown is not None:  # a replay sought back before the knee
                self._shown = None
                self.display = False
            return
        shown = (knee.t, knee_review(snapshot.events, knee) is not None)
        if shown == self._shown:
            return
        if "explanation" not in knee.data and not self.explain_missing:
            return
        self._shown = shown
        self.update(knee_banner_text(knee, explain_recorded_knee(knee, snapshot)))
        self.display = True
