"""`rampwatch` with no arguments on a terminal: the start screen, then the run it chose.

The shipped scenarios (``rampwatch.scenarios``, read through ``loadgen.workload.scenario_files``) are
handed to ``tui.start_screen.StartApp`` as ``StartScenario``s; its ``StartChoice`` becomes
a ``RunConfig``, run as `rampwatch run` runs the one its command line gives.
"""

from __future__ import annotations

from typing import Any

from rampwatch.app.run_config import DEFAULT_SIM_HARDWARE, DEFAULT_SIM_MODEL, RunConfig
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.loadgen.workload.scenario_files import list_scenarios
from rampwatch.tui.chart_data import RAMP_KINDS, schedule_text
from rampwatch.tui.start_screen import StartApp, StartChoice, StartScenario


def length_text(spec: Any) -> str:
    """A token length spec in a few characters: ``128``, ``20–200``, ``normal``."""
    if isinstance(spec, (int, float)):
        return f"{spec:g}"
    if isinstance(spec, dict):
        if "min" in spec and "max" in spec:
            return f"{spec['min']:g}–{spec['max']:g}"
        if "value" in spec:
            return f"{spec['value']:g}"
        return str(spec.get("dist", "?"))
    return "?"


def details_text(raw: dict[str, Any]) -> str:
    """One line on a scenario's schedule and workload."""
    workload = raw.get("workload") or {}
    parts = [schedule_text(raw.get("schedule") or {}), f"{raw.get('endpoint', 'completions')} endpoint"]
    if "input_tokens" in workload:
        shared = (workload.get("system_prompt") or {}).get("tokens")
        prefix = f"{shared:g} shared + " if isinstance(shared, (int, float)) and shared else ""
        parts.append(f"{prefix}{length_text(workload['input_tokens'])} tokens in")
    if "output_tokens" in workload:
        parts.append(f"{length_text(workload['output_tokens'])} tokens out")
    mix = workload.get("mix")
    if isinstance(mix, list) and mix:
        parts.append(f"mix of {len(mix)}: " + ", ".join(str(c.get("name")) for c in mix if isinstance(c, dict)))
    drain = raw.get("drain")
    if drain is not None and drain != "wait":  # what the schedule's end does, before the run starts
        parts.append(f"drain {drain}")
    return " · ".join(parts)


def shipped_scenarios() -> list[StartScenario]:
    out = []
    for name in list_scenarios():
        scenario = load_scenario(name)
        schedule = scenario.raw.get("schedule") or {}
        ramp = schedule.get("kind") in RAMP_KINDS
        out.append(
            StartScenario(
                name=scenario.name,
                description=scenario.description,
                details=details_text(scenario.raw),
                start_rps=float(schedule["start_rps"]) if ramp else None,
                end_rps=float(schedule["end_rps"]) if ramp else None,
                duration_s=float(schedule["duration_s"]) if ramp and "duration_s" in schedule else None,
            )
        )
    return out


def run_config(choice: StartChoice) -> RunConfig:
    """The run of a choice: its scenario, target and ramp, every other flag's default."""
    return RunConfig(
        scenario=choice.scenario,
        target=choice.target or None,
        start_rps=choice.start_rps,
        end_rps=choice.end_rps,
        duration=choice.duration_s,
    )


def choose_run() -> RunConfig | None:
    """Show the start screen; the run it chose, or None when the user left without starting."""
    simulator = f"the embedded simulator ({DEFAULT_SIM_HARDWARE}, {DEFAULT_SIM_MODEL})"
    choice = StartApp(shipped_scenarios(), simulator).run()
    return None if choice is None else run_config(choice)
