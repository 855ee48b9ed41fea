"""Why the knee: which limit the server (or the client) hit, from the series around it.

``explain_knee(window, limits, after)`` is a pure function of the 1-second series of the
seconds before the knee was declared (``window``: ``SERIES_NAMES`` -> values, oldest
first, NaN where a second has no figure), optionally of those after it in the same
overload (``after``), and of the limits the run knows (``ServerLimits``: from the ``vllm
serve`` command line, the server's ``vllm:cache_config_info`` and the run's own
``--max-concurrency``). It checks each limit's rule (``core.figures.knee_rules``) and names the first that holds,
in ``PRIORITY`` order, with the evidence as numbers, the seconds it read (``window``) and
the argument to try next; any other rule that holds too is mentioned under ``also``, and
when the KV cache binds while the batch cap or the token budget held too, ``conflict``
says so. When no rule holds, the limit is ``undetermined`` and the evidence is the figures
that were looked at: never a guess presented as a finding.

The explanation the knee event carries is provisional: it read only the seconds before
the knee, when a KV cache that fills a little later is still at 86 %. ``KneeReview``
explains it again with the ``REVIEW_S`` seconds after it (fewer when the server recovers,
the load pauses for a restart or the run ends first) and settles it with an ``info``
event; the summary, the result JSON, the banner and the report read that one.

The rules and their thresholds are ``core.figures.knee_rules``; the window of seconds they
read is ``core.figures.knee_window``; the limits a run knows are
``core.figures.server_limits``; the explanation itself is
``core.figures.knee_explanation``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace

from rampwatch.core.figures.knee_explanation import PRIORITY, KneeExplanation
from rampwatch.core.figures.knee_rules import CONFLICTS, RULES, reasoning_note, undetermined
from rampwatch.core.figures.knee_window import KneeWindow
from rampwatch.core.figures.server_limits import ServerLimits
from rampwatch.core.figures.summary import KNEE_REVIEW, knee_review, provisional_text
from rampwatch.core.timeline import Event, Snapshot

WINDOW_S = 45  # seconds of series the knee detector keeps for the explanation
REVIEW_S = 30  # seconds after the knee that settle its explanation (fewer when the overload or the run ends first)


def explain_knee(
    window: Mapping[str, Sequence[float]],
    limits: ServerLimits | None = None,
    after: Mapping[str, Sequence[float]] | None = None,
) -> KneeExplanation:
    """The limit behind a knee, from the seconds before it was declared (``window``) and,
    for the final explanation, the seconds after it in the same overload (``after``; see
    ``core.figures.knee_rules`` for the rules, their order and the conflicts)."""
    w = KneeWindow(window, after)
    limits = limits or ServerLimits()
    held = [found for name in PRIORITY if (found := RULES[name](w, limits)) is not None]
    note = reasoning_note(w)
    if not held:
        return replace(undetermined(w), window=w.text(), note=note)
    first = held[0]
    also = tuple({"limit": e.limit, "title": e.title, "evidence": e.evidence} for e in held[1:])
    conflict = next(
        (
            f"signals conflict: {other.brief} AND {first.brief}: {CONFLICTS[first.limit, other.limit]}"
            for other in held[1:]
            if (first.limit, other.limit) in CONFLICTS
        ),
        None,
    )
    return replace(first, also=also, conflict=conflict, window=w.text(), note=note)


def first_knee(events: Sequence[Event]) -> Event | None:
    return next((e for e in events if e.kind == "knee"), None)


def knee_explanation_of(snapshot: Snapshot) -> tuple[Event, KneeExplanation] | None:
    """The first knee of a run or recording and why (``explain_recorded_knee``); None
    without a knee."""
    knee = first_knee(snapshot.events)
    return None if knee is None else (knee, explain_recorded_knee(knee, snapshot))


def explain_recorded_knee(knee: Event, snapshot: Snapshot) -> KneeExplanation:
    """Why ``knee`` happened: as its review settled it (``KneeReview``), else as its event
    declared it, or — for a knee recorded before explanations — worked out now from the
    snapshot's series of the ``WINDOW_S`` seconds before it, with the limits its header
    tells (the cache config, the concurrency cap; the batch cap is then inferred)."""
    review = knee_review(snapshot.events, knee)
    recorded = KneeExplanation.from_dict((review or knee).data.get("explanation"))
    if recorded is not None:
        return recorded
    picked = [i for i, t in enumerate(snapshot.times) if knee.t - WINDOW_S <= t and t + 1 <= knee.t]
    window = {
        name: [values[i] for i in picked]
        for name, values in snapshot.series.items()
        if len(values) == len(snapshot.times)
    }
    return explain_knee(window, ServerLimits.of_run(snapshot.header))


class KneeReview:
    """The knee's explanation is provisional: declared from the seconds before the knee,
    it is judged again with the seconds after it in the same overload — a KV cache that
    fills later, preemptions, a queue that keeps growing — and settled by an ``info``
    event (``data``: ``knee_review``, ``knee_t``, ``explanation``, ``revised``) whose
    message says whether the seconds after changed it. It is settled ``REVIEW_S`` seconds
    after the knee, when the server recovers (the overload is over), or at ``finish``
    (the run's end, a restart of the server), whichever comes first.

    ``update`` takes each completed second and the knee detector's event for it, and
    returns the events to publish, in order."""

    def __init__(self, review_s: int = REVIEW_S) -> None:
        self.review_s = review_s
        self._before: deque[Mapping[str, float]] = deque(maxlen=WINDOW_S)
        self._knee: Event | None = None
        self._window: list[Mapping[str, float]] = []
        self._after: list[Mapping[str, float]] = []

    def update(self, t: float, values: Mapping[str, float], event: Event | None) -> list[Event]:
        out: list[Event] = []
        if self._knee is not None:
            self._after.append(values)
            recovered = event is not None and bool(event.data.get("knee_recovered"))
            if recovered or len(self._after) >= self.review_s or (event is not None and event.kind == "knee"):
                out += self.finish(t)
        self._before.append(values)
        if event is not None:
            out.append(event)
            if event.kind == "knee" and isinstance(event.data.get("explanation"), Mapping):
                # the detector's explanation read the seconds up to this one
                self._knee, self._window, self._after = event, list(self._before), []
        return out

    def finish(self, t: float) -> list[Event]:
        """The pending knee's review, settled with the seconds seen so far after it."""
        knee, self._knee = self._knee, None
        if knee is None:
            return []
        first = KneeExplanation.from_dict(knee.data.get("explanation"))
        assert first is not None  # only knees with an explanation are reviewed
        final = explain_knee(
            _columns(self._window), ServerLimits.from_dict(knee.data.get("limits") or {}), _columns(self._after)
        )
        revised = (final.limit, final.try_next) != (first.limit, first.try_next)
        if revised:
            final = replace(final, provisional={"limit": first.limit, "title": first.title, "try": first.try_next})
        message = f"knee {'revised' if revised else 'confirmed'} with the {len(self._after)} s after it: {final.title}"
        if final.try_next:
            message += f" → try {final.try_next}"
        if final.provisional:
            message += f" (at the knee: {provisional_text(final.provisional)})"
        self._window, self._after = [], []
        return [
            Event(
                t,
                "info",
                message,
                {KNEE_REVIEW: True, "knee_t": knee.t, "explanation": final.to_dict(), "revised": revised},
            )
        ]


def _columns(seconds: Sequence[Mapping[str, float]]) -> dict[str, list[float]]:
    names = {name for values in seconds for name in values}
    return {name: [values.get(name, math.nan) for values in seconds] for name in names}
