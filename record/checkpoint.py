"""The seek checkpoints a recording stores: their schema, written and read here.

A checkpoint is the state of the ``SeriesBuilder`` that a recording's replay needs
(``series_builder``) after every item up to a run time: JSON-able values plus named
numpy arrays, framed by ``format.encode_checkpoint``. The builder produces and restores
only the current schema (``SCHEMA_VERSION``); a checkpoint written by an older
rampwatch is brought to it here, by ``upgrade``, before the builder sees it.

Version 1 grew by additions while the recording format stayed at 1, so a version 1
checkpoint may lack any of them: each ``_V1_STEPS`` step fills one in as the builder of
the time had it (nothing of it so far, or those seconds unknown). A checkpoint
without a ``"schema"`` key is version 1; the key is written from version 2 on, so that
new recordings keep their bytes until the schema changes. A later version adds its
step to ``_UPGRADES``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from rampwatch.core.figures.series_bins import SESSION_RATES
from rampwatch.core.figures.stats import LogHistogram
from rampwatch.core.timeline import ERROR_SERIES, GPU_SERIES, RunHeader

# The series builder's modules are imported where first needed, as the writer and replay
# did before: importing the recording's modules stays light.
if TYPE_CHECKING:
    from rampwatch.core.figures.series import SeriesBuilder
    from rampwatch.record.reader import Recording

SCHEMA_VERSION = 1
SCHEMA_KEY = "schema"

State = dict[str, Any]
Arrays = dict[str, np.ndarray]

# A fresh builder's per-second arrays (``series_bins.Growable``): what a series added after a
# checkpoint was written starts as.
_CAPACITY = 256


class CheckpointTooOld(ValueError):
    """A checkpoint that cannot be brought to the current schema: a part of it was not
    kept then and cannot be rebuilt from the state (a replay builds from the start)."""


def series_builder(header: RunHeader | None) -> SeriesBuilder:
    """The builder a recording's checkpoints and replays are built with, started on ``header``."""
    from rampwatch.core.figures.series import SeriesBuilder

    builder = SeriesBuilder()
    if header is not None:
        builder.on_start(header)
    return builder


def write_checkpoint(builder: SeriesBuilder) -> tuple[State, Arrays]:
    """The builder's state in the current schema, to encode with ``format.encode_checkpoint``."""
    state, arrays = builder.export_state()
    if SCHEMA_VERSION > 1:
        state[SCHEMA_KEY] = SCHEMA_VERSION
    return state, arrays


def read_checkpoint(header: RunHeader | None, state: State, arrays: Arrays) -> SeriesBuilder:
    """A builder restored from a stored checkpoint of any schema (``CheckpointTooOld``,
    ``ValueError`` for one this rampwatch cannot read)."""
    from rampwatch.core.figures.series import SeriesBuilder

    state, arrays = upgrade(state, arrays)
    return SeriesBuilder.from_state(header, state, arrays)


def stored_builder(recording: Recording, t: float) -> tuple[float, SeriesBuilder] | None:
    """The recording's latest stored checkpoint at or before ``t`` as ``(time, builder)``;
    None when it has none there."""
    found = recording.checkpoint(t)
    if found is None:
        return None
    cp_time, state, arrays = found
    return cp_time, read_checkpoint(recording.header, state, arrays)


def schema_version(state: State) -> int:
    return int(state.get(SCHEMA_KEY, 1))


def upgrade(state: State, arrays: Arrays) -> tuple[State, Arrays]:
    """``(state, arrays)`` in the current schema; the arguments are left as they are."""
    version = schema_version(state)
    if version > SCHEMA_VERSION:
        raise ValueError(f"a checkpoint of schema {version}, newer than this rampwatch's {SCHEMA_VERSION}")
    state, arrays = _copy(state), dict(arrays)
    for step in range(version, SCHEMA_VERSION + 1):
        _UPGRADES[step](state, arrays)
    state.pop(SCHEMA_KEY, None)
    return state, arrays


def _copy(value: Any) -> Any:
    """A copy of a JSON-like value deep enough that the upgrade steps never touch the original."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


# ---- version 1: the additions, each as the builder of the time had it ------------------


def _complete_v1(state: State, arrays: Arrays) -> None:
    """A version 1 checkpoint of any age to the last version 1 shape (the run's builder,
    then each class's, whose arrays are under ``class<i>/``)."""
    _complete_builder(state, arrays, "", class_builder=False)
    for i, (_name, sub) in enumerate(state.get("classes", [])):
        _complete_builder(sub, arrays, f"class{i}/", class_builder=True)


def _complete_builder(state: State, arrays: Arrays, prefix: str, class_builder: bool) -> None:
    for step in _V1_STEPS:
        step(state, _Prefixed(arrays, prefix), class_builder)


class _Prefixed:
    """One builder's view of the checkpoint's arrays (a class's carry ``class<i>/``)."""

    def __init__(self, arrays: Arrays, prefix: str) -> None:
        self.arrays, self.prefix = arrays, prefix

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[self.prefix + name]

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self.arrays[self.prefix + name] = value

    def __delitem__(self, name: str) -> None:
        del self.arrays[self.prefix + name]

    def __contains__(self, name: str) -> bool:
        return self.prefix + name in self.arrays


def _require_steps(state: State, arrays: _Prefixed, class_builder: bool) -> None:
    """From before the step table: its rows would miss the run before the checkpoint."""
    if "steps" not in state:
        raise CheckpointTooOld("they predate the step table")


def _add_series(state: State, arrays: _Prefixed, table: str, name: str, fill: float, unknown_upto: int = 0) -> None:
    """A per-second series the checkpoint's builder did not have: ``fill`` from here on,
    NaN (unknown, drawn as a gap) in its first ``unknown_upto`` seconds."""
    if any(spec[0] == name for spec in state[table]):
        return
    size = _CAPACITY
    while size <= unknown_upto:  # as a builder's array grows to hold that second
        size *= 2
    data = np.full(size, fill, dtype=np.float64)
    data[:unknown_upto] = math.nan
    state[table].append([name, fill])
    arrays[f"{table}.{name}"] = data


def _plan_and_oldest(state: State, arrays: _Prefixed, class_builder: bool) -> None:
    """From before ticks carried the oldest in-flight send and the plan moved by holds."""
    state.setdefault("oldest_sent_at", None)
    state.setdefault("planned_end_s", None)


def _error_series(state: State, arrays: _Prefixed, class_builder: bool) -> None:
    """From before errors were counted by class: their seconds so far unknown."""
    known = int(math.floor(state["now"]))
    for name in ERROR_SERIES.values():
        _add_series(state, arrays, "counts", name, 0.0, unknown_upto=known)


def _client_and_gpu_gauges(state: State, arrays: _Prefixed, class_builder: bool) -> None:
    """From before the client's queue and lag, and GPU telemetry: no values so far."""
    for name in ("client_queued", "client_lag_ms", *GPU_SERIES):
        _add_series(state, arrays, "last", name, math.nan)


def _sessions(state: State, arrays: _Prefixed, class_builder: bool) -> None:
    """From before sessions: no session so far."""
    _add_series(state, arrays, "last", "sessions_active", 0.0)
    if "session_counts" not in state:
        state["session_counts"] = []
        for name in SESSION_RATES:
            _add_series(state, arrays, "session_counts", name, 0.0)
        state["session_totals"] = [0.0, 0, 0]


def _scrape_errors(state: State, arrays: _Prefixed, class_builder: bool) -> None:
    """From before the events panel's scrape failures, then before GPU sources had theirs."""
    state.setdefault("last_good_scrape_t", None)
    state["scrape_errors"] = [[*line[:5], bool(line[5:] and line[5])] for line in state.get("scrape_errors", [])]


def _gpu(state: State, arrays: _Prefixed, class_builder: bool) -> None:
    """From before GPU telemetry: no GPU sample so far."""
    from rampwatch.core.figures.summary import GpuTotals

    state.setdefault("gpu_latest", [])
    state.setdefault("last_good_gpu_t", None)
    if not state.get("gpu_totals"):
        state["gpu_totals"] = GpuTotals().export_state()


def _client_totals(state: State, arrays: _Prefixed, class_builder: bool) -> None:
    """From before the client's self-check: none so far (as a run without a tick)."""
    state.setdefault("client_totals", None)


def _latency_histograms(state: State, arrays: _Prefixed, class_builder: bool) -> None:
    """A class's checkpoint from before E2E percentiles: those seconds unknown and the
    windows' E2E histograms empty; a run's checkpoint from when the run's builder kept
    E2E too: those are not the run's any more."""
    from rampwatch.core.figures.series_latency import CLASS_HIST_METRICS, RUN_HIST_METRICS, latency_series

    metrics = CLASS_HIST_METRICS if class_builder else RUN_HIST_METRICS
    fills = dict(state["final"])
    names = latency_series(metrics)
    for name in set(fills) - set(names):
        del arrays[f"final.{name}"]
    for name in set(names) - set(fills):
        arrays[f"final.{name}"] = np.full(_CAPACITY, math.nan)
    state["final"] = [[name, fills.get(name, math.nan)] for name in names]
    if "hists" not in arrays:
        return
    hists = arrays["hists"]
    want = len(metrics)
    if hists.shape[1] > want:
        arrays["hists"] = hists[:, :want]
    elif hists.shape[1] < want:
        empty = np.zeros((hists.shape[0], want - hists.shape[1], LogHistogram.N), dtype=hists.dtype)
        arrays["hists"] = np.concatenate([hists, empty], axis=1)
    state["hist_totals"] = [(list(totals) + [0] * want)[:want] for totals in state["hist_totals"]]


def _summaries(state: State, arrays: _Prefixed, class_builder: bool) -> None:
    """The run-so-far summaries: the run's and each configuration's after a restart."""
    _complete_summary(state["summary"], arrays, "summary")
    for i, summary in enumerate(state.get("config_segments", {}).get("summaries", [])):
        _complete_summary(summary, arrays, f"segment{i}")


def _complete_summary(summary: State, arrays: _Prefixed, prefix: str) -> None:
    summary.setdefault("cancelled", 0)  # from before cancelled requests were told apart
    summary.setdefault("tokens_from_usage", True)
    if not summary.get("error_examples"):
        summary["error_examples"] = {}
    summary.setdefault("first_send_at", None)
    summary.setdefault("last_end_at", None)
    if "queue" not in summary["sums"]:
        # From before the client queue times were a store of their own: their sum only,
        # no histogram.
        summary["sums"]["queue"] = [summary["records"], summary["queue_sum"], 0.0]
        summary["hist_totals"]["queue"] = 0
        arrays[f"{prefix}.queue"] = np.zeros(LogHistogram.N, dtype=np.int64)


def _step_rows(state: State, arrays: _Prefixed, class_builder: bool) -> None:
    """Step rows from before the achieved rate counted the row's own requests: the row's
    requests that did not fail are the nearest; from before cancelled ones: none."""
    steps = state["steps"]
    steps.setdefault("unsettled_from", None)
    rows = []
    for scalars in steps["rows"]:
        sent, errors = int(scalars[5]), int(scalars[6])
        succeeded = scalars[15] if len(scalars) > 15 else max(0, sent - errors)
        cancelled = scalars[16] if len(scalars) > 16 else 0
        rows.append([*scalars[:15], succeeded, cancelled])
    steps["rows"] = rows


def _turn_rows(state: State, arrays: _Prefixed, class_builder: bool) -> None:
    if "turns" in state:
        state["turns"].setdefault("rows", [])


_V1_STEPS: tuple[Callable[[State, _Prefixed, bool], None], ...] = (
    _require_steps,
    _plan_and_oldest,
    _error_series,
    _client_and_gpu_gauges,
    _sessions,
    _scrape_errors,
    _gpu,
    _client_totals,
    _latency_histograms,
    _summaries,
    _step_rows,
    _turn_rows,
)

# version -> the step a checkpoint of that version goes through on its way to the current
# schema: to the next version, or (the current one's) to its last shape
_UPGRADES: dict[int, Callable[[State, Arrays], None]] = {1: _complete_v1}
