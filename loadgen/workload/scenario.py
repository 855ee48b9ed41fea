"""Scenarios: a YAML file saying what to send (workload) and when (schedule).

``load_scenario("chat")`` reads the repository's ``scenarios/chat.yaml``; any other string
is a path. Validation errors point at the file, line and key path, e.g.
``scenarios/chat.yaml:12: schedule.end_rps: expected a number >= 0, got 'fast'``.
Command-line overrides (``--set key.path=value`` and the named flags in ``FLAG_KEYS``)
are applied before validation. The schema is documented in ``docs/scenarios.md``.

The parts live beside this module: finding and reading the file (``scenario_files``), the
overrides (``scenario_overrides``), the ``schedule:`` and ``workload:`` checks
(``schedule_spec``, ``workload_spec``), and building the requests (``request_factory``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rampwatch.core.errors import UserError
from rampwatch.loadgen.run.drain import DrainPolicy, parse_drain
from rampwatch.loadgen.workload.scenario_files import display_path, read_yaml, resolve_scenario_path
from rampwatch.loadgen.workload.scenario_overrides import apply_overrides, flag_overrides, leave_out_the_old_kinds_keys
from rampwatch.loadgen.workload.schedule_spec import TRACE_KIND, USERS_KIND, check_schedule
from rampwatch.loadgen.workload.schedules import ArrivalSchedule, build_schedule
from rampwatch.loadgen.workload.spec_checks import (
    KeyPath,
    Problems,
    SpecProblem,
    choice_check,
    describe,
    dotted,
    number_check,
)
from rampwatch.loadgen.workload.trace_replay import build_trace_schedule
from rampwatch.loadgen.workload.workload_spec import check_slo, check_workload

ENDPOINTS = ("completions", "chat")
TOP_KEYS = (
    "name",
    "description",
    "endpoint",
    "model",
    "seed",
    "max_concurrency",
    "schedule",
    "workload",
    "slo",
    "drain",
)


@dataclass(slots=True)
class Scenario:
    name: str
    path: str
    raw: dict[str, Any]  # the resolved scenario (defaults filled, overrides applied)
    schedule_spec: dict[str, Any]
    endpoint: str  # "completions" | "chat"
    max_concurrency: int | None
    seed: int
    slo: dict[str, float] | None  # {"ttft_ms": …, "tpot_ms": …, "e2el_ms": …}, only those set
    duration_s: float | None  # the schedule's planned length; None when unbounded
    model: str | None = None
    description: str = ""
    workload: dict[str, Any] = field(default_factory=dict)
    drain: DrainPolicy | None = None  # the scenario's drain policy (None: not set, the run's default)

    def build_schedule(self) -> ArrivalSchedule:
        return schedule_for(self.schedule_spec, self.seed)


def schedule_for(spec: dict[str, Any], seed: int) -> ArrivalSchedule:
    """The schedule of a checked ``schedule:`` mapping (a trace's is read from its file)."""
    return build_trace_schedule(spec) if spec.get("kind") == TRACE_KIND else build_schedule(spec, seed)


def _trace_path(p: Problems, given: str, base_dir: Path) -> str:
    """A trace's path as an absolute one; relative paths are from the scenario's folder
    (or the working directory, when the file is there)."""
    found = Path(given).expanduser()
    if not found.is_absolute() and not found.exists():
        found = base_dir / found
    if not found.is_file():
        p.add(("schedule", "path"), f"trace file not found: {given}")
        return given
    return str(found.resolve())


def _locate(problem: SpecProblem, file: str, lines: dict[KeyPath, tuple[int, int]], overridden: list[KeyPath]) -> str:
    key = dotted(problem.path)
    for o in overridden:
        if problem.path[: len(o)] == o:
            return f"{file}: {key} (set on the command line): {problem.message}"
    path = problem.path
    while path and path not in lines:
        path = path[:-1]
    if not path:
        return f"{file}: {key}: {problem.message}" if key else f"{file}: {problem.message}"
    key_line, value_line = lines[path]
    line = key_line if (problem.at_key or path != problem.path) else value_line
    return f"{file}:{line}: {key}: {problem.message}"


def validate_scenario(
    data: Any,
    file: str,
    lines: dict[KeyPath, tuple[int, int]] | None = None,
    overridden: list[KeyPath] | None = None,
    base_dir: Path | None = None,
) -> Scenario:
    """Checks a scenario's mapping; ``file`` is how messages name it, ``base_dir`` the
    folder its relative paths (dataset, trace) are read from (the file's own)."""
    lines = lines or {}
    base_dir = base_dir or Path(file).resolve().parent
    p = Problems()
    if not isinstance(data, dict):
        raise UserError(f"{file}: expected a mapping with schedule: and workload:, got {describe(data)}")
    p.keys((), data, TOP_KEYS)
    name = data.get("name", Path(file).stem)
    if not isinstance(name, str) or not name:
        p.add(("name",), f"expected a non-empty string, got {describe(name)}")
    description = data.get("description", "") or ""
    if not isinstance(description, str):
        p.add(("description",), f"expected text, got {describe(description)}")
    endpoint = data.get("endpoint", "completions")
    p.check(("endpoint",), endpoint, choice_check(ENDPOINTS))
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        p.add(("model",), f"expected a model name, got {describe(model)}")
    seed = data.get("seed", 0)
    p.check(("seed",), seed, number_check(0, integer=True))
    max_conc = data.get("max_concurrency")
    if max_conc is not None:
        p.check(("max_concurrency",), max_conc, number_check(1, integer=True))
    if "schedule" not in data:
        p.add(("schedule",), "required key is missing", True)
        schedule: dict[str, Any] = {}
    else:
        schedule, sched_problems = check_schedule(data["schedule"])
        for sp in sched_problems:
            p.add(("schedule",) + sp.path, sp.message, sp.at_key)
        if schedule.get("kind") == TRACE_KIND and "path" in schedule and not sched_problems:
            schedule["path"] = _trace_path(p, schedule["path"], base_dir)
    if "workload" not in data:
        p.add(("workload",), "required key is missing", True)
        workload: dict[str, Any] = {}
    else:
        workload = check_workload(p, data["workload"], endpoint, base_dir, trace=schedule.get("kind") == TRACE_KIND)
    if schedule.get("kind") == USERS_KIND and not workload.get("sessions"):
        p.add(
            ("schedule", "kind"), "users (a closed loop) needs workload.sessions: each user runs sessions back to back"
        )
    slo = check_slo(p, ("slo",), data.get("slo"))
    drain: DrainPolicy | None = None
    if data.get("drain") is not None:
        try:
            drain = parse_drain(data["drain"])
        except ValueError as exc:
            p.add(("drain",), str(exc))
    if p.items:

        def order(sp: SpecProblem) -> tuple[int, int]:
            # Problems at a line of their own first: a missing key is often the echo of
            # a misspelt one, which is the more useful message.
            path = sp.path
            while path and path not in lines:
                path = path[:-1]
            return (0 if path == sp.path else 1, lines[path][0] if path else 10**9)

        ordered = sorted(p.items, key=order)
        located = [_locate(problem, file, lines, overridden or []) for problem in ordered]
        # Every problem, the most useful first: one fix at a time per run would take N runs.
        raise UserError("\n".join([located[0], *(f"  also {where}" for where in located[1:])]))
    seed = int(seed)
    max_conc = None if max_conc is None else int(max_conc)
    schedule_obj = schedule_for(schedule, seed)
    raw = {
        "name": name,
        "description": description,
        "endpoint": endpoint,
        "model": model,
        "seed": seed,
        "max_concurrency": max_conc,
        "schedule": schedule,
        "workload": workload,
        "slo": slo,
    }
    if drain is not None:
        raw["drain"] = str(drain)
    return Scenario(
        name=name,
        path=file,
        raw=copy.deepcopy(raw),
        schedule_spec=schedule,
        endpoint=endpoint,
        max_concurrency=max_conc,
        seed=seed,
        slo=slo,
        duration_s=schedule_obj.planned_duration_s,
        model=model,
        description=description,
        workload=workload,
        drain=drain,
    )


def load_scenario(
    path_or_name: str,
    overrides: list[tuple[str, Any]] | None = None,
    flags: dict[str, Any] | None = None,
) -> Scenario:
    """Reads, overrides and validates a scenario. ``overrides`` are ``--set`` pairs;
    ``flags`` are the run's named flags (keys of ``FLAG_KEYS``; None = not given).
    ``--set`` pairs are applied after the named flags, so they win."""
    path = resolve_scenario_path(path_or_name)
    data, lines = read_yaml(path)
    file = display_path(path)
    if isinstance(data, dict):
        pairs = flag_overrides(flags, data) + list(overrides or [])
        file_schedule = data.get("schedule")
        data = apply_overrides(data, pairs)
        leave_out_the_old_kinds_keys(file_schedule, data.get("schedule"), {k for k, _ in pairs})
        overridden = [tuple(int(x) if x.isdigit() else x for x in k.split(".")) for k, _ in pairs]
    else:
        overridden = []
    return validate_scenario(data, file, lines, overridden, path.resolve().parent)
