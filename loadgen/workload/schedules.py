"""Arrival schedules: when each request of a run is sent.

Every schedule is built on *operational time*. Requests arrive where the cumulative
work ``W`` crosses the partial sums ``S_k = g_1 + … + g_k`` of unit-mean gaps (all 1.0
for ``constant`` arrivals, Exp(1) for ``poisson``, Gamma(k, 1/k) for ``gamma`` with
burstiness k). ``W`` grows at the target rate, so a time-varying rate needs no special
sampling and a rate change takes effect at once: the pending target is simply reached
sooner or later.

Two kinds of *ramp coordinate* ``c`` drive the rate:

- wall-clock ramps (``constant``, ``poisson``, ``gamma``, ``linear``, ``exponential``,
  ``steps``): ``c`` is ramp seconds; the rate is a function of time with closed-form
  integral and inverse.
- request-index ramps (``vllm-constant``, ``vllm-linear``, ``vllm-exponential``): the
  rate belongs to the request index as in ``vllm bench serve --ramp-up-strategy``; ``c``
  is cumulative work, and ramp time is the sum of the gaps drawn so far.

Holding stops the ramp coordinate while work keeps growing at the held rate, so
``resume`` continues the ramp where it stopped, shifted by the hold's length.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rampwatch.core.errors import UserError
from rampwatch.core.timeline import Event
from rampwatch.loadgen.workload.traces import DEFAULT_BLOCK_TOKENS, TRACE_FORMATS

ARRIVALS = ("constant", "poisson", "gamma")
TIME_KINDS = ("constant", "poisson", "gamma", "linear", "exponential", "steps")
VLLM_KINDS = ("vllm-constant", "vllm-linear", "vllm-exponential")
TRACE_KIND = "trace"  # built by loadgen.workload.trace_replay from its trace file
# Closed loop (a session workload's concurrent users): the profile's "rate" is the number
# of users, a constant ``users`` or a linear ramp ``start_users`` → ``end_users``.
USERS_KIND = "users"
KINDS = TIME_KINDS + VLLM_KINDS + (TRACE_KIND, USERS_KIND)


# --------------------------------------------------------------------------- spec checks


@dataclass(frozen=True, slots=True)
class SpecProblem:
    """One thing wrong in a spec mapping: where (key path inside it) and what."""

    path: tuple[str | int, ...]
    message: str
    at_key: bool = False  # an unknown key: point at the key itself rather than its value


def dotted(path: tuple[str | int, ...]) -> str:
    """A key path as the user reads it: ``workload.mix[1].weight``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def describe(value: Any) -> str:
    """A value as the user wrote it, for 'got …' in error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


Check = Callable[[Any], "str | None"]


def number_check(minimum: float | None = None, *, strict: bool = False, integer: bool = False) -> Check:
    """A check returning ``"expected a number >= 0, got 'fast'"`` or None when fine."""
    what = "an integer" if integer else "a number"
    bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum:g}"

    def check(value: Any) -> str | None:
        ok = is_number(value) and (not integer or float(value).is_integer())
        if ok and minimum is not None:
            ok = value > minimum if strict else value >= minimum
        return None if ok else f"expected {what}{bound}, got {describe(value)}"

    return check


def choice_check(options: Sequence[str]) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, str) and value in options:
            return None
        return f"expected one of {', '.join(options)}, got {describe(value)}"

    return check


def unknown_key_message(key: Any, allowed: Sequence[str]) -> str:
    import difflib

    close = difflib.get_close_matches(str(key), list(allowed), n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else f" (allowed: {', '.join(allowed)})"
    return f"unknown key{hint}"


@dataclass(frozen=True, slots=True)
class _Field:
    check: Check
    required: bool = False
    default: Any = None


_POSITIVE = number_check(0, strict=True)
_NON_NEGATIVE = number_check(0)
_COUNT = number_check(1, integer=True)
_ARRIVAL_FIELDS = {
    "arrival": _Field(choice_check(ARRIVALS), default="poisson"),
    "burstiness": _Field(_POSITIVE, default=1.0),
}
_STEADY = {
    "rate": _Field(_POSITIVE, required=True),
    "duration_s": _Field(_POSITIVE),
    "num_requests": _Field(_COUNT),
}
_RAMP = {
    "start_rps": _Field(_NON_NEGATIVE, required=True),
    "end_rps": _Field(_NON_NEGATIVE, required=True),
    "duration_s": _Field(_POSITIVE, required=True),
    "hold_s": _Field(_NON_NEGATIVE, default=0.0),
    **_ARRIVAL_FIELDS,
    "num_requests": _Field(_COUNT),
}
_VLLM_RAMP = {
    "start_rps": _Field(_POSITIVE, required=True),
    "end_rps": _Field(_POSITIVE, required=True),
    "num_requests": _Field(_COUNT, required=True),
    "burstiness": _Field(_POSITIVE, default=1.0),
}
SCHEDULE_FIELDS: dict[str, dict[str, _Field]] = {
    "constant": dict(_STEADY),
    "poisson": dict(_STEADY),
    "gamma": {**_STEADY, "burstiness": _Field(_POSITIVE, default=1.0)},
    "linear": dict(_RAMP),
    "exponential": {
        **_RAMP,
        "start_rps": _Field(_POSITIVE, required=True),
        "end_rps": _Field(_POSITIVE, required=True),
    },
    "steps": {
        "steps": _Field(lambda v: None, required=True),  # checked item by item below
        **_ARRIVAL_FIELDS,
        "num_requests": _Field(_COUNT),
    },
    "vllm-constant": {
        "rate": _Field(_POSITIVE, required=True),
        "num_requests": _Field(_COUNT, required=True),
        "burstiness": _Field(_POSITIVE, default=1.0),
    },
    "vllm-linear": dict(_VLLM_RAMP),
    "vllm-exponential": dict(_VLLM_RAMP),
    USERS_KIND: {
        "users": _Field(_COUNT),
        "start_users": _Field(number_check(0, integer=True)),
        "end_users": _Field(number_check(0, integer=True)),
        "duration_s": _Field(_POSITIVE, required=True),
        "hold_s": _Field(_NON_NEGATIVE, default=0.0),
    },
}


def _speed_check(value: Any) -> str | None:
    """A trace's speed: a factor > 0, or a linear ramp of it ``{start, end}``."""
    if is_number(value) and value > 0:
        return None
    if isinstance(value, dict) and set(value) == {"start", "end"}:
        if all(is_number(value[k]) and value[k] > 0 for k in ("start", "end")):
            return None
    return f"expected a factor > 0 (1 = the trace's own pace) or {{start: F, end: F}} (a ramp), got {describe(value)}"


SCHEDULE_FIELDS[TRACE_KIND] = {
    "path": _Field(lambda v: None if isinstance(v, str) and v else f"expected a file path, got {describe(v)}", True),
    "format": _Field(choice_check(TRACE_FORMATS), required=True),
    "speed": _Field(_speed_check, default=1.0),
    "start_s": _Field(_NON_NEGATIVE, default=0.0),
    "duration_s": _Field(_POSITIVE),
    "block_tokens": _Field(_COUNT, default=DEFAULT_BLOCK_TOKENS),
}
_STEP_FIELDS = {"rate": _Field(_NON_NEGATIVE, required=True), "duration_s": _Field(_POSITIVE, required=True)}


def _check_mapping(
    value: Any, fields: dict[str, _Field], path: tuple[str | int, ...], problems: list[SpecProblem]
) -> dict[str, Any]:
    """Checks one mapping against its fields; returns it with defaults filled."""
    out: dict[str, Any] = {}
    for key in value:
        if key not in fields:
            problems.append(SpecProblem(path + (key,), unknown_key_message(key, list(fields)), True))
    for name, spec in fields.items():
        if name not in value or value[name] is None:
            if spec.required:
                problems.append(SpecProblem(path + (name,), "required key is missing", True))
            elif spec.default is not None:
                out[name] = spec.default
            continue
        message = spec.check(value[name])
        if message:
            problems.append(SpecProblem(path + (name,), message))
        out[name] = value[name]
    return out


def check_schedule(spec: Any) -> tuple[dict[str, Any], list[SpecProblem]]:
    """Validates a ``schedule:`` mapping. Returns (spec with defaults filled, problems)."""
    problems: list[SpecProblem] = []
    if not isinstance(spec, dict):
        return {}, [SpecProblem((), f"expected a mapping with a 'kind' key, got {describe(spec)}")]
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind not in SCHEDULE_FIELDS:  # a list or mapping: not hashable
        if "kind" not in spec:
            return {}, [SpecProblem(("kind",), f"required key is missing (one of {', '.join(KINDS)})", True)]
        return {}, [SpecProblem(("kind",), choice_check(KINDS)(kind) or "")]
    fields = {"kind": _Field(lambda v: None, required=True), **SCHEDULE_FIELDS[kind]}
    out = _check_mapping(spec, fields, (), problems)
    if kind == "steps" and "steps" in spec:
        steps = spec["steps"]
        if not isinstance(steps, list) or not steps:
            problems.append(
                SpecProblem(("steps",), f"expected a non-empty list of {{rate, duration_s}}, got {describe(steps)}")
            )
        else:
            checked = []
            for i, step in enumerate(steps):
                if not isinstance(step, dict):
                    problems.append(
                        SpecProblem(("steps", i), f"expected a mapping {{rate, duration_s}}, got {describe(step)}")
                    )
                    continue
                checked.append(_check_mapping(step, _STEP_FIELDS, ("steps", i), problems))
            out["steps"] = checked
    if kind == USERS_KIND:
        _check_users(spec, problems)
    if problems:
        return out, problems
    if "num_requests" in out:
        out["num_requests"] = int(out["num_requests"])
    if "block_tokens" in out:
        out["block_tokens"] = int(out["block_tokens"])
    if kind in ("vllm-linear", "vllm-exponential") and out["start_rps"] > out["end_rps"]:
        # vllm bench serve refuses a ramp down ("start RPS must be less than end RPS").
        problems.append(
            SpecProblem(
                ("end_rps",),
                f"expected a number >= start_rps ({out['start_rps']:g}) as vllm bench serve requires, got {describe(out['end_rps'])}",
            )
        )
    return out, problems


def _check_users(spec: dict[str, Any], problems: list[SpecProblem]) -> None:
    """A users schedule is either ``users: N`` or a ramp ``start_users`` → ``end_users``."""
    ramp = [key for key in ("start_users", "end_users") if key in spec]
    if "users" in spec and ramp:
        problems.append(
            SpecProblem((ramp[0],), "cannot be combined with users (give users: N, or start_users and end_users)", True)
        )
    elif "users" not in spec and len(ramp) < 2:
        missing = "users" if not ramp else ("end_users" if ramp == ["start_users"] else "start_users")
        problems.append(
            SpecProblem((missing,), "required key is missing (users: N, or start_users and end_users)", True)
        )


# --------------------------------------------------------------------------- ramp profiles


@dataclass(slots=True)
class _Segment:
    start: float
    length: float  # may be inf for the last segment of an unbounded schedule
    r0: float
    r1: float
    shape: str  # "const", "linear", "exp"
    work_before: float = 0.0

    @property
    def end(self) -> float:
        return self.start + self.length

    def rate(self, u: float) -> float:
        if self.shape == "const" or self.length == 0:
            return self.r0
        if self.shape == "linear":
            return self.r0 + (self.r1 - self.r0) * (u / self.length)
        return self.r0 * math.exp(math.log(self.r1 / self.r0) * (u / self.length))

    def work(self, u: float) -> float:
        if self.shape == "const" or self.length == 0:
            return self.r0 * u
        if self.shape == "linear":
            slope = (self.r1 - self.r0) / self.length
            return self.r0 * u + slope * u * u / 2
        g = math.log(self.r1 / self.r0) / self.length
        return self.r0 * u if g == 0 else self.r0 * math.expm1(g * u) / g

    def total(self) -> float:
        return self.work(self.length) if math.isfinite(self.length) else math.inf

    def inverse(self, dw: float) -> float:
        """Ramp seconds into the segment at which ``dw`` work has been done."""
        if dw <= 0:
            return 0.0
        if self.shape == "const" or self.length == 0:
            u = dw / self.r0 if self.r0 > 0 else self.length
        elif self.shape == "linear":
            slope = (self.r1 - self.r0) / self.length
            root = math.sqrt(max(0.0, self.r0 * self.r0 + 2 * slope * dw))
            # 2dw/(r0+root) is the stable form of (-r0+root)/slope; it also covers slope 0.
            u = 2 * dw / (self.r0 + root) if self.r0 + root > 0 else self.length
        else:
            g = math.log(self.r1 / self.r0) / self.length
            u = dw / self.r0 if g == 0 else math.log1p(g * dw / self.r0) / g
        return min(max(u, 0.0), self.length)


class _TimeProfile:
    """Rate as a function of ramp seconds, as a list of closed-form segments."""

    def __init__(self, segments: list[_Segment]) -> None:
        work = 0.0
        for seg in segments:
            seg.work_before = work
            work += seg.total()
        self.segments = segments
        self.end = segments[-1].end
        self.work_end = work
        self._starts = [s.start for s in segments]
        self._work_ends = [s.work_before + s.total() for s in segments]

    def _segment_at(self, c: float) -> _Segment:
        return self.segments[max(0, bisect.bisect_right(self._starts, c) - 1)]

    def rate(self, c: float) -> float:
        if c >= self.end:
            return 0.0
        seg = self._segment_at(c)
        return seg.rate(c - seg.start)

    def work(self, c: float) -> float:
        c = min(max(c, 0.0), self.end)
        if c == self.end and math.isfinite(self.end):
            return self.work_end
        seg = self._segment_at(c)
        return seg.work_before + seg.work(c - seg.start)

    def work_inv(self, w: float) -> float | None:
        if w > self.work_end:
            if w > self.work_end * (1 + 1e-12) + 1e-12:
                return None
            return self.end
        i = min(bisect.bisect_left(self._work_ends, w), len(self.segments) - 1)
        seg = self.segments[i]
        return seg.start + seg.inverse(w - seg.work_before)

    def time(self, c: float) -> float:
        return c

    def time_inv(self, s: float) -> float:
        return min(s, self.end)

    def ramp_range(self) -> tuple[float, float] | None:
        """The lowest and highest rate its ramps (non-constant segments) go through;
        None for a profile without one (constant, steps)."""
        ramps = [r for seg in self.segments if seg.shape != "const" and seg.r0 != seg.r1 for r in (seg.r0, seg.r1)]
        return (min(ramps), max(ramps)) if ramps else None

    def coordinate_at_rate(self, rate: float) -> float | None:
        """The first ramp coordinate where a ramp segment's rate is ``rate``; None when
        no ramp goes through it."""
        for seg in self.segments:
            if seg.shape == "const" or seg.r0 == seg.r1 or not min(seg.r0, seg.r1) <= rate <= max(seg.r0, seg.r1):
                continue
            if seg.shape == "linear":
                return seg.start + seg.length * (rate - seg.r0) / (seg.r1 - seg.r0)
            return seg.start + seg.length * math.log(rate / seg.r0) / math.log(seg.r1 / seg.r0)
        return None


class _IndexProfile:
    """Rate by request index (vllm bench serve): request i arrives ``delays[i]`` after
    request i-1 at rate ``rates[i]``. The ramp coordinate is cumulative work, whose
    piece i spans ``delays[i] * rates[i]`` units."""

    def __init__(self, rates: list[float], cumulative_delays: list[float]) -> None:
        self.rates = rates
        self.delay_cum = cumulative_delays
        bounds, work, prev = [], 0.0, 0.0
        for rate, cum in zip(rates, cumulative_delays):
            work += (cum - prev) * rate
            prev = cum
            bounds.append(work)
        self.bounds = bounds
        self.end = bounds[-1]
        self.work_end = self.end

    def _before(self, k: int) -> tuple[float, float]:
        return (0.0, 0.0) if k == 0 else (self.bounds[k - 1], self.delay_cum[k - 1])

    def rate(self, c: float) -> float:
        k = bisect.bisect_right(self.bounds, c)
        return 0.0 if k >= len(self.rates) else self.rates[k]

    def work(self, c: float) -> float:
        return min(max(c, 0.0), self.end)

    def work_inv(self, w: float) -> float | None:
        if w > self.end:
            return None if w > self.end * (1 + 1e-12) + 1e-12 else self.end
        return max(w, 0.0)

    def time(self, c: float) -> float:
        k = bisect.bisect_left(self.bounds, c)
        if k >= len(self.bounds):
            return self.delay_cum[-1]
        if self.bounds[k] == c:
            return self.delay_cum[k]  # exactly vllm's cumulative delay, no rounding
        w0, t0 = self._before(k)
        return t0 + (c - w0) / self.rates[k]

    def time_inv(self, s: float) -> float:
        k = bisect.bisect_left(self.delay_cum, s)
        if k >= len(self.delay_cum):
            return self.end
        if self.delay_cum[k] == s:
            return self.bounds[k]
        w0, t0 = self._before(k)
        return w0 + (s - t0) * self.rates[k]


# --------------------------------------------------------------------------- gap streams


class _Targets:
    """Partial sums S_k of unit-mean gaps, drawn lazily in chunks (deterministic)."""

    CHUNK = 1024

    def __init__(self, draw: Callable[[int], np.ndarray], head: list[float] | None = None) -> None:
        self._draw = draw
        self._sums: list[float] = list(head or [])

    def __getitem__(self, k: int) -> float:
        while k >= len(self._sums):
            last = self._sums[-1] if self._sums else 0.0
            gaps = self._draw(self.CHUNK)
            sums = np.cumsum(gaps) + last
            self._sums.extend(float(x) for x in sums)
        return self._sums[k]


def _gap_draw(arrival: str, burstiness: float, rng: np.random.Generator) -> Callable[[int], np.ndarray]:
    if arrival == "constant":
        return lambda n: np.ones(n)
    if arrival == "poisson":
        return lambda n: rng.exponential(1.0, n)
    return lambda n: rng.gamma(burstiness, 1.0 / burstiness, n)


# --------------------------------------------------------------------------- the schedule


class ArrivalSchedule:
    """Hands out send times (seconds since run start) one at a time, and takes control
    changes while running.

    The runner's loop: ``t = next_send_time()``; ``None`` means the schedule is over;
    otherwise sleep until ``t`` and fire one request. After any control call (``hold``,
    ``resume``, ``set_rate``, ``step_rate``) made at time ``now``, a send time already
    handed out that lies after ``now`` is withdrawn: drop it and call
    ``next_send_time()`` again, which returns that same arrival re-timed at the new
    rate. A schedule held at rate 0 returns ``math.inf`` (paused until the next change).
    Arrivals already overdue when a change is made are due at the change's time, unless
    the runner takes the one it holds back (``withdraw``: a pause for a server restart
    sends nothing).
    """

    def __init__(
        self,
        spec: dict[str, Any],
        profile: _TimeProfile | _IndexProfile,
        targets: _Targets,
        num_requests: int | None,
        planned_duration_s: float | None,
    ) -> None:
        self.spec = spec
        self.kind: str = spec["kind"]
        self.planned_duration_s = planned_duration_s
        self._profile = profile
        self._targets = targets
        self._max = num_requests
        self._issued = 0
        self._last_time = 0.0
        self._finished = False
        self._holding = False
        self._held_rate = 0.0
        self._set_by_hand = False  # the held rate is one set_rate gave, not the ramp's
        self._anchor_t = 0.0
        self._anchor_c = 0.0
        self._anchor_w = 0.0

    # -- queries

    @property
    def state(self) -> str:
        if self._finished or (self._max is not None and self._issued >= self._max):
            return "done"
        return "holding" if self._holding else "ramping"

    @property
    def request_rates(self) -> list[float] | None:
        """For the vllm-* kinds: the rate each request index is drawn at (as vllm bench)."""
        return list(self._profile.rates) if isinstance(self._profile, _IndexProfile) else None

    def current_rate(self, t: float) -> float:
        """Target rate (requests/s) at run time ``t``; 0 once the schedule is over."""
        if self.state == "done":
            return 0.0
        if self._holding:
            return self._held_rate
        return self._profile.rate(self._ramp_coordinate(t))

    def projected_end_s(self) -> float | None:
        """When the schedule will end if nothing changes (None: unbounded or holding)."""
        if self._holding or not math.isfinite(self._profile.end):
            return None
        p = self._profile
        return self._anchor_t + p.time(p.end) - p.time(self._anchor_c)

    def planned_end_s(self, t: float) -> float | None:
        """When the schedule ends, as planned at run time ``t``: the planned duration moved
        on by the time held so far, and while holding by every further second held (a
        hold, or a rate set by hand, pauses the ramp; ``resume`` continues the rest of it).
        None for an unbounded schedule."""
        p = self._profile
        if not math.isfinite(p.end):
            return None
        return t + max(0.0, p.time(p.end) - p.time(self._ramp_coordinate(t)))

    def ended_by(self, t: float) -> bool:
        """Whether the schedule is over at run time ``t`` going by its clock alone, and
        then marks it done: a closed loop (kind ``users``) asks for no send times, so
        this is how it ends. Holding never ends."""
        if self.state != "done" and not self._holding and self._ramp_coordinate(t) >= self._profile.end:
            self._finished = True
        return self.state == "done"

    # -- the runner's loop

    def next_send_time(self) -> float | None:
        if self.state == "done":
            self._finished = True
            return None
        target = self._targets[self._issued]
        if self._holding:
            if self._held_rate <= 0:
                t = math.inf
            else:
                t = self._anchor_t + max(0.0, target - self._anchor_w) / self._held_rate
        else:
            p = self._profile
            c = p.work_inv(p.work(self._anchor_c) + max(0.0, target - self._anchor_w))
            if c is None:
                self._finished = True
                return None
            t = self._anchor_t + p.time(c) - p.time(self._anchor_c)
        t = max(t, self._anchor_t)
        self._issued += 1
        self._last_time = t
        return t

    def withdraw(self) -> None:
        """Take back the send time last handed out, unused, that a control change did not
        withdraw (it was already due then): the next ``next_send_time()`` returns that
        arrival again, timed as the schedule now stands."""
        if self._issued > 0:
            self._issued -= 1

    # -- control

    def hold(self, t: float) -> Event:
        before = self.current_rate(t)
        if self.state == "done":
            return self._event(t, "hold", "schedule already finished", before, before, applied=False)
        if self._holding:
            return self._event(t, "hold", f"already holding at {before:g} req/s", before, before, applied=False)
        self._rebase(t)
        self._holding, self._held_rate, self._set_by_hand = True, before, False
        return self._event(t, "hold", f"hold at {before:.3g} req/s", before, before)

    def resume(self, t: float) -> Event:
        """End a hold. After a rate set by hand (``set_rate``, ``+``/``-``) a ramp goes on
        from that rate: from the first point where the ramp runs at it, ahead of where it
        was held or back, so the rest of the plan moves with it. A schedule without a
        ramp, or a rate outside the ramp's, resumes where it was held, and the event's
        message says that the rate set by hand ends there and why."""
        before = self.current_rate(t)
        if self.state == "done":
            return self._event(t, "resume", "schedule already finished", before, before, applied=False)
        if not self._holding:
            return self._event(t, "resume", "not holding", before, before, applied=False)
        self._rebase(t)
        held_at = self._profile.rate(self._anchor_c)
        set_by_hand = self._set_by_hand and not math.isclose(before, held_at, rel_tol=1e-9, abs_tol=1e-9)
        self._holding = self._set_by_hand = False
        if not set_by_hand:
            return self._event(t, "resume", f"resume ramp at {held_at:.3g} req/s", before, held_at)
        ramp = self._profile.ramp_range() if isinstance(self._profile, _TimeProfile) else None
        coordinate = self._profile.coordinate_at_rate(before) if isinstance(self._profile, _TimeProfile) else None
        if coordinate is not None:
            self._anchor_c = coordinate
            message = (
                f"resume ramp at {before:.3g} req/s, the rate set by hand: the ramp goes on from where it "
                f"reaches {before:.3g} (it was held at {held_at:.3g})"
            )
            event = self._event(t, "resume", message, before, before)
        elif ramp is not None:
            message = (
                f"resume ramp at {held_at:.3g} req/s, where it was held: the rate set by hand, {before:.3g}, "
                f"is outside the ramp's {ramp[0]:.3g}–{ramp[1]:.3g} req/s"
            )
            event = self._event(t, "resume", message, before, held_at)
        else:
            message = (
                f"resume schedule at {held_at:.3g} req/s: the rate set by hand, {before:.3g}, ends "
                f"(a {self.kind} schedule has no ramp to go on from it)"
            )
            event = self._event(t, "resume", message, before, held_at)
        event.data["set_rps"] = before
        return event

    def set_rate(self, t: float, rps: float) -> Event:
        if not is_number(rps) or rps < 0:
            raise UserError(f"rate: expected a number >= 0, got {describe(rps)}")
        before = self.current_rate(t)
        if self.state == "done":
            return self._event(t, "set_rate", "schedule already finished", before, before, applied=False)
        self._rebase(t)
        self._holding, self._held_rate, self._set_by_hand = True, float(rps), True
        return self._event(t, "set_rate", f"hold at {rps:.3g} req/s", before, float(rps))

    def step_rate(self, t: float, delta: float) -> Event:
        if not is_number(delta):
            raise UserError(f"rate step: expected a number, got {describe(delta)}")
        event = self.set_rate(t, max(0.0, self.current_rate(t) + delta))
        event.data["delta_rps"] = float(delta)
        return event

    def restart(self, t: float) -> Event:
        """Continue from the schedule's start (a restarted server ramped again): the rest
        of the run is the whole plan again, from ``t``."""
        before = self.current_rate(t)
        if self.state == "done":
            return self._event(t, "resume", "schedule already finished", before, before, applied=False)
        self._rebase(t)
        self._holding, self._set_by_hand, self._anchor_c = False, False, 0.0
        after = self._profile.rate(0.0)
        return self._event(t, "resume", f"ramp restarted from its start at {after:.3g} req/s", before, after)

    # -- internals

    def _ramp_coordinate(self, t: float) -> float:
        if self._holding:
            return self._anchor_c
        p = self._profile
        return p.time_inv(p.time(self._anchor_c) + max(0.0, t - self._anchor_t))

    def _rebase(self, t: float) -> None:
        t = max(t, self._anchor_t)
        if self._issued > 0 and self._last_time > t:
            self._issued -= 1  # withdraw the pending send time; it is re-timed on request
        if self._holding:
            c = self._anchor_c
            w = self._anchor_w + self._held_rate * (t - self._anchor_t)
        else:
            c = self._ramp_coordinate(t)
            w = self._anchor_w + self._profile.work(c) - self._profile.work(self._anchor_c)
        self._anchor_t, self._anchor_c, self._anchor_w = t, c, w

    def _event(self, t: float, kind: str, message: str, before: float, after: float, applied: bool = True) -> Event:
        """The control change as an event; one that changed nothing says so in
        ``data["applied"]`` (False), and the runner does not record it."""
        data: dict[str, Any] = {"before_rps": before, "after_rps": after}
        if not applied:
            data["applied"] = False
        return Event(t=t, kind=kind, message=message, data=data)


# --------------------------------------------------------------------------- building


def _time_segments(spec: dict[str, Any]) -> list[_Segment]:
    kind = spec["kind"]
    if kind in ("constant", "poisson", "gamma"):
        length = float(spec.get("duration_s", math.inf))
        return [_Segment(0.0, length, float(spec["rate"]), float(spec["rate"]), "const")]
    if kind == USERS_KIND:
        length = float(spec["duration_s"])
        start = float(spec["users"] if "users" in spec else spec["start_users"])
        end = float(spec["users"] if "users" in spec else spec["end_users"])
        segments = [_Segment(0.0, length, start, end, "linear")]
        if spec.get("hold_s", 0) > 0:
            segments.append(_Segment(length, float(spec["hold_s"]), end, end, "const"))
        return segments
    if kind in ("linear", "exponential"):
        start, end, length = float(spec["start_rps"]), float(spec["end_rps"]), float(spec["duration_s"])
        shape = "linear" if kind == "linear" else "exp"
        segments = [_Segment(0.0, length, start, end, shape)]
        if spec.get("hold_s", 0) > 0:
            segments.append(_Segment(length, float(spec["hold_s"]), end, end, "const"))
        return segments
    segments, t = [], 0.0
    for step in spec["steps"]:
        segments.append(_Segment(t, float(step["duration_s"]), float(step["rate"]), float(step["rate"]), "const"))
        t += float(step["duration_s"])
    return segments


def vllm_request_rate(kind: str, start: float, end: float, index: int, total: int) -> float:
    """The rate vllm bench serve assigns to request ``index`` of ``total`` when ramping
    (progress = index / max(total - 1, 1), linear or geometric between start and end)."""
    progress = index / max(total - 1, 1)
    if kind == "vllm-linear":
        return start + (end - start) * progress
    return start * ((end / start) ** progress)


def _vllm_profile(
    spec: dict[str, Any], seed: int, expected: bool = False
) -> tuple[_IndexProfile, np.random.RandomState]:
    n, k = spec["num_requests"], float(spec["burstiness"])
    if spec["kind"] == "vllm-constant":
        rates = [spec["rate"]] * n
    else:
        rates = [vllm_request_rate(spec["kind"], spec["start_rps"], spec["end_rps"], i, n) for i in range(n)]
    # vllm bench seeds numpy's global legacy generator and draws one gamma per request.
    rs = np.random.RandomState(seed)
    delays: list[float] = []
    for rate in rates:
        if expected:
            delays.append(1.0 / rate)
        else:
            delays.append(float(rs.gamma(shape=k, scale=1.0 / (rate * k))))
    for i in range(1, len(delays)):
        delays[i] += delays[i - 1]
    if spec["kind"] == "vllm-constant" and delays[-1] != 0:
        # Without a ramp, vllm bench rescales so the last request lands at N / rate.
        factor = (n / spec["rate"]) / delays[-1]
        delays = [d * factor for d in delays]
    return _IndexProfile([float(r) for r in rates], delays), rs


def _resolve(spec: dict[str, Any]) -> dict[str, Any]:
    resolved, problems = check_schedule(spec)
    if problems:
        first = problems[0]
        where = ".".join(["schedule", *map(str, first.path)])
        raise UserError(f"{where}: {first.message}")
    return resolved


def build_schedule(spec: dict[str, Any], seed: int) -> ArrivalSchedule:
    """The schedule for a scenario's ``schedule:`` mapping; same spec and seed, same times."""
    spec = _resolve(spec)
    kind = spec["kind"]
    if kind == TRACE_KIND:
        raise UserError("schedule.kind: a trace schedule is built from its trace (loadgen.workload.trace_replay)")
    if kind in VLLM_KINDS:
        profile, rs = _vllm_profile(spec, seed)
        k = float(spec["burstiness"])
        # Arrivals beyond the ramp's N (made while holding) continue the same generator.
        targets = _Targets(lambda n: rs.standard_gamma(k, n) / k, head=list(profile.bounds))
        return ArrivalSchedule(spec, profile, targets, None, profile.delay_cum[-1])
    time_profile = _TimeProfile(_time_segments(spec))
    arrival = {"constant": "constant", "poisson": "poisson", "gamma": "gamma"}.get(kind, spec.get("arrival", "poisson"))
    rng = np.random.default_rng(seed)
    targets = _Targets(_gap_draw(arrival, float(spec.get("burstiness", 1.0)), rng))
    planned = time_profile.end if math.isfinite(time_profile.end) else None
    return ArrivalSchedule(spec, time_profile, targets, spec.get("num_requests"), planned)


def expected_rate_curve(spec: dict[str, Any], times: Sequence[float]) -> list[float]:
    """The target rate at each time if nobody touches the controls. For the vllm-*
    kinds the request index is placed at its expected arrival time (gaps of 1/rate)."""
    spec = _resolve(spec)
    if spec["kind"] == TRACE_KIND:
        raise UserError("schedule.kind: a trace's rate curve is its trace's (loadgen.workload.trace_replay)")
    if spec["kind"] in VLLM_KINDS:
        profile, _ = _vllm_profile(spec, 0, expected=True)
        out = []
        for t in times:
            c = profile.time_inv(t)
            out.append(0.0 if t > profile.delay_cum[-1] else profile.rate(min(c, profile.end * (1 - 1e-15))))
        return out
    time_profile = _TimeProfile(_time_segments(spec))
    return [time_profile.rate(t) if t >= 0 else 0.0 for t in times]


def schedule_work(spec: dict[str, Any], t0: float, t1: float) -> float:
    """Expected number of arrivals between ramp times t0 and t1 (∫ rate) for the
    wall-clock kinds; used by tests and plots."""
    spec = _resolve(spec)
    if spec["kind"] in VLLM_KINDS + (TRACE_KIND,):
        raise UserError(f"schedule.kind: {spec['kind']} is not ramped by a rate function of time")
    profile = _TimeProfile(_time_segments(spec))
    return profile.work(t1) - profile.work(t0)
