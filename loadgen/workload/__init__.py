"""Building the requests: scenarios, arrival schedules, prompts, datasets, sessions, traces, mixtures."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rampwatch.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from rampwatch.loadgen.workload.request_factory import RequestFactory
    from rampwatch.loadgen.workload.requests import PreparedRequest
    from rampwatch.loadgen.workload.requests_ahead import BuilderLost, BuildFailed, RequestsAhead
    from rampwatch.loadgen.workload.scenario import Scenario, load_scenario
    from rampwatch.loadgen.workload.scenario_files import (
        BUILTIN_SCENARIOS,
        SWEEP_PREFIX,
        list_scenarios,
        resolve_scenario_path,
    )
    from rampwatch.loadgen.workload.schedule_spec import TRACE_KIND, USERS_KIND
    from rampwatch.loadgen.workload.sessions import (
        SessionDriver,
        SessionWorkload,
        session_target,
        users_for,
        users_message,
        users_target,
    )
    from rampwatch.loadgen.workload.spec_checks import describe, dotted, is_number, unknown_key_message
    from rampwatch.loadgen.workload.tokenizers import load_tokenizer

# module -> the public names it defines, loaded on first use
_MODULES: dict[str, tuple[str, ...]] = {
    "request_factory": ("RequestFactory",),
    "requests": ("PreparedRequest",),
    "requests_ahead": (
        "BuildFailed",
        "BuilderLost",
        "RequestsAhead",
    ),
    "scenario": (
        "Scenario",
        "load_scenario",
    ),
    "scenario_files": (
        "BUILTIN_SCENARIOS",
        "SWEEP_PREFIX",
        "list_scenarios",
        "resolve_scenario_path",
    ),
    "schedule_spec": (
        "TRACE_KIND",
        "USERS_KIND",
    ),
    "sessions": (
        "SessionDriver",
        "SessionWorkload",
        "session_target",
        "users_for",
        "users_message",
        "users_target",
    ),
    "spec_checks": (
        "describe",
        "dotted",
        "is_number",
        "unknown_key_message",
    ),
    "tokenizers": ("load_tokenizer",),
}
__all__ = [
    "BUILTIN_SCENARIOS",
    "BuildFailed",
    "BuilderLost",
    "PreparedRequest",
    "RequestFactory",
    "RequestsAhead",
    "SWEEP_PREFIX",
    "Scenario",
    "SessionDriver",
    "SessionWorkload",
    "TRACE_KIND",
    "USERS_KIND",
    "describe",
    "dotted",
    "is_number",
    "list_scenarios",
    "load_scenario",
    "load_tokenizer",
    "resolve_scenario_path",
    "session_target",
    "unknown_key_message",
    "users_for",
    "users_message",
    "users_target",
]
__getattr__ = lazy_attributes(__name__, _MODULES)
