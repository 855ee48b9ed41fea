"""A set of repeated runs (`rampwatch run --repeats N`): each repeat's figures, their
combination as mean ± 95 % interval (``core.figures.intervals``), the combined result
JSON, the summary's text, and the set file that names the repeats' recordings
(``REC.repeats.json``), which `rampwatch compare` reads.

The figures of a repeat are its result JSON's numbers (`vllm bench serve`'s summary
keys, and ``cancelled``: the requests the run cancelled, its ``rampwatch_cancelled``) plus
its knee (``knee_rps``, the knee event's offered rate) and its max good-put
(``max_goodput_rps``: the most requests meeting the scenario's SLO ending in any 10 s,
per second; without an SLO every successful request counts).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rampwatch.core import strict_json
from rampwatch.core.errors import UserError
from rampwatch.core.figures import stats
from rampwatch.core.figures.intervals import CONFIDENCE, MeanInterval, mean_interval
from rampwatch.core.figures.sweep import knee_event, max_window_rate
from rampwatch.core.files import private_file
from rampwatch.core.text import printable
from rampwatch.record.reader import Recording

SET_FORMAT = "rampwatch-repeats"
SET_VERSION = 1
SET_SUFFIX = ".repeats.json"
# The figures a repeat adds to its result JSON's (``rampwatch_`` in the result JSON).
EXTRA_FIGURES = ("knee_rps", "max_goodput_rps")
# Summary keys that are settings or counts of the load, not measurements: kept from the
# first repeat, never averaged (the same in every repeat).
_SETTINGS = frozenset(
    {"request_rate", "burstiness", "max_concurrency", "num_prompts", "ramp_up_start_rps", "ramp_up_end_rps"}
)


def repeat_recording(base: Path, k: int) -> Path:
    """Repeat ``k``'s (1-based) file beside ``base``: ``REC-r1.rwrec`` for ``REC.rwrec``."""
    return base.with_name(f"{base.stem}-r{k}{base.suffix}")


def set_file(base: Path) -> Path:
    """The set file beside the base recording: ``REC.repeats.json``."""
    return base.with_name(base.stem + SET_SUFFIX)


def recording_extras(recording: Recording, slo_ms: Mapping[str, float] | None) -> dict[str, float | None]:
    """A repeat's knee and max good-put from its recording."""
    knee = knee_event(recording.events)
    knee_rps = float(knee.data["offered_rps"]) if knee is not None and "offered_rps" in knee.data else None
    ends: list[float] = []
    for r in recording.iter_requests():
        if not r.ok or r.ttft is None:
            continue
        if slo_ms:
            good = stats.meets_slo(
                np.array([r.ttft]), np.array([r.tpot or 0.0]), np.array([r.e2e]), dict(slo_ms),
                ttfa_s=np.array([math.inf if r.ttfa is None else r.ttfa]),
            )  # fmt: skip
            if not bool(good[0]):
                continue
        ends.append(r.end_at)
    return {"knee_rps": knee_rps, "max_goodput_rps": max_window_rate(np.array(ends, dtype=float))}


def numeric_figures(result: Mapping[str, Any]) -> dict[str, float]:
    """A result JSON's measured numbers (vLLM's summary keys): numbers at the top level,
    not the load's settings, not ``rampwatch_`` additions or per-request lists; and
    ``cancelled`` (its ``rampwatch_cancelled``: vLLM's keys have no count of them, and a
    drain that cancels shrinks ``completed``). A result JSON without it has no ``cancelled``.
    A repeat that completed no request has no latency figures (vLLM's 0 there is no
    measurement: in a mean it would pull the others down)."""
    out = {
        k: float(v)
        for k, v in result.items()
        if _finite_number(v) and not k.startswith("rampwatch_") and k not in _SETTINGS
    }
    if out.get("completed") == 0:  # vLLM writes 0 for the latencies of no request: none were measured
        out = {k: v for k, v in out.items() if not k.endswith("_ms")}
    cancelled = result.get("rampwatch_cancelled")
    if isinstance(cancelled, (int, float)) and _finite_number(cancelled):
        out["cancelled"] = float(cancelled)
    return out


def _finite_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def combine_figures(figures: Sequence[Mapping[str, float | None]]) -> dict[str, MeanInterval]:
    """Each figure's mean and 95 % interval over the repeats that have it, in the first
    repeat's order."""
    keys: list[str] = []
    for one in figures:
        keys += [k for k in one if k not in keys]
    out = {}
    for key in keys:
        interval = mean_interval([one.get(key) for one in figures])
        if interval is not None:
            out[key] = interval
    return out


def combined_result(
    results: Sequence[Mapping[str, Any]],
    combined: Mapping[str, MeanInterval],
    recordings: Sequence[str],
    requested: int,
) -> dict[str, Any]:
    """The combined result JSON: the first repeat's keys with every measured number
    replaced by its mean over the repeats (vLLM's keys unchanged), and
    ``rampwatch_repeats``: each figure's mean, 95 % half-width, n and values. The first
    repeat's own ``rampwatch_`` figures (server, client, phases …) are left out: one
    repeat's, they would read as the set's (each repeat's result JSON keeps them)."""
    out = {k: v for k, v in results[0].items() if not isinstance(v, list) and not k.startswith("rampwatch_")}
    for key, interval in combined.items():
        if key in out:
            out[key] = interval.mean
    out["rampwatch_repeats"] = {
        "requested": requested,
        "completed": len(results),
        "confidence": CONFIDENCE,
        "recordings": list(recordings),
        "figures": {key: interval.to_dict() for key, interval in combined.items()},
        # how many repeats found a knee (its figure is over those only; none: no knee_rps)
        "knee_reached": combined["knee_rps"].n if "knee_rps" in combined else 0,
    }
    return out


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with private_file(path, "w", encoding="utf-8") as fh:
        fh.write(strict_json.dumps(value, indent=2) + "\n")


def write_set(
    path: Path, scenario: str, requested: int, recordings: Sequence[Path], combined: Mapping[str, MeanInterval]
) -> None:
    """The set file: the repeats' recordings (relative to it where beside it) and each
    figure's per-repeat values, for `rampwatch compare`."""
    names = [os.path.relpath(p, path.parent) for p in recordings]
    write_json(
        path,
        {
            "format": SET_FORMAT,
            "version": SET_VERSION,
            "scenario": scenario,
            "requested": requested,
            "recordings": names,
            "figures": {key: interval.to_dict() for key, interval in combined.items()},
        },
    )


@dataclass(frozen=True)
class RepeatSet:
    """A set file read back: its recordings (checked to exist) and per-repeat values."""

    path: Path
    recordings: tuple[Path, ...]
    values: dict[str, tuple[float, ...]]


def is_set_file(path: str | Path) -> bool:
    return str(path).endswith(SET_SUFFIX)


def _is_finite_number(value: object) -> bool:
    """A JSON number a figure can be (not a bool, NaN, ±Infinity or an int past float's range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def read_set(path: str | Path) -> RepeatSet:
    """A set file, checked: any problem (unreadable, not JSON, not a set file, a named
    recording missing) is one ``UserError`` line naming the file."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"{p}: cannot read: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{p}: not a repeats file (damaged JSON: {printable(str(exc))})") from None
    except RecursionError:  # nested deeper than json can read
        raise UserError(f"{p}: not a repeats file (damaged JSON: nested too deep)") from None
    if not isinstance(data, dict) or data.get("format") != SET_FORMAT:
        raise UserError(f'{p}: not a repeats file (no "format": "{SET_FORMAT}")')
    names, figures = data.get("recordings"), data.get("figures")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise UserError(f'{p}: "recordings" is not a list of file names')
    if not isinstance(figures, dict):
        raise UserError(f'{p}: "figures" is not a mapping')
    # the set names its recordings beside it (as written): a path elsewhere is not one of them
    outside = [n for n in names if Path(n).name != n or n in ("", ".", "..")]
    if outside:
        raise UserError(f'{p}: "recordings" names a file outside its folder: {printable(outside[0])}')
    recordings = tuple(p.parent / n for n in names)
    missing = [str(r) for r in recordings if not r.is_file()]
    if missing:
        raise UserError(f"{p}: names recording(s) that are missing: {printable(', '.join(missing))}")
    values: dict[str, tuple[float, ...]] = {}
    for key, figure in figures.items():
        got = figure.get("values") if isinstance(figure, dict) else None
        if not isinstance(got, list) or not all(_is_finite_number(v) for v in got):
            raise UserError(f"{p}: figures.{printable(str(key))}.values is not a list of finite numbers")
        if len(got) > len(names):  # one value a repeat at most (a repeat may lack a figure)
            raise UserError(
                f"{p}: figures.{printable(str(key))}.values has {len(got)} values for {len(names)} recordings"
            )
        values[str(key)] = tuple(float(v) for v in got)
    return RepeatSet(p, recordings, values)


# The summary's rows: (figure, label, digits); a row shows where the figure was measured.
SUMMARY_ROWS: tuple[tuple[str, str, int], ...] = (
    ("completed", "Successful requests", 1),
    ("failed", "Failed requests", 1),
    ("cancelled", "Cancelled requests", 1),
    ("duration", "Benchmark duration (s)", 2),
    ("request_throughput", "Request throughput (req/s)", 2),
    ("request_goodput", "Request goodput (req/s)", 2),
    ("output_throughput", "Output token throughput (tok/s)", 2),
    ("total_token_throughput", "Total token throughput (tok/s)", 2),
    ("max_output_tokens_per_s", "Peak output token throughput (tok/s)", 2),
    ("max_concurrent_requests", "Peak concurrent requests", 1),
    ("mean_ttft_ms", "Mean TTFT (ms)", 2),
    ("median_ttft_ms", "Median TTFT (ms)", 2),
    ("p99_ttft_ms", "P99 TTFT (ms)", 2),
    ("mean_tpot_ms", "Mean TPOT (ms)", 2),
    ("median_tpot_ms", "Median TPOT (ms)", 2),
    ("p99_tpot_ms", "P99 TPOT (ms)", 2),
    ("mean_itl_ms", "Mean ITL (ms)", 2),
    ("median_itl_ms", "Median ITL (ms)", 2),
    ("p99_itl_ms", "P99 ITL (ms)", 2),
    ("mean_e2el_ms", "Mean E2E latency (ms)", 2),
    ("median_e2el_ms", "Median E2E latency (ms)", 2),
    ("p99_e2el_ms", "P99 E2E latency (ms)", 2),
    ("knee_rps", "Knee (req/s offered)", 2),
    ("max_goodput_rps", "Max good-put (req/s, 10 s)", 2),
)


def _percentile_label(key: str) -> str:
    """``p90_ttft_ms`` → ``P90 TTFT (ms)``."""
    pct, _, metric = key.removesuffix("_ms").partition("_")
    return f"{pct.upper()} {printable(metric.upper())} (ms)"


def format_set_summary(combined: Mapping[str, MeanInterval], requested: int) -> str:
    """The repeats' summary: each figure as mean ± 95 % half-width, n and the values."""
    n = max((iv.n for iv in combined.values()), default=0)
    lines = [
        "{s:{c}^{n}}".format(s=f" Repeats: mean ± 95 % interval ({n} of {requested}) ", n=78, c="="),
        f"{'figure':<40}{'mean ± 95 %':>18}  n  per repeat",
    ]
    shown = {key for key, _, _ in SUMMARY_ROWS}
    # other percentiles the run was asked for (p90 …); p50 and p99 are the median and P99 rows
    more = [k for k in combined if re.fullmatch(r"p(?!50_|99_)[0-9.]+_\w+_ms", k) and k not in shown]
    rows = [*SUMMARY_ROWS, *((k, _percentile_label(k), 2) for k in more)]
    for key, label, digits in rows:
        interval = combined.get(key)
        if key == "knee_rps" and n:  # the knee always answered: a repeat without one has no value
            lines += knee_rows(interval, n, label, digits)
            continue
        if interval is None:
            continue
        values = ", ".join(f"{v:.{digits}f}" for v in interval.values)
        lines.append(f"{label:<40}{interval.text(digits):>18} {interval.n:>2}  {values}")
    lines.append("=" * 78)
    return "\n".join(lines)


def knee_rows(interval: MeanInterval | None, repeats: int, label: str, digits: int) -> list[str]:
    """The knee's row: ``not reached in 3/3`` where no repeat found one; where some did,
    its mean ± over those, and ``reached in 2/3``."""
    if interval is None:
        return [f"{label:<40}{'-':>18} {0:>2}  not reached in {repeats}/{repeats}"]
    values = ", ".join(f"{v:.{digits}f}" for v in interval.values)
    reached = "" if interval.n >= repeats else f" (reached in {interval.n}/{repeats}: the mean is over those)"
    return [f"{label:<40}{interval.text(digits):>18} {interval.n:>2}  {values}{reached}"]


def report_set(path: str | Path, as_json: bool = False) -> int:
    """`rampwatch report REC.repeats.json`: the set's summary (mean ± 95 % interval, n and
    the values of each figure) and its recordings; ``as_json``: the figures as JSON."""
    one = read_set(path)
    combined = {key: interval for key, values in one.values.items() if (interval := mean_interval(values)) is not None}
    requested = json.loads(Path(path).read_text(encoding="utf-8")).get("requested")
    requested = requested if isinstance(requested, int) and not isinstance(requested, bool) else len(one.recordings)
    if as_json:
        figures = {key: interval.to_dict() for key, interval in combined.items()}
        knee = combined.get("knee_rps")
        out = {
            "recordings": [str(p) for p in one.recordings],
            "figures": figures,
            "knee_reached": knee.n if knee else 0,
        }
        print(strict_json.dumps(out, indent=2))
        return 0
    print(format_set_summary(combined, requested))
    print("recordings: " + printable(", ".join(str(p) for p in one.recordings)))
    return 0
