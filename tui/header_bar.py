"""Two lines at the top: what is being run against what, and where the run is now."""

from __future__ import annotations

import math
import time

from rich.text import Text
from textual.widgets import Static

from rampwatch.core.timeline import Snapshot
from rampwatch.loadgen.run.drain import drain_policy_of
from rampwatch.loadgen.workload.sessions import session_target, users_for, users_target
from rampwatch.tui.chart_data import (
    DRAIN_STATES,
    eta_unix,
    format_duration,
    format_rate,
    oldest_in_flight_age_s,
    time_left,
)
from rampwatch.tui.gpu_view import power_text
from rampwatch.tui.health import DEGRADED, METRICS_STALE, OK, SERVER_DOWN, Health, health

STATE_STYLES = {
    "ramping": "bold green",
    "holding": "bold yellow",
    "restarting": "bold black on cyan",
    "draining": "bold magenta",
    "stopping": "bold red",
    "done": "bold",
    "replay": "bold cyan",
}

HEALTH_STYLES = {
    OK: "bold green",
    DEGRADED: "bold black on yellow",
    SERVER_DOWN: "bold white on red",
    METRICS_STALE: "bold black on magenta",
}
DETAIL_STYLES = {DEGRADED: "yellow", SERVER_DOWN: "bold red", METRICS_STALE: "magenta"}


def managed_startup_s(snapshot: Snapshot) -> float | None:
    """How long the server the run started (``--serve``) took to serve, from the header."""
    header = snapshot.header
    managed = header.server_info.get("managed_server") if header is not None else None
    value = managed.get("startup_s") if isinstance(managed, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class HeaderBar(Static):
    """Line 1: where the run is now; line 2: what runs against what. When line 1 does
    not fit the terminal (80 columns), it keeps the state, the time and the ETA, its
    load figures (target, in flight, drain) open line 2 and the run's identity follows
    them there: what a narrow terminal cuts is what changes least."""

    def __init__(
        self,
        *,
        mode: str = "live",
        recording: str | None = None,
        compare_label: str | None = None,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.mode = mode
        self.recording = recording
        self.compare_label = compare_label
        self._snapshot: Snapshot | None = None
        self._shown: Text | None = None
        self.replay_status = ""  # e.g. "▶ 2×", set by the app in replay mode
        self.replay_duration_s: float | None = None  # the recording's length, set in replay mode

    def show_snapshot(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        self._snapshot = snapshot
        text = self.render_text(snapshot, self.size.width or None)
        if text != self._shown:
            self._shown = text
            self.update(text)

    def on_resize(self) -> None:
        if self._snapshot is not None:
            self.show_snapshot(self._snapshot)

    def append_elapsed(self, line: Text, snapshot: Snapshot) -> None:
        """Elapsed / planned (the plan moves on while the ramp is held); in a replay, the
        position in the recording and its length."""
        if self.mode == "replay":
            line.append(f"  {format_duration(snapshot.t)} / {format_duration(self.replay_duration_s)}")
            line.append(" recorded", style="dim")
            return
        header = snapshot.header
        planned = snapshot.planned_duration_s or (header.planned_duration_s if header else None)
        line.append("  ")
        line.append(f"{format_duration(snapshot.t)} / {format_duration(planned)}")

    def append_time_left(self, line: Text, snapshot: Snapshot) -> None:
        """What is left of the schedule, or of the drain, and the wall-clock ETA, drain
        included (and said so). Live only: a replay's ETA would be the original run's."""
        left = time_left(snapshot) if self.mode == "live" else None
        if left is None:
            return
        draining = snapshot.state in DRAIN_STATES
        if not draining and left.schedule_s is not None:
            line.append("  left ", style="dim")
            line.append(format_duration(left.schedule_s))
        elif draining:
            line.append("  drain ", style="dim")
            if left.drain_s is None:
                line.append("unknown")  # nothing has ended yet: no pace to go by
            else:
                # rounded up: "~00:00" with requests still out would read as "over"
                line.append("overdue" if left.drain_s == 0 else f"~{format_duration(math.ceil(left.drain_s))}")
        eta = eta_unix(snapshot, left)
        if eta is not None:
            line.append("  ETA ", style="dim")
            line.append(time.strftime("%H:%M:%S", time.localtime(eta)))
            if not draining and left.drain_s is not None:
                line.append(f" incl. ~{format_duration(math.ceil(left.drain_s))} drain", style="dim")

    def append_in_flight(self, line: Text, snapshot: Snapshot) -> None:
        line.append("  in flight ", style="dim")
        line.append(str(snapshot.in_flight))
        peak = (snapshot.summary or {}).get("max_concurrent_requests")
        if isinstance(peak, int) and peak > 0:
            line.append(f" (peak {peak})", style="dim")

    def append_drain(self, line: Text, snapshot: Snapshot) -> None:
        """While draining or stopping: what is still out and how long the oldest has waited."""
        line.append("  in flight ", style="dim")
        line.append(str(snapshot.in_flight), style="bold")
        age = oldest_in_flight_age_s(snapshot)
        if age is not None:
            line.append("  oldest ", style="dim")
            line.append(format_duration(age), style="bold")

    def append_drain_key(self, line: Text, snapshot: Snapshot) -> None:
        if snapshot.in_flight > 0 and self.mode == "live":
            line.append("  x", style="bold reverse")
            line.append(" cancels them now", style="dim")

    @staticmethod
    def append_target(line: Text, snapshot: Snapshot) -> None:
        """The schedule's rate now: "target", as in the Stats panel (whose "offered" is
        the requests the schedule actually released per second)."""
        header = snapshot.header
        if users_target(header):  # a closed loop: its target is users, not a rate
            line.append("  users ", style="dim")
            line.append(f"{users_for(snapshot.target_rps)}", style="bold")
        elif session_target(header):  # an open-loop session workload: sessions started
            line.append("  target ", style="dim")
            line.append(f"{format_rate(snapshot.target_rps)} sessions/s", style="bold")
        else:
            line.append("  target ", style="dim")
            line.append(f"{format_rate(snapshot.target_rps)} req/s", style="bold")

    def status_line(self, snapshot: Snapshot, state_health: Health | None, *, brand: bool) -> Text:
        """State, health, time and what is left of it: the part no terminal may lose."""
        state = "replay" if self.mode == "replay" else snapshot.state
        line = Text(no_wrap=True, overflow="ellipsis")
        if brand:
            line.append(" rampwatch ", style="bold reverse")
        line.append(" ")
        label = f"REPLAY {self.replay_status}".strip() if self.mode == "replay" else state.upper()
        line.append(label, style=STATE_STYLES.get(state, "bold"))
        if self.mode == "replay" and snapshot.state not in ("replay", ""):
            line.append(f" ({snapshot.state})", style=STATE_STYLES.get(snapshot.state, ""))
        self.append_health(line, state_health)
        self.append_elapsed(line, snapshot)
        self.append_time_left(line, snapshot)
        return line

    def load_parts(self, snapshot: Snapshot) -> Text:
        """The load now: target and in flight (while draining, what is still out)."""
        line = Text(no_wrap=True, overflow="ellipsis")
        if snapshot.state in DRAIN_STATES:
            self.append_drain(line, snapshot)
            self.append_drain_key(line, snapshot)
        else:
            self.append_target(line, snapshot)
            self.append_in_flight(line, snapshot)
            self.append_power(line, snapshot)
        return line

    def identity_parts(self, snapshot: Snapshot) -> Text:
        """What runs against what: scenario, model, server, recording."""
        header = snapshot.header
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append("  scenario ", style="dim")
        line.append(header.scenario_name if header else "–")
        line.append("  model ", style="dim")
        line.append(header.model if header else "–")
        line.append("  server ", style="dim")
        line.append(header.target if header else "–")
        startup_s = managed_startup_s(snapshot)
        if startup_s is not None and self.mode == "live":  # a replay's server is long gone
            line.append(f" (ready in {startup_s:.1f} s)", style="dim")
        recording = self.recording or (header.options.get("record") if header else None)
        line.append("  rec ", style="dim")
        line.append(str(recording) if recording else "off")
        drain = drain_policy_of(header.options if header else None)
        if drain.mode != "wait":  # waiting for every request is vllm bench's way: said only otherwise
            line.append("  drain ", style="dim")
            line.append(str(drain))
        if self.compare_label:
            line.append("  vs ", style="dim")
            line.append(f"{self.compare_label} (B, dimmed)", style="dim")
        return line

    def render_text(self, snapshot: Snapshot, width: int | None = None) -> Text:
        """The two lines for a terminal ``width`` cells wide (None: wide enough). The
        health's detail ends the load figures; it gives way first, so whether the load
        figures fit on line 1 is decided without it."""
        state_health = health(snapshot) if snapshot.times else None
        load = self.load_parts(snapshot)
        detail = Text()
        self.append_health_detail(detail, state_health)
        line1 = self.status_line(snapshot, state_health, brand=True) + load
        if width is None or line1.cell_len <= width:
            lines = [line1 + detail, self.identity_parts(snapshot)]
        else:
            lines = [
                self.status_line(snapshot, state_health, brand=False),
                load + detail + self.identity_parts(snapshot),
            ]
        lines[1] = Text(" ") + lines[1][2:]  # each part leads with two spaces; a line with one
        return Text("\n", no_wrap=True, overflow="ellipsis").join(lines)

    @staticmethod
    def append_power(line: Text, snapshot: Snapshot) -> None:
        """The GPUs' power now, in a run with GPU telemetry."""
        power = power_text(snapshot)
        if power is not None:
            line.append("  GPU ", style="dim")
            line.append(power, style="bold")

    @staticmethod
    def append_health(line: Text, state: Health | None) -> None:
        """The health label, right after the run state so that a narrow terminal keeps it."""
        if state is None:
            return
        line.append("  ")
        line.append(f" {state.state} ", style=HEALTH_STYLES.get(state.state, "bold"))

    @staticmethod
    def append_health_detail(line: Text, state: Health | None) -> None:
        """What the health label is based on, at the end of the line (it gives way first)."""
        if state is None or not state.detail:
            return
        line.append("  ")
        line.append(state.detail, style=DETAIL_STYLES.get(state.state, ""))
