"""Command-line overrides of a scenario: ``--set key.path=value`` and the named run flags
(``FLAG_KEYS``), applied to the file's mapping before it is validated."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.schedule_spec import SCHEDULE_FIELDS, TRACE_KIND, USERS_KIND, VLLM_KINDS

# Named run flags -> the scenario key each one sets.
FLAG_KEYS: dict[str, str] = {
    "duration": "schedule.duration_s",
    "start_rps": "schedule.start_rps",
    "end_rps": "schedule.end_rps",
    "seed": "seed",
    "max_concurrency": "max_concurrency",
    "model": "model",
}


def _parse_value(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return yaml.safe_load(value) if value.strip() else value
    except yaml.YAMLError:
        return value


def apply_overrides(scenario_dict: dict[str, Any], overrides: list[tuple[str, Any]]) -> dict[str, Any]:
    """A copy of ``scenario_dict`` with each ``(key.path, value)`` set. String values are
    read as YAML scalars (``20`` → 20, ``null`` → None, ``[1, 2]`` → a list); a numeric
    part indexes a list (``schedule.steps.0.rate``)."""
    out = copy.deepcopy(scenario_dict)
    for key_path, raw_value in overrides:
        parts = [p for p in str(key_path).split(".")]
        if not parts or any(p == "" for p in parts):
            raise UserError(f"--set {key_path}: expected a dotted key path such as schedule.end_rps")
        node: Any = out
        for i, part in enumerate(parts[:-1]):
            where = ".".join(parts[: i + 1])
            if isinstance(node, list) and part.isdigit():
                if int(part) >= len(node):
                    raise UserError(f"--set {key_path}: {where}: index out of range (the list has {len(node)} items)")
                node = node[int(part)]
                continue
            if not isinstance(node, dict):
                raise UserError(f"--set {key_path}: {'.'.join(parts[:i]) or 'scenario'} is not a mapping")
            if not isinstance(node.get(part), (dict, list)):
                node[part] = {}
            node = node[part]
        last = parts[-1]
        value = _parse_value(raw_value)
        if isinstance(node, list) and last.isdigit():
            if int(last) >= len(node):
                raise UserError(f"--set {key_path}: index out of range (the list has {len(node)} items)")
            node[int(last)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise UserError(f"--set {key_path}: {'.'.join(parts[:-1])} is not a mapping")
    return out


def flag_overrides(flags: dict[str, Any] | None, scenario_dict: dict[str, Any]) -> list[tuple[str, Any]]:
    """(key path, value) pairs for the run's named flags (None values are skipped)."""
    pairs: list[tuple[str, Any]] = []
    kind = (
        (scenario_dict.get("schedule") or {}).get("kind") if isinstance(scenario_dict.get("schedule"), dict) else None
    )
    for flag, value in (flags or {}).items():
        if value is None:
            continue
        if flag not in FLAG_KEYS:
            raise UserError(f"--{flag.replace('_', '-')}: not a scenario flag (known: {', '.join(FLAG_KEYS)})")
        option = f"--{flag.replace('_', '-')}"
        if flag in ("start_rps", "end_rps") and kind == TRACE_KIND:
            raise UserError(
                f"{option}: a trace schedule takes its rate from its trace; scale it with --set schedule.speed=F"
            )
        if flag == "duration" and kind == TRACE_KIND:
            raise UserError(
                f"{option}: a trace schedule lasts as long as its trace; replay part of it with "
                "--set schedule.start_s=S --set schedule.duration_s=S (trace seconds)"
            )
        if flag in ("start_rps", "end_rps") and kind == USERS_KIND:
            raise UserError(
                f"{option}: schedule kind 'users' ramps users, not a rate; "
                f"set schedule.start_users / schedule.end_users (--set schedule.end_users=N)"
            )
        if flag in ("start_rps", "end_rps") and kind in ("constant", "poisson", "gamma", "steps", "vllm-constant"):
            raise UserError(
                f"{option}: schedule kind '{kind}' has no {flag}; change the kind "
                f"(--set schedule.kind=linear) or set its rate (--set schedule.rate=N)"
            )
        if flag == "duration" and kind in VLLM_KINDS:
            raise UserError(
                f"{option}: schedule kind '{kind}' is bounded by request count; use --set schedule.num_requests=N"
            )
        if flag == "duration" and kind == "steps":
            raise UserError(
                f"{option}: schedule kind 'steps' takes its length from its steps; set schedule.steps.N.duration_s"
            )
        pairs.append((FLAG_KEYS[flag], value))
    return pairs


def leave_out_the_old_kinds_keys(before: Any, after: Any, set_keys: set[str]) -> None:
    """``--set schedule.kind=K`` swaps the file's schedule for one of kind K: the file's
    keys that K does not take (a ramp's ``start_rps`` under ``constant``) belong to the
    old kind and are left out, so that ``--set schedule.kind=constant --set
    schedule.rate=20`` works on a ramp's file. Keys the user set are kept (and checked)."""
    if "schedule.kind" not in set_keys or not isinstance(before, dict) or not isinstance(after, dict):
        return
    kind = after.get("kind")
    # Only a string can name a kind (a list or mapping is not hashable): anything else is
    # left for the validation to report as a bad schedule.kind, in one line.
    if not isinstance(kind, str) or kind == before.get("kind") or kind not in SCHEDULE_FIELDS:
        return
    takes = {"kind", *SCHEDULE_FIELDS[kind]}
    for key in [k for k in after if k not in takes and f"schedule.{k}" not in set_keys]:
        del after[key]
