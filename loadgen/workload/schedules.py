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

import math
from typing import Any

import numpy as np

from rampwatch.core.errors import UserError
from rampwatch.core.timeline import Event
from rampwatch.loadgen.workload.rate_profiles import (
    IndexProfile,
    Targets,
    TimeProfile,
    gap_draw,
    time_segments,
    vllm_profile,
)
from rampwatch.loadgen.workload.schedule_spec import TRACE_KIND, VLLM_KINDS, resolve_schedule
from rampwatch.loadgen.workload.spec_checks import describe, is_number


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
        profile: TimeProfile | IndexProfile,
        targets: Targets,
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
        return list(self._profile.rates) if isinstance(self._profile, IndexProfile) else None

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

    def finish(self) -> None:
        """End the schedule now, whatever its plan (a search that is over): no further
        send time; the run drains as at a planned end."""
        self._finished = True

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
        ramp = self._profile.ramp_range() if isinstance(self._profile, TimeProfile) else None
        coordinate = self._profile.coordinate_at_rate(before) if isinstance(self._profile, TimeProfile) else None
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


def build_schedule(spec: dict[str, Any], seed: int) -> ArrivalSchedule:
    """The schedule for a scenario's ``schedule:`` mapping; same spec and seed, same times."""
    spec = resolve_schedule(spec)
    kind = spec["kind"]
    if kind == TRACE_KIND:
        raise UserError("schedule.kind: a trace schedule is built from its trace (loadgen.workload.trace_replay)")
    if kind in VLLM_KINDS:
        profile, rs = vllm_profile(spec, seed)
        k = float(spec["burstiness"])
        # Arrivals beyond the ramp's N (made while holding) continue the same generator.
        targets = Targets(lambda n: rs.standard_gamma(k, n) / k, head=list(profile.bounds))
        return ArrivalSchedule(spec, profile, targets, None, profile.delay_cum[-1])
    time_profile = TimeProfile(time_segments(spec))
    arrival = {"constant": "constant", "poisson": "poisson", "gamma": "gamma"}.get(kind, spec.get("arrival", "poisson"))
    rng = np.random.default_rng(seed)
    targets = Targets(gap_draw(arrival, float(spec.get("burstiness", 1.0)), rng))
    planned = time_profile.end if math.isfinite(time_profile.end) else None
    return ArrivalSchedule(spec, time_profile, targets, spec.get("num_requests"), planned)
