"""The ``schedule:`` mapping of a scenario: its kinds, each kind's keys, and their checks
(``check_schedule``). The schedule itself is built by ``loadgen.workload.schedules``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.spec_checks import (
    Check,
    SpecProblem,
    choice_check,
    describe,
    is_number,
    number_check,
    unknown_key_message,
)
from rampwatch.loadgen.workload.traces import DEFAULT_BLOCK_TOKENS, TRACE_FORMATS

ARRIVALS = ("constant", "poisson", "gamma")
TIME_KINDS = ("constant", "poisson", "gamma", "linear", "exponential", "steps")
VLLM_KINDS = ("vllm-constant", "vllm-linear", "vllm-exponential")
TRACE_KIND = "trace"  # built by loadgen.workload.trace_replay from its trace file
# Closed loop (a session workload's concurrent users): the profile's "rate" is the number
# of users, a constant ``users`` or a linear ramp ``start_users`` → ``end_users``.
USERS_KIND = "users"
KINDS = TIME_KINDS + VLLM_KINDS + (TRACE_KIND, USERS_KIND)


@dataclass(frozen=True, slots=True)
class _Field:
    check: Check
    required: bool = False
    default: Any = None


_POSITIVE = number_check(0, strict=True)
_NON_NEGATIVE = number_check(0)
_COUNT = number_check(1, integer=True)
_ARRIVAL_FIELDS = {
    "arrival": _Field(choice_check(ARRIVALS), default="poisson"),
    "burstiness": _Field(_POSITIVE, default=1.0),
}
_STEADY = {
    "rate": _Field(_POSITIVE, required=True),
    "duration_s": _Field(_POSITIVE),
    "num_requests": _Field(_COUNT),
}
_RAMP = {
    "start_rps": _Field(_NON_NEGATIVE, required=True),
    "end_rps": _Field(_NON_NEGATIVE, required=True),
    "duration_s": _Field(_POSITIVE, required=True),
    "hold_s": _Field(_NON_NEGATIVE, default=0.0),
    **_ARRIVAL_FIELDS,
    "num_requests": _Field(_COUNT),
}
_VLLM_RAMP = {
    "start_rps": _Field(_POSITIVE, required=True),
    "end_rps": _Field(_POSITIVE, required=True),
    "num_requests": _Field(_COUNT, required=True),
    "burstiness": _Field(_POSITIVE, default=1.0),
}
SCHEDULE_FIELDS: dict[str, dict[str, _Field]] = {
    "constant": dict(_STEADY),
    "poisson": dict(_STEADY),
    "gamma": {**_STEADY, "burstiness": _Field(_POSITIVE, default=1.0)},
    "linear": dict(_RAMP),
    "exponential": {
        **_RAMP,
        "start_rps": _Field(_POSITIVE, required=True),
        "end_rps": _Field(_POSITIVE, required=True),
    },
    "steps": {
        "steps": _Field(lambda v: None, required=True),  # checked item by item below
        **_ARRIVAL_FIELDS,
        "num_requests": _Field(_COUNT),
    },
    "vllm-constant": {
        "rate": _Field(_POSITIVE, required=True),
        "num_requests": _Field(_COUNT, required=True),
        "burstiness": _Field(_POSITIVE, default=1.0),
    },
    "vllm-linear": dict(_VLLM_RAMP),
    "vllm-exponential": dict(_VLLM_RAMP),
    USERS_KIND: {
        "users": _Field(_COUNT),
        "start_users": _Field(number_check(0, integer=True)),
        "end_users": _Field(number_check(0, integer=True)),
        "duration_s": _Field(_POSITIVE, required=True),
        "hold_s": _Field(_NON_NEGATIVE, default=0.0),
    },
}


def _speed_check(value: Any) -> str | None:
    """A trace's speed: a factor > 0, or a linear ramp of it ``{start, end}``."""
    if is_number(value) and value > 0:
        return None
    if isinstance(value, dict) and set(value) == {"start", "end"}:
        if all(is_number(value[k]) and value[k] > 0 for k in ("start", "end")):
            return None
    return f"expected a factor > 0 (1 = the trace's own pace) or {{start: F, end: F}} (a ramp), got {describe(value)}"


SCHEDULE_FIELDS[TRACE_KIND] = {
    "path": _Field(lambda v: None if isinstance(v, str) and v else f"expected a file path, got {describe(v)}", True),
    "format": _Field(choice_check(TRACE_FORMATS), required=True),
    "speed": _Field(_speed_check, default=1.0),
    "start_s": _Field(_NON_NEGATIVE, default=0.0),
    "duration_s": _Field(_POSITIVE),
    "block_tokens": _Field(_COUNT, default=DEFAULT_BLOCK_TOKENS),
}
_STEP_FIELDS = {"rate": _Field(_NON_NEGATIVE, required=True), "duration_s": _Field(_POSITIVE, required=True)}


def _check_mapping(
    value: Any, fields: dict[str, _Field], path: tuple[str | int, ...], problems: list[SpecProblem]
) -> dict[str, Any]:
    """Checks one mapping against its fields; returns it with defaults filled."""
    out: dict[str, Any] = {}
    for key in value:
        if key not in fields:
            problems.append(SpecProblem(path + (key,), unknown_key_message(key, list(fields)), True))
    for name, spec in fields.items():
        if name not in value or value[name] is None:
            if spec.required:
                problems.append(SpecProblem(path + (name,), "required key is missing", True))
            elif spec.default is not None:
                out[name] = spec.default
            continue
        message = spec.check(value[name])
        if message:
            problems.append(SpecProblem(path + (name,), message))
        out[name] = value[name]
    return out


def check_schedule(spec: Any) -> tuple[dict[str, Any], list[SpecProblem]]:
    """Validates a ``schedule:`` mapping. Returns (spec with defaults filled, problems)."""
    problems: list[SpecProblem] = []
    if not isinstance(spec, dict):
        return {}, [SpecProblem((), f"expected a mapping with a 'kind' key, got {describe(spec)}")]
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind not in SCHEDULE_FIELDS:  # a list or mapping: not hashable
        if "kind" not in spec:
            return {}, [SpecProblem(("kind",), f"required key is missing (one of {', '.join(KINDS)})", True)]
        return {}, [SpecProblem(("kind",), choice_check(KINDS)(kind) or "")]
    fields = {"kind": _Field(lambda v: None, required=True), **SCHEDULE_FIELDS[kind]}
    out = _check_mapping(spec, fields, (), problems)
    if kind == "steps" and "steps" in spec:
        steps = spec["steps"]
        if not isinstance(steps, list) or not steps:
            problems.append(
                SpecProblem(("steps",), f"expected a non-empty list of {{rate, duration_s}}, got {describe(steps)}")
            )
        else:
            checked = []
            for i, step in enumerate(steps):
                if not isinstance(step, dict):
                    problems.append(
                        SpecProblem(("steps", i), f"expected a mapping {{rate, duration_s}}, got {describe(step)}")
                    )
                    continue
                checked.append(_check_mapping(step, _STEP_FIELDS, ("steps", i), problems))
            out["steps"] = checked
    if kind == USERS_KIND:
        _check_users(spec, problems)
    if problems:
        return out, problems
    if "num_requests" in out:
        out["num_requests"] = int(out["num_requests"])
    if "block_tokens" in out:
        out["block_tokens"] = int(out["block_tokens"])
    if kind in ("vllm-linear", "vllm-exponential") and out["start_rps"] > out["end_rps"]:
        # vllm bench serve refuses a ramp down ("start RPS must be less than end RPS").
        problems.append(
            SpecProblem(
                ("end_rps",),
                f"expected a number >= start_rps ({out['start_rps']:g}) as vllm bench serve requires, got {describe(out['end_rps'])}",
            )
        )
    return out, problems


def _check_users(spec: dict[str, Any], problems: list[SpecProblem]) -> None:
    """A users schedule is either ``users: N`` or a ramp ``start_users`` → ``end_users``."""
    ramp = [key for key in ("start_users", "end_users") if key in spec]
    if "users" in spec and ramp:
        problems.append(
            SpecProblem((ramp[0],), "cannot be combined with users (give users: N, or start_users and end_users)", True)
        )
    elif "users" not in spec and len(ramp) < 2:
        missing = "users" if not ramp else ("end_users" if ramp == ["start_users"] else "start_users")
        problems.append(
            SpecProblem((missing,), "required key is missing (users: N, or start_users and end_users)", True)
        )


def resolve_schedule(spec: dict[str, Any]) -> dict[str, Any]:
    """A ``schedule:`` mapping checked and with its defaults filled; its first problem as
    a ``UserError`` (a scenario's own checks have already said them all, with lines)."""
    resolved, problems = check_schedule(spec)
    if problems:
        first = problems[0]
        where = ".".join(["schedule", *map(str, first.path)])
        raise UserError(f"{where}: {first.message}")
    return resolved
