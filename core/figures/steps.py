"""The per-step results table: one row per stretch of a run at one target rate.

The table a performance engineer otherwise builds by hand from a sweep of ``vllm bench
serve`` runs, one row per request rate. Where the rows split (``step_key``):

- a step of a ``steps`` schedule, or a constant-rate schedule, is one row per target
  rate: a new row starts at the first tick showing a new target;
- a ramp (``linear``, ``exponential``, ``vllm-linear``, ``vllm-exponential``, or a
  kind this version does not know) is cut
  into tenths of its planned duration, counted in ramp time (held time excluded, so a
  slice after a hold still covers the rates it would have without the hold);
- a hold (``space``) and a manual rate (``+``/``-``) are rows of their own, from the
  event on; a resume starts a new row; so does a stop (the drain: no new requests).

What each row counts (``core.timeline.StepRow``): latencies (TTFT, ITL p50/p99, from
log histograms, ~1 %), errors and the achieved rate belong to the requests *sent* in the
row, so they describe the load the row offered even when the requests end later. The
achieved rate is the row's requests that ended OK per second of the row: comparable with
its target, whatever the answers' length (a count of the requests that *ended* in the
row lags the sends by an end-to-end latency, and read 2.7 req/s in a row offered 5–6 that
the server kept up with). While some of the row's requests are in flight it is a lower
bound (``pending``: the oldest request in flight was sent before the row's end), and so
it is when some were cancelled (a stop, the drain policy: whether they would have ended
OK is not known). The
completion rate (requests that ended OK in the row per second of it) is kept beside it;
output tok/s counts the tokens streamed in the row, by chunk arrival (what the server
delivered meanwhile). KV cache % is the maximum (and mean) of the scrapes in the row;
waiting is the maximum. A reasoning run's rows add the time to first answer p99
(``reasoning``: from the first request that reasoned on, in every row).

``StepTracker`` is bounded: per row a few counters and two histograms, never request
records. Rows arrive in time order; a request's row is found by bisecting the row
starts, so a request ending long after its row closed still lands in it.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

import numpy as np

from rampwatch.core.figures.reasoning import reasoned
from rampwatch.core.figures.stats import LogHistogram, itl_array
from rampwatch.core.text import column_groups
from rampwatch.core.timeline import CANCELLED, Event, RequestRecord, StepRow

# Schedules whose target rate is piecewise constant; any other (the ramps, and kinds this
# version does not know, e.g. older recordings' "ramp") is cut into tenths.
CONSTANT_RATE_KINDS = ("constant", "poisson", "gamma", "steps", "vllm-constant")
# Schedules whose target rate moves while held: a held trace keeps its speed, and its
# target follows the trace's own rate, so a hold is one row whatever the target does.
HELD_SPEED_KINDS = ("trace",)  # loadgen.workload.schedule_spec.TRACE_KIND (tests/core/figures/test_steps.py ties them)
RAMP_SLICES = 10
DRAIN_STATES = ("stopping", "draining", "done")
# A row younger than this shows no achieved rate yet: a count over a fraction of a second
# reads as a wild rate.
MIN_RATE_S = 1.0

StepKey = tuple[Any, ...]


def same_rate(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def step_key(
    state: str, target_rps: float, ramp_t: float, schedule_kind: str | None, planned_s: float | None, held_kind: str
) -> StepKey:
    """Which row a tick belongs to; a new row starts where this changes.

    ``ramp_t``: seconds of ramp so far (held time excluded); ``held_kind``: "hold" or
    "rate" (a manual rate), what a holding state is."""
    if state in DRAIN_STATES:
        return ("drain",)
    if state in ("holding", "restarting"):  # a server restart holds the schedule at 0
        return (held_kind,) if schedule_kind in HELD_SPEED_KINDS else (held_kind, target_rps)
    if schedule_kind not in CONSTANT_RATE_KINDS and planned_s:
        return ("ramp", min(RAMP_SLICES - 1, max(0, int(RAMP_SLICES * ramp_t / planned_s))))
    return ("step", target_rps)


def keys_match(a: StepKey | None, b: StepKey) -> bool:
    if a is None or a[0] != b[0]:
        return False
    if len(a) == 2 and isinstance(a[1], float) and isinstance(b[1], float):
        return same_rate(a[1], b[1])
    return a == b


class _Row:
    """The running figures of one row."""

    __slots__ = (
        "key",
        "start",
        "last",
        "lo",
        "hi",
        "sent",
        "errors",
        "succeeded",
        "cancelled",
        "completed",
        "output_tokens",
        "ttft",
        "itl",
        "kv_sum",
        "kv_n",
        "kv_max",
        "waiting_max",
        "spec",
        "cached",
        "ttfa",
    )

    def __init__(self, key: StepKey | None, start: float) -> None:
        self.key = key
        self.start = start
        self.last = start
        self.lo = math.nan
        self.hi = math.nan
        self.sent = 0
        self.errors = 0
        self.succeeded = 0
        self.cancelled = 0
        self.completed = 0
        self.output_tokens = 0.0
        self.ttft = LogHistogram()
        self.itl = LogHistogram()
        self.kv_sum = 0.0
        self.kv_n = 0
        self.kv_max: float | None = None
        self.waiting_max: float | None = None
        self.spec: list[float] | None = None  # [drafts, draft tokens, accepted] from the row's scrapes
        self.cached: tuple[float, StepRow] | None = None  # (end used, row) until the row changes
        self.ttfa: LogHistogram | None = None  # a reasoning run's time to first answer

    def target(self, rps: float) -> None:
        self.lo = rps if math.isnan(self.lo) else min(self.lo, rps)
        self.hi = rps if math.isnan(self.hi) else max(self.hi, rps)

    def scalars(self) -> list[Any]:
        return [
            list(self.key) if self.key is not None else None,
            self.start,
            self.last,
            self.lo,
            self.hi,
            self.sent,
            self.errors,
            self.completed,
            self.output_tokens,
            self.kv_sum,
            self.kv_n,
            self.kv_max,
            self.waiting_max,
            self.ttft.total,
            self.itl.total,
            self.succeeded,
            self.cancelled,
        ]


class StepTracker:
    """Builds the step rows from the timeline stream (fed by ``SeriesBuilder``)."""

    def __init__(self) -> None:
        self.schedule_kind: str | None = None
        self.planned_s: float | None = None
        self._rows: list[_Row] = []
        self._starts: list[float] = []
        self._held_kind = "hold"
        self._held_s = 0.0
        self._last_tick: tuple[float, str] | None = None
        # When the oldest request in flight was sent (None: none in flight): the rows that
        # end after it may have requests in flight still.
        self._unsettled_from: float | None = None
        # A request has reasoned: every row has a TTFA column from then on.
        self.reasoning = False

    def configure(self, schedule_kind: str | None, planned_s: float | None) -> None:
        self.schedule_kind = schedule_kind
        self.planned_s = planned_s

    # -- feeding --------------------------------------------------------------------
    def _open(self, key: StepKey | None, t: float) -> _Row:
        if self._rows and t <= self._rows[-1].start:  # two boundaries at once: the later wins
            row = self._rows[-1]
            row.key = key
            row.cached = None
            return row
        row = _Row(key, max(t, self._rows[-1].start) if self._rows else 0.0)  # the first row starts the run
        self._rows.append(row)
        self._starts.append(row.start)
        return row

    def _row_at(self, t: float) -> _Row:
        if not self._rows:
            return self._open(None, 0.0)
        i = max(0, bisect.bisect_right(self._starts, t) - 1)
        return self._rows[i]

    def on_tick(
        self, t: float, state: str, target_rps: float, in_flight: int = 0, oldest_sent_at: float | None = None
    ) -> None:
        """``oldest_sent_at``: when the oldest request in flight was sent (ticks of older
        recordings lack it: any request in flight then leaves every row pending)."""
        self._unsettled_from = None if in_flight <= 0 else (oldest_sent_at if oldest_sent_at is not None else 0.0)
        if self._last_tick is not None and self._last_tick[1] in ("holding", "restarting"):
            self._held_s += max(0.0, t - self._last_tick[0])
        self._last_tick = (t, state)
        key = step_key(state, float(target_rps), t - self._held_s, self.schedule_kind, self.planned_s, self._held_kind)
        row = self._rows[-1] if self._rows else None
        if row is not None and row.key is None:
            row.key = key  # a row opened by an event (or before the first tick) takes the tick's key
        elif row is None or not keys_match(row.key, key):
            row = self._open(key, t)
        if state not in DRAIN_STATES:
            row.target(float(target_rps))
        self._touch(row, t)

    def on_event(self, event: Event) -> None:
        kind = event.kind
        last_kind = self._rows[-1].key[0] if self._rows and self._rows[-1].key is not None else None
        if last_kind == "drain":
            return  # after a stop the schedule ignores holds and rates
        if kind in ("hold", "set_rate"):
            after = event.data.get("after_rps")
            if kind == "hold" and last_kind in ("hold", "rate"):
                return  # "already holding"
            self._held_kind = "hold" if kind == "hold" else "rate"
            key: StepKey | None = (self._held_kind, float(after)) if isinstance(after, (int, float)) else None
            if self.schedule_kind in HELD_SPEED_KINDS:
                key = (self._held_kind,)
            row = self._open(key, event.t)
            if key is not None:
                row.target(float(after))  # type: ignore[arg-type]
        elif kind == "resume":
            if last_kind in ("hold", "rate"):
                self._open(None, event.t)  # the next tick says which row the ramp is in
        elif kind == "config" and event.data.get("resume") == "start":
            # The ramp begins again after a restart, its tenths too: ramp time counts from here.
            self._held_s, self._last_tick = event.t, (event.t, "ramping")
        elif kind == "stop":
            self._open(("drain",), event.t)

    def on_request(self, record: RequestRecord, itls: np.ndarray | None = None) -> None:
        """``itls``: the record's ``itl_array`` when the caller has it already. A request
        the run cancelled (a stop's grace ran out) counts as sent, neither completed nor
        failed, as in the run's figures."""
        sent_row = self._row_at(record.sent_at)
        sent_row.sent += 1
        sent_row.cached = None
        if record.error_class == CANCELLED:
            sent_row.cancelled += 1
        elif record.ok:
            sent_row.succeeded += 1
            if record.ttft is not None:
                sent_row.ttft.add((record.ttft,))
            self._add_ttfa(sent_row, record)
            sent_row.itl.add(itl_array(record) if itls is None else itls)
            end_row = self._row_at(record.end_at)
            end_row.completed += 1
            end_row.cached = None
            self._add_streamed(record)
        else:
            sent_row.errors += 1
        self._touch(self._rows[-1], record.end_at)

    def _add_ttfa(self, row: _Row, record: RequestRecord) -> None:
        """A successful request's time to first answer, once the run has reasoning."""
        if not self.reasoning and not reasoned(record):
            return
        self.reasoning = True
        if row.ttfa is None:
            row.ttfa = LogHistogram()
        if record.ttfa is not None:
            row.ttfa.add((record.ttfa,))

    def _add_streamed(self, record: RequestRecord) -> None:
        """The record's output tokens to the rows its chunks arrived in, spread evenly over
        its chunks (a chunk may carry several tokens; the usage gives only the total)."""
        tokens = float(record.completion_tokens)
        chunks = record.chunk_times
        first = record.first_token_at
        if first is None or not chunks:
            row = self._row_at(record.end_at if first is None else first)
            row.output_tokens += tokens
            row.cached = None
            return
        first_row, last_row = self._row_at(first), self._row_at(chunks[-1])
        if first_row is last_row:  # the usual case: no numpy
            first_row.output_tokens += tokens
            first_row.cached = None
            return
        times = np.concatenate(([first], np.asarray(chunks, dtype=np.float64)))
        rows = np.maximum(np.searchsorted(self._starts, times, side="right") - 1, 0)
        per_row = np.bincount(rows) * (tokens / times.size)
        for i in np.flatnonzero(per_row):
            self._rows[i].output_tokens += float(per_row[i])
            self._rows[i].cached = None

    def on_gauges(self, t: float, waiting: float | None, kv_pct: float | None) -> None:
        row = self._row_at(t)
        if kv_pct is not None and math.isfinite(kv_pct):
            row.kv_sum += kv_pct
            row.kv_n += 1
            row.kv_max = kv_pct if row.kv_max is None else max(row.kv_max, kv_pct)
        if waiting is not None and math.isfinite(waiting):
            row.waiting_max = waiting if row.waiting_max is None else max(row.waiting_max, waiting)
        row.cached = None
        self._touch(self._rows[-1], t)

    def on_spec(self, t: float, drafts: float, draft_tokens: float, accepted: float) -> None:
        """Speculative decoding's counter increases up to the scrape at ``t``."""
        row = self._row_at(t)
        if row.spec is None:
            row.spec = [0.0, 0.0, 0.0]
        row.spec[0] += drafts
        row.spec[1] += draft_tokens
        row.spec[2] += accepted
        row.cached = None

    def _touch(self, row: _Row, t: float) -> None:
        if t > row.last:
            row.last = t

    # -- rows -----------------------------------------------------------------------
    def rows(self, now: float) -> list[StepRow]:
        out: list[StepRow] = []
        for i, row in enumerate(self._rows):
            end = self._rows[i + 1].start if i + 1 < len(self._rows) else max(now, row.last)
            pending = self._unsettled_from is not None and end > self._unsettled_from
            if row.cached is not None and row.cached[0] == end and row.cached[1].pending == pending:
                out.append(row.cached[1])
                continue
            step = self._build(i, row, end, pending)
            row.cached = (end, step)
            out.append(step)
        return out

    def _build(self, i: int, row: _Row, end: float, pending: bool) -> StepRow:
        length = end - row.start
        timed = length >= MIN_RATE_S
        ttft50, ttft99 = row.ttft.quantiles((0.5, 0.99))
        itl50, itl99 = row.itl.quantiles((0.5, 0.99))
        if row.key is not None:
            kind = str(row.key[0])
        else:  # no tick yet since the row opened
            kind = "step" if self.schedule_kind in CONSTANT_RATE_KINDS else "ramp"
        return StepRow(
            index=i + 1,
            kind=kind,
            start_s=row.start,
            end_s=end,
            target_lo_rps=row.lo,
            target_hi_rps=row.hi,
            sent=row.sent,
            errors=row.errors,
            succeeded=row.succeeded,
            cancelled=row.cancelled,
            completed=row.completed,
            # the drain offers nothing: its row has no rate to compare with a target
            achieved_rps=row.succeeded / length if timed and kind != "drain" else math.nan,
            completed_rps=row.completed / length if timed else math.nan,
            output_tps=row.output_tokens / length if timed else math.nan,
            pending=pending and kind != "drain",
            ttft_p50=ttft50,
            ttft_p99=ttft99,
            itl_p50=itl50,
            itl_p99=itl99,
            kv_max_pct=row.kv_max,
            kv_mean_pct=row.kv_sum / row.kv_n if row.kv_n else None,
            waiting_max=row.waiting_max,
            ttfa_p99=None if not self.reasoning else math.nan if row.ttfa is None else row.ttfa.quantiles((0.99,))[0],
            spec_acceptance_pct=None if row.spec is None or not row.spec[1] else 100.0 * row.spec[2] / row.spec[1],
            spec_accept_len=None if row.spec is None or not row.spec[0] else 1.0 + row.spec[2] / row.spec[0],
        )

    # -- checkpoints ----------------------------------------------------------------
    def export_state(self, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        if self._rows:
            arrays["steps.hists"] = np.stack([np.stack([r.ttft.counts, r.itl.counts]) for r in self._rows])
        return {
            "schedule_kind": self.schedule_kind,
            "planned_s": self.planned_s,
            "held_kind": self._held_kind,
            "held_s": self._held_s,
            "last_tick": list(self._last_tick) if self._last_tick is not None else None,
            "unsettled_from": self._unsettled_from,
            "rows": [r.scalars() for r in self._rows],
            **({"ttfa": self._export_ttfa(arrays)} if self.reasoning else {}),
            **({"spec": [r.spec for r in self._rows]} if any(r.spec for r in self._rows) else {}),
        }

    def _export_ttfa(self, arrays: dict[str, np.ndarray]) -> list[int | None]:
        """The rows' TTFA histograms (zeros for a row without one) and their totals (None: none)."""
        empty = np.zeros(LogHistogram.N, dtype=np.int64)
        if self._rows:
            arrays["steps.ttfa"] = np.stack([empty if r.ttfa is None else r.ttfa.counts for r in self._rows])
        return [None if r.ttfa is None else r.ttfa.total for r in self._rows]

    @classmethod
    def restore_state(cls, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> StepTracker:
        tracker = cls()
        tracker.configure(state["schedule_kind"], state["planned_s"])
        tracker._held_kind = state["held_kind"]
        tracker._held_s = float(state["held_s"])
        last_tick = state["last_tick"]
        tracker._last_tick = (float(last_tick[0]), str(last_tick[1])) if last_tick is not None else None
        tracker._unsettled_from = state["unsettled_from"]
        for k, scalars in enumerate(state["rows"]):
            (
                key, start, last, lo, hi, sent, errors, completed, output,
                kv_sum, kv_n, kv_max, waiting_max, nt, ni, succeeded, cancelled,
            ) = scalars  # fmt: skip
            row = _Row(tuple(key) if key is not None else None, float(start))
            row.last, row.lo, row.hi = float(last), float(lo), float(hi)
            row.sent, row.errors, row.completed, row.output_tokens = (
                int(sent),
                int(errors),
                int(completed),
                float(output),
            )
            row.succeeded, row.cancelled = int(succeeded), int(cancelled)
            row.kv_sum, row.kv_n, row.kv_max, row.waiting_max = float(kv_sum), int(kv_n), kv_max, waiting_max
            for hist, total, j in ((row.ttft, nt, 0), (row.itl, ni, 1)):
                hist._counts = np.array(arrays["steps.hists"][k, j], dtype=np.int64)
                hist.total = int(total)
            tracker._rows.append(row)
            tracker._starts.append(row.start)
        if "ttfa" in state:
            tracker.reasoning = True
            for k, (row, total) in enumerate(zip(tracker._rows, state["ttfa"])):
                if total is not None:
                    row.ttfa = LogHistogram()
                    row.ttfa._counts = np.array(arrays["steps.ttfa"][k], dtype=np.int64)
                    row.ttfa.total = int(total)
        for row, spec in zip(tracker._rows, state.get("spec") or []):  # a speculating server's rows
            row.spec = None if spec is None else [float(x) for x in spec]
        return tracker


# -- the table as text: one definition for the live screen and the reports -------------

# (column header, short header for narrow screens, StepRow -> text); the first ones matter most.
STEP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("#", "#"),
    ("start", "start"),
    ("kind", "kind"),
    ("target rps", "target"),
    ("achieved rps", "achvd"),
    ("out tok/s", "tok/s"),
    ("TTFT p50", "TTFT50"),
    ("TTFT p99", "TTFT99"),
    ("ITL p50", "ITL50"),
    ("ITL p99", "ITL99"),
    ("errors", "err"),
    ("KV % max", "KV%"),
    ("waiting max", "wait"),
)
# Speculative decoding's columns: only in a table of a server that speculates (step_columns).
SPEC_STEP_COLUMNS: tuple[tuple[str, str], ...] = (("accept %", "acc%"), ("accept len", "alen"))
# Dropped first when a screen is too narrow for every column (least useful first).
NARROW_DROP = ("out tok/s", "kind", "start")
# A reasoning run's column, after TTFT p99's.
TTFA_COLUMN = ("TTFA p99", "TTFA99")


def step_columns(rows: list[StepRow]) -> tuple[tuple[str, str], ...]:
    """``STEP_COLUMNS``, with ``TTFA_COLUMN`` when the rows are a reasoning run's and
    ``SPEC_STEP_COLUMNS`` when a row has speculative decoding's figures."""
    columns = STEP_COLUMNS
    if any(row.ttfa_p99 is not None for row in rows):
        at = [name for name, _ in STEP_COLUMNS].index("TTFT p99") + 1
        columns = (*STEP_COLUMNS[:at], TTFA_COLUMN, *STEP_COLUMNS[at:])
    if any(row.spec_acceptance_pct is not None for row in rows):
        columns = (*columns, *SPEC_STEP_COLUMNS)
    return columns


def _clock(seconds: float) -> str:
    seconds = max(0, round(seconds))  # a row starting at 4.9996 s reads 0:05, not 0:04
    return f"{seconds // 60}:{seconds % 60:02d}"


def _num(value: float | None, digits: int = 1) -> str:
    if value is None or math.isnan(value):
        return "–"
    if abs(round(value, digits)) >= 100:  # 99.96 reads 100 like 100.0 does, not "100.0"
        return f"{value:.0f}"
    return f"{value:.{digits}f}"


def _ms(seconds: float) -> str:
    """Milliseconds without the unit (the header says ms): 3 significant figures."""
    if math.isnan(seconds):
        return "–"
    ms = seconds * 1000.0
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def _rate_range(lo: float, hi: float) -> str:
    if math.isnan(lo):
        return "–"
    if same_rate(lo, hi) or _num(lo) == _num(hi):
        return _num(lo)
    return f"{_num(lo)}–{_num(hi)}"


def step_cells(row: StepRow) -> dict[str, str]:
    """A row's text per column header (``step_columns``); latencies in ms."""
    ttfa = {} if row.ttfa_p99 is None else {TTFA_COLUMN[0]: _ms(row.ttfa_p99)}
    return {
        **ttfa,
        "#": str(row.index),
        "start": _clock(row.start_s),
        "kind": row.kind,
        "target rps": "–" if row.kind == "drain" else _rate_range(row.target_lo_rps, row.target_hi_rps),
        "achieved rps": _num(row.achieved_rps, 2 if row.achieved_rps < 10 else 1)
        + ("+" if (row.pending or row.cancelled) and not math.isnan(row.achieved_rps) else ""),
        "out tok/s": _num(row.output_tps, 0),
        "TTFT p50": _ms(row.ttft_p50),
        "TTFT p99": _ms(row.ttft_p99),
        "ITL p50": _ms(row.itl_p50),
        "ITL p99": _ms(row.itl_p99),
        "errors": f"{row.errors}" if row.errors == 0 else f"{row.errors}/{row.sent}",
        "KV % max": _num(row.kv_max_pct),
        "waiting max": _num(row.waiting_max, 0),
        "accept %": _num(row.spec_acceptance_pct),
        "accept len": _num(row.spec_accept_len, 2),
    }


def step_table_text(rows: list[StepRow], width: int | None = None) -> str:
    """The table as aligned plain text (``rampwatch report``); latencies in ms. Given a
    terminal's ``width``, columns that do not fit go in groups, each under the row
    number again (the terminal never folds a row)."""
    headers = [name for name, _ in step_columns(rows)]
    cells = [[step_cells(row)[name] for name in headers] for row in rows]
    headers = [h + " ms" if h.startswith(("TTFT", "TTFA", "ITL")) else h for h in headers]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(headers)]
    rest = list(range(1, len(headers)))  # column 0, the row number, leads every group
    room = math.inf if width is None else width - widths[0] - 2
    blocks = []
    for group in ([rest[k] for k in g] for g in column_groups([widths[i] for i in rest], room)):
        columns = [0, *group]
        lines = ["  ".join(headers[i].rjust(widths[i]) for i in columns)]
        lines += ["  ".join(c[i].rjust(widths[i]) for i in columns) for c in cells]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


STEP_TABLE_NOTE = (
    "latencies (ms), errors and achieved: requests sent in the row; achieved: those that ended OK, per second "
    "of the row (N+: at least N, some still in flight or cancelled); out tok/s: tokens streamed in the row; "
    "KV % and waiting: the most over the row's scrapes"
)


def step_json(row: StepRow) -> dict[str, Any]:
    """A row as plain JSON (NaN as null); a plain run's rows without ``ttfa_p99``, and
    speculative decoding's keys only where it has them."""
    return {
        k: None if isinstance(v, float) and math.isnan(v) else v
        for k, v in row.to_dict().items()
        if v is not None or not (k == "ttfa_p99" or k.startswith("spec_"))
    }
