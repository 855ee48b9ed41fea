"""A sweep: one scenario ramped against a server started with each of several sets of
serve arguments, and the table that compares them.

This module is the sweep's pure part: reading ``SWEEP.yaml`` (errors name the file, line
and key, as scenario errors do), expanding its matrix into configurations, putting a
configuration's arguments into the serve command, the figures of one configuration's run
(``config_row``), the Pareto front, the best configuration and the tables printed at the
end. Starting servers and running the load is ``rampwatch.app.sweep``'s.

Definitions (docs/tuning.md says the same):

- *good request*: ended OK with every latency within the SLO's bound read as a
  per-request limit (``Slo.per_request_ms``), as ``vllm bench serve --goodput`` counts it;
- *max good-put*: the most good requests ending in any ``GOODPUT_WINDOW_S`` seconds of the
  run, per second;
- *at the knee*: the requests sent in the ``KNEE_WINDOW_S`` seconds before the knee's
  onset (without a knee: before the load's end), the load the server last kept up with;
- *output tok/s*: what the server delivered (the tokens of the requests that ended OK)
  in the ``KNEE_WINDOW_S`` seconds from the knee's onset — saturated, the server's
  capacity — or, without a knee, in the load's last ``KNEE_WINDOW_S`` seconds;
- *tok/s per user*: at the knee, output tokens over the summed request latencies, which
  is the output throughput divided by the mean number of requests in flight (Little's
  law) — what ``vllm bench sweep plot_pareto`` plots as tokens/s/user;
- *GPUs*: tensor × pipeline × data parallel size of the configuration's arguments;
- *knee ±*: how far the per-second offered rates the knee detector's window averaged
  reach from its estimate (the knee event's ``offered_rps_range``);
- *loaded to its limit*: a knee was declared, or the requests sent in the load's last
  ``KNEE_WINDOW_S`` seconds broke the SLO; a configuration that was not is never on the
  front nor best (``BEST_RULE``);
- *repeats*: each figure the median of the runs, ``spread`` the min–max of the
  ``SPREAD_KEYS``.
"""

from __future__ import annotations

import itertools
import math
import shlex
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rampwatch.core.errors import UserError
from rampwatch.core.figures import stats
from rampwatch.core.figures.knee_explanation import KneeExplanation
from rampwatch.core.figures.slo import Slo, parse_slo
from rampwatch.core.figures.summary import gpu_figures, knee_explanation, server_figures, tokens_per_joule
from rampwatch.core.redact import redact_value
from rampwatch.core.timeline import CANCELLED, Event, NullSink, RequestRecord, ServerSample, Tick
from rampwatch.loadgen.workload.scenario_files import BUILTIN_SCENARIOS, SWEEP_PREFIX, resolve_scenario_path
from rampwatch.loadgen.workload.scenario_files import read_yaml as _read_yaml
from rampwatch.loadgen.workload.spec_checks import KeyPath as Path_
from rampwatch.loadgen.workload.spec_checks import describe, dotted, is_number, unknown_key_message

GOODPUT_WINDOW_S = 10.0
KNEE_WINDOW_S = 10.0
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
LOAD_KEYS = ("ramp", "rates", "hold_s", "arrival")
RAMP_KEYS = ("start_rps", "end_rps", "duration_s")
EARLY_STOP_KEYS = ("enabled", "window_s", "min_requests")
ARRIVALS = ("poisson", "constant", "gamma")
# Serve flags whose product is the number of GPUs a configuration uses.
GPU_FLAGS = {
    "--tensor-parallel-size": ("-tp",),
    "--pipeline-parallel-size": ("-pp",),
    "--data-parallel-size": ("-dp", "--engines"),
}


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
    repeats: int = 1  # runs of each configuration: the table gives their median and spread
    raw: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- reading


class _Problems:
    def __init__(self, file: str, lines: dict[Path_, tuple[int, int]]) -> None:
        self.file, self.lines = file, lines

    def fail(self, path: Path_, message: str, at_key: bool = False) -> UserError:
        where = path
        while where and where not in self.lines:
            where = where[:-1]
        key = dotted(path)
        if not where:
            return UserError(f"{self.file}: {key}: {message}" if key else f"{self.file}: {message}")
        key_line, value_line = self.lines[where]
        return UserError(f"{self.file}:{key_line if at_key or where != path else value_line}: {key}: {message}")

    def keys(self, path: Path_, value: dict, allowed: Sequence[str]) -> None:
        for key in value:
            if key not in allowed:
                raise self.fail(path + (key,), unknown_key_message(key, allowed), True)

    def mapping(self, path: Path_, value: Any, what: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping ({what}), got {describe(value)}")
        return value

    def number(self, path: Path_, value: Any, minimum: float = 0.0, strict: bool = True) -> float:
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


def _check_value(p: _Problems, path: Path_, value: Any) -> Any:
    if isinstance(value, bool) or is_number(value) or (isinstance(value, str) and value.strip()):
        return value
    raise p.fail(path, f"expected a number, a string or true/false, got {describe(value)}")


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
    data, lines = _read_yaml(file_path)
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
        early_stop=EarlyStop(bool(enabled), window, int(min_requests)),
        output_dir=out,
        startup_timeout_s=timeout,
        stop_grace_s=grace,
        vllm_model=vllm_model,
        description=str(data.get("description", "") or ""),
        repeats=repeats,
        raw=data,
    )


# --------------------------------------------------------------------------- serve arguments


def _flag_of(token: str) -> str:
    return token.split("=", 1)[0]


def _negation(flag: str) -> str:
    return "--" + flag[5:] if flag.startswith("--no-") else "--no-" + flag[2:]


def render_args(args: dict[str, Any]) -> list[str]:
    """A configuration's arguments as command-line words: ``True`` is the bare flag,
    ``False`` its ``--no-`` form (as ``vllm bench sweep`` writes booleans)."""
    out: list[str] = []
    for flag, value in args.items():
        if value is True:
            out.append(flag)
        elif value is False:
            out.append(_negation(flag))
        else:
            out += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return out


def apply_args(argv: Sequence[str], args: dict[str, Any]) -> list[str]:
    """``argv`` with each flag of ``args`` set: any occurrence of the flag (``--f v``,
    ``--f=v``, the bare ``--f`` or its ``--no-f``) removed, the configuration's appended."""
    replaced = set()
    for flag in args:
        replaced |= {flag, _negation(flag)}
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("-") and _flag_of(token) in replaced:
            takes_value = "=" not in token and i + 1 < len(argv) and not argv[i + 1].startswith("--")
            i += 2 if takes_value else 1
            continue
        out.append(token)
        i += 1
    return out + render_args(args)


def flag_values(argv: Sequence[str]) -> dict[str, str]:
    """``--flag value`` and ``--flag=value`` pairs of a command line (last one wins;
    a bare flag maps to "")."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("-") and len(token) > 1:
            if "=" in token:
                key, value = token.split("=", 1)
                out[key] = value
            elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                out[token] = argv[i + 1]
                i += 1
            else:
                out[token] = ""
        i += 1
    return out


def gpu_count(argv: Sequence[str]) -> int:
    """GPUs a serve command uses: tensor × pipeline × data parallel size (1 each when not
    given; the simulator's ``--engines`` is its data-parallel size)."""
    values = flag_values(argv)
    total = 1
    for flag, aliases in GPU_FLAGS.items():
        for name in (flag, *aliases):
            if name in values:
                try:
                    total *= max(1, int(values[name]))
                except ValueError:
                    pass
                break
    return total


def config_label(args: dict[str, Any]) -> str:
    """The differing arguments of a configuration, as the table's first column shows them."""
    return " ".join(render_args(args)) or "(base)"


def config_slug(index: int, args: dict[str, Any]) -> str:
    """A file name for a configuration's recording: its number and arguments."""
    words = "_".join(f"{flag.lstrip('-')}={value}" for flag, value in args.items()) or "base"
    safe = "".join(c if c.isalnum() or c in "-_=." else "-" for c in words)[:80]
    return f"{index + 1:02d}-{safe}"


# Flags of `rampwatch sim` that vLLM does not have (dropped from the `vllm serve` line a
# simulator sweep prints); `--engines` is vLLM's --data-parallel-size.
SIM_ONLY_FLAGS = (
    "--hardware",
    "--model",
    "--host",
    "--port",
    "--seed",
    "--speed",
    "--eos-probability",
    "--step-overhead-ms",
    "--per-request-overhead-us",
    "--routing",
    "--gpu-telemetry",
    "--error-rate",
    "--abort-rate",
    "--metrics-error-rate",
    "--stall-at",
    "--stall-for",
    "--chunk-gaps-out",
)


# The simulator's spelling of a vLLM argument -> vLLM's.
SIM_RENAMED = {"--engines": "--data-parallel-size", "--num-gpu-blocks": "--num-gpu-blocks-override"}


def is_sim_command(argv: Sequence[str]) -> bool:
    return len(argv) >= 2 and Path(argv[0]).name == "rampwatch" and argv[1] == "sim"


def vllm_serve_argv(argv: Sequence[str], model: str | None) -> list[str]:
    """The ``vllm serve`` words of a serve command: itself when it is one; for a
    ``rampwatch sim`` command, ``vllm serve MODEL`` with the simulator's vLLM arguments
    (its own knobs dropped, ``SIM_RENAMED`` in vLLM's spelling)."""
    if not is_sim_command(argv):
        return list(argv)
    out = ["vllm", "serve", model or "MODEL"]
    rest = list(argv[2:])
    i = 0
    while i < len(rest):
        token = rest[i]
        flag = _flag_of(token)
        takes_value = "=" not in token and i + 1 < len(rest) and not rest[i + 1].startswith("--")
        words = rest[i : i + (2 if takes_value else 1)]
        i += len(words)
        if flag in SIM_ONLY_FLAGS:
            continue
        if flag in SIM_RENAMED:
            renamed = SIM_RENAMED[flag]
            words = [renamed, *words[1:]] if "=" not in token else [f"{renamed}={token.split('=', 1)[1]}"]
        out += words
    return out


def command_line(argv: Sequence[str]) -> str:
    """Words as one line a shell reads back to the same words."""
    return shlex.join(list(argv))


def shown_command(argv: Sequence[str]) -> str:
    """``command_line`` with secrets masked (``--api-key X``): what is printed and kept."""
    return command_line(redact_value(list(argv)))


# --------------------------------------------------------------------------- figures


def good_requests(requests: Sequence[RequestRecord], slo: Slo) -> np.ndarray:
    """Which requests are good: ended OK with every latency within the SLO's per-request
    limits (vLLM's ``--goodput`` rule; a request with one token has TPOT 0)."""
    ok = [r.ok and r.ttft is not None for r in requests]
    ttft = np.array([r.ttft if r.ttft is not None else math.inf for r in requests], dtype=float)
    tpot = np.array([r.tpot or 0.0 for r in requests], dtype=float)
    e2el = np.array([r.e2e for r in requests], dtype=float)
    if not requests:
        return np.zeros(0, dtype=bool)
    return np.array(ok, dtype=bool) & stats.meets_slo(ttft, tpot, e2el, slo.per_request_ms())


def max_window_rate(times: np.ndarray, window_s: float = GOODPUT_WINDOW_S) -> float:
    """The most of ``times`` falling in any ``window_s``-long interval, per second; 0.0
    for none. Windows start at an event, so a window shorter than the run is never
    stretched over empty time."""
    if len(times) == 0:
        return 0.0
    t = np.sort(np.asarray(times, dtype=float))
    ends = np.searchsorted(t, t + window_s, side="left")
    return float((ends - np.arange(len(t))).max()) / window_s


def max_goodput_rps(requests: Sequence[RequestRecord], slo: Slo, window_s: float = GOODPUT_WINDOW_S) -> float:
    good = good_requests(requests, slo)
    ends = np.array([r.end_at for r in requests], dtype=float)
    return max_window_rate(ends[good] if len(ends) else ends, window_s)


def knee_event(events: Sequence[Event]) -> Event | None:
    return next((e for e in events if e.kind == "knee"), None)


def delivered_tps(requests: Sequence[RequestRecord], t_from: float, t_to: float) -> float | None:
    """Output tokens per second the server delivered in ``[t_from, t_to]``: the tokens of
    the requests that ended OK in it, over its length (None for an empty span)."""
    if t_to <= t_from:
        return None
    return float(sum(stats.output_len(r) for r in requests if r.ok and t_from <= r.end_at <= t_to)) / (t_to - t_from)


def window_figures(requests: Sequence[RequestRecord], t_from: float, t_to: float) -> dict[str, float | None]:
    """Of the requests *sent* in ``[t_from, t_to)`` that ended OK: TTFT and ITL p50/p99 in
    ms and tok/s per user (their tokens over their summed latencies)."""
    ok = [r for r in requests if r.ok and t_from <= r.sent_at < t_to and r.first_token_at is not None]
    if not ok:
        return dict.fromkeys(("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "tps_per_user"))
    ttft = np.array([r.ttft for r in ok], dtype=float)
    itls = np.concatenate([stats.itl_array(r) for r in ok])
    tokens = float(sum(stats.output_len(r) for r in ok))
    latency = float(sum(r.e2e for r in ok))

    def pct(values: np.ndarray, q: float) -> float | None:
        return float(np.percentile(values, q)) * 1000 if len(values) else None

    return {
        "ttft_p50_ms": pct(ttft, 50),
        "ttft_p99_ms": pct(ttft, 99),
        "itl_p50_ms": pct(itls, 50),
        "itl_p99_ms": pct(itls, 99),
        "tps_per_user": tokens / latency if latency > 0 else None,
    }


def slo_breaks(window: Sequence[RequestRecord], slo: Slo) -> list[str]:
    """What of the SLO these requests break (cancelled ones aside): a latency percentile
    over its bound (TTFT and ITL of the successful ones) or the failed fraction over the
    SLO's error rate; empty when they meet it."""
    judged = [r for r in window if r.error_class != CANCELLED]
    if not judged:
        return []
    ok = [r for r in judged if r.ok and r.first_token_at is not None]
    values = {
        "ttft": np.array([r.ttft for r in ok], dtype=float),
        "itl": np.concatenate([stats.itl_array(r) for r in ok]) if ok else np.zeros(0),
        "tpot": np.array([r.tpot for r in ok if r.tpot is not None], dtype=float),
        "e2el": np.array([r.e2e for r in ok], dtype=float),
    }
    failed = sum(1 for r in judged if not r.ok)
    return slo.violations(values, failed / len(judged))


def peak_target_rps(schedule: dict[str, Any], t: float) -> float | None:
    """The highest rate a sweep's load (``SweepSpec.schedule``: a linear ramp or steps)
    asked for up to run time ``t`` (its last send): what a configuration that never
    reached its limit was shown to keep up with."""
    if schedule.get("kind") == "linear":
        start, end, duration = schedule["start_rps"], schedule["end_rps"], schedule["duration_s"]
        reached = start + (end - start) * min(1.0, max(0.0, t / duration))
        return max(start, reached)
    if schedule.get("kind") == "steps":
        rates: list[float] = []
        elapsed = 0.0
        for step in schedule["steps"]:
            if elapsed > t and rates:
                break
            rates.append(step["rate"])
            elapsed += step["duration_s"]
        return max(rates, default=None)
    return None


def config_row(
    requests: Sequence[RequestRecord],
    samples: Sequence[ServerSample],
    events: Sequence[Event],
    slo: Slo,
    load_end_s: float | None = None,
    schedule: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The table's figures for one configuration's run (see the module's definitions)."""
    knee = knee_event(events)
    why = KneeExplanation.from_dict(knee_explanation(events))  # as the review settled it
    sends = [r.sent_at for r in requests if r.error_class != CANCELLED]
    last_send = max(sends, default=0.0)
    if knee is not None:
        at = float(knee.data.get("onset_t", knee.t))
    else:
        at = min(load_end_s, last_send) if load_end_s is not None else last_send
    # The window starts no earlier than the load (a knee 6 s into a run has 6 s before it).
    first_send = min(sends, default=0.0)
    window = (max(first_send, at - KNEE_WINDOW_S), at + (0 if knee is not None else 1e-9))
    figures = window_figures(requests, *window)
    # The server's output once saturated: from the knee's onset on (to the last answer at
    # most); without a knee, over the load's last seconds.
    last_end = max((r.end_at for r in requests if r.ok), default=at)
    if knee is not None:
        figures["output_tps"] = delivered_tps(requests, at, min(at + KNEE_WINDOW_S, last_end))
    else:
        figures["output_tps"] = delivered_tps(requests, max(first_send, at - KNEE_WINDOW_S), at)
    # Without a knee, the load still reached the configuration's limit when the requests
    # sent in its last seconds broke the SLO: more load would not serve more users.
    broken = [] if knee is not None else slo_breaks([r for r in requests if window[0] <= r.sent_at < window[1]], slo)
    server = server_figures(samples)
    judged = [r for r in requests if r.error_class != CANCELLED]
    failed = sum(1 for r in judged if not r.ok)
    knee_rps = float(knee.data["offered_rps"]) if knee is not None and "offered_rps" in knee.data else None
    return {
        "knee_rps": knee_rps,
        "knee_rps_pm": knee_uncertainty(knee_rps, None if knee is None else knee.data.get("offered_rps_range")),
        "knee_t": at if knee is not None else None,
        "reached": knee is not None or bool(broken),
        "slo_broken_at_end": "; ".join(broken) or None,
        "peak_offered_rps": None if schedule is None else peak_target_rps(schedule, last_send),
        "max_goodput_rps": max_goodput_rps(requests, slo),
        **figures,
        "peak_kv_pct": server.get("max_kv_usage_pct"),
        # over the whole run, as the run's summary gives it; None without GPU power
        "tokens_per_joule": tokens_per_joule(
            sum(stats.output_len(r) for r in requests if r.ok), gpu_figures(samples).get("energy_j")
        ),
        "preemptions": server.get("preemptions"),
        "limit": None if why is None else why.title,
        "limit_key": None if why is None else why.limit,
        "try_next": None if why is None else why.try_next,
        "requests": len(judged),
        "failed": failed,
        "error_rate": failed / len(judged) if judged else 0.0,
    }


def knee_uncertainty(knee_rps: float | None, offered_range: Sequence[float] | None) -> float | None:
    """The ± of a knee estimate: how far the offered rates its window averaged reach
    from it on either side (``KneeDetector``'s ``offered_rps_range``); None without them."""
    if knee_rps is None or not offered_range or len(offered_range) != 2:
        return None
    lo, hi = float(offered_range[0]), float(offered_range[1])
    return max(knee_rps - lo, hi - knee_rps, 0.0)


# A configuration's figures that repeats give a median and a min–max spread of.
SPREAD_KEYS = ("knee_rps", "max_goodput_rps", "output_tps", "tps_per_user")


def combine_runs(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's row from the figures of its repeated runs (``config_row``'s):
    each figure's median over the runs that have it, ``spread`` the min and max of the
    ``SPREAD_KEYS``; reached only when every run reached its limit (a limit that one run
    of three missed is not established); the limit the runs named most. One run is
    itself."""
    if len(runs) == 1:
        return dict(runs[0])
    out: dict[str, Any] = {}
    for key in {k for run in runs for k in run}:
        values = [run.get(key) for run in runs]
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numbers and len(numbers) == len([v for v in values if v is not None]):
            out[key] = float(np.median(numbers))
        else:
            present = [v for v in values if v is not None]
            out[key] = max(present, key=present.count) if present else None
    out["reached"] = all(run.get("reached") for run in runs)
    limits = [run.get("limit") for run in runs if run.get("limit")]
    if limits:
        common = max(limits, key=limits.count)
        first = next(run for run in runs if run.get("limit") == common)
        out.update(limit=common, limit_key=first.get("limit_key"), try_next=first.get("try_next"))
    out["spread"] = {
        key: [min(vals), max(vals)]
        for key in SPREAD_KEYS
        if (vals := [float(run[key]) for run in runs if run.get(key) is not None])
    }
    return out


def pareto_front(points: Sequence[tuple[float | None, float | None]]) -> list[bool]:
    """Which points no other point beats on both axes (higher is better on each): a point
    is off the front when another is at least as good on both and better on one. A point
    with a missing coordinate is never on it."""
    out = []
    for i, (x, y) in enumerate(points):
        if x is None or y is None or math.isnan(x) or math.isnan(y):
            out.append(False)
            continue
        dominated = False
        for j, (x2, y2) in enumerate(points):
            if j == i or x2 is None or y2 is None or math.isnan(x2) or math.isnan(y2):
                continue
            if x2 >= x and y2 >= y and (x2 > x or y2 > y):
                dominated = True
                break
        out.append(not dominated)
    return out


BEST_RULE = (
    "best: of the configurations loaded to their limit (a knee, or the SLO broken), those on the "
    "Pareto front (tok/s/user vs out tok/s per GPU), the highest max good-put (tie: fewer GPUs, "
    "then out tok/s); a configuration whose load never reached its limit is never best"
)


def limit_reached(row: dict[str, Any]) -> bool:
    """Whether a configuration's load reached its limit (a row from before the sweep
    judged that: whether it had a knee)."""
    return bool(row["reached"]) if "reached" in row else row.get("knee_rps") is not None


def loaded_to_limit(row: dict[str, Any]) -> bool:
    """A completed configuration whose load reached its limit: its figures are its
    capacity, not whatever load the sweep happened to stop at."""
    return row.get("status") == "done" and limit_reached(row)


def mark_pareto(rows: list[dict[str, Any]]) -> None:
    """Set each row's ``tps_per_gpu`` and ``pareto``: on the front of tok/s per user vs
    tok/s per GPU among the configurations loaded to their limit (one that never was has
    figures from below its limit, so it is not compared)."""
    points: list[tuple[float | None, float | None]] = []
    for row in rows:
        out = row.get("output_tps")
        row["tps_per_gpu"] = None if out is None else out / max(1, row.get("gpus", 1))
        points.append((row.get("tps_per_user"), row["tps_per_gpu"]) if loaded_to_limit(row) else (None, None))
    for row, on in zip(rows, pareto_front(points), strict=True):
        row["pareto"] = on


def choose_best(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The sweep's verdict by ``BEST_RULE`` over rows ``mark_pareto`` has marked: ``best``
    (an index, or None), ``not_reached`` (completed configurations whose load never
    reached their limit: extend the load to judge them) and ``overlap`` (configurations
    whose good-put spread over repeats overlaps the best's: not distinguishable from it)."""
    not_reached = [i for i, row in enumerate(rows) if row.get("status") == "done" and not limit_reached(row)]
    candidates = [
        i
        for i, row in enumerate(rows)
        if loaded_to_limit(row) and row.get("pareto") and (row.get("max_goodput_rps") or 0) > 0
    ]
    best = (
        max(
            candidates,
            key=lambda i: (rows[i]["max_goodput_rps"], -rows[i].get("gpus", 1), rows[i].get("output_tps") or 0.0),
        )
        if candidates
        else None
    )
    overlap: list[int] = []
    if best is not None and "max_goodput_rps" in (rows[best].get("spread") or {}):
        lo, hi = rows[best]["spread"]["max_goodput_rps"]
        for i, row in enumerate(rows):
            other = (row.get("spread") or {}).get("max_goodput_rps")
            if i != best and loaded_to_limit(row) and other and other[0] <= hi and lo <= other[1]:
                overlap.append(i)
    return {"best": best, "not_reached": not_reached, "overlap": overlap}


def best_config(rows: Sequence[dict[str, Any]]) -> int | None:
    """The index of the best configuration by ``BEST_RULE`` (rows marked by
    ``mark_pareto``); None when no configuration loaded to its limit served a good request."""
    return choose_best(rows)["best"]


# --------------------------------------------------------------------------- early stop


class EarlyStopRule(NullSink):
    """A run's sink that calls ``on_stop(reason)`` once, at the first tick after the knee
    event at which the requests that ended in the last ``window_s`` seconds (at least
    ``min_requests`` of them, cancelled ones aside) break the SLO: a latency percentile
    over its bound (TTFT and ITL of the successful ones) or the failed fraction over the
    SLO's error rate. Before the knee nothing stops the run: a slow start is not a knee."""

    def __init__(self, slo: Slo, rule: EarlyStop, on_stop: Callable[[str], None]) -> None:
        self.slo, self.rule, self.on_stop = slo, rule, on_stop
        self._ended: deque[tuple[float, RequestRecord]] = deque()
        self.knee_at: float | None = None
        self.reason: str | None = None

    def on_request(self, record: RequestRecord) -> None:
        if record.error_class != CANCELLED:
            self._ended.append((record.end_at, record))

    def on_event(self, event: Event) -> None:
        if event.kind == "knee" and self.knee_at is None:
            self.knee_at = event.t

    def on_tick(self, tick: Tick) -> None:
        if not self.rule.enabled or self.reason is not None:
            return
        while self._ended and self._ended[0][0] < tick.t - self.rule.window_s:
            self._ended.popleft()
        if self.knee_at is None:
            return
        reason = self.check([r for _, r in self._ended])
        if reason is not None:
            self.reason = reason
            self.on_stop(reason)

    def check(self, window: Sequence[RequestRecord]) -> str | None:
        """Why these requests break the SLO (None: they meet it, or are too few)."""
        if len(window) < self.rule.min_requests:
            return None
        broken = slo_breaks(window, self.slo)
        if not broken:
            return None
        return f"past the knee, the last {self.rule.window_s:g} s break the SLO: " + "; ".join(broken)


# --------------------------------------------------------------------------- text

TABLE_COLUMNS = (
    ("#", "index"),
    ("config", "config"),
    ("knee rps", "knee_rps"),
    ("good-put", "max_goodput_rps"),
    ("out tok/s", "output_tps"),
    ("tok/s/user", "tps_per_user"),
    ("TTFT p50", "ttft_p50_ms"),
    ("TTFT p99", "ttft_p99_ms"),
    ("ITL p50", "itl_p50_ms"),
    ("ITL p99", "itl_p99_ms"),
    ("KV peak", "peak_kv_pct"),
    ("preempt", "preemptions"),
    ("tok/J", "tokens_per_joule"),
    ("limit", "limit"),
)
# Shown only when some configuration has it (GPU power known).
OPTIONAL_COLUMNS = ("tokens_per_joule",)


NOT_REACHED = "not reached; extend the load"
TABLE_LEGEND = (
    "knee rps: the offered rate at the knee ± how far the rates its 15 s window averaged reach "
    "(a slower ramp narrows it); >R: no knee up to R req/s offered",
    "* on the Pareto front; " + BEST_RULE,
)


def _number(value: float, spread: Sequence[float] | None) -> str:
    """A figure, and with repeats the min–max of the runs after it."""
    text = f"{value:.1f}"
    return text if not spread else f"{text} ({spread[0]:.1f}–{spread[1]:.1f})"


def _cell(key: str, row: dict[str, Any]) -> str:
    value = row.get(key)
    done = row.get("status") == "done"
    spread = (row.get("spread") or {}).get(key)
    if key == "index":
        return f"{int(row['index']) + 1}{'*' if row.get('pareto') else ''}"
    if key == "config":
        return str(value)
    if key == "limit":
        if not done and row.get("status") is not None:
            return str(row.get("status"))
        if done and not limit_reached(row):
            return NOT_REACHED
        if done and value is None and row.get("slo_broken_at_end"):
            return "SLO broken, no knee"
        return str(value) if value else "—"
    if key == "knee_rps" and done and value is None:
        peak = row.get("peak_offered_rps")
        return f">{peak:.1f}" if peak is not None and not limit_reached(row) else "none"
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if key == "knee_rps":
        pm = row.get("knee_rps_pm")
        text = f"{value:.1f}" if pm is None else f"{value:.1f} ±{pm:.1f}"
        return text if not spread else f"{text} ({spread[0]:.1f}–{spread[1]:.1f})"
    if key == "peak_kv_pct":
        return f"{value:.0f}%"
    if key == "preemptions":
        return f"{value:.0f}"
    if key == "tokens_per_joule":
        return f"{value:.2f}"
    if key.endswith("_ms"):
        return f"{value:.0f}"
    return _number(value, spread)


def table_cells(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """The sweep table's text: a header row then one row per configuration (``*`` after
    the number marks the Pareto front). A configuration that failed shows its status in
    the last column and its reason under the table."""
    columns = table_columns(rows)
    out = [[header for header, _ in columns]]
    for row in rows:
        out.append([_cell(key, row) for _, key in columns])
    return out


def table_columns(rows: Sequence[dict[str, Any]]) -> list[tuple[str, str]]:
    """``TABLE_COLUMNS`` less the optional ones no row has a figure for."""
    return [
        (header, key)
        for header, key in TABLE_COLUMNS
        if key not in OPTIONAL_COLUMNS or any(row.get(key) is not None for row in rows)
    ]


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    cells = table_cells(rows)
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = []
    for r in cells:
        line = "  ".join(
            c.ljust(w) if i in (0, 1, len(r) - 1) else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        lines.append(line.rstrip())
    for row in rows:
        if row.get("status") not in ("done", None) and row.get("reason"):
            lines.append(f"#{row['index'] + 1} {row['status']}: {row['reason']}")
    lines += ["", *TABLE_LEGEND]
    return "\n".join(lines)


def knee_text(row: dict[str, Any]) -> str:
    """The knee as the end lines say it: its rate and uncertainty, or that the load
    never reached the configuration's limit (and the most it offered)."""
    if row.get("knee_rps") is None:
        if limit_reached(row):
            return "none (the SLO broke first)"
        peak = row.get("peak_offered_rps")
        return NOT_REACHED + ("" if peak is None else f" (kept up to {peak:.1f} rps offered)")
    pm = row.get("knee_rps_pm")
    return f"{row['knee_rps']:.1f}" + ("" if pm is None else f" ±{pm:.1f}") + " rps"


def knee_breaches(row: dict[str, Any], slo: str | None) -> list[str]:
    """The SLO's percentile bounds that the row's figures at its knee break ("TTFT p99
    814 ms > 500 ms"): the table shows them beside a best chosen by good-put, which
    judges each request, so the verdict says so rather than leave them to contradict it."""
    try:
        bounds = parse_slo(slo).bounds if slo else ()
    except UserError:
        return []
    out = []
    for b in bounds:
        value = row.get(f"{b.metric}_p{b.percentile:g}_ms")
        if isinstance(value, (int, float)) and math.isfinite(value) and value > b.limit_ms:
            out.append(f"{b.metric.upper()} p{b.percentile:g} {value:.0f} ms > {b.limit_ms:g} ms")
    return out


def verdict_text(state: dict[str, Any]) -> str:
    """The sweep's verdict by ``loadgen.sweep.BEST_RULE``: the best configuration as
    commands ready to paste, the ones its repeats cannot tell from it, and the
    configurations whose load never reached their limit (not judged)."""
    best = state.get("best")
    slo = state.get("slo")
    rows = state["rows"]
    not_reached = state.get("not_reached") or []
    lines = []
    if best is None:
        if not any(r.get("status") == "done" for r in rows):
            why = "no configuration completed"
        elif not any(loaded_to_limit(r) for r in rows):
            why = "no configuration was loaded to its limit: extend the load (a higher end_rps or longer ramp)"
        else:
            why = "no configuration loaded to its limit served a request meeting the SLO"
        lines.append(f"best under {slo}: none — {why}")
    else:
        row = rows[best]
        lines.append(
            f"best under {slo} (of those loaded to their limit, on the Pareto front, the highest max good-put): "
            f"#{best + 1} {row['config']} — {row['max_goodput_rps']:.1f} good req/s, knee {knee_text(row)}"
        )
        if row.get("vllm_command"):
            lines.append(f"  {row['vllm_command']}")
            lines.append(f"  (simulator: {row['command']})")
        else:
            lines.append(f"  {row['command']}")
        breaches = knee_breaches(row, slo)
        if breaches:
            lines.append(
                f"  at its knee #{best + 1} breaks the SLO ({', '.join(breaches)}): good-put judges each request "
                f"against the bounds, so run it at its max good-put ({row['max_goodput_rps']:.1f} req/s), not its knee"
            )
        repeats = state.get("repeats", 1)
        for i in state.get("overlap") or []:
            lines.append(
                f"#{best + 1} and #{i + 1} overlap (good-put over {repeats} runs): not distinguishable at {repeats} repeats"
            )
    for i in not_reached:
        lines.append(f"#{i + 1} {rows[i]['config']}: {knee_text(rows[i])} — not judged")
    return "\n".join(lines)


def place_labels(points: Sequence[tuple[int, int, str]], width: int, height: int) -> list[tuple[int, int, str]]:
    """Grid positions (row, column, label) for labels wanted at (row, column): each keeps
    a blank cell from the ones placed before it, moving right, then to the rows above and
    below, so that two close points never print as one number (``23`` for #2 and #3)."""
    taken: set[tuple[int, int]] = set()
    placed = []
    for row, col, label in points:
        spots = [(row + dr, col + dc) for dr in (0, -1, 1, -2, 2) for dc in range(0, width)]
        for r, c in spots:
            cells = {(r, k) for k in range(c - 1, c + len(label) + 1)}
            if 0 <= r < height and 0 <= c and c + len(label) <= width and not cells & taken:
                break
        else:
            r, c = row, col  # no room anywhere: overprint rather than drop a point
        taken |= {(r, k) for k in range(c, c + len(label))}
        placed.append((r, c, label))
    return placed


def format_pareto(rows: Sequence[dict[str, Any]], width: int = 50, height: int = 12) -> str:
    """The Pareto plane as text: tok/s per user across, tok/s per GPU up; each completed
    configuration is its number, ``*`` beside those on the front, in brackets when its
    load never reached its limit (its point is below its capacity)."""
    pts = [
        (row["index"], row["tps_per_user"], row["tps_per_gpu"], bool(row.get("pareto")), limit_reached(row))
        for row in rows
        if row.get("status") == "done" and row.get("tps_per_user") is not None and row.get("tps_per_gpu") is not None
    ]
    if not pts:
        return "Pareto front: no completed configuration with figures"
    xmax = max(p[1] for p in pts) * 1.05 or 1.0
    ymax = max(p[2] for p in pts) * 1.05 or 1.0
    grid = [[" "] * width for _ in range(height)]
    wanted = []
    for index, x, y, on, reached in pts:
        label = f"{index + 1}{'*' if on else ''}"
        wanted.append(
            (
                height - 1 - min(height - 1, int(y / ymax * (height - 1))),
                min(width - 4, int(x / xmax * (width - 4))),
                label if reached else f"({label})",
            )
        )
    for row, col, label in place_labels(wanted, width, height):
        for k, ch in enumerate(label):
            if col + k < width:
                grid[row][col + k] = ch
    lines = [f"tok/s per GPU (top {ymax:.0f})"]
    lines += ["│" + "".join(r).rstrip() for r in grid]
    lines.append("└" + "─" * width)
    front = ", ".join(f"#{p[0] + 1}" for p in pts if p[3]) or "none"
    lines.append(f" tok/s per user → (right edge {xmax:.1f});  * on the Pareto front: {front}")
    if any(not p[4] for p in pts):
        lines.append(" (n): not loaded to its limit — below its capacity, not compared")
    return "\n".join(lines)
