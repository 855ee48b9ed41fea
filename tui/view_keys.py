"""The view keys: what the screen shows, not what the run does (steps table, log scale,
latency view and class, server log, the configurations and turns screens).

``ViewKeys`` holds their actions for ``RampwatchApp``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.widgets import TabbedContent

from rampwatch.core.timeline import Snapshot
from rampwatch.tui.class_panel import ClassPanel, next_class
from rampwatch.tui.configurations_screen import ConfigurationsScreen
from rampwatch.tui.latency_chart import LatencyChart
from rampwatch.tui.messages import SnapshotUpdated
from rampwatch.tui.server_log import ServerLogPanel
from rampwatch.tui.turns_screen import TurnsScreen

# A mixin of RampwatchApp: checked as the App it is mixed into, a plain class at run time
# (Textual sees one App subclass).
if TYPE_CHECKING:
    from textual.app import App
    from textual.screen import Screen

    _AppBase = App[int | str]
else:
    _AppBase = object


class ViewKeys(_AppBase):
    """Keys that change the view; a changed chart is redrawn from the latest snapshot."""

    wide: bool | None  # the wide layout (every chart on screen) rather than tabs
    latest: Snapshot
    compare_snapshot: Snapshot | None

    if TYPE_CHECKING:

        @property
        def main_screen(self) -> Screen[Any]: ...

    def action_toggle_steps(self) -> None:
        """Wide: the step table in place of the charts and back; narrow: its tab."""
        if not self.wide:
            self.main_screen.query_one("#narrow", TabbedContent).active = "tab-steps"
            return
        grid = self.main_screen.query_one("#chart-grid")
        grid.display = not grid.display
        self.main_screen.query_one("#w-steps").display = not grid.display

    def action_toggle_log(self) -> None:
        for chart in self.main_screen.query(LatencyChart):
            chart.toggle_log()
        self.post_message(SnapshotUpdated(self.latest, self.compare_snapshot))

    def action_toggle_server_log(self) -> None:
        panel = self.main_screen.query_one("#server-log", ServerLogPanel)
        self.set_server_log_shown(not panel.display)

    def set_server_log_shown(self, shown: bool) -> None:
        panel = self.main_screen.query_one("#server-log", ServerLogPanel)
        panel.display = shown
        if shown:
            panel.refresh_lines()

    def action_latency_view(self) -> None:
        for chart in self.main_screen.query(LatencyChart):
            chart.next_view()
        self.post_message(SnapshotUpdated(self.latest, self.compare_snapshot))

    def action_latency_class(self) -> None:
        """w: the latency chart for every request, then each class of a mixture in turn."""
        names = [c.name for c in self.latest.classes]
        if not names:
            self.notify("w: this run has no classes (workload.mix) or adapters (workload.adapters)", timeout=3)
            return
        charts = list(self.main_screen.query(LatencyChart))
        shown = next_class(names, charts[0].class_name if charts else None)
        for chart in charts:
            chart.show_class(shown)
        for panel in self.main_screen.query(ClassPanel):
            panel.show_class(shown)
        self.post_message(SnapshotUpdated(self.latest, self.compare_snapshot))

    def action_configurations(self) -> None:
        """g: the configurations side by side (after a restart)."""
        if isinstance(self.screen, ConfigurationsScreen):
            return
        table = self.latest.configurations
        if table is None:
            self.notify("one configuration so far: the table compares them after a server restart", timeout=3)
            return
        self.push_screen(ConfigurationsScreen(table))

    def action_turns(self) -> None:
        """u: the figures by turn index of a session workload."""
        if isinstance(self.screen, TurnsScreen):
            return
        if self.latest.turns is None:
            self.notify("no turn so far: the figures by turn are for session workloads (sessions:)", timeout=3)
            return
        self.push_screen(TurnsScreen(self.latest))
