"""The rate profiles a schedule runs on (see ``loadgen.workload.schedules``): the rate as a
function of the ramp coordinate, in closed-form segments (``TimeProfile``: ramp seconds)
or by request index as ``vllm bench serve`` ramps (``IndexProfile``: cumulative work),
and the lazily drawn partial sums of unit-mean gaps that arrivals cross (``Targets``)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rampwatch.loadgen.workload.schedule_spec import USERS_KIND

# --------------------------------------------------------------------------- ramp profiles


@dataclass(slots=True)
class Segment:
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


class TimeProfile:
    """Rate as a function of ramp seconds, as a list of closed-form segments."""

    def __init__(self, segments: list[Segment]) -> None:
        work = 0.0
        for seg in segments:
            seg.work_before = work
            work += seg.total()
        self.segments = segments
        self.end = segments[-1].end
        self.work_end = work
        self._starts = [s.start for s in segments]
        self._work_ends = [s.work_before + s.total() for s in segments]

    def _segment_at(self, c: float) -> Segment:
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


class IndexProfile:
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


class Targets:
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


def gap_draw(arrival: str, burstiness: float, rng: np.random.Generator) -> Callable[[int], np.ndarray]:
    """Unit-mean gaps, ``n`` at a time: all 1.0, Exp(1), or Gamma(k, 1/k) with burstiness k."""
    if arrival == "constant":
        return lambda n: np.ones(n)
    if arrival == "poisson":
        return lambda n: rng.exponential(1.0, n)
    return lambda n: rng.gamma(burstiness, 1.0 / burstiness, n)


# --------------------------------------------------------------------------- a spec's profile


def time_segments(spec: dict[str, Any]) -> list[Segment]:
    """The segments of a wall-clock kind's checked spec (``TimeProfile``'s input)."""
    kind = spec["kind"]
    if kind in ("constant", "poisson", "gamma"):
        length = float(spec.get("duration_s", math.inf))
        return [Segment(0.0, length, float(spec["rate"]), float(spec["rate"]), "const")]
    if kind == USERS_KIND:
        length = float(spec["duration_s"])
        start = float(spec["users"] if "users" in spec else spec["start_users"])
        end = float(spec["users"] if "users" in spec else spec["end_users"])
        segments = [Segment(0.0, length, start, end, "linear")]
        if spec.get("hold_s", 0) > 0:
            segments.append(Segment(length, float(spec["hold_s"]), end, end, "const"))
        return segments
    if kind in ("linear", "exponential"):
        start, end, length = float(spec["start_rps"]), float(spec["end_rps"]), float(spec["duration_s"])
        shape = "linear" if kind == "linear" else "exp"
        segments = [Segment(0.0, length, start, end, shape)]
        if spec.get("hold_s", 0) > 0:
            segments.append(Segment(length, float(spec["hold_s"]), end, end, "const"))
        return segments
    segments, t = [], 0.0
    for step in spec["steps"]:
        segments.append(Segment(t, float(step["duration_s"]), float(step["rate"]), float(step["rate"]), "const"))
        t += float(step["duration_s"])
    return segments


def vllm_request_rate(kind: str, start: float, end: float, index: int, total: int) -> float:
    """The rate vllm bench serve assigns to request ``index`` of ``total`` when ramping
    (progress = index / max(total - 1, 1), linear or geometric between start and end)."""
    progress = index / max(total - 1, 1)
    if kind == "vllm-linear":
        return start + (end - start) * progress
    return start * ((end / start) ** progress)


def vllm_profile(spec: dict[str, Any], seed: int) -> tuple[IndexProfile, np.random.RandomState]:
    """A vllm-* kind's profile, its delays drawn as ``vllm bench serve`` draws them, and
    the generator it drew them from (arrivals past its N continue it)."""
    n, k = spec["num_requests"], float(spec["burstiness"])
    if spec["kind"] == "vllm-constant":
        rates = [spec["rate"]] * n
    else:
        rates = [vllm_request_rate(spec["kind"], spec["start_rps"], spec["end_rps"], i, n) for i in range(n)]
    # vllm bench seeds numpy's global legacy generator and draws one gamma per request.
    rs = np.random.RandomState(seed)
    delays: list[float] = []
    for rate in rates:
        delays.append(float(rs.gamma(shape=k, scale=1.0 / (rate * k))))
    for i in range(1, len(delays)):
        delays[i] += delays[i - 1]
    if spec["kind"] == "vllm-constant" and delays[-1] != 0:
        # Without a ramp, vllm bench rescales so the last request lands at N / rate.
        factor = (n / spec["rate"]) / delays[-1]
        delays = [d * factor for d in delays]
    return IndexProfile([float(r) for r in rates], delays), rs
