"""Trace replay: ``schedule: {kind: trace, path, format, speed}`` sends a trace's rows
at its own times, and its i-th request is the trace's i-th row.

**Time.** Send times are the rows' trace times (seconds from the first row, or from the
window's ``start_s``) divided by the speed. A speed ramp ``{start, end}`` changes the
speed linearly over the run's wall time, so the trace's rate is scaled linearly and no
row is dropped: trace time is warped. This is the operational time of
``loadgen.workload.schedules`` with trace seconds as the work and the speed as its rate: the
trace's times are the targets, and a segment of ``TimeProfile`` (constant or linear)
gives the speed.

**Rate.** The target rate a tick reports is the trace's local rate (rows per trace
second over ``traces.RATE_WINDOW_S`` around the point replayed) times the speed. ``hold``
keeps the current speed (the rows keep coming at it; ``resume`` goes on with the speed
ramp); ``set_rate`` and the ``+``/``-`` keys set the speed that gives the asked rate at
the trace's local rate there (its mean rate where the trace has a gap).

**Requests.** A Mooncake row's ``hash_ids`` become shared prefix blocks: a synthetic
block of ``block_tokens`` tokens per hash id, the same bytes wherever it appears, built
once (a bounded cache); the rest of the row's input is a unique tail. A jsonl row's
``prompt`` or ``messages`` is sent as given.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from rampwatch.core.errors import UserError
from rampwatch.core.timeline import Event
from rampwatch.loadgen.workload.prompts import SEPARATOR, random_token_ids, synth_counted
from rampwatch.loadgen.workload.rate_profiles import Segment, Targets, TimeProfile
from rampwatch.loadgen.workload.schedule_spec import check_schedule
from rampwatch.loadgen.workload.schedules import ArrivalSchedule
from rampwatch.loadgen.workload.spec_checks import describe, is_number
from rampwatch.loadgen.workload.tokenizers import count_tokens
from rampwatch.loadgen.workload.traces import Trace, load_trace, local_rate, mean_rate

# --------------------------------------------------------------------------- loading

_LOADED: dict[tuple[str, str, int, int, float, float | None], Trace] = {}


def trace_of(spec: dict[str, Any]) -> Trace:
    """The rows a trace schedule replays (its window of its file, read no further than
    the window's end). The file is read once while it and the window are unchanged: a
    scenario's check, its schedule and its requests share it."""
    path = Path(spec["path"])
    try:
        stat = path.stat()
    except OSError:
        raise UserError(f"{path}: trace file not found") from None
    start_s, duration_s = float(spec.get("start_s") or 0.0), spec.get("duration_s")
    key = (str(path.resolve()), spec["format"], stat.st_mtime_ns, stat.st_size, start_s, duration_s)
    trace = _LOADED.get(key)
    if trace is None:
        trace = load_trace(path, spec["format"], start_s, duration_s)
        _LOADED.clear()  # one trace at a time: a large one is tens of MB
        _LOADED[key] = trace
    return trace


def speeds(speed: Any) -> tuple[float, float]:
    """(start, end) of a speed: a factor, or a ramp ``{start, end}``."""
    if isinstance(speed, dict):
        return float(speed["start"]), float(speed["end"])
    return float(speed), float(speed)


def speed_profile(speed: Any, span_s: float) -> TimeProfile:
    """Speed over wall seconds, changing linearly from start to end while the trace's
    ``span_s`` seconds are replayed: that takes ``2 * span / (start + end)`` seconds."""
    s0, s1 = speeds(speed)
    length = 2.0 * span_s / (s0 + s1)
    return TimeProfile([Segment(0.0, length, s0, s1, "const" if s0 == s1 else "linear")])


class _TraceTimes(Targets):
    """The trace's times as the schedule's targets (read from its array, not copied)."""

    def __init__(self, times_s: np.ndarray) -> None:
        self._times = times_s

    def __getitem__(self, k: int) -> float:
        return float(self._times[k])


# --------------------------------------------------------------------------- schedule


class TraceSchedule(ArrivalSchedule):
    """``ArrivalSchedule`` over a trace: work is trace seconds, its rate the speed; the
    rates it reports and takes are requests per second (see the module docstring)."""

    def __init__(self, spec: dict[str, Any], trace: Trace) -> None:
        profile = speed_profile(spec["speed"], trace.span_s)
        super().__init__(spec, profile, _TraceTimes(trace.times_s), len(trace), profile.end)
        self._speeds = profile.segments[0]
        self.trace = trace
        self._mean_rate = mean_rate(trace.times_s)

    def speed(self, t: float) -> float:
        """Trace seconds replayed per second at run time ``t``."""
        if self._holding:
            return self._held_rate
        return self._speeds.rate(min(self._ramp_coordinate(t), self._profile.end))

    def trace_position(self, t: float) -> float:
        """Trace seconds replayed by run time ``t``."""
        if self._holding:
            return self._anchor_w + self._held_rate * max(0.0, t - self._anchor_t)
        p = self._profile
        return self._anchor_w + p.work(self._ramp_coordinate(t)) - p.work(self._anchor_c)

    def local_rate(self, t: float) -> float:
        return local_rate(self.trace.times_s, self.trace_position(t))

    def current_rate(self, t: float) -> float:
        if self.state == "done":
            return 0.0
        return self.speed(t) * self.local_rate(t)

    def planned_end_s(self, t: float) -> float | None:
        """When the last row is due if nothing changes: at the held speed while held,
        else at the speed ramp's (paused while held at 0, so the end moves on)."""
        remaining = max(0.0, self.trace.span_s - self.trace_position(t))
        if self._holding and self._held_rate > 0:
            return t + remaining / self._held_rate
        p = self._profile
        c = self._ramp_coordinate(t)  # frozen while held
        end = p.work_inv(p.work(c) + remaining)
        return t + ((p.end if end is None else end) - c)

    def hold(self, t: float) -> Event:
        if self.state == "done" or self._holding:
            return super().hold(t)  # says why nothing changed
        before, speed = self.current_rate(t), self.speed(t)
        self._rebase(t)
        self._holding, self._held_rate = True, speed
        return self._speed_event(t, "hold", f"hold at speed ×{speed:.3g}", before, speed)

    def resume(self, t: float) -> Event:
        if self.state == "done" or not self._holding:
            return super().resume(t)
        before = self.current_rate(t)
        self._rebase(t)
        self._holding = False
        speed = self.speed(t)
        return self._speed_event(t, "resume", f"resume the trace at speed ×{speed:.3g}", before, speed)

    def set_rate(self, t: float, rps: float) -> Event:
        if not is_number(rps) or rps < 0:
            raise UserError(f"rate: expected a number >= 0, got {describe(rps)}")
        if self.state == "done":
            return super().set_rate(t, rps)
        before = self.current_rate(t)
        speed = float(rps) / (self.local_rate(t) or self._mean_rate)
        self._rebase(t)
        self._holding, self._held_rate = True, speed
        message = f"speed ×{speed:.3g} ({rps:.3g} req/s at the trace's rate here)"
        return self._speed_event(t, "set_rate", message, before, speed, after_rps=float(rps))

    def restart(self, t: float) -> Event:
        if self.state == "done":
            return super().restart(t)
        before = self.current_rate(t)
        self._rebase(t)
        self._holding, self._anchor_c = False, 0.0
        speed = self.speed(t)
        return self._speed_event(t, "resume", f"speed ramp restarted at ×{speed:.3g}", before, speed)

    def _speed_event(
        self, t: float, kind: str, message: str, before: float, speed: float, after_rps: float | None = None
    ) -> Event:
        after = self.current_rate(t) if after_rps is None else after_rps
        event = self._event(t, kind, message, before, after)
        event.data["speed"] = speed
        return event


def build_trace_schedule(spec: dict[str, Any]) -> TraceSchedule:
    resolved, problems = check_schedule(spec)
    if problems:
        first = problems[0]
        raise UserError(f"{'.'.join(['schedule', *map(str, first.path)])}: {first.message}")
    return TraceSchedule(resolved, trace_of(resolved))


# --------------------------------------------------------------------------- requests

# Prefix blocks kept built: a block of 512 tokens is a few KB of text, and a trace's
# popular blocks (system prompts, shared documents) come back again and again.
BLOCK_CACHE_SIZE = 4096


class TraceRequests:
    """The bodies of a trace's requests, row by row (``RequestFactory`` finishes them)."""

    def __init__(self, trace: Trace, block_tokens: int, endpoint: str, token_ids: bool, seed: int, tokenizer) -> None:
        self.trace = trace
        self.block_tokens = int(block_tokens)
        self.endpoint = endpoint
        self.token_ids = token_ids
        self.seed = seed
        self.tokenizer = tokenizer
        self._rng = np.random.default_rng([seed, 103])
        self._blocks: OrderedDict[int, tuple[Any, int]] = OrderedDict()

    def block(self, hash_id: int) -> tuple[Any, int]:
        """(text or token ids, token count) of one prefix block: the same for the same id."""
        hit = self._blocks.get(hash_id)
        if hit is not None:
            self._blocks.move_to_end(hash_id)
            return hit

        rng = np.random.default_rng([self.seed, 3, hash_id % 2**63])
        if self.token_ids:
            ids = random_token_ids(self.tokenizer, self.block_tokens, rng)
            hit = (ids, len(ids))
        else:
            hit = synth_counted(self.tokenizer, self.block_tokens, rng)
        self._blocks[hash_id] = hit
        if len(self._blocks) > BLOCK_CACHE_SIZE:
            self._blocks.popitem(last=False)
        return hit

    def row(self, i: int) -> tuple[dict[str, Any], int, int, dict[str, Any]]:
        """(payload, expected prompt tokens, max tokens, extra) for row ``i``. Servers
        refuse ``max_tokens`` 0, so a row of no output asks for one token."""

        trace = self.trace
        n_out = max(1, int(trace.output_tokens[i]))
        extra: dict[str, Any] = {"trace_row": i}
        given = trace.prompts.get(i)
        if given is not None:
            if self.endpoint == "chat":
                messages = given.as_messages()
                payload: dict[str, Any] = {"messages": messages}
                expected = sum(count_tokens(self.tokenizer, m["content"]) for m in messages)
            else:
                payload = {"prompt": given.as_text()}
                expected = count_tokens(self.tokenizer, payload["prompt"])
            return self._with_max_tokens(payload, n_out), expected, n_out, extra
        n_in = max(1, int(trace.input_tokens[i]))
        ids = trace.row_hash_ids(i)
        full = min(len(ids), n_in // self.block_tokens)  # a partial last block is unique tail
        blocks = [self.block(h) for h in ids[:full].tolist()]
        shared = sum(count for _, count in blocks)
        tail_n = max(0, n_in - shared)
        if self.token_ids:
            tail_ids = random_token_ids(self.tokenizer, tail_n, self._rng)
            prompt: Any = [t for part, _ in blocks for t in part] + tail_ids
            expected = shared + len(tail_ids)
        else:
            tail, tail_count = synth_counted(self.tokenizer, tail_n, self._rng)
            prefix = " ".join(part for part, _ in blocks)
            prompt = SEPARATOR.join(p for p in (prefix, tail) if p)
            expected = shared + tail_count
        extra.update(prefix_blocks=full, shared_prefix_tokens=shared)
        if self.endpoint == "chat":
            payload = {"messages": [{"role": "user", "content": prompt}]}
        else:
            payload = {"prompt": prompt}
        return self._with_max_tokens(payload, n_out), expected, n_out, extra

    def _with_max_tokens(self, payload: dict[str, Any], n_out: int) -> dict[str, Any]:
        payload["max_completion_tokens" if self.endpoint == "chat" else "max_tokens"] = n_out
        return payload
