"""`rampwatch` with no arguments on a terminal: pick a scenario, a target and a ramp, then go.

The app (``app.cli``) passes in the shipped scenarios (``StartScenario``) and gets back a
``StartChoice``, which it runs exactly as `rampwatch run` would; this screen knows
nothing of how scenarios are read or runs executed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Footer, Input, OptionList, Static
from textual.widgets.option_list import Option


@dataclass(frozen=True)
class StartScenario:
    """A shipped scenario as the start screen lists it. ``start_rps``/``end_rps``/
    ``duration_s`` are its ramp, None when its schedule has no such setting."""

    name: str
    description: str
    details: str  # one line on its schedule and workload, e.g. "linear 1 → 20 req/s over 120 s"
    start_rps: float | None = None
    end_rps: float | None = None
    duration_s: float | None = None


@dataclass(frozen=True)
class StartChoice:
    """What to run: the scenario, the target (None: the embedded simulator) and the ramp
    (None: the scenario's own)."""

    scenario: str
    target: str | None
    start_rps: float | None
    end_rps: float | None
    duration_s: float | None

    def run_args(self) -> list[str]:
        """`rampwatch run`'s arguments for this choice."""
        args = [self.scenario]
        if self.target:
            args += ["--target", self.target]
        for flag, value in (
            ("--start-rps", self.start_rps),
            ("--end-rps", self.end_rps),
            ("--duration", self.duration_s),
        ):
            if value is not None:
                args += [flag, f"{value:g}"]
        return args


def _number(text: str, what: str, *, positive: bool) -> float | str:
    """The field's number, or a one-line problem naming the field."""
    try:
        value = float(text)
    except ValueError:
        return f"{what}: {text.strip()!r} is not a number"
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        return f"{what}: {text.strip()} must be {'above 0' if positive else '0 or more'}"
    return value


def check_target(text: str) -> str | None:
    """None when ``text`` is empty (the simulator) or an http(s) URL with a host and a
    numeric port, else the problem in one line."""
    url = text.strip()
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        return f"target {url!r}: expected an http:// or https:// URL (empty: the embedded simulator)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        return f"target: {exc}"
    if not parts.hostname:
        return "target: the URL has no host"
    return None


def make_choice(scenario: StartScenario, target: str, start: str, end: str, duration: str) -> StartChoice | str:
    """The choice from the screen's fields, or the first problem with them (one line)."""
    problem = check_target(target)
    if problem is not None:
        return problem
    ramp: list[float | None] = []
    for text, what, default, positive in (
        (start, "start rps", scenario.start_rps, False),
        (end, "end rps", scenario.end_rps, False),
        (duration, "duration s", scenario.duration_s, True),
    ):
        if default is None:  # the scenario's schedule has no such setting: the field is off
            ramp.append(None)
            continue
        value = _number(text, what, positive=positive)
        if isinstance(value, str):
            return value
        ramp.append(value)
    start_rps, end_rps, duration_s = ramp
    return StartChoice(scenario.name, target.strip() or None, start_rps, end_rps, duration_s)


def _field(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


class StartApp(App[StartChoice | None]):
    """Returns the ``StartChoice`` on start, None when the user leaves."""

    CSS_PATH = "rampwatch.tcss"
    TITLE = "rampwatch"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("ctrl+s", "start", "start run", priority=True),
        Binding("escape", "leave", "quit"),
    ]

    def __init__(self, scenarios: Sequence[StartScenario], simulator: str) -> None:
        super().__init__()
        if not scenarios:
            raise ValueError("no scenario to offer")
        self.scenarios = list(scenarios)
        self.simulator = simulator
        self.scenario = self.scenarios[0]

    def compose(self) -> ComposeResult:
        yield Static(
            Text.assemble(("rampwatch", "bold"), " — start a run  ", ("(rampwatch run --help: every option)", "dim")),
            id="start-title",
        )
        with Vertical(id="start-box"):
            options = OptionList(
                *(Option(self._scenario_line(s), id=s.name) for s in self.scenarios), id="start-scenarios"
            )
            options.border_title = "Scenario"
            yield options
            yield Static(id="start-details")
            with Horizontal(classes="start-row"):
                yield Static("Target", classes="start-label")
                yield Input(placeholder=f"empty: {self.simulator}", id="start-target")
            with Horizontal(classes="start-row"):
                yield Static("Ramp", classes="start-label")
                yield Input(id="start-from", classes="start-number")
                yield Static("→", classes="start-sep")
                yield Input(id="start-to", classes="start-number")
                yield Static("req/s over", classes="start-sep")
                yield Input(id="start-duration", classes="start-number")
                yield Static("s", classes="start-sep")
                yield Button("Start run", id="start-go", variant="primary")
            yield Static(id="start-problem")
            yield Static(
                "↑ ↓ pick a scenario · tab next field · enter or ctrl+s start · esc quit\n"
                "The run opens the live screen (? there lists its keys); its summary is printed when you quit.",
                id="start-hint",
            )
        yield Footer()

    def _scenario_line(self, scenario: StartScenario) -> Text:
        width = max(len(s.name) for s in self.scenarios) + 2
        line = Text.assemble((scenario.name.ljust(width), "bold"), (scenario.description, ""))
        line.no_wrap, line.overflow = True, "ellipsis"
        return line

    def on_mount(self) -> None:
        self.query_one("#start-scenarios", OptionList).highlighted = 0
        self._show(self.scenarios[0])
        self.query_one("#start-scenarios", OptionList).focus()

    def _show(self, scenario: StartScenario) -> None:
        self.scenario = scenario
        self.query_one("#start-details", Static).update(Text(scenario.details, style="dim"))
        for field_id, value in (
            ("#start-from", scenario.start_rps),
            ("#start-to", scenario.end_rps),
            ("#start-duration", scenario.duration_s),
        ):
            field = self.query_one(field_id, Input)
            field.value = _field(value)
            field.disabled = value is None
        self._check()

    def _choice(self) -> StartChoice | str:
        def value(field_id: str) -> str:
            return self.query_one(field_id, Input).value

        return make_choice(
            self.scenario,
            value("#start-target"),
            value("#start-from"),
            value("#start-to"),
            value("#start-duration"),
        )

    def _check(self) -> StartChoice | str:
        """Show the first problem with the fields, or the command line the choice runs."""
        choice = self._choice()
        line = self.query_one("#start-problem", Static)
        if isinstance(choice, str):
            line.update(Text(choice, style="bold red"))
        else:
            line.update(Text("runs: rampwatch run " + " ".join(choice.run_args()), style="dim"))
        self.query_one("#start-go", Button).disabled = isinstance(choice, str)
        return choice

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._show(self.scenarios[event.option_index])

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self._show(self.scenarios[event.option_index])
        self.query_one("#start-target", Input).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self._check()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_start()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start-go":
            self.action_start()

    def action_start(self) -> None:
        choice = self._check()
        if isinstance(choice, StartChoice):
            self.exit(choice)

    def action_leave(self) -> None:
        self.exit(None)
