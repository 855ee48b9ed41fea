"""A sweep file (``SWEEP.yaml``) read and checked: the scenario, the base serve command,
the matrix expanded into configurations, the load, the SLO, the early stop. Errors name
the file, line and key, as scenario errors do."""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rampwatch.core.errors import UserError
from rampwatch.core.figures.search import DEFAULT_TOLERANCE, SearchPlan, parse_tolerance
from rampwatch.core.figures.slo import Slo, parse_slo
from rampwatch.loadgen.workload.scenario_files import BUILTIN_SCENARIOS, SWEEP_PREFIX, read_yaml, resolve_scenario_path
from rampwatch.loadgen.workload.spec_checks import KeyPath, describe, dotted, is_number, unknown_key_message

TOP_KEYS = (
    "name",
    "description",
    "scenario",
    "set",
    "serve",
    "vllm_model",
    "matrix",
    "load",
    "slo",
    "early_stop",
    "output_dir",
    "startup_timeout_s",
    "stop_grace_s",
    "repeats",
)
MAX_REPEATS = 20
MATRIX_KEYS = ("product", "sets")
LOAD_KEYS = ("ramp", "rates", "hold_s", "arrival", "search")
SEARCH_KEYS = ("tolerance", "hold_s")
RAMP_KEYS = ("start_rps", "end_rps", "duration_s")
EARLY_STOP_KEYS = ("enabled", "window_s", "min_requests")
ARRIVALS = ("poisson", "constant", "gamma")


@dataclass(frozen=True)
class EarlyStop:
    """Stop a configuration's load once its knee is past and the requests that ended in
    the last ``window_s`` seconds (at least ``min_requests`` of them) break the SLO."""

    enabled: bool = True
    window_s: float = 10.0
    min_requests: int = 5


@dataclass
class SweepSpec:
    name: str
    path: str
    scenario: str
    sets: list[tuple[str, Any]]
    serve: str
    configs: list[dict[str, Any]]  # flag ("--max-num-seqs") -> value, one mapping per configuration
    schedule: dict[str, Any]  # the scenario's schedule: key for every configuration
    slo: Slo
    early_stop: EarlyStop
    output_dir: str
    startup_timeout_s: float = 600.0
    stop_grace_s: float = 5.0
    vllm_model: str | None = None
    description: str = ""
    # load: search: each configuration's max rate under the SLO (core.figures.search)
    search: SearchPlan | None = None
    repeats: int = 1  # runs of each configuration: the table gives their mean and 95 % interval
    raw: dict[str, Any] = field(default_factory=dict)


class _Problems:
    def __init__(self, file: str, lines: dict[KeyPath, tuple[int, int]]) -> None:
        self.file, self.lines = file, lines

    def fail(self, path: KeyPath, message: str, at_key: bool = False) -> UserError:
        where = path
        while where and where not in self.lines:
            where = where[:-1]
        key = dotted(path)
        if not where:
            return UserError(f"{self.file}: {key}: {message}" if key else f"{self.file}: {message}")
        key_line, value_line = self.lines[where]
        return UserError(f"{self.file}:{key_line if at_key or where != path else value_line}: {key}: {message}")

    def keys(self, path: KeyPath, value: dict, allowed: Sequence[str]) -> None:
        for key in value:
            if key not in allowed:
                raise self.fail(path + (key,), unknown_key_message(key, allowed), True)

    def mapping(self, path: KeyPath, value: Any, what: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping ({what}), got {describe(value)}")
        return value

    def number(self, path: KeyPath, value: Any, minimum: float = 0.0, strict: bool = True) -> float:
        if not is_number(value) or value < minimum or (strict and value == minimum):
            raise self.fail(path, f"expected a number {'>' if strict else '>='} {minimum:g}, got {describe(value)}")
        return float(value)


def flag_name(key: Any) -> str:
    """A matrix key as the command line spells it: ``max_num_seqs``, ``max-num-seqs`` and
    ``--max-num-seqs`` are all ``--max-num-seqs`` (vLLM's JSON files use underscores)."""
    text = str(key).strip()
    if text.startswith("-"):
        return text if text.startswith("--") or len(text) > 2 else text
    return "--" + text.replace("_", "-")


def _check_value(p: _Problems, path: KeyPath, value: Any) -> Any:
    if isinstance(value, bool) or is_number(value) or (isinstance(value, str) and value.strip()):
        return value
    if isinstance(value, dict) and value:  # a JSON-valued flag (--speculative-config): given as its JSON
        return value
    raise p.fail(path, f"expected a number, a string, true/false or a mapping (a JSON flag), got {describe(value)}")


def expand_matrix(product: dict[str, list[Any]] | None, sets: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Every combination of ``product`` (first key varying slowest, as nested loops),
    then each of ``sets``; keys are spelled as flags; a configuration given twice is
    kept once (its first place)."""
    configs: list[dict[str, Any]] = []
    if product:
        keys = [flag_name(k) for k in product]
        for values in itertools.product(*product.values()):
            configs.append(dict(zip(keys, values, strict=True)))
    for item in sets or []:
        configs.append({flag_name(k): v for k, v in item.items()})
    unique: list[dict[str, Any]] = []
    for config in configs:
        if config not in unique:
            unique.append(config)
    return unique


def _schedule(p: _Problems, load: Any) -> dict[str, Any]:
    load = p.mapping(("load",), load, "ramp: or rates: with hold_s:")
    p.keys(("load",), load, LOAD_KEYS)
    arrival = load.get("arrival", "poisson")
    if arrival not in ARRIVALS:
        raise p.fail(("load", "arrival"), f"expected one of {', '.join(ARRIVALS)}, got {describe(arrival)}")
    if ("ramp" in load) == ("rates" in load):
        raise p.fail(
            ("load",), "give exactly one of ramp: {start_rps, end_rps, duration_s} or rates: [..] with hold_s:"
        )
    if "ramp" in load:
        ramp = p.mapping(("load", "ramp"), load["ramp"], "start_rps, end_rps, duration_s")
        p.keys(("load", "ramp"), ramp, RAMP_KEYS)
        for key in RAMP_KEYS:
            if key not in ramp:
                raise p.fail(("load", "ramp", key), "required key is missing", True)
        if "hold_s" in load:
            raise p.fail(("load", "hold_s"), "belongs to rates:, not to a ramp", True)
        return {
            "kind": "linear",
            "start_rps": p.number(("load", "ramp", "start_rps"), ramp["start_rps"], strict=False),
            "end_rps": p.number(("load", "ramp", "end_rps"), ramp["end_rps"]),
            "duration_s": p.number(("load", "ramp", "duration_s"), ramp["duration_s"]),
            "arrival": arrival,
        }
    rates = load["rates"]
    if not isinstance(rates, list) or not rates:
        raise p.fail(("load", "rates"), f"expected a list of request rates, got {describe(rates)}")
    if "hold_s" not in load:
        raise p.fail(("load", "hold_s"), "required key is missing (seconds each rate is held)", True)
    hold = p.number(("load", "hold_s"), load["hold_s"])
    steps = [{"rate": p.number(("load", "rates", i), r), "duration_s": hold} for i, r in enumerate(rates)]
    return {"kind": "steps", "steps": steps, "arrival": arrival}


def _search(p: _Problems, load: Any, slo: Slo) -> SearchPlan | None:
    """``load: search: {tolerance, hold_s}`` (or ``search: true``) over a ``ramp:``: each
    configuration searches its max rate under the sweep's SLO instead of ramping past it."""
    if not isinstance(load, dict) or load.get("search") in (None, False):
        return None
    value = {} if load["search"] is True else p.mapping(("load", "search"), load["search"], "tolerance, hold_s")
    p.keys(("load", "search"), value, SEARCH_KEYS)
    if "ramp" not in load:
        raise p.fail(("load", "search"), "searches over a ramp: give ramp: {start_rps, end_rps, duration_s}", True)
    hold = p.number(("load", "search", "hold_s"), value["hold_s"]) if "hold_s" in value else None
    try:
        tolerance = parse_tolerance(str(value.get("tolerance", DEFAULT_TOLERANCE)), "tolerance")
    except UserError as exc:
        raise p.fail(("load", "search", "tolerance"), str(exc).removeprefix("tolerance ")) from None
    return SearchPlan(slo, "rate", tolerance, hold)


def _sets(p: _Problems, value: Any) -> list[tuple[str, Any]]:
    """``set:`` as a mapping of scenario key paths, or a list of ``KEY=VALUE`` strings
    (``--set``'s spelling)."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [(str(k), v) for k, v in value.items()]
    if isinstance(value, list):
        out = []
        for i, item in enumerate(value):
            key, sep, val = str(item).partition("=")
            if not isinstance(item, str) or not sep or not key.strip():
                raise p.fail(("set", i), f"expected KEY=VALUE, got {describe(item)}")
            out.append((key.strip(), val))
        return out
    raise p.fail(("set",), f"expected a mapping of scenario keys (or KEY=VALUE strings), got {describe(value)}")


def load_sweep(
    path: str | Path, slo_text: str | None = None, output_dir: str | None = None, repeats: int | None = None
) -> SweepSpec:
    """Reads and checks a SWEEP.yaml; ``slo_text`` (``--slo``), ``output_dir``
    (``--output-dir``) and ``repeats`` (``--repeats``) override its keys. Any problem raises one ``UserError`` line naming
    the file, line and key (or the flag)."""
    file_path = Path(path)
    if not file_path.is_file():
        shipped = BUILTIN_SCENARIOS / f"{path}.yaml"
        if "/" in str(path) or not str(path).startswith(SWEEP_PREFIX) or not shipped.is_file():
            raise UserError(f"{path}: no such sweep file")
        file_path = Path(str(shipped))
        path = f"scenarios/{path}.yaml"
    data, lines = read_yaml(file_path)
    file = str(path)
    p = _Problems(file, lines)
    data = p.mapping((), data, "scenario:, serve:, matrix:, load:")
    p.keys((), data, TOP_KEYS)
    for key in ("scenario", "serve", "matrix", "load"):
        if key not in data:
            raise p.fail((key,), "required key is missing", True)
    scenario = data["scenario"]
    if not isinstance(scenario, str) or not scenario.strip():
        raise p.fail(("scenario",), f"expected a scenario name or path, got {describe(scenario)}")
    if "/" in scenario or scenario.endswith((".yaml", ".yml")):
        relative = (file_path.parent / scenario).resolve()
        scenario = str(relative) if relative.is_file() else scenario
    try:
        resolve_scenario_path(scenario)
    except UserError as exc:
        raise p.fail(("scenario",), str(exc)) from None
    serve = data["serve"]
    if not isinstance(serve, str) or not serve.strip():
        raise p.fail(("serve",), f"expected the base serve command line, got {describe(serve)}")
    try:
        shlex.split(serve)
    except ValueError as exc:
        raise p.fail(("serve",), f"cannot split the command line ({exc})") from None
    matrix = p.mapping(("matrix",), data["matrix"], "product: and/or sets:")
    p.keys(("matrix",), matrix, MATRIX_KEYS)
    product = matrix.get("product")
    if product is not None:
        p.mapping(("matrix", "product"), product, "flag: [values]")
        for key, values in product.items():
            if not isinstance(values, list) or not values:
                raise p.fail(("matrix", "product", key), f"expected a non-empty list of values, got {describe(values)}")
            for i, v in enumerate(values):
                _check_value(p, ("matrix", "product", key, i), v)
    sets = matrix.get("sets")
    if sets is not None:
        if not isinstance(sets, list) or not sets:
            raise p.fail(("matrix", "sets"), f"expected a list of {{flag: value}} mappings, got {describe(sets)}")
        for i, item in enumerate(sets):
            p.mapping(("matrix", "sets", i), item, "flag: value")
            for key, v in item.items():
                _check_value(p, ("matrix", "sets", i, key), v)
    configs = expand_matrix(product, sets)
    if not configs:
        raise p.fail(("matrix",), "names no configuration: give product: {flag: [values]} or sets: [{flag: value}]")
    slo_source = "--slo" if slo_text is not None else f"{file}:{lines.get(('slo',), (0, 0))[1]}: slo"
    slo_value = slo_text if slo_text is not None else data.get("slo", "ttft_p99<500ms,itl_p99<50ms")
    slo = parse_slo(str(slo_value), slo_source)
    early = data.get("early_stop", {})
    if isinstance(early, bool):
        early = {"enabled": early}
    early = p.mapping(("early_stop",), early, "enabled, window_s, min_requests")
    p.keys(("early_stop",), early, EARLY_STOP_KEYS)
    enabled = early.get("enabled", True)
    if not isinstance(enabled, bool):
        raise p.fail(("early_stop", "enabled"), f"expected true or false, got {describe(enabled)}")
    window = p.number(("early_stop", "window_s"), early.get("window_s", EarlyStop.window_s))
    min_requests = p.number(("early_stop", "min_requests"), early.get("min_requests", EarlyStop.min_requests), 1, False)
    out = output_dir if output_dir is not None else data.get("output_dir", f"sweeps/{file_path.stem}")
    if not isinstance(out, str) or not out.strip():
        raise p.fail(("output_dir",), f"expected a directory path, got {describe(out)}")
    timeout = p.number(("startup_timeout_s",), data.get("startup_timeout_s", 600.0))
    grace = p.number(("stop_grace_s",), data.get("stop_grace_s", 5.0), strict=False)
    vllm_model = data.get("vllm_model")
    if vllm_model is not None and not (isinstance(vllm_model, str) and vllm_model.strip()):
        raise p.fail(("vllm_model",), f"expected a model name, got {describe(vllm_model)}")
    name = data.get("name", file_path.stem)
    if repeats is None:
        repeats_value = data.get("repeats", 1)
        if (
            isinstance(repeats_value, bool)
            or not isinstance(repeats_value, int)
            or not 1 <= repeats_value <= MAX_REPEATS
        ):
            raise p.fail(
                ("repeats",), f"expected a whole number from 1 to {MAX_REPEATS}, got {describe(repeats_value)}"
            )
        repeats = repeats_value
    return SweepSpec(
        name=str(name),
        path=file,
        scenario=scenario,
        sets=_sets(p, data.get("set")),
        serve=serve.strip(),
        configs=configs,
        schedule=_schedule(p, data["load"]),
        slo=slo,
        search=_search(p, data["load"], slo),
        early_stop=EarlyStop(bool(enabled), window, int(min_requests)),
        output_dir=out,
        startup_timeout_s=timeout,
        stop_grace_s=grace,
        vllm_model=vllm_model,
        description=str(data.get("description", "") or ""),
        repeats=repeats,
        raw=data,
    )
