"""The replay's keys: play and pause, speed, seeking and jumping to the knee and marks.

``ReplayKeys`` holds their actions for ``RampwatchApp``, whose ``check_action`` lets them
act only when there is a replay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rampwatch.core.controls import ReplayControl

# A mixin of RampwatchApp: checked as the App it is mixed into, a plain class at run time
# (Textual sees one App subclass).
if TYPE_CHECKING:
    from textual.app import App

    _AppBase = App[int | str]
else:
    _AppBase = object

SPEEDS = (1.0, 2.0, 4.0, 8.0, 16.0)
REPLAY_ACTIONS = {
    "play_pause",
    "speed_down",
    "speed_up",
    "seek",
    "jump_start",
    "jump_end",
    "jump_knee",
    "next_mark",
    "previous_mark",
}


def next_speed(speed: float, up: bool) -> float:
    """Speeds go 1, 2, 4, 8, 16 and stop at the ends (an odd speed goes to its neighbour)."""
    if up:
        return min((s for s in SPEEDS if s > speed + 1e-9), default=SPEEDS[-1])
    return max((s for s in SPEEDS if s < speed - 1e-9), default=SPEEDS[0])


class ReplayKeys(_AppBase):
    """The replay keys' actions; each polls the source at once so the screen follows."""

    replay: ReplayControl | None
    _marks: list[tuple[float, str]] | None  # the recording's knee, marks and holds, read once

    if TYPE_CHECKING:

        def poll_source(self) -> None: ...

    def _after_replay_control(self) -> None:
        self.poll_source()

    def action_play_pause(self) -> None:
        assert self.replay is not None
        self.replay.toggle()
        self._after_replay_control()

    def _set_speed(self, up: bool) -> None:
        assert self.replay is not None
        self.replay.speed = next_speed(self.replay.speed, up)
        self._after_replay_control()

    def action_speed_down(self) -> None:
        self._set_speed(False)

    def action_speed_up(self) -> None:
        self._set_speed(True)

    def action_seek(self, seconds: float) -> None:
        assert self.replay is not None
        self.replay.seek_relative(float(seconds))
        self._after_replay_control()

    def action_jump_start(self) -> None:
        assert self.replay is not None
        self.replay.seek(0.0)
        self._after_replay_control()

    def action_jump_end(self) -> None:
        assert self.replay is not None
        self.replay.seek(self.replay.duration)
        self._after_replay_control()

    def _replay_marks(self, replay: ReplayControl) -> list[tuple[float, str]]:
        """(t, kind) of the recording's knee, marks and holds (they never change: read once)."""
        if self._marks is None:
            self._marks = sorted({(e.t, e.kind) for e in replay.marks()})
        return self._marks

    def action_jump_knee(self) -> None:
        assert self.replay is not None
        knees = [t for t, kind in self._replay_marks(self.replay) if kind == "knee"]
        if not knees:
            self.notify("no knee in this recording", timeout=2)
            return
        self.replay.seek(knees[0])
        self._after_replay_control()

    def _jump_mark(self, forward: bool) -> None:
        assert self.replay is not None
        here = self.replay.position
        times = [t for t, kind in self._replay_marks(self.replay) if kind == "mark"]
        candidates = [t for t in times if t > here + 0.5] if forward else [t for t in times if t < here - 0.5]
        if not candidates:
            self.notify("no further mark" if forward else "no earlier mark", timeout=2)
            return
        self.replay.seek(min(candidates) if forward else max(candidates))
        self._after_replay_control()

    def action_next_mark(self) -> None:
        self._jump_mark(True)

    def action_previous_mark(self) -> None:
        self._jump_mark(False)
