"""Two lines at the top: what is being run against what, and where the run is now."""

from __future__ import annotations

import math
import time

from rich.text import Text
from textual.widgets import Static

from rampwatch.core.timeline import Snapshot
from rampwatch.loadgen.drain import drain_policy_of
from rampwatch.loadgen.sessions import session_target, users_for, users_target
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
        self._shown: Text | None = None
        self.replay_status = ""  # e.g. "▶ 2×", set by the app in replay mode

    def show_snapshot(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        text = self.render_text(snapshot)
        if text != self._shown:
            self._shown = text
            self.update(text)

    def append_elapsed(self, line: Text, snapshot: Snapshot) -> None:
        """Elapsed / planned: the plan moves on while the ramp is held."""
        header = snapshot.header
        planned = snapshot.planned_duration_s or (header.planned_duration_s if header else None)
        line.append("  ")
        line.append(f"{format_duration(snapshot.t)} / {format_duration(planned)}")

    def append_time_left(self, line: Text, snapshot: Snapshot) -> None:
        """What is left of the schedule and of the drain, and the wall-clock ETA, drain
        included; in a replay, as it was at that moment."""
        left = time_left(snapshot)
        if left is None:
            return
        if snapshot.state not in DRAIN_STATES and left.schedule_s is not None:
            line.append("  left ", style="dim")
            line.append(format_duration(left.schedule_s))
        elif snapshot.state in DRAIN_STATES:
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

    def append_drain_estimate(self, line: Text, snapshot: Snapshot) -> None:
        """Before the drain: how long it is expected to take (the ETA includes it)."""
        left = time_left(snapshot)
        if left is not None and left.drain_s is not None:
            line.append(f"  ETA incl. ~{format_duration(left.drain_s)} drain", style="dim")

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

    def render_text(self, snapshot: Snapshot) -> Text:
        """Line 1: where the run is now (most important, first). Line 2: what runs against what."""
        header = snapshot.header
        state = "replay" if self.mode == "replay" else snapshot.state
        line1 = Text(no_wrap=True, overflow="ellipsis")
        line1.append(" rampwatch ", style="bold reverse")
        line1.append(" ")
        label = f"REPLAY {self.replay_status}".strip() if self.mode == "replay" else state.upper()
        line1.append(label, style=STATE_STYLES.get(state, "bold"))
        if self.mode == "replay" and snapshot.state not in ("replay", ""):
            line1.append(f" ({snapshot.state})", style=STATE_STYLES.get(snapshot.state, ""))
        state_health = health(snapshot) if snapshot.times else None
        self.append_health(line1, state_health)
        # What matters most comes first: a narrow terminal cuts the line's end.
        self.append_elapsed(line1, snapshot)
        if snapshot.state in DRAIN_STATES:
            self.append_drain(line1, snapshot)
            self.append_time_left(line1, snapshot)
            self.append_drain_key(line1, snapshot)
            self.append_health_detail(line1, state_health)
        else:
            self.append_time_left(line1, snapshot)
            if users_target(header):  # a closed loop: its target is users, not a rate
                line1.append("  users ", style="dim")
                line1.append(f"{users_for(snapshot.target_rps)}", style="bold")
            elif session_target(header):  # an open-loop session workload: sessions started
                line1.append("  sessions ", style="dim")
                line1.append(f"{format_rate(snapshot.target_rps)}/s", style="bold")
            else:
                line1.append("  offered ", style="dim")
                line1.append(f"{format_rate(snapshot.target_rps)} rps", style="bold")
            self.append_in_flight(line1, snapshot)
            self.append_power(line1, snapshot)
            self.append_health_detail(line1, state_health)
            self.append_drain_estimate(line1, snapshot)

        line2 = Text(no_wrap=True, overflow="ellipsis")
        line2.append(" scenario ", style="dim")
        line2.append(header.scenario_name if header else "–")
        line2.append("  model ", style="dim")
        line2.append(header.model if header else "–")
        line2.append("  target ", style="dim")
        line2.append(header.target if header else "–")
        startup_s = managed_startup_s(snapshot)
        if startup_s is not None:
            line2.append("  server ready in ", style="dim")
            line2.append(f"{startup_s:.1f} s")
        recording = self.recording or (header.options.get("record") if header else None)
        line2.append("  rec ", style="dim")
        line2.append(str(recording) if recording else "off")
        drain = drain_policy_of(header.options if header else None)
        if drain.mode != "wait":  # waiting for every request is vllm bench's way: said only otherwise
            line2.append("  drain ", style="dim")
            line2.append(str(drain))
        if self.compare_label:
            line2.append("  vs ", style="dim")
            line2.append(f"{self.compare_label} (B, dimmed)", style="dim")
        return Text("\n", no_wrap=True, overflow="ellipsis").join([line1, line2])

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
