"""The search for the highest load that meets an SLO (``rampwatch search``), as pure
decisions: no clock, no I/O. ``loadgen.run.search_control`` drives a run with them.

A search has two phases. The *ramp* brackets the answer: the scenario's ramp runs and
each window of it is judged against the SLO; the first window that breaks it gives the
upper bound (``hi``), the last one that met it the lower (``lo``). Then *holds*: the
load is held at one level at a time, each started from an empty queue (nothing is sent
until every request of the levels before has ended) and judged on the requests sent in
it after a settle time. Bisection
moves ``lo`` (a passing hold) or ``hi`` (a failing one) until they are at most the
tolerance apart; the answer is ``lo`` only once a hold at ``lo`` met the SLO and a hold
at ``hi`` broke it — both held, never taken from the ramp alone.

A level is a rate (req/s, ``by="rate"``) or a number of concurrent users
(``by="concurrency"``, whole numbers).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rampwatch.core.errors import UserError
from rampwatch.core.figures import stats
from rampwatch.core.figures.slo import NEVER_S, Slo, parse_slo
from rampwatch.core.timeline import CANCELLED, Event, RequestRecord

BY_CHOICES = ("rate", "concurrency")
DEFAULT_TOLERANCE = "5%"
# The hold rule: enough requests that the SLO's highest percentile has this many
# requests beyond it, judged for at least MIN_HOLD_S and at most MAX_HOLD_S seconds.
REQUESTS_BEYOND_PERCENTILE = 10
MIN_HOLD_S = 10.0
MAX_HOLD_S = 300.0
# An SLO of error rate alone: this many requests per hold.
ERROR_ONLY_REQUESTS = 100
# The judged part of a hold starts this long after the level changed (its drain, the
# requests of the levels before ended, came first).
DEFAULT_SETTLE_S = 2.0
# The ramp is judged in windows of its duration / RAMP_WINDOWS, between these bounds.
RAMP_WINDOWS = 20
RAMP_WINDOW_S = (2.0, 10.0)
# Holds a search makes at most (a tolerance of 1e-9 req/s would bisect for ever).
MAX_HOLDS = 40
# A judged request still in flight this long after its hold (or window) counts as failed.
UNFINISHED_AFTER_S = 60.0


@dataclass(frozen=True)
class Tolerance:
    """How close ``lo`` and ``hi`` must come: an absolute step in the level's unit, or a
    share of the bracket's upper bound (``5%``)."""

    value: float
    relative: bool = False

    def of(self, hi: float, by: str) -> float:
        step = self.value * hi if self.relative else self.value
        return max(1.0, math.ceil(step - 1e-9)) if by == "concurrency" else step

    @property
    def text(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}"


def parse_tolerance(text: str, source: str = "--tolerance") -> Tolerance:
    """``0.5`` (the level's unit) or ``5%`` (of the bracket's upper bound); anything else,
    or a value not above 0 (a percentage at most 50), is one ``UserError`` line."""
    raw = str(text).strip()
    relative = raw.endswith("%")
    try:
        value = float(raw[:-1] if relative else raw)
    except ValueError:
        raise UserError(f"{source} {text!r}: expected a step (0.5) or a share of the upper bound (5%)") from None
    if not math.isfinite(value) or value <= 0 or (relative and value > 50):
        raise UserError(f"{source} {text!r}: expected a number above 0 (a percentage at most 50%)")
    return Tolerance(value / 100, True) if relative else Tolerance(value)


@dataclass(frozen=True)
class SearchPlan:
    """What a search is asked: its SLO, what it holds, how close, how long."""

    slo: Slo
    by: str = "rate"
    tolerance: Tolerance = Tolerance(0.05, True)
    hold_s: float | None = None  # None: the hold rule (hold_rule)
    settle_s: float = DEFAULT_SETTLE_S

    @classmethod
    def from_flags(
        cls, slo: str, by: str = "rate", tolerance: str = DEFAULT_TOLERANCE, hold_s: float | None = None
    ) -> SearchPlan:
        if by not in BY_CHOICES:
            raise UserError(f"--by {by!r}: expected one of {', '.join(BY_CHOICES)}")
        if hold_s is not None and not (math.isfinite(hold_s) and hold_s > 0):
            raise UserError(f"--hold {hold_s!r}: expected seconds above 0")
        return cls(parse_slo(slo), by, parse_tolerance(tolerance), hold_s)

    def options(self) -> dict[str, Any]:
        """The plan as the recording's header keeps it (its ``options["search"]``)."""
        return {"slo": self.slo.text, "by": self.by, "tolerance": self.tolerance.text, "hold_s": self.hold_s}

    @property
    def unit(self) -> str:
        return "req/s" if self.by == "rate" else "concurrent users"

    def requests_needed(self) -> int:
        """Requests a hold judges at least: its SLO's highest percentile with
        ``REQUESTS_BEYOND_PERCENTILE`` requests beyond it (p99: 1000; p90: 100)."""
        if not self.slo.bounds:
            return ERROR_ONLY_REQUESTS
        top = max(b.percentile for b in self.slo.bounds)
        if top >= 100:
            return 10**9  # every request is the maximum: the cap decides
        return math.ceil(REQUESTS_BEYOND_PERCENTILE / (1 - top / 100) - 1e-9)

    @property
    def hold_rule(self) -> str:
        """The hold rule in words, for the output."""
        if self.hold_s is not None:
            return f"each hold judged for {self.hold_s:g} s (--hold)"
        return (
            f"each hold judged until {self.requests_needed()} requests were sent in it "
            f"({REQUESTS_BEYOND_PERCENTILE} beyond the SLO's highest percentile), "
            f"{MIN_HOLD_S:g}–{MAX_HOLD_S:g} s, after a {self.settle_s:g} s settle"
        )

    def hold_over(self, judged_s: float, judged_requests: int) -> bool:
        """Whether a hold has been judged long enough."""
        if self.hold_s is not None:  # and one request at least: a hold that judged none says nothing
            return judged_s >= self.hold_s and (judged_requests > 0 or judged_s >= MAX_HOLD_S)
        if judged_s >= MAX_HOLD_S:
            return True
        return judged_s >= MIN_HOLD_S and judged_requests >= self.requests_needed()


def ramp_window_s(ramp_duration_s: float | None) -> float:
    low, high = RAMP_WINDOW_S
    if ramp_duration_s is None:
        return high
    return min(high, max(low, ramp_duration_s / RAMP_WINDOWS))


@dataclass(frozen=True)
class Verdict:
    passed: bool
    requests: int  # judged
    breaks: tuple[str, ...] = ()  # what of the SLO they broke
    figures: dict[str, float | None] = field(default_factory=dict)  # the SLO's figures, ms
    unfinished: int = 0  # of ``requests``: still in flight when judged


def judge(records: Sequence[RequestRecord], slo: Slo, unfinished: int = 0) -> Verdict:
    """A hold's (or a ramp window's) verdict on the requests sent in its judged part.
    ``unfinished``: requests of it still in flight when it had to be judged; they count
    as failed (they never answered in time). No request judged is a failure: nothing
    showed that the level meets the SLO."""
    judged = [r for r in records if r.error_class != CANCELLED]
    total = len(judged) + unfinished
    if not total:
        return Verdict(False, 0, ("no request was sent in the hold",))
    values = latency_values(judged)
    errors = sum(1 for r in judged if not r.ok)
    failed = unfinished + errors
    breaks = list(slo.violations(values, errors / total))
    if unfinished and failed / total > slo.max_error_rate:  # they failed to answer in time: said as such
        breaks.append(f"{unfinished} of {total} requests had not ended {UNFINISHED_AFTER_S:g} s after it")
    figures = slo_figures(values, slo)
    if slo.error_rate_given:
        figures["error_rate"] = 100.0 * failed / total
    return Verdict(not breaks, total, tuple(breaks), figures, unfinished)


def figures_text(figures: object) -> str:
    """A hold's (or window's) SLO figures in words: ``ttft_p90 226 ms, error rate 2.0%``
    (a hand-edited recording's figures of the wrong types are left out)."""
    if not isinstance(figures, dict):
        return ""
    out = []
    for key, value in figures.items():
        if not _finite(value):
            continue
        out.append(f"error rate {value:.1f}%" if key == "error_rate" else f"{key} {value:.0f} ms")
    return ", ".join(out)


def latency_values(records: Sequence[RequestRecord]) -> dict[str, np.ndarray]:
    """Each SLO metric's values (s) over the requests that ended OK (as a sweep judges)."""
    ok = [r for r in records if r.ok and r.first_token_at is not None]
    return {
        "ttft": np.array([r.ttft for r in ok], dtype=float),
        "itl": np.concatenate([stats.itl_array(r) for r in ok]) if ok else np.zeros(0),
        "tpot": np.array([r.tpot for r in ok if r.tpot is not None], dtype=float),
        "e2el": np.array([r.e2e for r in ok], dtype=float),
        # a request cut short while thinking has no answer: it counts as never answering
        "ttfa": np.array([math.inf if r.ttfa is None else r.ttfa for r in ok], dtype=float),
    }


def slo_figures(values: dict[str, np.ndarray], slo: Slo) -> dict[str, float | None]:
    """The SLO's own figures (``ttft_p99`` → ms), for the holds' table."""
    out: dict[str, float | None] = {}
    for b in slo.bounds:
        arr = values.get(b.metric)
        if arr is None or not len(arr):
            out[b.label] = None
            continue
        out[b.label] = float(np.percentile(np.minimum(arr, NEVER_S), b.percentile)) * 1000
    return out


@dataclass
class Hold:
    level: float
    passed: bool | None = None  # None: running
    seconds: float = 0.0  # judged
    requests: int = 0
    breaks: tuple[str, ...] = ()
    figures: dict[str, float | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "passed": self.passed,
            "seconds": self.seconds,
            "requests": self.requests,
            "breaks": list(self.breaks),
            "figures": dict(self.figures),
        }


class Search:
    """The search's state: the bracket, the holds so far, and the next hold (``next_level``)."""

    def __init__(self, plan: SearchPlan, start: float, end: float) -> None:
        self.plan = plan
        self.floor = start  # the ramp's start: below it nothing is tried
        self.ceiling = end  # its end
        self.lo: float | None = None
        self.hi: float | None = None
        self.lo_held = False  # a hold at lo met the SLO
        self.hi_held = False  # a hold at hi broke it
        self.last_pass: float | None = None  # the ramp's last passing window's level
        self.passes: list[float] = []  # every passing window's level
        self.tol: float | None = None
        self.holds: list[Hold] = []
        self.failure: str | None = None  # why it cannot bracket
        self.floor_first = False

    # -- the ramp
    def ramp_window(self, level: float, verdict: Verdict) -> bool:
        """One ramp window judged; True when it brackets the answer (the ramp ends)."""
        if self.lo is not None:
            return True
        if not verdict.requests:  # nothing sent in it (a low start rate): no evidence either way
            return False
        if verdict.passed:
            self.last_pass = level
            self.passes.append(level)
            return False
        # The ramp's first window broke it already: the start is held first (one hold
        # says whether any level meets the SLO, rather than a bisection down to it).
        self.floor_first = self.last_pass is None
        self.bracket(self.last_pass if self.last_pass is not None else self.floor, max(level, self.floor))
        return True

    def pass_below(self, level: float) -> float | None:
        """The highest level below ``level`` whose ramp window met the SLO."""
        return max((p for p in self.passes if p < level), default=None)

    def knee_reached(self, level: float) -> None:
        """The ramp stopped at the run's knee (the level in force at its onset) with no
        window below it broken: the knee is the bracket's top, whatever windows above it
        showed (a short window meets the SLO before a queue has had time to grow; held,
        it would not). A hold that meets the SLO at the knee moves the bracket up again
        (``held``)."""
        if self.lo is not None:
            return
        below = self.pass_below(level)
        self.floor_first = below is None
        lo = below if below is not None else self.floor
        self.bracket(lo, max(level, lo))

    def ramp_ended(self) -> None:
        """The ramp reached its end without breaking the SLO (or without a window judged)."""
        if self.lo is None:
            self.bracket(self.last_pass if self.last_pass is not None else self.floor, self.ceiling)

    def bracket(self, lo: float, hi: float) -> None:
        if self.plan.by == "concurrency":
            lo, hi = math.floor(lo), math.ceil(hi)
        self.lo, self.hi = lo, max(hi, lo)
        self.tol = self.plan.tolerance.of(max(self.hi, 1e-9), self.plan.by)

    # -- the holds
    @property
    def done(self) -> bool:
        return self.failure is not None or (self.lo_held and self.hi_held and self._close())

    def _close(self) -> bool:
        assert self.lo is not None and self.hi is not None and self.tol is not None
        return self.hi - self.lo <= self.tol + 1e-9

    def next_level(self) -> float | None:
        """The next level to hold, or None: the search is over (``done``, or ``failure``)."""
        if self.failure is not None or self.lo is None or self.hi is None:
            return None
        if len(self.holds) >= MAX_HOLDS:
            self.failure = f"no answer within the tolerance after {MAX_HOLDS} holds: give a coarser --tolerance"
            return None
        if self.floor_first and not self.lo_held and self.lo > 0:
            self.floor_first = False
            return self.lo
        if not self._close():
            mid = (self.lo + self.hi) / 2
            if self.plan.by == "concurrency":
                mid = float(round(mid))
            return mid
        if not self.hi_held:
            return self.hi
        if not self.lo_held:
            if self.lo <= 0 or (self.plan.by == "concurrency" and self.lo < 1):
                self.failure = (
                    f"the SLO was broken at every level held, down to {_num(self.hi)} {self.plan.unit}: "
                    "no level meets it"
                )
                return None
            return self.lo
        return None

    def held(self, level: float, verdict: Verdict, seconds: float) -> Hold:
        """A hold at ``level`` was judged: the bracket moves."""
        assert self.lo is not None and self.hi is not None
        hold = Hold(level, verdict.passed, seconds, verdict.requests, verdict.breaks, dict(verdict.figures))
        self.holds.append(hold)
        if verdict.requests and verdict.unfinished == verdict.requests:  # not one answered: no capacity to read
            self.failure = (
                f"the server answered none of the {verdict.requests} requests of the hold at "
                f"{_num(level)} {self.plan.unit} within {UNFINISHED_AFTER_S:g} s: it stopped answering"
            )
            return hold
        if verdict.passed:
            if level >= self.hi:  # the ramp's upper bound met the SLO when held
                if level >= self.ceiling:
                    self.failure = (
                        f"the SLO was never broken up to the end of the ramp ({_num(level)} {self.plan.unit})"
                    )
                    return hold
                self.lo, self.lo_held = level, True
                self.hi, self.hi_held = self.ceiling, False
                self.tol = self.plan.tolerance.of(self.hi, self.plan.by)
            else:
                self.lo, self.lo_held = level, True
        elif level <= self.lo:  # the lower bound broke it when held
            self.hi, self.hi_held = level, True
            if level <= self.floor:
                met = max(self.passes, default=None)
                self.failure = (
                    f"the SLO was already broken at the start ({_num(level)} {self.plan.unit})"
                    if met is None
                    else f"the SLO was broken when held at the start ({_num(level)} {self.plan.unit}), though the "
                    f"ramp met it up to {_num(met)}: the server changed during the search (see the holds)"
                )
                return hold
            self.lo, self.lo_held = self.floor, False
        else:
            self.hi, self.hi_held = level, True
        # A share of the upper bound (``5%``) is of the bracket's upper bound now: after a
        # passing hold sent it to the ramp's end, a later failing hold lowers it again.
        self.tol = self.plan.tolerance.of(max(self.hi, 1e-9), self.plan.by)
        return hold

    def confirming_hold(self) -> Hold | None:
        """The last passing hold at the answer."""
        return next((h for h in reversed(self.holds) if h.passed and h.level == self.lo), None)

    def breaking_hold(self) -> Hold | None:
        return next((h for h in reversed(self.holds) if h.passed is False and h.level == self.hi), None)

    def report_line(self) -> str:
        """``max X req/s (± Y) under SLO Z, confirmed by a T-second hold at X``, or why not."""
        slo = self.plan.slo.text or "its error rate"
        if self.failure is not None:
            return f"search: no maximum under SLO {slo}: {self.failure}"
        if not self.done:
            return f"search: not finished under SLO {slo} ({len(self.holds)} holds)"
        assert self.lo is not None and self.hi is not None
        confirm, broke = self.confirming_hold(), self.breaking_hold()
        assert confirm is not None
        unit = "req/s" if self.plan.by == "rate" else "concurrent"
        line = (
            f"max {_num(self.lo)} {unit} (± {_num(self.hi - self.lo)}) under SLO {slo}, "
            f"confirmed by a {confirm.seconds:.0f}-second hold at {_num(self.lo)}"
        )
        if broke is not None and broke.breaks:
            line += f"; {_num(self.hi)} broke it ({broke.breaks[0]})"
        needed = self.plan.requests_needed()
        if confirm.requests < needed <= 10**6:  # a --hold shorter than the rule: the figure is rough
            line += (
                f"; the confirming hold judged {confirm.requests} requests, fewer than the {needed} "
                "the SLO's percentile wants (a longer --hold)"
            )
        return line

    def to_dict(self) -> dict[str, Any]:
        """The result JSON's ``rampwatch_search``."""
        confirm = self.confirming_hold() if self.done and self.failure is None else None
        return {
            "by": self.plan.by,
            "slo": self.plan.slo.text,
            "tolerance": self.plan.tolerance.text,
            "hold_rule": self.plan.hold_rule,
            "max": self.lo if confirm is not None else None,
            "plus_minus": round(self.hi - self.lo, 9)
            if confirm is not None and self.hi is not None and self.lo is not None
            else None,
            "next_step_up": self.hi if confirm is not None else None,
            "confirmed_by_hold_s": confirm.seconds if confirm is not None else None,
            "failure": self.failure,
            "line": self.report_line(),
            "holds": [h.to_dict() for h in self.holds],
        }


def _num(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def level_text(level: float, by: str) -> str:
    """A level as the output says it: ``3.85 req/s``, ``1 user``, ``16 users``."""
    if by == "rate":
        return f"{_num(level)} req/s"
    users = int(round(level))
    return f"{users} user" if users == 1 else f"{users} users"


def search_result(events: Iterable[Event]) -> dict[str, Any] | None:
    """A run's search result (``Search.to_dict()``) from its events; None: no search, or
    one that did not finish (the run was stopped before)."""
    for event in events:
        if event.kind == "search" and (event.data or {}).get("search") == "result":
            result = event.data.get("result")
            return result if isinstance(result, dict) else None
    return None


def search_section(events: Iterable[Event]) -> dict[str, Any]:
    """The result JSON's ``rampwatch_search`` (nothing for a run without a search)."""
    result = search_result(events)
    return {} if result is None else {"rampwatch_search": result}


def search_holds(events: Iterable[Event]) -> list[dict[str, Any]]:
    """The holds so far, oldest first: each verdict's hold, and the one running (``passed``
    None) — the live screen's and replay's list."""
    holds: list[dict[str, Any]] = []
    for event in events:
        data = event.data or {}
        if event.kind != "search":
            continue
        if data.get("search") == "hold":
            holds.append({"level": data.get("level"), "passed": None, "seconds": None, "figures": {}})
        elif data.get("search") == "verdict" and isinstance(data.get("hold"), dict):
            if holds and holds[-1]["passed"] is None:
                holds.pop()
            holds.append(dict(data["hold"]))
    return holds


def holds_text(result: dict[str, Any]) -> list[str]:
    """A search's holds as lines under its answer (the summary and ``report``): each
    hold's level, judged seconds, requests, the SLO's figures, PASS or FAIL; then the rule.
    A hand-edited recording's holds of the wrong types are shown as ``?``, never raised on."""
    by = "rate" if result.get("by") == "rate" else "concurrency"
    holds = result.get("holds")
    lines = []
    for i, hold in enumerate(holds if isinstance(holds, list) else [], 1):
        if not isinstance(hold, dict):
            continue
        figures = figures_text(hold.get("figures"))
        verdict = "PASS" if hold.get("passed") is True else "FAIL"
        seconds = hold.get("seconds")
        level = hold.get("level")
        requests = hold.get("requests")
        shown = (
            level_text(float(level), by)
            if isinstance(level, (int, float)) and _finite(level)
            else f"? {'req/s' if by == 'rate' else 'users'}"
        )
        lines.append(
            f"  hold {i}: {shown}, "
            f"{f'{seconds:.0f}' if _finite(seconds) else '?'} s, "
            f"{requests if isinstance(requests, int) and not isinstance(requests, bool) else '?'} requests: "
            f"{figures or 'no figures'}  {verdict}"
        )
    if isinstance(result.get("hold_rule"), str) and result["hold_rule"]:
        lines.append(f"  ({result['hold_rule']})")
    return lines


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def search_row(events: Iterable[Event]) -> dict[str, Any]:
    """A sweep row's search figures (``load: search``): the max, its ± and why there is
    none; nothing for a configuration without a search."""
    result = search_result(events)
    if result is None:
        return {}
    return {
        "search_max": result.get("max"),
        "search_plus_minus": result.get("plus_minus"),
        "search_failure": result.get("failure"),
        "search_line": result.get("line"),
    }
