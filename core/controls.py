"""What the UI drives and polls, as protocols: a live run's steering (``RunControl``),
the server a run started (``ServerControl``), the snapshots a screen polls
(``SnapshotSource``) and a replay's transport (``ReplayControl``). The UI knows runs,
servers and replays only through these; ``loadgen.run``, ``app`` and ``record.replay``
implement them.
"""

from __future__ import annotations

from typing import Protocol

from rampwatch.core.timeline import Event, Snapshot


class RunControl(Protocol):
    """Steering a live run (the TUI's keys call these). Every call becomes an Event."""

    def hold(self) -> None: ...  # freeze the schedule at the current rate
    def resume(self) -> None: ...  # continue the ramp from where it was held
    def set_rate(self, rps: float) -> None: ...  # hold at an explicit rate
    def step_rate(self, delta_rps: float) -> None: ...  # +/- relative to the current rate
    def mark(self, note: str) -> None: ...  # user mark with a note
    def stop(self) -> None: ...  # graceful stop: no new requests, drain, then finish
    def cancel_in_flight(self) -> None: ...  # end the drain now: cancel every request in flight


class ServerControl(Protocol):
    """The server a live run started (``--serve``), restarted from the live screen with
    other arguments. The UI knows it only through this (``app.restart`` implements it)."""

    @property
    def command(self) -> str: ...  # the serve command now, as shown (secrets masked)
    def preview(self, text: str) -> str: ...  # the argument diff on one line; UserError: refused
    def restart(self, text: str, resume: str) -> None: ...  # begins the restart, returns at once


class SnapshotSource(Protocol):
    """What the UI polls (at most ~4 Hz). Live runs and replays both implement it."""

    def snapshot(self) -> Snapshot: ...


class ReplayControl(SnapshotSource, Protocol):
    """A replay: the snapshot at its position, and the transport the replay screen's
    keys drive."""

    @property
    def position(self) -> float: ...  # run seconds shown now
    @property
    def duration(self) -> float: ...  # run seconds the recording covers
    @property
    def playing(self) -> bool: ...  # False once the position reaches the end

    speed: float  # playback speed, 1 to 16

    def toggle(self) -> None: ...  # play <-> pause
    def seek(self, t: float) -> None: ...  # to a position, clamped to [0, duration]
    def seek_relative(self, dt: float) -> None: ...
    def marks(self) -> list[Event]: ...  # knee, user marks, holds and restarts, in time order
