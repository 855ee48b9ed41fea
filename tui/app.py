"""The rampwatch Textual app: live runs and replays share these screens.

``make_live_app`` and ``make_replay_app`` build it for the CLI and the tests: a live
run is steered through a ``RunControl``, a replay through its ``ReplayControl``. The app
polls its ``SnapshotSource`` on a timer (at most 4 Hz) and hands the newest snapshot to every
panel through a replaceable ``SnapshotUpdated`` message, so a slow frame never queues
stale work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Container, Grid, Horizontal, Vertical
from textual.geometry import Size
from textual.screen import Screen
from textual.widgets import Footer, TabbedContent, TabPane

from rampwatch.core.controls import ReplayControl, RunControl, ServerControl, SnapshotSource
from rampwatch.core.timeline import Snapshot
from rampwatch.tui.class_panel import ClassPanel
from rampwatch.tui.compare_panel import ComparePanel
from rampwatch.tui.configurations_screen import ConfigurationsScreen
from rampwatch.tui.event_log import EventLog
from rampwatch.tui.gpu_chart import GpuChart
from rampwatch.tui.gpu_view import has_gpu
from rampwatch.tui.header_bar import HeaderBar
from rampwatch.tui.help_screen import HelpScreen, help_settings
from rampwatch.tui.knee_banner import KneeBanner
from rampwatch.tui.kv_chart import KvChart
from rampwatch.tui.latency_chart import LatencyChart
from rampwatch.tui.messages import SnapshotUpdated
from rampwatch.tui.position_bar import PositionBar
from rampwatch.tui.prefix_chart import PrefixChart
from rampwatch.tui.queue_chart import QueueChart
from rampwatch.tui.quit_dialog import DetachDialog, QuitDialog
from rampwatch.tui.replay_keys import REPLAY_ACTIONS, ReplayKeys
from rampwatch.tui.search_banner import SearchBanner
from rampwatch.tui.server_log import ServerLogPanel
from rampwatch.tui.spec_chart import SpecChart
from rampwatch.tui.spec_view import has_spec
from rampwatch.tui.stats_panel import StatsPanel
from rampwatch.tui.steering import LIVE_ACTIONS, NO_SERVER, AwaitedEvent, LiveSteering, why_unavailable
from rampwatch.tui.step_table import StepTable
from rampwatch.tui.throughput_chart import ThroughputChart
from rampwatch.tui.timeseries_chart import TimeSeriesChart
from rampwatch.tui.turns_screen import TurnsScreen
from rampwatch.tui.view_keys import ViewKeys

Mode = Literal["live", "replay"]
# Compare mode's B-vs-A rows (``record.cli_compare.compare_rows``) and the one-line load
# warning (or None); computed off the UI thread, since it reads both recordings whole.
Comparison = tuple[Sequence[Mapping[str, Any]], str | None]
MAX_REFRESH_HZ = 4.0
# Below this the panels go into tabs; above it every chart is on screen at once.
WIDE_MIN = Size(120, 36)
# A toast is removed at its timeout; the repaint comes just after.
TOAST_REPAINT_DELAY_S = 0.25
ACTIVE_STATES = ("starting", "ramping", "holding", "restarting", "draining", "stopping")

CHARTS: tuple[tuple[str, str, type[TimeSeriesChart]], ...] = (
    ("throughput", "Rate", ThroughputChart),
    ("queue", "Queue", QueueChart),
    ("kv", "KV", KvChart),
    ("prefix", "Prefix", PrefixChart),
    ("latency", "Latency", LatencyChart),
)


def is_wide(size: Size) -> bool:
    return size.width >= WIDE_MIN.width and size.height >= WIDE_MIN.height


class RampwatchApp(LiveSteering, ReplayKeys, ViewKeys, App[int | str]):
    """The app's screen, layout, data flow and views; the live keys' actions are
    ``LiveSteering``'s, the replay keys' ``ReplayKeys``'s, the view keys' ``ViewKeys``'s. It returns the exit code, or
    "detach"/"stop" when the user leaves an attached run."""

    CSS_PATH = "rampwatch.tcss"
    TITLE = "rampwatch"
    ENABLE_COMMAND_PALETTE = False

    BINDINGS = [
        Binding("question_mark", "help", "help"),
        Binding("q", "quit_app", "quit"),
        # Textual's own ctrl+q quits without asking and its ctrl+c only shows a hint: both
        # go through the same quit flow as q; pressed again in the dialog they confirm.
        Binding("ctrl+q,ctrl+c", "quit_app(True)", "quit", show=False, priority=True),
        Binding("c", "toggle_mouse", "mouse", show=False),
        # live
        Binding("space", "toggle_hold", "hold"),
        # the footer shows the pair once, "+ - rate": at 80 columns every live key fits whole
        Binding("plus,equals_sign", "rate_up", "rate", key_display="+ -"),
        Binding("minus,underscore", "rate_down", "rate down", show=False),
        Binding("m", "mark", "mark"),
        Binding("s", "stop_run", "stop"),
        Binding("x", "end_drain", "cancel"),
        Binding("R", "restart_server", "restart", key_display="R"),
        # replay: the footer shows each pair of keys once (the second of a pair is hidden)
        Binding("space", "play_pause", "play/pause", priority=True),
        Binding("left_square_bracket,less_than_sign", "speed_down", "speed", key_display="[ ]", priority=True),
        Binding("right_square_bracket,greater_than_sign", "speed_up", "faster", show=False, priority=True),
        Binding("left", "seek(-10)", "±10s", priority=True, key_display="← →"),
        Binding("right", "seek(10)", "+10s", show=False, priority=True),
        Binding("shift+left,pageup", "seek(-60)", "-1m", show=False, priority=True),
        Binding("shift+right,pagedown", "seek(60)", "+1m", show=False, priority=True),
        Binding("home", "jump_start", "start", show=False, priority=True),
        Binding("end", "jump_end", "end", show=False, priority=True),
        Binding("k", "jump_knee", "knee", priority=True),
        Binding("n", "next_mark", "marks", key_display="n p", priority=True),
        Binding("p", "previous_mark", "prev mark", show=False, priority=True),
        # tabs on narrow terminals
        *[Binding(str(i), f"show_tab({i})", f"tab {i}", show=False) for i in range(1, 10)],
        Binding("0", "show_tab(10)", "tab 10", show=False),
        # views
        # in the help, not the footer: an 80-column footer holds the run's own keys only
        Binding("t", "toggle_steps", "steps", show=False),
        Binding("l", "toggle_log", "log/linear", show=False),
        Binding("v", "latency_view", "latency view", show=False),
        Binding("w", "latency_class", "class", show=False),
        Binding("g", "configurations", "configurations", show=False),
        Binding("u", "turns", "turns", show=False),
        Binding("o", "toggle_server_log", "server log", show=False),
    ]

    def __init__(
        self,
        source: SnapshotSource,
        *,
        control: RunControl | None = None,
        replay: ReplayControl | None = None,
        run_failed: Callable[[], bool] | None = None,
        compare: SnapshotSource | None = None,
        refresh_hz: float = 4.0,
        recording: str | None = None,
        compare_label: str | None = None,
        rate_step_rps: float | None = None,
        mouse: bool = True,
        comparison: Callable[[], Comparison] | None = None,
        server_log: Callable[[], list[str]] | None = None,
        server_exit: Callable[[], str | None] | None = None,
        server: ServerControl | None = None,
        attached: str | None = None,
    ) -> None:
        """A replay when ``replay`` is given (then it is also the ``source``), else a live
        run, steered through ``control`` when there is one. ``run_failed()`` true: the run
        ended in an error, and the app leaves so the command line can print it.
        ``server_log()``: the last log lines of the server the run started (``o`` shows
        them); ``server_exit()``: why that server exited on its own, once it has."""
        super().__init__()
        if control is not None and replay is not None:
            raise ValueError("a live run's control or a replay's, not both")
        self.source = source
        self.control = control
        self.replay = replay
        self.run_failed = run_failed
        self.mode: Mode = "replay" if replay is not None else "live"
        self.compare_source = compare
        self.refresh_hz = min(max(refresh_hz, 0.1), MAX_REFRESH_HZ)
        self.recording = recording
        self.compare_label = compare_label
        self.rate_step_rps = rate_step_rps
        self.comparison = comparison
        self.server = server  # the run's own server (--serve), which R restarts
        self.attached = attached  # the id of the run in another process this screen watches
        # Seconds a finished live run's screen stays before it closes by itself (None: until q).
        self.leave_when_done_s: float | None = None
        self.latest: Snapshot = Snapshot.empty("replay" if self.mode == "replay" else "starting")
        self.compare_snapshot: Snapshot | None = None
        self._pending_hold: bool | None = None
        self.wide: bool | None = None
        self._main_screen: Screen[Any] | None = None  # set on mount
        self._panels: list | None = None
        self._marks: list[tuple[float, str]] | None = None
        self._awaited: list[AwaitedEvent] = []
        self._claimed: set[int] = set()  # indices of events a toast has already confirmed
        self._events_announced = 0  # events already looked at for a restart's outcome
        self.mouse_reporting = mouse  # as the app is started (``App.run(mouse=...)``)
        self.server_log = server_log
        self.server_exit = server_exit
        self.server_exit_shown = False
        self.gpu_shown: bool | None = None
        self.spec_shown: bool | None = None

    @property
    def main_screen(self) -> Screen[Any]:
        """The screen the panels live on (dialogs and the help are pushed above it)."""
        if self._main_screen is None:
            raise RuntimeError("the app is not mounted yet")
        return self._main_screen

    # ----- layout -----

    def compose(self) -> ComposeResult:
        yield HeaderBar(mode=self.mode, recording=self.recording, compare_label=self.compare_label, id="header")
        if self.mode == "replay":
            yield PositionBar(id="position")
        yield KneeBanner(explain_missing=self.mode == "replay", id="knee-banner")
        yield SearchBanner(id="search-banner")  # rampwatch search's holds; hidden without one
        with Container(id="body"):
            with Horizontal(id="wide"):
                with Grid(id="chart-grid"):
                    for key, _, chart in CHARTS:
                        yield chart(id=f"w-{key}", classes="chart")
                        if key == "throughput":  # beside it, once the run has GPU telemetry
                            yield GpuChart(id="w-gpu", classes="chart")
                        if key == "latency":  # under it, once the server speculates
                            yield SpecChart(id="w-spec", classes="chart")
                yield StepTable(id="w-steps", classes="panel")
                with Vertical(id="side"):
                    yield StatsPanel(id="w-stats", classes="panel")
                    yield ClassPanel(id="w-classes", classes="panel")
                    if self.comparison is not None:
                        yield ComparePanel(id="w-compare", classes="panel")
                    yield EventLog(id="w-events", classes="panel")
            with TabbedContent(id="narrow"):
                for index, (key, title, chart) in enumerate(CHARTS, start=1):
                    with TabPane(f"{index} {title}", id=f"tab-{key}"):
                        yield chart(id=f"n-{key}", classes="chart")
                        if key == "latency":  # a mixture's classes under the chart `w` switches
                            yield ClassPanel(id="n-classes", classes="panel")
                with TabPane(f"{len(CHARTS) + 1} Stats", id="tab-stats"):
                    yield StatsPanel(id="n-stats", classes="panel")
                with TabPane(f"{len(CHARTS) + 2} Events", id="tab-events"):
                    yield EventLog(id="n-events", classes="panel")
                with TabPane(f"{len(CHARTS) + 3} Steps", id="tab-steps"):
                    yield StepTable(id="n-steps", classes="panel")
                if self.comparison is not None:
                    with TabPane(f"{len(CHARTS) + 4} B vs A", id="tab-compare"):
                        yield ComparePanel(id="n-compare", classes="panel")
                # Last, so the other tabs keep their numbers; hidden until GPU data comes.
                gpu_tab = len(CHARTS) + (5 if self.comparison is not None else 4)
                with TabPane(f"{gpu_tab} GPU", id="tab-gpu"):
                    yield GpuChart(id="n-gpu", classes="chart")
                with TabPane(f"{gpu_tab + 1} Spec", id="tab-spec"):  # hidden until the server speculates
                    yield SpecChart(id="n-spec", classes="chart")
        if self.server_log is not None:
            yield ServerLogPanel(self.server_log, id="server-log", classes="panel")
        yield Footer()

    def on_mount(self) -> None:
        # Dialogs and the help are pushed on top; the panels always live on this screen.
        self._main_screen = self.screen
        self.apply_layout(self.size)
        self.show_gpu(False)
        self.show_spec(False)
        if self.compare_source is not None:
            self.compare_snapshot = self.compare_source.snapshot()
        self.poll_source()
        self.set_interval(1.0 / self.refresh_hz, self.poll_source, name="poll-snapshot")
        if self.comparison is not None:
            self.run_worker(self._compare_runs, thread=True, name="compare-runs", exit_on_error=False)

    def _compare_runs(self) -> None:
        assert self.comparison is not None
        try:
            rows, warning = self.comparison()
        except Exception as exc:  # a damaged recording: the replay goes on without the panel's figures
            self._from_worker(self._show_comparison_failure, f"cannot compare the runs: {exc}")
            return
        self._from_worker(self._show_comparison, rows, warning)

    def _from_worker(self, callback: Callable[..., None], *args: Any) -> None:
        try:
            self.call_from_thread(callback, *args)
        except RuntimeError:  # the user quit before the comparison was done: nobody to show it to
            pass

    def _show_comparison(self, rows: Sequence[Mapping[str, Any]], warning: str | None) -> None:
        for panel in self.main_screen.query(ComparePanel):
            panel.set_comparison(rows, warning)
        if warning:
            self.notify(warning, severity="warning", timeout=10)

    def _show_comparison_failure(self, message: str) -> None:
        for panel in self.main_screen.query(ComparePanel):
            panel.set_failure(message)

    def on_resize(self, event) -> None:
        if self._main_screen is not None:
            self.apply_layout(event.size)

    def apply_layout(self, size: Size) -> None:
        wide = is_wide(size)
        if wide == self.wide:
            return
        self.wide = wide
        self.main_screen.query_one("#wide").display = wide
        self.main_screen.query_one("#narrow").display = not wide

    # ----- data flow -----

    def poll_source(self) -> None:
        if self.run_failed is not None and self.run_failed():
            # E.g. the target is unreachable: leave the screen so the command line can
            # print the error as one line.
            self.exit(1, return_code=1)
            return
        if self.server_exit is not None and not self.server_exit_shown:
            self._check_server()
        snapshot = self.source.snapshot()
        if snapshot is None:
            return
        self.post_message(SnapshotUpdated(snapshot, self.compare_snapshot))

    def _check_server(self) -> None:
        """The run's server exited on its own: say so, and show its last log lines (the
        run records the exit as an error event and stops)."""
        assert self.server_exit is not None
        reason = self.server_exit()
        if reason is None:
            return
        self.server_exit_shown = True
        self.notify(f"{reason} — the run is stopping (o: server log, q: quit)", severity="error", timeout=30)
        if self.server_log is not None:
            self.set_server_log_shown(True)

    def show_gpu(self, shown: bool) -> None:
        """The GPU panel (and its tab) on screen only when the run has GPU telemetry."""
        if shown == self.gpu_shown:
            return
        self.gpu_shown = shown
        self.main_screen.query_one("#chart-grid").set_class(shown, "with-gpu")
        tabs = self.main_screen.query_one("#narrow", TabbedContent)
        if shown:
            tabs.show_tab("tab-gpu")
        else:
            tabs.hide_tab("tab-gpu")
        self._number_tabs()

    def show_spec(self, shown: bool) -> None:
        """The spec-decode chart (and its tab) on screen only when the server speculates."""
        if shown == self.spec_shown:
            return
        self.spec_shown = shown
        self.main_screen.query_one("#chart-grid").set_class(shown, "with-spec")
        tabs = self.main_screen.query_one("#narrow", TabbedContent)
        if shown:
            tabs.show_tab("tab-spec")
        else:
            tabs.hide_tab("tab-spec")
        self._number_tabs()

    def _shown_panes(self) -> list[str]:
        """The narrow layout's tabs on screen, in order (GPU and Spec only once shown)."""
        hidden = {"tab-gpu": not self.gpu_shown, "tab-spec": not self.spec_shown}
        tabs = self.main_screen.query_one("#narrow", TabbedContent)
        return [pane.id for pane in tabs.query(TabPane) if pane.id is not None and not hidden.get(pane.id, False)]

    def _number_tabs(self) -> None:
        """Number the tabs on screen 1, 2, … as the digit keys reach them (0 is the tenth):
        a hidden tab takes no number, so the Spec tab is 9 without GPU telemetry."""
        tabs = self.main_screen.query_one("#narrow", TabbedContent)
        for number, pane_id in enumerate(self._shown_panes(), start=1):
            tab = tabs.get_tab(pane_id)
            title = str(tab.label).split(" ", 1)[-1]
            tab.label = f"{number} {title}"

    def on_snapshot_updated(self, message: SnapshotUpdated) -> None:
        if self._main_screen is None:
            return
        snapshot = message.snapshot
        self.show_gpu(has_gpu(snapshot))
        self.show_spec(has_spec(snapshot))
        if self.mode == "live" and self.latest.state in ACTIVE_STATES and snapshot.state == "done":
            if self.leave_when_done_s is not None:  # one of `run --repeats N`'s: the next goes on unattended
                self.notify(f"run finished — the next repeat follows in {self.leave_when_done_s:g} s (q: now)")
                self.set_timer(self.leave_when_done_s, lambda: self.exit(0))
            else:
                self.notify("run finished — q to quit", timeout=10)
        state_changed = snapshot.state != self.latest.state
        self.latest = snapshot
        if state_changed:
            self.refresh_bindings()  # the footer dims the keys that cannot act now
        if self._awaited:
            self._confirm_steering(snapshot)
        if self.mode == "live":
            self._announce_restarts(snapshot)
        if self._pending_hold is not None and (
            (snapshot.state == "holding") == self._pending_hold or snapshot.state not in ACTIVE_STATES
        ):
            self._pending_hold = None
        if self.replay is not None:
            self._update_replay_status(self.replay)
        if self._panels is None:  # a query per refresh is a measurable part of its cost
            self._panels = list(
                self.main_screen.query(
                    "HeaderBar, KneeBanner, SearchBanner, TimeSeriesChart, StatsPanel, ClassPanel, EventLog, StepTable"
                )
            )
        for widget in self._panels:
            widget.show_snapshot(snapshot, message.compare)
        on_top = self.screen_stack[-1] if self.screen_stack else None
        if isinstance(on_top, ConfigurationsScreen) and snapshot.configurations is not None:
            on_top.update_table(snapshot.configurations)
        if isinstance(on_top, TurnsScreen):
            on_top.update_snapshot(snapshot)

    def _update_replay_status(self, replay: ReplayControl) -> None:
        playing, speed = replay.playing, replay.speed
        for header in self.main_screen.query(HeaderBar):
            header.replay_status = f"{'▶' if playing else '⏸'} {speed:g}×"
            header.replay_duration_s = replay.duration
        letters = {"knee": "K", "mark": "M", "hold": "H", "config": "C"}
        bar_marks = [(t, letters[kind]) for t, kind in self._replay_marks(replay) if kind in letters]
        for bar in self.main_screen.query(PositionBar):
            bar.set_state(
                position=replay.position, duration=replay.duration, speed=speed, playing=playing, marks=bar_marks
            )

    # ----- notifications -----

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity="information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        # Toasts say what events, files and servers say: their text is shown, never read
        # as markup (a server's "[link=…]" or a path with "[" in it).
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)
        # Once the toast has gone, repaint the whole screen: the panels under it are redrawn
        # only when their own content changes (the events panel may not change for minutes),
        # so a lost or partial update of the toast's region would otherwise stay on screen.
        after = (self.NOTIFICATION_TIMEOUT if timeout is None else timeout) + TOAST_REPAINT_DELAY_S
        self.set_timer(after, self.repaint_screen, name="repaint-after-toast")

    def repaint_screen(self) -> None:
        self.screen.refresh()

    # ----- bindings -----

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if (action in LIVE_ACTIONS or action in REPLAY_ACTIONS) and len(self.screen_stack) > 1:
            return False  # a dialog or the help is open: keys belong to it
        if action in LIVE_ACTIONS:
            if self.mode != "live" or self.control is None:
                return False
            if action == "restart_server" and self.server is None:
                return None
            # None: shown dimmed in the footer, and on_key says why when it is pressed
            return None if why_unavailable(action, self.latest.state) else True
        if action in REPLAY_ACTIONS:
            return self.replay is not None
        if action == "show_tab":
            return not self.wide
        if action == "toggle_server_log":
            return self.server_log is not None
        return True

    def on_key(self, event: events.Key) -> None:
        """A live key pressed in a state where it cannot act: say why (nothing is sent to
        the run, nothing recorded)."""
        if self.mode != "live" or self.control is None or len(self.screen_stack) > 1:
            return
        action = self._live_key_actions().get(event.key)
        if action is None:
            return
        reason = why_unavailable(action, self.latest.state)
        if not reason and action == "restart_server" and self.server is None:
            reason = NO_SERVER
        if reason:
            event.stop()
            self.notify(f"{event.key}: {reason}", severity="warning", timeout=3)

    def _live_key_actions(self) -> dict[str, str]:
        keys = {}
        for binding in self.BINDINGS:
            if isinstance(binding, Binding) and binding.action in LIVE_ACTIONS:
                for key in binding.key.split(","):
                    keys[key.strip()] = binding.action
        return keys

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.mode, self._help_settings()))

    def _help_settings(self) -> dict[str, str]:
        if self.replay is None:
            return help_settings(self.latest, configured_step=self.rate_step_rps)
        marks = self._replay_marks(self.replay)
        knees = [t for t, kind in marks if kind == "knee"]
        return help_settings(
            self.latest,
            speed=self.replay.speed,
            knee_at=knees[0] if knees else None,
            mark_count=sum(1 for _, kind in marks if kind == "mark"),
        )

    def run_active(self) -> bool:
        return self.mode == "live" and self.control is not None and self.latest.state in ACTIVE_STATES

    def action_quit_app(self, repeated_confirms: bool = False) -> None:
        """q, ctrl+q, ctrl+c: quit; while the run is active ask first (a second ctrl+c or
        ctrl+q in the dialog answers yes)."""
        if isinstance(self.screen, QuitDialog):
            if repeated_confirms:
                self.screen.dismiss(True)
            return
        if isinstance(self.screen, DetachDialog):
            if repeated_confirms:
                self.screen.dismiss("detach")  # leaving never stops an attached run unasked
            return
        if not self.run_active():
            self.exit(0)
            return
        if self.attached is not None:

            def chosen(answer: str | None) -> None:
                if answer == "stop":
                    self._steered().stop()
                if answer is not None:
                    self.exit(answer, return_code=0)  # app.run() returns "detach" or "stop"

            self.push_screen(DetachDialog(self.attached), chosen)
            return

        def answered(stop: bool | None) -> None:
            if stop:
                self._steered().stop()
                self.exit(0)

        self.push_screen(QuitDialog(), answered)

    def action_toggle_mouse(self) -> None:
        """Mouse capture off lets the terminal select text (over SSH too); on again for
        clicking the tabs. Textual has no public switch: its driver's own calls are used."""
        driver = self._driver
        enable = getattr(driver, "_enable_mouse_support", None)
        disable = getattr(driver, "_disable_mouse_support", None)
        if driver is None or enable is None or disable is None:
            self.notify("this terminal driver cannot switch mouse capture", severity="warning", timeout=3)
            return
        if self.mouse_reporting:
            disable()
            driver._mouse = False
            self.mouse_reporting = False
            self.notify("mouse capture off: drag to select text (c turns it back on)", timeout=3)
        else:
            driver._mouse = True
            enable()
            self.mouse_reporting = True
            self.notify("mouse capture on (c turns it off to select text)", timeout=3)

    def action_show_tab(self, index: int) -> None:
        tabs = self.main_screen.query_one("#narrow", TabbedContent)
        panes = self._shown_panes()
        if 1 <= index <= len(panes):
            tabs.active = panes[index - 1]


def make_live_app(
    source: SnapshotSource,
    control: RunControl | None = None,
    *,
    run_failed: Callable[[], bool] | None = None,
    refresh_hz: float = 4.0,
    recording: str | None = None,
    rate_step_rps: float | None = None,
    mouse: bool = True,
    server_log: Callable[[], list[str]] | None = None,
    server_exit: Callable[[], str | None] | None = None,
    server: ServerControl | None = None,
    attached: str | None = None,
) -> RampwatchApp:
    """The app for a live run: ``control`` steers it (no control: a view only). ``mouse``
    says whether it is run with mouse capture (``app.run(mouse=...)``; ``c`` toggles it).
    ``server_log``/``server_exit``: the server the run started (``--serve``), if any;
    ``server``: that server's control, which ``R`` restarts with other arguments.
    ``attached``: the id of the run, in another process, this screen is attached to
    (`rampwatch attach`): ``q`` then offers to detach (the run goes on) or stop it."""
    return RampwatchApp(
        source,
        control=control,
        server=server,
        run_failed=run_failed,
        refresh_hz=refresh_hz,
        recording=recording,
        rate_step_rps=rate_step_rps,
        mouse=mouse,
        server_log=server_log,
        server_exit=server_exit,
        attached=attached,
    )


def make_replay_app(
    replay: ReplayControl,
    *,
    compare: SnapshotSource | None = None,
    refresh_hz: float = 4.0,
    recording: str | None = None,
    compare_label: str | None = None,
    mouse: bool = True,
    comparison: Callable[[], Comparison] | None = None,
) -> RampwatchApp:
    """The app for a replay; ``compare`` is drawn dimmed on the same charts, and
    ``comparison()`` (called once, in a worker thread) gives the B-vs-A panel's rows."""
    return RampwatchApp(
        replay,
        replay=replay,
        compare=compare,
        refresh_hz=refresh_hz,
        recording=recording,
        compare_label=compare_label,
        mouse=mouse,
        comparison=comparison,
    )
