"""Request traces: when each request of a recorded service arrived and how long it was.

Three formats, one row per request:

- ``mooncake``: JSONL as in the Mooncake traces (``mooncake_trace.jsonl``):
  ``{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}``. Each
  hash id names one prefix block of ``block_tokens`` tokens (512 in the published
  traces); rows sharing hash ids share those blocks.
- ``azure``: the Azure LLM inference trace CSV (``AzureLLMInferenceTrace_conv.csv``):
  a header line, then ``TIMESTAMP`` (a date and time), ``ContextTokens``,
  ``GeneratedTokens``.
- ``jsonl``: ``{"time": s, "input_tokens": n, "output_tokens": n}``, with an optional
  ``"prompt": "text"`` or ``"messages": [...]`` sent as given (``input_tokens`` may then
  be left out).

A trace is held as numpy columns (a million rows take tens of MB, not a dict per row);
its times are seconds from its first row, in time order (rows out of order are sorted,
stably). A bad line is a ``UserError`` naming the file, the line and the field.

A window (``start_s``, ``duration_s``) is applied while reading: only its rows are kept,
and a file in time order is read no further than the first row past its end (the lines
after it are neither read nor checked), so two seconds of a ten-million-row trace cost
two seconds of rows. A file found out of order is read to its end (still keeping only the
window's rows); one with a row earlier than its first is read whole, then windowed.
"""

from __future__ import annotations

import csv
import math
import re
from array import array
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.datasets import CHAT_ROLES, DatasetEntry, chat_messages

TRACE_FORMATS = ("mooncake", "azure", "jsonl")
DEFAULT_BLOCK_TOKENS = 512  # the Mooncake traces' block size
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


@dataclass(frozen=True, slots=True, eq=False)
class Trace:
    """A trace's rows as columns. ``hash_ids[hash_offsets[i]:hash_offsets[i + 1]]`` are
    row i's prefix blocks (empty arrays when the format has none); ``prompts`` maps a row
    to the prompt or messages it carries (jsonl only; sparse)."""

    path: str
    format: str
    times_s: np.ndarray  # float64, seconds from the first row (or the window's start)
    input_tokens: np.ndarray  # int64; 0 where a row gives its prompt and no length
    output_tokens: np.ndarray  # int64
    hash_offsets: np.ndarray  # int64, len(rows) + 1
    hash_ids: np.ndarray  # int64
    prompts: dict[int, DatasetEntry] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.times_s)

    @property
    def span_s(self) -> float:
        """Seconds from the trace's start to its last row."""
        return float(self.times_s[-1]) if len(self.times_s) else 0.0

    def row_hash_ids(self, i: int) -> np.ndarray:
        return self.hash_ids[self.hash_offsets[i] : self.hash_offsets[i + 1]]

    @property
    def nbytes(self) -> int:
        return sum(
            a.nbytes for a in (self.times_s, self.input_tokens, self.output_tokens, self.hash_offsets, self.hash_ids)
        )


# --------------------------------------------------------------------------- errors


def _got(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


def _bad(path: Path, lineno: int, what: str) -> UserError:
    return UserError(f"{path}:{lineno}: {what}")


# Bounds that keep every value representable (a count fits what a recording stores; a
# time, in ms or s, any trace's span) and turn absurd ones into a named field's error.
MAX_TOKENS = 2**31 - 1
MAX_TIME = 1e15


def _is_count(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_TOKENS  # exact type: a bool is not a count


def _is_time(value: Any) -> bool:
    # int compared with a float never overflows; nan fails every comparison
    return (type(value) is int or type(value) is float) and 0 <= value <= MAX_TIME


def _count_problem(row: dict, key: str, required: bool = True) -> str | None:
    if key not in row:
        return f"{key}: required field is missing" if required else None
    if not _is_count(row[key]):
        return f"{key}: expected a token count (an integer 0–{MAX_TOKENS}), got {_got(row[key])}"
    return None


def _diagnose_json(path: Path, lineno: int, line: bytes, fmt: str) -> UserError:
    """The one message for a JSONL line the fast path could not take."""
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return _bad(path, lineno, f"not valid JSON ({str(exc).split(':')[0]})")
    if not isinstance(row, dict):
        return _bad(path, lineno, f"expected a JSON object per line, got {_got(row)}")
    if fmt == "mooncake":
        if "timestamp" not in row:
            return _bad(path, lineno, "timestamp: required field is missing (milliseconds)")
        if not _is_time(row["timestamp"]):
            return _bad(
                path,
                lineno,
                f"timestamp: expected milliseconds (a number 0–{MAX_TIME:g}), got {_got(row['timestamp'])}",
            )
        for key in ("input_length", "output_length"):
            problem = _count_problem(row, key)
            if problem:
                return _bad(path, lineno, problem)
        ids = row.get("hash_ids", [])
        if not isinstance(ids, list):
            return _bad(path, lineno, f"hash_ids: expected a list of integers, got {_got(ids)}")
        for k, h in enumerate(ids):
            if not (isinstance(h, int) and not isinstance(h, bool) and -(2**63) <= h < 2**63):
                return _bad(path, lineno, f"hash_ids[{k}]: expected an integer, got {_got(h)}")
    else:
        if "time" not in row:
            return _bad(path, lineno, "time: required field is missing (seconds)")
        if not _is_time(row["time"]):
            return _bad(path, lineno, f"time: expected seconds (a number 0–{MAX_TIME:g}), got {_got(row['time'])}")
        given = _given_prompt(row)
        if isinstance(given, str):
            return _bad(path, lineno, given)
        problem = _count_problem(row, "input_tokens", required=given is None) or _count_problem(row, "output_tokens")
        if problem:
            return _bad(path, lineno, problem)
    return _bad(path, lineno, "cannot read this line")  # pragma: no cover - every failure is named above


def _given_prompt(row: dict) -> DatasetEntry | str | None:
    """A jsonl row's prompt or messages as an entry; a string says what is wrong."""
    if "prompt" in row and "messages" in row:
        return "prompt, messages: expected one of them, got both"
    if "prompt" in row:
        if not isinstance(row["prompt"], str) or not row["prompt"]:
            return f"prompt: expected non-empty text, got {_got(row['prompt'])}"
        return DatasetEntry(prompt=row["prompt"])
    if "messages" in row:
        messages = chat_messages(row["messages"])
        if messages is None:
            return (
                'messages: expected [{"role": "user", "content": "text"}, …] '
                f"with roles among {', '.join(CHAT_ROLES)}, got {_got(row['messages'])}"
            )
        return DatasetEntry(messages=messages)
    return None


# --------------------------------------------------------------------------- readers


class _Window:
    """Which rows a window keeps, told row by row as a file is read (times in the file's
    seconds): ``place(t)`` is -1 to skip the row, 0 to keep it, 1 to stop reading."""

    def __init__(self, start_s: float, duration_s: float | None) -> None:
        self.start_s = start_s
        self.end_s = math.inf if duration_s is None else start_s + duration_s
        self.origin: float | None = None  # the first row's time: the trace's 0
        self.previous = -math.inf
        self.in_order = True
        self.before_origin = False  # a row earlier than the first: the origin is not known while reading
        self.stopped = False
        self.rows_read = 0
        self.latest = -math.inf

    def place(self, t: float) -> int:
        self.rows_read += 1
        if self.origin is None:
            self.origin = t
        if t < self.previous:
            self.in_order = False
        self.previous = t
        self.latest = max(self.latest, t)
        at = t - self.origin
        if at < 0:
            self.before_origin = True
            return -1
        if at < self.start_s:
            return -1
        if at < self.end_s:
            return 0
        if self.in_order:  # every later row is later still
            self.stopped = True
            return 1
        return -1


class _Columns:
    """Growing columns in compact arrays (no Python object per value)."""

    def __init__(self, window: _Window | None = None) -> None:
        self.window = window
        self.times = array("d")
        self.inputs = array("q")
        self.outputs = array("q")
        self.offsets = array("q", [0])
        self.hashes = array("q")
        self.prompts: dict[int, DatasetEntry] = {}


_NO_IDS: list[int] = []  # a row without hash_ids (read, never changed)


def _read_mooncake(path: Path, fh, cols: _Columns) -> None:
    times, inputs, outputs, offsets, hashes = cols.times, cols.inputs, cols.outputs, cols.offsets, cols.hashes
    loads = orjson.loads
    place = cols.window.place if cols.window is not None else None
    for lineno, line in enumerate(fh, 1):
        if not line.strip():
            continue
        try:
            row = loads(line)
            t, n_in, n_out = row["timestamp"], row["input_length"], row["output_length"]
            ids = row.get("hash_ids", _NO_IDS)
            if not (_is_time(t) and _is_count(n_in) and _is_count(n_out) and type(ids) is list):
                raise ValueError
            where = place(t / 1000.0) if place is not None else 0
            if where > 0:
                return
            if where < 0:
                continue
            if ids:
                before = len(hashes)
                try:
                    hashes.extend(ids)
                except (TypeError, OverflowError):
                    del hashes[before:]
                    raise ValueError from None
        except Exception:
            raise _diagnose_json(path, lineno, line, "mooncake") from None
        times.append(t / 1000.0)
        inputs.append(n_in)
        outputs.append(n_out)
        offsets.append(len(hashes))


def _read_jsonl(path: Path, fh, cols: _Columns) -> None:
    times, inputs, outputs, offsets = cols.times, cols.inputs, cols.outputs, cols.offsets
    loads = orjson.loads
    place = cols.window.place if cols.window is not None else None
    for lineno, line in enumerate(fh, 1):
        if not line.strip():
            continue
        try:
            row = loads(line)
            t, n_out = row["time"], row["output_tokens"]
            given = _given_prompt(row) if ("prompt" in row or "messages" in row) else None
            n_in = row.get("input_tokens", 0) if isinstance(given, DatasetEntry) else row["input_tokens"]
            if isinstance(given, str) or not (_is_time(t) and _is_count(n_in) and _is_count(n_out)):
                raise ValueError
        except Exception:
            raise _diagnose_json(path, lineno, line, "jsonl") from None
        where = place(t) if place is not None else 0
        if where > 0:
            return
        if where < 0:
            continue
        if given is not None:
            cols.prompts[len(times)] = given
        times.append(t)
        inputs.append(n_in)
        outputs.append(n_out)
        offsets.append(0)


_LEADING_DIGITS = re.compile(r"\d+")


def parse_azure_time(text: str) -> float:
    """Seconds since the epoch of an Azure trace TIMESTAMP (``2023-11-16 18:15:46.6805900``,
    read as UTC; fractions beyond microseconds are cut). ValueError when it is not one."""
    text = text.strip()
    date, _, frac = text.partition(".")
    if frac:
        digits = _LEADING_DIGITS.match(frac)
        if digits is None:
            raise ValueError(text)
        text = f"{date}.{digits.group()[:6].ljust(6, '0')}{frac[digits.end() :]}"
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _read_azure(path: Path, fh, cols: _Columns) -> None:
    reader = csv.reader(fh)
    header = next(reader, None)
    if header is None:
        raise UserError(f"{path}: empty file (expected a CSV header {','.join(AZURE_COLUMNS)})")
    names = [h.strip().lstrip("\ufeff") for h in header]
    missing = [c for c in AZURE_COLUMNS if c not in names]
    if missing:
        raise _bad(path, 1, f"{missing[0]}: column missing from the CSV header (expected {','.join(AZURE_COLUMNS)})")
    it, ic, ig = (names.index(c) for c in AZURE_COLUMNS)
    width = max(it, ic, ig)
    times, inputs, outputs, offsets = cols.times, cols.inputs, cols.outputs, cols.offsets
    place = cols.window.place if cols.window is not None else None
    for record in reader:
        lineno = reader.line_num
        if not record or not any(x.strip() for x in record):
            continue
        if len(record) <= width:
            raise _bad(path, lineno, f"expected {len(names)} columns, got {len(record)}")
        try:
            t = parse_azure_time(record[it])
        except ValueError:
            raise _bad(
                path,
                lineno,
                f"TIMESTAMP: expected a date and time such as 2023-11-16 18:15:46.68, got {_got(record[it])}",
            ) from None
        counts = []
        for index, name, column in ((ic, "ContextTokens", inputs), (ig, "GeneratedTokens", outputs)):
            raw = record[index].strip()
            if not (raw.isascii() and raw.isdigit() and int(raw) <= MAX_TOKENS):
                raise _bad(
                    path,
                    lineno,
                    f"{name}: expected a token count (an integer 0–{MAX_TOKENS}), got {_got(record[index])}",
                )
            counts.append((column, int(raw)))
        where = place(t) if place is not None else 0
        if where > 0:
            return
        if where < 0:
            continue
        for column, count in counts:
            column.append(count)
        times.append(t)
        offsets.append(0)


def load_trace(path: str | Path, fmt: str, start_s: float = 0.0, duration_s: float | None = None) -> Trace:
    """The rows of a trace file in the window ``start_s <= time < start_s + duration_s``
    (every row by default), in time order, times in seconds from ``start_s`` (trace
    seconds count from its first row). An empty window is a UserError."""
    path = Path(path)
    if fmt not in TRACE_FORMATS:
        raise UserError(f"{path}: unknown trace format {fmt!r} (expected one of {', '.join(TRACE_FORMATS)})")
    if start_s <= 0 and duration_s is None:
        return _read(path, fmt, None)
    limits = _Window(start_s, duration_s)
    trace = _read(path, fmt, limits)
    if limits.before_origin:  # the trace's 0 is a row read later than its first: window it whole
        return window(_read(path, fmt, None), start_s, duration_s)
    if not len(trace):
        assert limits.origin is not None  # a file without rows failed in _read
        span = (
            "the trace goes on after it" if limits.stopped else f"its rows span 0–{limits.latest - limits.origin:g} s"
        )
        raise _empty_window(path, start_s, duration_s, span)
    return replace(trace, times_s=trace.times_s - start_s)


def _read(path: Path, fmt: str, limits: _Window | None) -> Trace:
    """The rows of the file ``limits`` keeps (all without), in time order; times from
    the file's first row when windowed (``limits.origin``), else from its earliest."""
    cols = _Columns(limits)
    try:
        if fmt == "azure":
            with path.open("r", encoding="utf-8", newline="") as text:
                _read_azure(path, text, cols)
        else:
            with path.open("rb") as raw:
                (_read_mooncake if fmt == "mooncake" else _read_jsonl)(path, raw, cols)
    except FileNotFoundError:
        raise UserError(f"{path}: trace file not found") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read trace ({exc.strerror or exc})") from None
    if not cols.times and (limits is None or not limits.rows_read):
        raise UserError(f"{path}: no rows in this {fmt} trace")
    times = np.frombuffer(cols.times, dtype=np.float64)
    origin = limits.origin if limits is not None and limits.origin is not None else float(times.min())
    trace = Trace(
        path=str(path),
        format=fmt,
        times_s=times - origin,
        input_tokens=np.frombuffer(cols.inputs, dtype=np.int64),
        output_tokens=np.frombuffer(cols.outputs, dtype=np.int64),
        hash_offsets=np.frombuffer(cols.offsets, dtype=np.int64),
        hash_ids=np.frombuffer(cols.hashes, dtype=np.int64),
        prompts=cols.prompts,
    )
    return _time_ordered(trace)


def _time_ordered(trace: Trace) -> Trace:
    if len(trace) < 2 or bool(np.all(np.diff(trace.times_s) >= 0)):
        return trace
    order = np.argsort(trace.times_s, kind="stable")
    lengths = np.diff(trace.hash_offsets)[order]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if len(trace.hash_ids):
        starts = trace.hash_offsets[:-1][order]
        hash_ids = np.concatenate([trace.hash_ids[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist())])
    else:
        hash_ids = trace.hash_ids
    where = {int(old): new for new, old in enumerate(order.tolist()) if int(old) in trace.prompts}
    return replace(
        trace,
        times_s=trace.times_s[order],
        input_tokens=trace.input_tokens[order],
        output_tokens=trace.output_tokens[order],
        hash_offsets=offsets,
        hash_ids=hash_ids.astype(np.int64),
        prompts={where[old]: entry for old, entry in trace.prompts.items()},
    )


def _empty_window(path: Path, start_s: float, duration_s: float | None, span: str) -> UserError:
    shown = f"{start_s:g} s on" if duration_s is None else f"{start_s:g}–{start_s + duration_s:g} s"
    return UserError(
        f"{path}: the window {shown} holds no row of this trace ({span}); change schedule.start_s or schedule.duration_s"
    )


def window(trace: Trace, start_s: float = 0.0, duration_s: float | None = None) -> Trace:
    """The rows at ``start_s <= time < start_s + duration_s`` (trace seconds from its first
    row), their times counted from ``start_s``. A window with no row is a UserError."""
    if start_s <= 0 and duration_s is None:
        return trace
    end = math.inf if duration_s is None else start_s + duration_s
    lo = int(np.searchsorted(trace.times_s, start_s, side="left"))
    hi = int(np.searchsorted(trace.times_s, end, side="left"))
    if hi <= lo:
        raise _empty_window(Path(trace.path), start_s, duration_s, f"its rows span 0–{trace.span_s:g} s")
    offsets = trace.hash_offsets[lo : hi + 1]
    return replace(
        trace,
        times_s=trace.times_s[lo:hi] - start_s,
        input_tokens=trace.input_tokens[lo:hi],
        output_tokens=trace.output_tokens[lo:hi],
        hash_offsets=offsets - offsets[0],
        hash_ids=trace.hash_ids[offsets[0] : offsets[-1]],
        prompts={i - lo: entry for i, entry in trace.prompts.items() if lo <= i < hi},
    )


# --------------------------------------------------------------------------- rates

# The trace's local rate is counted over this many trace seconds around a point: long
# enough to hold several rows of a sparse trace, short enough to follow a day's swings.
RATE_WINDOW_S = 10.0


def local_rate(times_s: np.ndarray, at_s: float, window_s: float = RATE_WINDOW_S) -> float:
    """Rows per trace second in the window of ``window_s`` centred on ``at_s``, clipped to
    the trace's span (so its first and last seconds are not diluted by empty time
    outside it). A trace whose rows all share one time: its row count."""
    if not len(times_s):
        return 0.0
    first, last = float(times_s[0]), float(times_s[-1])
    if last - first <= 0:
        return float(len(times_s))
    lo = max(first, at_s - window_s / 2)
    hi = min(last, at_s + window_s / 2)
    if hi <= lo:
        return 0.0
    # rows at lo <= t < hi; the last row counts in the window that ends at it
    count = int(np.searchsorted(times_s, hi, side="right" if hi >= last else "left") - np.searchsorted(times_s, lo))
    return count / (hi - lo)


def mean_rate(times_s: np.ndarray) -> float:
    """Rows per trace second over the whole trace."""
    span = float(times_s[-1] - times_s[0]) if len(times_s) else 0.0
    return len(times_s) / span if span > 0 else float(len(times_s))
