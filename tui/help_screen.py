"""`?`: the keys of the current mode, each with its setting (the value it uses now and
where it comes from: the flag and its default), and the run's scenario."""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from rampwatch.core.timeline import Snapshot
from rampwatch.loadgen.run.drain import drain_policy_of
from rampwatch.tui.chart_data import format_duration, rate_step, schedule_text

# (keys, action, setting name or None): the setting's text comes from ``help_settings``.
LIVE_KEYS = (
    ("space", "hold / resume the ramp", "ramp"),
    ("+  -", "raise / lower the rate by a step (holds the ramp)", "step"),
    ("m", "add a mark with a note", None),
    ("s", "stop gracefully (no new requests, drain, finish)", "grace"),
    ("x", "while draining or stopping: cancel the in-flight requests now", "drain"),
    ("R", "restart the server with other arguments (a server rampwatch started)", "serve"),
    ("o", "server log: show / hide (a run that started its server: --serve, the simulator)", None),
    ("q  ctrl+c  ctrl+q", "quit (asks while a run is active; ctrl+c again: yes)", None),
)
REPLAY_KEYS = (
    ("space", "play / pause", None),
    ("[ ]  < >", "speed ×½ / ×2 (1×–16×)", "speed"),
    ("← →", "seek −10 s / +10 s", None),
    ("shift+← →  pgup pgdn", "seek −1 min / +1 min", None),
    ("home  end", "jump to start / end", None),
    ("k", "jump to the knee", "knee"),
    ("n  p", "next / previous mark", "marks"),
    ("q", "quit", None),
)
COMMON_KEYS = (
    ("t", "step table: in place of the charts (narrow: its tab)", None),
    ("g", "configurations side by side (after a server restart)", None),
    ("u", "turns: TTFT, input tokens and prefix-cache hit rate by turn (session workloads)", None),
    ("l", "latency chart: log / linear axes", None),
    ("v", "latency chart: p50/p99 · TTFT p50/p90/p99 · ITL p50/p90/p99", None),
    ("w", "latency chart: every request · each class of a mixture in turn", None),
    ("1 … 8", "switch tab (narrow terminals; 9: B vs A when comparing)", None),
    ("↑ ↓  enter", "events: select a line, show it whole", None),
    ("c", "mouse capture off / on (off: the terminal selects text)", None),
    ("?", "this help", None),
)
CHART_KEY = (
    "Markers on every chart: K knee, H hold, R resume, M1 M2 … marks, C2 C3 … server restarts; "
    "(B) = compared run, dimmed. "
    "Dimmed keys in the footer cannot act now; pressed, they say why."
)


def keys_table(mode: str, settings: Mapping[str, str] | None = None) -> Table:
    """The mode's keys; a key with a setting in ``settings`` shows it, dimmed, below its action."""
    settings = settings or {}
    table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
    table.add_column("key", no_wrap=True)
    table.add_column("action")
    for key, action, setting in (LIVE_KEYS if mode == "live" else REPLAY_KEYS) + COMMON_KEYS:
        text = Text(action)
        if setting is not None and settings.get(setting):
            text.append("\n" + settings[setting], style="dim")
        table.add_row(key, text)
    return table


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def help_settings(
    snapshot: Snapshot,
    *,
    configured_step: float | None = None,
    speed: float | None = None,
    knee_at: float | None = None,
    mark_count: int | None = None,
) -> dict[str, str]:
    """What the help shows beside the keys: the values the run uses now, with the flag
    that sets each and its default, and the scenario's schedule (from the run header)."""
    header = snapshot.header
    options = header.options if header is not None else {}
    scenario = header.scenario if header is not None else {}
    schedule = scenario.get("schedule") if isinstance(scenario.get("schedule"), dict) else None
    out: dict[str, str] = {}
    if schedule:
        out["ramp"] = f"ramp: {schedule_text(schedule)}"
    step = _number(configured_step) or _number(options.get("rate_step"))
    if step:
        out["step"] = f"step {step:g} req/s (--rate-step)"
    else:
        out["step"] = f"step now {rate_step(snapshot.target_rps):g} req/s (default: ~10% of the rate; --rate-step)"
    grace = _number(options.get("stop_grace"))
    out["grace"] = (f"{grace:g} s" if grace is not None else "--stop-grace") + (
        " for in-flight requests (--stop-grace, default 10 s)"
    )
    out["drain"] = f"{drain_policy_of(options).describe()} (--drain, or the scenario's drain:)"
    serve = options.get("serve")
    if isinstance(serve, str) and serve:
        out["serve"] = f"started with: {serve}"
    else:
        out["serve"] = "not available: the run connects to a server it did not start (--target)"
    if speed is not None:
        out["speed"] = f"now {speed:g}× (--speed, default 1×)"
    if knee_at is not None:
        out["knee"] = f"knee at {format_duration(knee_at)}"
    elif speed is not None:
        out["knee"] = "no knee in this recording"
    if mark_count is not None:
        out["marks"] = f"{mark_count} mark{'' if mark_count == 1 else 's'} in this recording"
    if header is not None:
        parts = [f"scenario {header.scenario_name}"]
        if schedule and speed is not None:  # a live run's help has it beside space
            parts.append(schedule_text(schedule))
        concurrency = scenario.get("max_concurrency") or options.get("max_concurrency")
        parts.append(f"max concurrency {concurrency}" if concurrency else "no concurrency cap")
        slo = scenario.get("slo") or {}
        if isinstance(slo, dict) and slo:
            parts.append("SLO " + ", ".join(f"{k.removesuffix('_ms').upper()} {v:g} ms" for k, v in slo.items()))
        out["scenario"] = " · ".join(parts)
    return out


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss_help", "close"),
        Binding("question_mark", "dismiss_help", "close", show=False),
        Binding("q", "dismiss_help", "close", show=False),
    ]

    def __init__(self, mode: str, settings: Mapping[str, str] | None = None) -> None:
        """``settings``: each key's setting by name (``ramp``, ``step``, ``grace``, ``speed``,
        ``knee``, ``marks``) and ``scenario``, the run's scenario in a line."""
        super().__init__()
        self.mode = mode
        self.settings = dict(settings or {})

    def compose(self) -> ComposeResult:
        # focused, so ↑ ↓ pgup pgdn home end scroll it: at 80×24 the keys do not fit
        with VerticalScroll(id="help-box"):
            yield Static(f"rampwatch — {self.mode} keys", classes="dialog-title")
            if self.settings.get("scenario"):
                yield Static(Text(self.settings["scenario"], style="dim"), classes="help-scenario")
            yield Static(keys_table(self.mode, self.settings))
            yield Static(CHART_KEY, classes="dialog-hint")
            yield Static("↑ ↓ pgup pgdn home end scroll · esc or ? to close", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#help-box").focus()

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
