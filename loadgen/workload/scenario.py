"""Scenarios: a YAML file saying what to send (workload) and when (schedule).

``load_scenario("chat")`` reads the repository's ``scenarios/chat.yaml``; any other string
is a path. Validation errors point at the file, line and key path, e.g.
``scenarios/chat.yaml:12: schedule.end_rps: expected a number >= 0, got 'fast'``.
Command-line overrides (``--set key.path=value`` and the named flags in ``FLAG_KEYS``)
are applied before validation. The schema is documented in ``docs/scenarios.md``.
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from rampwatch.core.errors import UserError
from rampwatch.core.figures.classes import MIX_KEY
from rampwatch.loadgen.run.drain import DrainPolicy, parse_drain
from rampwatch.loadgen.workload.mixture import CLASS_KEYS, MixtureFactory, check_mix
from rampwatch.loadgen.workload.requests import PreparedRequest
from rampwatch.loadgen.workload.schedules import (
    SCHEDULE_FIELDS,
    TRACE_KIND,
    USERS_KIND,
    VLLM_KINDS,
    ArrivalSchedule,
    SpecProblem,
    build_schedule,
    check_schedule,
    choice_check,
    describe,
    dotted,
    is_number,
    number_check,
    unknown_key_message,
)
from rampwatch.loadgen.workload.trace_replay import TraceRequests, build_trace_schedule, trace_of

# The shipped scenarios are package data (rampwatch.scenarios), in a checkout and a wheel alike.
BUILTIN_SCENARIOS = resources.files("rampwatch.scenarios")

# Named run flags -> the scenario key each one sets.
FLAG_KEYS: dict[str, str] = {
    "duration": "schedule.duration_s",
    "start_rps": "schedule.start_rps",
    "end_rps": "schedule.end_rps",
    "seed": "seed",
    "max_concurrency": "max_concurrency",
    "model": "model",
}

ENDPOINTS = ("completions", "chat")
PROMPT_FORMATS = ("text", "token_ids")
LENGTH_DISTS = ("fixed", "uniform", "normal", "lognormal")
THINK_DISTS = ("fixed", "uniform", "exponential", "lognormal")
SESSION_KEYS = ("turns", "think_time_s")
DOC_PICKS = ("uniform", "zipf")
DATASET_FORMATS = ("auto", "sharegpt", "prompts", "messages")
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
WORKLOAD_KEYS = (
    "prompt_format",
    "input_tokens",
    "output_tokens",
    "system_prompt",
    "documents",
    "conversations",
    "sessions",
    "dataset",
    "ignore_eos",
    "extra_body",
)
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")

Path_ = tuple[str | int, ...]


# --------------------------------------------------------------------------- files


# Shipped sweep files (`rampwatch sweep sweep-sim`) sit beside the scenarios under this prefix.
SWEEP_PREFIX = "sweep-"


def list_scenarios() -> list[str]:
    return sorted(
        p.name.removesuffix(".yaml")
        for p in BUILTIN_SCENARIOS.iterdir()
        if p.name.endswith(".yaml") and not p.name.startswith(SWEEP_PREFIX)
    )


def resolve_scenario_path(path_or_name: str) -> Path:
    candidate = Path(path_or_name).expanduser()
    if candidate.is_file():
        return candidate
    if "/" not in path_or_name and not path_or_name.endswith((".yaml", ".yml")):
        named = BUILTIN_SCENARIOS / f"{path_or_name}.yaml"
        if named.is_file():
            return Path(str(named))
    names = ", ".join(list_scenarios()) or "none"
    raise UserError(f"scenario {path_or_name!r}: no such file and not a built-in scenario (built-in: {names})")


def _line_map(node: yaml.Node | None, path: Path_ = (), out: dict | None = None) -> dict[Path_, tuple[int, int]]:
    """Key path -> (line of the key, line of the value), 1-based."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            sub = path + (key_node.value,)
            out[sub] = (key_node.start_mark.line + 1, value_node.start_mark.line + 1)
            _line_map(value_node, sub, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = path + (i,)
            out[sub] = (item.start_mark.line + 1, item.start_mark.line + 1)
            _line_map(item, sub, out)
    return out


def _read_yaml(path: Path) -> tuple[Any, dict[Path_, tuple[int, int]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read scenario ({exc})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        _check_aliases(node, path)  # before anything walks the node graph expanded
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{where}: not valid YAML ({problem})") from None
    return data, _line_map(node)


# A scenario is a page of keys: far below this even with anchors reused. Aliases repeat a
# node without copying it, so a few lines can expand to billions of values ("billion laughs").
MAX_EXPANDED_NODES = 100_000


def _check_aliases(root: yaml.Node | None, path: Path) -> None:
    """Reject a node graph that refers to itself or expands past ``MAX_EXPANDED_NODES``
    (counted without expanding it: each distinct node's size is computed once)."""
    sizes: dict[int, int] = {}
    visiting: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in visiting:
            raise UserError(f"{path}:{node.start_mark.line + 1}: a YAML anchor refers to itself")
        visiting.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_EXPANDED_NODES:
                raise UserError(
                    f"{path}:{node.start_mark.line + 1}: YAML aliases expand this scenario past "
                    f"{MAX_EXPANDED_NODES:,} values; write it out without them"
                )
        visiting.discard(key)
        sizes[key] = total
        return total

    if root is not None:
        size(root)


# --------------------------------------------------------------------------- overrides


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


# --------------------------------------------------------------------------- validation


class _Problems:
    def __init__(self) -> None:
        self.items: list[SpecProblem] = []

    def add(self, path: Path_, message: str, at_key: bool = False) -> None:
        self.items.append(SpecProblem(path, message, at_key))

    def check(self, path: Path_, value: Any, check) -> bool:
        message = check(value)
        if message:
            self.add(path, message)
        return message is None

    def keys(self, path: Path_, value: dict, allowed: tuple[str, ...]) -> None:
        for key in value:
            if key not in allowed:
                self.add(path + (key,), unknown_key_message(key, allowed), True)

    def mapping(self, path: Path_, value: Any, what: str) -> bool:
        if isinstance(value, dict):
            return True
        self.add(path, f"expected a mapping ({what}), got {describe(value)}")
        return False


def _check_length(p: _Problems, path: Path_, value: Any) -> dict[str, Any] | None:
    if is_number(value) and not isinstance(value, bool):
        if p.check(path, value, number_check(1, integer=True)):
            return {"dist": "fixed", "value": int(value)}
        return None
    if not p.mapping(path, value, f"a token count or {{dist: {'|'.join(LENGTH_DISTS)}, …}}"):
        return None
    dist = value.get("dist")
    if not p.check(path + ("dist",), dist, choice_check(LENGTH_DISTS)):
        return None
    fields = {
        "fixed": {"value": number_check(1, integer=True)},
        "uniform": {"min": number_check(1, integer=True), "max": number_check(1, integer=True)},
        "normal": {"mean": number_check(1), "std": number_check(0)},
        "lognormal": {"median": number_check(1), "sigma": number_check(0)},
    }[dist]
    optional = (
        {"min": number_check(1, integer=True), "max": number_check(1, integer=True)}
        if dist in ("normal", "lognormal")
        else {}
    )
    p.keys(path, value, ("dist", *fields, *optional))
    out: dict[str, Any] = {"dist": dist}
    ok = True
    for name, check in fields.items():
        if name not in value:
            p.add(path + (name,), "required key is missing", True)
            ok = False
        elif p.check(path + (name,), value[name], check):
            out[name] = value[name]
        else:
            ok = False
    for name, check in optional.items():
        if name in value and value[name] is not None:
            if p.check(path + (name,), value[name], check):
                out[name] = int(value[name])
            else:
                ok = False
    if ok and "min" in out and "max" in out and out["min"] > out["max"]:
        p.add(path + ("max",), f"expected a number >= min ({out['min']}), got {describe(value['max'])}")
        ok = False
    for key in ("value", "min", "max"):
        if key in out:
            out[key] = int(out[key])
    return out if ok else None


# Workload keys a trace schedule decides itself: the trace gives each request's prompt.
TRACE_DECIDES = ("input_tokens", "output_tokens", "system_prompt", "documents", "conversations", "sessions", "dataset")


def _check_workload(
    p: _Problems,
    w: Any,
    endpoint: str,
    base_dir: Path,
    trace: bool = False,
    path: Path_ = ("workload",),
    extra_keys: tuple[str, ...] = (),
) -> dict[str, Any]:
    if not p.mapping(path, w, "prompt_format, input_tokens, output_tokens, …"):
        return {}
    if MIX_KEY in w:
        if trace:
            p.add(
                path + (MIX_KEY,),
                "cannot be combined with schedule.kind trace (the trace gives each request's prompt and lengths)",
                True,
            )
            return {}
        return check_mix(
            p,
            w,
            path,
            lambda class_path, cw: _check_workload(p, cw, endpoint, base_dir, path=class_path, extra_keys=CLASS_KEYS),
            lambda slo_path, value: _check_slo(p, slo_path, value),
        )
    p.keys(path, w, WORKLOAD_KEYS + extra_keys)
    out: dict[str, Any] = {}
    fmt = w.get("prompt_format", "text")
    if p.check(path + ("prompt_format",), fmt, choice_check(PROMPT_FORMATS)):
        if fmt == "token_ids" and endpoint == "chat":
            p.add(
                path + ("prompt_format",),
                "expected text with endpoint chat (token id prompts need endpoint completions), got 'token_ids'",
            )
    out["prompt_format"] = fmt
    if trace:
        for clash in TRACE_DECIDES:
            if w.get(clash) is not None:
                p.add(
                    path + (clash,),
                    "cannot be combined with schedule.kind trace (the trace gives each request's prompt and lengths)",
                    True,
                )
        w = {k: v for k, v in w.items() if k not in TRACE_DECIDES}
    dataset = w.get("dataset")
    if dataset is not None and p.mapping(path + ("dataset",), dataset, "path, format"):
        p.keys(path + ("dataset",), dataset, ("path", "format"))
        ds_fmt = dataset.get("format", "auto")
        p.check(path + ("dataset", "format"), ds_fmt, choice_check(DATASET_FORMATS))
        ds_path = dataset.get("path")
        if not isinstance(ds_path, str) or not ds_path:
            p.add(path + ("dataset", "path"), f"expected a file path, got {describe(ds_path)}", "path" not in dataset)
        else:
            found = Path(ds_path).expanduser()
            if not found.is_absolute() and not found.exists():
                found = base_dir / found
            if not found.is_file():
                p.add(path + ("dataset", "path"), f"dataset file not found: {ds_path}")
            ds_path = str(found.resolve()) if found.is_file() else ds_path
        out["dataset"] = {"path": ds_path, "format": ds_fmt}
        for clash in ("documents", "conversations", "input_tokens"):
            if w.get(clash) is not None:
                p.add(
                    path + (clash,),
                    f"cannot be combined with {dotted(path + ('dataset',))} (prompts come from the dataset)",
                    True,
                )
        if fmt == "token_ids":
            p.add(path + ("prompt_format",), "expected text with a dataset, got 'token_ids'")
    for key in ("input_tokens", "output_tokens"):
        if w.get(key) is not None:
            out[key] = _check_length(p, path + (key,), w[key])
        elif trace:
            continue
        elif key == "input_tokens" and dataset is None:
            p.add(path + (key,), "required key is missing", True)
        elif key == "output_tokens" and (
            dataset is None or (isinstance(dataset, dict) and dataset.get("format") in ("prompts", "messages"))
        ):
            hint = "" if dataset is None else " (only ShareGPT datasets carry answer lengths)"
            p.add(path + (key,), "required key is missing" + hint, True)
    system = w.get("system_prompt")
    if system is not None and p.mapping(path + ("system_prompt",), system, "tokens: N or text: '…'"):
        p.keys(path + ("system_prompt",), system, ("tokens", "text"))
        if ("tokens" in system) == ("text" in system):
            p.add(path + ("system_prompt",), "expected exactly one of tokens or text")
        elif "tokens" in system:
            if p.check(path + ("system_prompt", "tokens"), system["tokens"], number_check(1, integer=True)):
                out["system_prompt"] = {"tokens": int(system["tokens"])}
        elif isinstance(system["text"], str) and system["text"]:
            if fmt == "token_ids":
                p.add(path + ("system_prompt", "text"), "expected tokens: N with prompt_format token_ids, got text")
            out["system_prompt"] = {"text": system["text"]}
        else:
            p.add(path + ("system_prompt", "text"), f"expected non-empty text, got {describe(system['text'])}")
    docs = w.get("documents")
    if docs is not None and p.mapping(path + ("documents",), docs, "count, tokens, pick"):
        p.keys(path + ("documents",), docs, ("count", "tokens", "pick", "zipf_exponent"))
        d: dict[str, Any] = {"pick": docs.get("pick", "uniform"), "zipf_exponent": docs.get("zipf_exponent", 1.0)}
        for key in ("count", "tokens"):
            if key not in docs:
                p.add(path + ("documents", key), "required key is missing", True)
            elif p.check(path + ("documents", key), docs[key], number_check(1, integer=True)):
                d[key] = int(docs[key])
        p.check(path + ("documents", "pick"), d["pick"], choice_check(DOC_PICKS))
        p.check(path + ("documents", "zipf_exponent"), d["zipf_exponent"], number_check(0, strict=True))
        out["documents"] = d
    conv = w.get("conversations")
    if conv is not None and p.mapping(path + ("conversations",), conv, "count, turns"):
        p.keys(path + ("conversations",), conv, ("count", "turns"))
        c: dict[str, Any] = {}
        for key in ("count", "turns"):
            if key not in conv:
                p.add(path + ("conversations", key), "required key is missing", True)
            elif p.check(path + ("conversations", key), conv[key], number_check(1, integer=True)):
                c[key] = int(conv[key])
        out["conversations"] = c
    if w.get("sessions") is not None:
        out["sessions"] = _check_sessions(p, w["sessions"], path + ("sessions",), dataset is not None)
        if conv is not None:
            p.add(
                path + ("conversations",),
                "cannot be combined with workload.sessions (sessions are the multi-turn workload)",
                True,
            )
        if fmt == "token_ids":
            p.add(
                path + ("prompt_format",),
                "expected text with workload.sessions (each turn carries the answer's text), got 'token_ids'",
            )
    ignore_eos = w.get("ignore_eos", True)
    if not isinstance(ignore_eos, bool):
        p.add(path + ("ignore_eos",), f"expected true or false, got {describe(ignore_eos)}")
    out["ignore_eos"] = ignore_eos
    extra = w.get("extra_body", {}) or {}
    if p.mapping(path + ("extra_body",), extra, "extra request fields such as temperature"):
        reserved = {"prompt", "messages", "max_tokens", "max_completion_tokens", "model", "stream", "stream_options"}
        for key in extra:
            if key in reserved:
                p.add(path + ("extra_body", key), "is set by rampwatch itself and cannot be overridden", True)
            elif key == "cache_salt":  # one per run, recorded: the run's flag, not the file's
                p.add(path + ("extra_body", key), "is the run's: use --cache-salt SALT (auto, none or a salt)", True)
        out["extra_body"] = dict(extra)
    return out


def _check_slo(p: _Problems, path: Path_, value: Any) -> dict[str, float] | None:
    """An ``slo:`` mapping (the scenario's, or a mixture class's): the objectives set."""
    slo: dict[str, float] = {}
    if value is not None and p.mapping(path, value, "ttft_ms, tpot_ms, e2el_ms"):
        p.keys(path, value, SLO_KEYS)
        for key in SLO_KEYS:
            if value.get(key) is not None and p.check(path + (key,), value[key], number_check(0, strict=True)):
                slo[key] = float(value[key])
    return slo or None


def _check_think(p: _Problems, path: Path_, value: Any) -> dict[str, Any] | None:
    """Think time in seconds: a number, or ``{dist: fixed|uniform|exponential|lognormal, …}``."""
    if is_number(value):
        return {"dist": "fixed", "value": float(value)} if p.check(path, value, number_check(0)) else None
    if not p.mapping(path, value, f"seconds, or {{dist: {'|'.join(THINK_DISTS)}, …}}"):
        return None
    dist = value.get("dist")
    if not p.check(path + ("dist",), dist, choice_check(THINK_DISTS)):
        return None
    fields = {
        "fixed": ("value",),
        "uniform": ("min", "max"),
        "exponential": ("mean",),
        "lognormal": ("median", "sigma"),
    }[dist]
    optional = ("max",) if dist in ("exponential", "lognormal") else ()
    p.keys(path, value, ("dist", *fields, *optional))
    out: dict[str, Any] = {"dist": dist}
    ok = True
    for name in (*fields, *optional):
        if name not in value:
            if name in fields:
                p.add(path + (name,), "required key is missing", True)
                ok = False
        elif p.check(path + (name,), value[name], number_check(0)):
            out[name] = float(value[name])
        else:
            ok = False
    if ok and dist == "uniform" and out["min"] > out["max"]:
        p.add(path + ("max",), f"expected a number >= min ({out['min']:g}), got {describe(value['max'])}")
        ok = False
    return out if ok else None


def _check_sessions(p: _Problems, value: Any, path: Path_, has_dataset: bool) -> dict[str, Any]:
    """``workload.sessions``: turns per session (a length distribution; with a dataset,
    at most this many of each conversation's turns) and the think time after each answer."""
    if not p.mapping(path, value, "turns, think_time_s"):
        return {}
    p.keys(path, value, SESSION_KEYS)
    out: dict[str, Any] = {}
    if value.get("turns") is not None:
        out["turns"] = _check_length(p, path + ("turns",), value["turns"])
    elif not has_dataset:
        p.add(path + ("turns",), "required key is missing (a turn count or a distribution)", True)
    out["think_time_s"] = _check_think(p, path + ("think_time_s",), value.get("think_time_s", 0))
    return out


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


def _trace_path(p: _Problems, given: str, base_dir: Path) -> str:
    """A trace's path as an absolute one; relative paths are from the scenario's folder
    (or the working directory, when the file is there)."""
    found = Path(given).expanduser()
    if not found.is_absolute() and not found.exists():
        found = base_dir / found
    if not found.is_file():
        p.add(("schedule", "path"), f"trace file not found: {given}")
        return given
    return str(found.resolve())


def _locate(problem: SpecProblem, file: str, lines: dict[Path_, tuple[int, int]], overridden: list[Path_]) -> str:
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
    lines: dict[Path_, tuple[int, int]] | None = None,
    overridden: list[Path_] | None = None,
    base_dir: Path | None = None,
) -> Scenario:
    """Checks a scenario's mapping; ``file`` is how messages name it, ``base_dir`` the
    folder its relative paths (dataset, trace) are read from (the file's own)."""
    lines = lines or {}
    base_dir = base_dir or Path(file).resolve().parent
    p = _Problems()
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
        workload = _check_workload(p, data["workload"], endpoint, base_dir, trace=schedule.get("kind") == TRACE_KIND)
    if schedule.get("kind") == USERS_KIND and not workload.get("sessions"):
        p.add(
            ("schedule", "kind"), "users (a closed loop) needs workload.sessions: each user runs sessions back to back"
        )
    slo = _check_slo(p, ("slo",), data.get("slo"))
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
    data, lines = _read_yaml(path)
    file = _display_path(path)
    if isinstance(data, dict):
        pairs = flag_overrides(flags, data) + list(overrides or [])
        file_schedule = data.get("schedule")
        data = apply_overrides(data, pairs)
        _leave_out_the_old_kinds_keys(file_schedule, data.get("schedule"), {k for k, _ in pairs})
        overridden = [tuple(int(x) if x.isdigit() else x for x in k.split(".")) for k, _ in pairs]
    else:
        overridden = []
    return validate_scenario(data, file, lines, overridden, path.resolve().parent)


def _leave_out_the_old_kinds_keys(before: Any, after: Any, set_keys: set[str]) -> None:
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


def _display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        try:
            return str(Path("scenarios") / path.resolve().relative_to(Path(str(BUILTIN_SCENARIOS))))
        except ValueError:
            return str(path)


# --------------------------------------------------------------------------- requests


def sample_length(spec: dict[str, Any], rng: np.random.Generator) -> int:
    dist = spec["dist"]
    if dist == "fixed":
        return int(spec["value"])
    if dist == "uniform":
        return int(rng.integers(spec["min"], spec["max"] + 1))
    if dist == "normal":
        value = rng.normal(spec["mean"], spec["std"])
    else:
        value = spec["median"] * math.exp(spec["sigma"] * rng.standard_normal())
    lo, hi = spec.get("min", 1), spec.get("max", math.inf)
    return int(min(max(round(value), lo, 1), hi))


def length_bounds(spec: dict[str, Any]) -> tuple[int, float]:
    """Smallest and largest length a distribution can produce."""
    if spec["dist"] == "fixed":
        return spec["value"], spec["value"]
    return max(1, spec.get("min", 1)), spec.get("max", math.inf)


@dataclass(slots=True)
class _Conversation:
    id: int
    doc: int | None
    turn: int = 0
    # Previous turns as (user content, assistant content); text or token ids.
    history: list[tuple[Any, Any]] = field(default_factory=list)


class RequestFactory:
    """Builds the scenario's requests one by one; the same scenario (seed) and tokenizer
    give the same sequence. Prompt lengths are exact with the simulator's tokenizer; with
    a sub-word tokenizer ``expected_prompt_tokens`` is the count actually achieved.

    ``cache_salt`` (the run's ``--cache-salt``) goes in every request's body: vLLM never
    lets requests with different salts share prefix-cache blocks, so a run's requests
    share their declared prefixes with each other and with no other run's."""

    def __init__(self, scenario: Scenario, tokenizer=None, cache_salt: str | None = None) -> None:
        from rampwatch.loadgen.workload.tokenizers import load_tokenizer

        self.scenario = scenario
        self.cache_salt = cache_salt
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(None)
        self.workload = scenario.workload
        self.endpoint = scenario.endpoint
        self.token_ids = self.workload.get("prompt_format") == "token_ids"
        self._rng = np.random.default_rng([scenario.seed, 101])
        self._count = 0
        self._docs: dict[int, Any] = {}
        self._shared_counts: dict[str, int] = {}
        self._system: Any = None
        self.doc_probs: np.ndarray | None = None
        docs = self.workload.get("documents")
        if docs:
            ranks = np.arange(1, docs["count"] + 1, dtype=float)
            weights = ranks ** -docs["zipf_exponent"] if docs["pick"] == "zipf" else np.ones_like(ranks)
            self.doc_probs = weights / weights.sum()
        self._conversations: list[_Conversation] = []
        self._next_conversation = 0
        self.dataset = None
        self._order: list[int] = []
        self._trace: TraceRequests | None = None
        spec = scenario.schedule_spec
        if spec.get("kind") == TRACE_KIND:
            self._trace = TraceRequests(
                trace_of(spec), spec["block_tokens"], self.endpoint, self.token_ids, scenario.seed, self.tokenizer
            )
        if self.workload.get("dataset"):
            from rampwatch.loadgen.workload.datasets import load_dataset

            ds = self.workload["dataset"]
            self.dataset = load_dataset(ds["path"], ds["format"])
        # A mixture: each class builds its requests with its own factory (loadgen.workload.mixture).
        self._mixture = (
            MixtureFactory(scenario, self.tokenizer, functools.partial(RequestFactory, cache_salt=cache_salt))
            if MIX_KEY in self.workload
            else None
        )

    # -- shared parts (built once, identical in every request)

    def _piece(self, n: int, rng: np.random.Generator) -> Any:
        from rampwatch.loadgen.workload.prompts import random_token_ids, synth_text

        return random_token_ids(self.tokenizer, n, rng) if self.token_ids else synth_text(self.tokenizer, n, rng)

    def system_prompt(self) -> Any:
        spec = self.workload.get("system_prompt")
        if not spec:
            return None
        if self._system is None:
            if "text" in spec:
                self._system = spec["text"]
            else:
                self._system = self._piece(spec["tokens"], np.random.default_rng([self.scenario.seed, 1]))
        return self._system

    def document(self, index: int) -> Any:
        if index not in self._docs:
            rng = np.random.default_rng([self.scenario.seed, 2, index])
            self._docs[index] = self._piece(self.workload["documents"]["tokens"], rng)
        return self._docs[index]

    # -- request building

    def count_of(self, part: Any) -> int:
        from rampwatch.loadgen.workload.tokenizers import count_tokens

        if part is None:
            return 0
        return len(part) if isinstance(part, list) else count_tokens(self.tokenizer, part)

    def count_shared(self, part: Any) -> int:
        """``count_of`` for the parts many requests share (system prompt, documents):
        counted once, since a document can be thousands of tokens."""
        if part is None or isinstance(part, list):
            return self.count_of(part)
        count = self._shared_counts.get(part)
        if count is None:
            count = self._shared_counts[part] = self.count_of(part)
        return count

    def _fresh_tail(self, prefix_parts: list[Any], n: int) -> tuple[Any, Any, int]:
        """(new user content, full completions prompt, the prompt's token count) with n
        new tokens after the parts."""
        from rampwatch.loadgen.workload.prompts import compose_exact, join, random_token_ids

        parts = [x for x in prefix_parts if x]
        if self.token_ids:
            tail = random_token_ids(self.tokenizer, n, self._rng)
            flat = [i for part in parts for i in part]
            return tail, flat + tail, len(flat) + len(tail)
        prefix = join(parts)
        if not prefix:
            text, count = compose_exact(self.tokenizer, "", n, self._rng)
            return text, text, count
        target = self.count_of(prefix + "\n\n") + n
        full, count = compose_exact(self.tokenizer, prefix, target, self._rng)
        return full[len(prefix) + 2 :] if len(full) > len(prefix) else "", full, count

    def _pick_doc(self) -> int | None:
        if self.doc_probs is None:
            return None
        return int(self._rng.choice(len(self.doc_probs), p=self.doc_probs))

    def _conversation(self) -> _Conversation | None:
        conv = self.workload.get("conversations")
        if not conv:
            return None
        slot = int(self._rng.integers(conv["count"]))
        while len(self._conversations) < conv["count"]:
            self._conversations.append(self._new_conversation())
        c = self._conversations[slot]
        if c.turn >= conv["turns"]:
            c = self._conversations[slot] = self._new_conversation()
        return c

    def _new_conversation(self) -> _Conversation:
        c = _Conversation(id=self._next_conversation, doc=self._pick_doc())
        self._next_conversation += 1
        return c

    def next_request(self) -> PreparedRequest:
        if self._mixture is not None:
            return self._mixture.next_request()
        index = self._count
        self._count += 1
        if self._trace is not None:  # the i-th request is the trace's i-th row
            body, prompt_tokens, max_tokens, row = self._trace.row(index)
            return self.finish_request(body, prompt_tokens, max_tokens, None, {"index": index, **row})
        if self.dataset is not None:
            return self._dataset_request(index)
        w = self.workload
        n_in = sample_length(w["input_tokens"], self._rng)
        n_out = sample_length(w["output_tokens"], self._rng)
        conv = self._conversation()
        doc = conv.doc if conv is not None else self._pick_doc()
        system = self.system_prompt()
        doc_part = self.document(doc) if doc is not None else None
        history = conv.history if conv is not None else []
        extra: dict[str, Any] = {"index": index}
        tags = []
        if doc is not None:
            extra["doc"] = doc
            tags.append(f"doc-{doc}")
        if conv is not None:
            conv.turn += 1
            extra.update(conversation=conv.id, turn=conv.turn)
            tags = [f"conv-{conv.id}/turn-{conv.turn}"]
        extra["shared_prefix_tokens"] = self.count_shared(system) + self.count_shared(doc_part)
        if self.endpoint == "chat":
            first_user_prefix = [doc_part] if not history else []
            question, content, _ = self._fresh_tail(first_user_prefix, n_in)
            messages = [{"role": "system", "content": system}] if system else []
            for user, answer in history:
                messages.append({"role": "user", "content": user})
                messages.append({"role": "assistant", "content": answer})
            messages.append({"role": "user", "content": content})
            expected = sum(self.count_of(m["content"]) for m in messages)
            payload: dict[str, Any] = {"messages": messages, "max_completion_tokens": n_out}
            user_turn = content
        else:
            prefix_parts: list[Any] = [system, doc_part]
            for user, answer in history:
                prefix_parts += [user, answer]
            question, prompt, expected = self._fresh_tail(prefix_parts, n_in)
            payload = {"prompt": prompt, "max_tokens": n_out}
            user_turn = question
        if conv is not None:
            conv.history.append((user_turn, self._piece(n_out, self._rng)))
        return self.finish_request(payload, expected, n_out, "/".join(tags) or None, extra)

    def _dataset_request(self, index: int) -> PreparedRequest:
        assert self.dataset is not None
        if not self._order:
            self._order = self._rng.permutation(len(self.dataset)).tolist()
        entry = self.dataset[self._order.pop(0)]
        system = self.system_prompt()
        out_spec = self.workload.get("output_tokens")
        if out_spec:
            n_out = sample_length(out_spec, self._rng)
        elif entry.answer is not None:
            n_out = max(1, self.count_of(entry.answer))
        else:
            raise UserError(
                f"{self.workload['dataset']['path']}: entries carry no answer to size the output; "
                "set workload.output_tokens"
            )
        if self.endpoint == "chat":
            messages = ([{"role": "system", "content": system}] if system else []) + entry.as_messages()
            payload: dict[str, Any] = {"messages": messages, "max_completion_tokens": n_out}
            expected = sum(self.count_of(m["content"]) for m in messages)
        else:
            from rampwatch.loadgen.workload.prompts import join

            prompt = join([system or "", entry.as_text()])
            payload = {"prompt": prompt, "max_tokens": n_out}
            expected = self.count_of(prompt)
        return self.finish_request(payload, expected, n_out, None, {"index": index})

    def finish_request(
        self, payload: dict[str, Any], expected: int, n_out: int, tag: str | None, extra: dict[str, Any]
    ) -> PreparedRequest:
        """The request of a built body: ``ignore_eos``, the workload's ``extra_body`` and
        the run's ``cache_salt`` added."""
        if self.workload.get("ignore_eos", True):
            payload["ignore_eos"] = True
        payload.update(self.workload.get("extra_body") or {})
        if self.cache_salt is not None:
            payload["cache_salt"] = self.cache_salt
        return PreparedRequest(
            endpoint=self.endpoint,  # type: ignore[arg-type]
            payload=payload,
            expected_prompt_tokens=expected,
            max_tokens=n_out,
            tag=tag,
            extra=extra,
        )
