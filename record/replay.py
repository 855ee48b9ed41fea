"""Replaying a recording as a ``SnapshotSource``: play at a speed, pause, step, seek.

The recorded stream is fed, in time order, into the same ``SeriesBuilder`` a live run
uses, so a replayed snapshot at ``t`` is built from exactly what the live run had seen
at ``t``. Seeking restores the nearest earlier checkpoint and feeds only the stretch
after it. Files written with seek checkpoints (``record.writer.SeriesCheckpointer``)
carry them, so any seek is fast right after opening; for older files a background
thread builds in-memory checkpoints (pickled builders every ``checkpoint_every_s`` of
run time) after opening.
"""

from __future__ import annotations

import copy
import logging
import math
import pickle
import threading
import time
import zlib
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

from rampwatch.core.timeline import Event, Snapshot
from rampwatch.record.checkpoint import series_builder, stored_builder
from rampwatch.record.reader import Item, Recording

log = logging.getLogger(__name__)

MIN_SPEED = 1.0
MAX_SPEED = 16.0
# Checkpoints are spaced so that restoring one leaves about this many requests to feed
# (the builder's per-request cost dominates a seek), within a memory cap on their count.
REQUESTS_PER_CHECKPOINT = 600
MAX_CHECKPOINTS = 360
MIN_CHECKPOINT_SPACING_S = 2.0


def checkpoint_spacing(duration_s: float, request_count: int) -> float:
    rate = request_count / max(duration_s, 1.0)
    by_work = REQUESTS_PER_CHECKPOINT / max(rate, 1e-9)
    by_memory = duration_s / MAX_CHECKPOINTS
    return float(max(MIN_CHECKPOINT_SPACING_S, math.ceil(max(by_work, by_memory))))


def feed(builder: Any, items: list[Item]) -> None:
    for it in items:
        if it.kind == "request":
            builder.on_request(it.value)
        elif it.kind == "sample":
            builder.on_scrape(it.value)
        elif it.kind == "tick":
            builder.on_tick(it.value)
        else:
            builder.on_event(it.value)


class _Checkpoints:
    """Builder states at fixed run times, shared by the cursor and the warm-up thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: list[float] = []
        self._states: dict[float, Any] = {}
        self.disabled = False

    def has(self, t: float) -> bool:
        with self._lock:
            return t in self._states

    def put(self, t: float, builder: Any) -> None:
        if self.disabled or self.has(t):
            return
        try:
            # Builders hold mostly-empty histogram arrays: level-1 zlib shrinks them ~3x cheaply.
            state: Any = zlib.compress(pickle.dumps(builder, protocol=pickle.HIGHEST_PROTOCOL), 1)
        except Exception:
            try:
                state = ("copy", copy.deepcopy(builder))
            except Exception as exc:
                log.warning("replay checkpoints disabled: the series builder cannot be copied (%s)", exc)
                self.disabled = True
                return
        with self._lock:
            if t not in self._states:
                self._states[t] = state
                self._times.insert(bisect_right(self._times, t), t)

    def best(self, t: float) -> tuple[float, Any] | None:
        """The latest checkpoint at or before ``t``, as (time, fresh builder copy)."""
        with self._lock:
            i = bisect_right(self._times, t)
            if i == 0:
                return None
            ct = self._times[i - 1]
            state = self._states[ct]
        if isinstance(state, tuple):
            return ct, copy.deepcopy(state[1])
        return ct, pickle.loads(zlib.decompress(state))

    def latest_time(self, t: float) -> float | None:
        with self._lock:
            i = bisect_right(self._times, t)
            return self._times[i - 1] if i else None

    def __len__(self) -> int:
        return len(self._times)


class ReplayTimeline:
    """A ``SnapshotSource`` over a recording, with transport controls: implements
    ``core.controls.ReplayControl`` (plus ``play``/``pause``/``step``).

    ``clock`` (seconds, monotonic) drives playback and is injectable for tests.
    ``warm_up=True`` starts a daemon thread that builds seek checkpoints over the whole
    recording; ``wait_warm()`` blocks until it is done.
    """

    def __init__(
        self,
        recording: Recording,
        *,
        clock: Callable[[], float] = time.monotonic,
        builder_factory: Callable[[], Any] | None = None,
        checkpoint_every_s: float | None = None,
        warm_up: bool = True,
        speed: float = 1.0,
    ) -> None:
        self.recording = recording
        self._clock = clock
        self._factory = builder_factory
        duration = max(0.0, recording.duration_s)
        self.checkpoint_every_s = checkpoint_every_s or checkpoint_spacing(duration, recording.request_count)
        self._checkpoints = _Checkpoints()
        self._speed = min(MAX_SPEED, max(MIN_SPEED, float(speed)))
        self._playing = False
        self._anchor_pos = 0.0
        self._anchor_wall = clock()
        self._builder: Any = None
        self._fed_until = -math.inf
        self._lock = threading.RLock()
        self._warm_thread: threading.Thread | None = None
        self._warm_stop = threading.Event()
        self._warmed_upto = 0.0
        # Files written with seek checkpoints (see record.writer.SeriesCheckpointer) need no
        # warm-up: any position is one stored state plus at most one spacing of items away.
        self._stored_checkpoints = builder_factory is None and bool(recording.checkpoint_frames)
        if self._stored_checkpoints:
            self._checkpoints.disabled = True
        elif warm_up and duration > self.checkpoint_every_s:
            self._warm_thread = threading.Thread(target=self._warm, name="rampwatch-replay-warmup", daemon=True)
            self._warm_thread.start()

    # ---- transport ---------------------------------------------------------------------

    @property
    def duration(self) -> float:
        return self.recording.duration_s

    @property
    def playing(self) -> bool:
        self.position  # noqa: B018 - reaching the end pauses
        return self._playing

    @property
    def position(self) -> float:
        with self._lock:
            if not self._playing:
                return self._anchor_pos
            pos = self._anchor_pos + (self._clock() - self._anchor_wall) * self._speed
            if pos >= self.duration:
                self._playing = False
                self._anchor_pos = self.duration
                return self.duration
            return pos

    def _set_position(self, t: float) -> None:
        self._anchor_pos = min(self.duration, max(0.0, t))
        self._anchor_wall = self._clock()

    def play(self) -> None:
        with self._lock:
            if self.position >= self.duration:
                self._set_position(0.0)  # play at the end restarts
            else:
                self._set_position(self.position)
            self._playing = True

    def pause(self) -> None:
        with self._lock:
            self._set_position(self.position)
            self._playing = False

    def toggle(self) -> None:
        if self.playing:
            self.pause()
        else:
            self.play()

    @property
    def speed(self) -> float:
        return self._speed

    @speed.setter
    def speed(self, value: float) -> None:
        with self._lock:
            self._set_position(self.position)
            self._speed = min(MAX_SPEED, max(MIN_SPEED, float(value)))

    def seek(self, t: float) -> None:
        with self._lock:
            self._set_position(t)

    def seek_relative(self, dt: float) -> None:
        with self._lock:
            self._set_position(self.position + dt)

    def step(self, dt: float = 1.0) -> None:
        """Pause and move by ``dt`` seconds (negative steps back)."""
        with self._lock:
            pos = self.position
            self._playing = False
            self._set_position(pos + dt)

    def marks(self) -> list[Event]:
        """Knee, user marks, holds and server restarts, in time order: the position bar's
        letters and the jump keys' targets."""
        kinds = ("knee", "mark", "hold", "config")
        return sorted((e for e in self.recording.events if e.kind in kinds), key=lambda e: e.t)

    # ---- snapshots ---------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        with self._lock:
            t = self.position
            self._advance_to(t)
            return self._builder.snapshot(now=t)

    def _fresh_builder(self) -> Any:
        if self._factory is None:
            return series_builder(self.recording.header)
        b = self._factory()
        b.on_start(self.recording.header)
        return b

    def _advance_to(self, t: float) -> None:
        if self._stored_checkpoints:
            self._advance_with_stored(t)
            return
        cp_time = self._checkpoints.latest_time(t)
        behind = t < self._fed_until
        better_checkpoint = cp_time is not None and cp_time > self._fed_until
        if self._builder is None or behind or better_checkpoint:
            best = self._checkpoints.best(t)
            if best is not None:
                self._fed_until, self._builder = best
            elif self._builder is None or behind:
                self._builder = self._fresh_builder()
                self._fed_until = -math.inf
        self._fed_until = self._feed(self._builder, self._fed_until, t)

    def _advance_with_stored(self, t: float) -> None:
        times = self.recording.checkpoint_times
        i = bisect_right(times, t)
        cp_time = times[i - 1] if i else None
        behind = t < self._fed_until
        if self._builder is None or behind or (cp_time is not None and cp_time > self._fed_until):
            restored = self._restore(t) if cp_time is not None else None
            if restored is not None:
                self._fed_until, self._builder = restored
            elif self._builder is None or behind:
                self._builder = self._fresh_builder()
                self._fed_until = -math.inf
            if not self._stored_checkpoints:  # restoring failed: use the in-memory path
                self._advance_to(t)
                return
        if t > self._fed_until:
            feed(self._builder, self.recording.items_between(self._fed_until, t))
            self._fed_until = t

    def _restore(self, t: float) -> tuple[float, Any] | None:
        try:
            return stored_builder(self.recording, t)
        except Exception as exc:  # e.g. a checkpoint from a newer builder: replay still works
            log.warning("stored seek checkpoints unusable (%s); replaying from the start", exc)
            self._stored_checkpoints = False
            self._checkpoints.disabled = False
            return None

    def _feed(self, builder: Any, fed_until: float, t: float) -> float:
        """Feed items in (fed_until, t], stopping at each checkpoint boundary to save one."""
        every = self.checkpoint_every_s
        while fed_until < t:
            start = 0.0 if fed_until == -math.inf else fed_until
            boundary = (math.floor(start / every) + 1) * every
            upto = min(t, boundary)
            feed(builder, self.recording.items_between(fed_until, upto))
            fed_until = upto
            if upto == boundary:
                self._checkpoints.put(boundary, builder)
        return fed_until

    def _warm(self) -> None:
        try:
            builder = self._fresh_builder()
            fed = -math.inf
            every = self.checkpoint_every_s
            end = self.duration
            k = 1
            while k * every <= end and not self._warm_stop.is_set():
                fed = self._feed(builder, fed, k * every)
                self._warmed_upto = fed
                k += 1
            self._warmed_upto = end
        except Exception as exc:  # the cursor still works without checkpoints
            log.warning("replay warm-up stopped: %s", exc)

    def wait_warm(self, timeout: float | None = None) -> bool:
        if self._warm_thread is None:
            return True
        self._warm_thread.join(timeout)
        return not self._warm_thread.is_alive()

    @property
    def warm_fraction(self) -> float:
        """How far (0..1) the background checkpointing has got; seeks beyond it are slow."""
        if self._warm_thread is None:
            return 1.0
        return min(1.0, self._warmed_upto / self.duration) if self.duration > 0 else 1.0

    @property
    def checkpoint_count(self) -> int:
        """Checkpoints a seek can restore (stored in the file, or built in memory)."""
        if self._stored_checkpoints:
            return len(self.recording.checkpoint_frames)
        return len(self._checkpoints)

    @property
    def uses_stored_checkpoints(self) -> bool:
        return self._stored_checkpoints

    def close(self) -> None:
        self._warm_stop.set()
