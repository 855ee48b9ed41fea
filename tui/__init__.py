"""The Textual screens: the live and replay app, the start screen, the sweep's view, the
managed server's start."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rampwatch.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from rampwatch.tui.app import RampwatchApp, make_live_app, make_replay_app
    from rampwatch.tui.chart_data import RAMP_KINDS, schedule_text
    from rampwatch.tui.server_log import ServerStartApp
    from rampwatch.tui.start_screen import StartApp, StartScenario
    from rampwatch.tui.sweep_view import SweepApp

# module -> the public names it defines, loaded on first use
_MODULES: dict[str, tuple[str, ...]] = {
    "app": (
        "RampwatchApp",
        "make_live_app",
        "make_replay_app",
    ),
    "chart_data": (
        "RAMP_KINDS",
        "schedule_text",
    ),
    "server_log": ("ServerStartApp",),
    "start_screen": (
        "StartApp",
        "StartScenario",
    ),
    "sweep_view": ("SweepApp",),
}
__all__ = [
    "RAMP_KINDS",
    "RampwatchApp",
    "ServerStartApp",
    "StartApp",
    "StartScenario",
    "SweepApp",
    "make_live_app",
    "make_replay_app",
    "schedule_text",
]
__getattr__ = lazy_attributes(__name__, _MODULES)
