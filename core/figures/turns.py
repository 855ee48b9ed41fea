"""Figures by turn index of a session workload (``RequestRecord.turn``, 1-based).

One row per turn index — turns from ``TURN_ROWS`` on share the last row, ``"16+"``, so the
table stays bounded however long the conversations — with, over the row's requests:

- ``requests`` sent (every outcome), ``errors`` (failed: a failed turn ends its session),
  ``cancelled`` (the run's stop cancelled it);
- TTFT mean and p50/p90/p99, ITL p50/p99, over the turns that ended OK with a token (ms);
- ``input_tokens_mean``: prompt tokens (the whole history the turn sends) of the turns
  that ended OK;
- ``cached_tokens_mean`` and the prefix-cache ``hit_rate_pct`` = Σ cached tokens / Σ prompt
  tokens, both over the turns that ended OK *and* whose server reported cached tokens
  (``usage.prompt_tokens_details.cached_tokens``); None when none did (vLLM reports them
  with ``--enable-prompt-tokens-details``).

Session totals come from the same counts, without a set of session ids, because every
session has one turn 1 and a failed turn ends its session: ``sessions`` = turn-1 requests,
``ended_by_error`` = failed turns, ``cancelled`` = cancelled turns, ``without_error`` =
the rest (finished, still in progress, or stopped between two turns by the run's end:
records cannot tell these apart), ``mean_turns`` = turns sent / sessions. ``finished``
is the run's own count of the sessions that ended, when its ticks carry one
(``sessions_finished_total``), else None.

``TurnFigures`` accumulates the rows from records in batches: live (``core.figures.series``,
bounded: ``stats.RunningValues``, percentiles within 1%), at the run's end and from a
recording (exact stores). ``TurnTable`` is what the screen, the text report, the result
JSON (``per_turn``, ``sessions``) and the HTML report show.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from rampwatch.core.figures import stats
from rampwatch.core.timeline import CANCELLED, RequestRecord

TURN_ROWS = 16  # turns 1 … 15 one row each, then one row for turn 16 and later
TTFT_PERCENTILES = (50, 90, 99)
ITL_PERCENTILES = (50, 99)
NO_HIT_RATE_HINT = (
    "hit rate —: the server reported no cached tokens (vLLM reports them with --enable-prompt-tokens-details)"
)
TURNS_NOTE = (
    "by turn index of the sessions (turns from 16 on in one row); TTFT and ITL of the turns that ended OK, "
    "hit rate = cached / prompt tokens of those whose server reported cached tokens"
)


def row_index(turn: int) -> int:
    """The 0-based row of a turn index: turn 1 → 0, …, every turn ≥ ``TURN_ROWS`` → the last."""
    return min(max(int(turn), 1), TURN_ROWS) - 1


def row_label(index: int) -> str:
    """The row's turn as printed: "1", "2", …, "16+"."""
    return f"{index + 1}+" if index == TURN_ROWS - 1 else str(index + 1)


def hit_rate_pct(cached_tokens: int, prompt_tokens: int, reporting: int) -> float | None:
    """Prefix-cache hit rate in %: cached over prompt tokens of the requests that reported
    cached tokens; None when none did (or they had no prompt tokens)."""
    if reporting == 0 or prompt_tokens <= 0:
        return None
    return 100.0 * cached_tokens / prompt_tokens


def session_totals(
    turn1_requests: int, requests: int, errors: int, cancelled: int, finished: int | None = None
) -> SessionTotals:
    """The session totals from per-turn counts (see the module docstring); ``finished``:
    the run's own count, when it has one."""
    return SessionTotals(
        sessions=turn1_requests,
        without_error=max(0, turn1_requests - errors - cancelled),
        ended_by_error=errors,
        cancelled=cancelled,
        mean_turns=requests / turn1_requests if turn1_requests else None,
        finished=finished,
    )


@dataclass(frozen=True)
class TurnRow:
    turn: str  # "1", …, "16+"
    requests: int
    errors: int
    cancelled: int
    ttft_ms: dict[str, float] | None  # "mean", "p50", "p90", "p99"; None: no turn ended OK with a token
    itl_ms: dict[str, float] | None  # "p50", "p99"; None: no ITL
    input_tokens_mean: float | None
    cached_tokens_mean: float | None  # None: no turn reported cached tokens
    hit_rate_pct: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SessionTotals:
    sessions: int
    without_error: int
    ended_by_error: int
    cancelled: int
    mean_turns: float | None
    finished: int | None = None  # the run's count (its ticks), None when it has none

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TurnTable:
    rows: list[TurnRow]
    sessions: SessionTotals

    @property
    def hit_rate_reported(self) -> bool:
        return any(row.hit_rate_pct is not None for row in self.rows)

    def to_json(self) -> dict[str, Any]:
        """The result JSON's sections: ``per_turn`` (the rows) and ``sessions`` (the totals)."""
        return {"per_turn": [row.to_dict() for row in self.rows], "sessions": self.sessions.to_dict()}

    def text(self) -> str:
        """The table as fixed-width text (``rampwatch report``), the session totals under it."""
        head = [h for h, _ in TEXT_COLUMNS]
        body = [[cell(row) for _, cell in TEXT_COLUMNS] for row in self.rows]
        widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(head)]
        lines = ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in [head, *body]]
        lines.append(sessions_line(self.sessions))
        if not self.hit_rate_reported:
            lines.append(NO_HIT_RATE_HINT)
        return "\n".join(lines)


def number_text(value: float | None, fmt: str = ".1f") -> str:
    """A figure of the table: "—" when there is none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return format(value, fmt)


def _ms(part: str, key: str):
    def cell(row: TurnRow) -> str:
        figures = getattr(row, part)
        return number_text(None if figures is None else figures.get(key))

    return cell


TEXT_COLUMNS = (
    ("turn", lambda r: r.turn),
    ("requests", lambda r: str(r.requests)),
    ("errors", lambda r: str(r.errors)),
    ("TTFT p50 ms", _ms("ttft_ms", "p50")),
    ("p90", _ms("ttft_ms", "p90")),
    ("p99", _ms("ttft_ms", "p99")),
    ("mean", _ms("ttft_ms", "mean")),
    ("ITL p50 ms", _ms("itl_ms", "p50")),
    ("p99", _ms("itl_ms", "p99")),
    ("input tok", lambda r: number_text(r.input_tokens_mean, ".0f")),
    ("cached tok", lambda r: number_text(r.cached_tokens_mean, ".0f")),
    ("hit %", lambda r: number_text(r.hit_rate_pct)),
)


def with_active(totals: SessionTotals, active: int) -> SessionTotals:
    """The totals while the run goes on, counting its ``active`` sessions (its ticks).

    The turn table counts a session once its first turn has ended, so mid-run it misses
    the sessions whose first turn is still in flight, while the ticks' finished and active
    counts include them: "sessions 33 · finished 26 · active 19" did not add up. With the
    run's own count (finished + active) every session started is counted, and one that
    has had no failed turn so far is counted as without error; at the end (none active)
    both counts are the same."""
    if totals.finished is None:
        return totals
    started = max(totals.sessions, totals.finished + active)
    return replace(totals, sessions=started, without_error=started - totals.ended_by_error - totals.cancelled)


def sessions_line(totals: SessionTotals, active: int | None = None) -> str:
    """The totals in a line; ``active``: the run's open sessions when known (its ticks)."""
    if active is not None:
        totals = with_active(totals, active)
    parts = [f"sessions {totals.sessions}"]
    if totals.finished is not None:
        parts.append(f"finished {totals.finished}")
    parts += [f"ended by an error {totals.ended_by_error}", f"no error {totals.without_error}"]
    if totals.cancelled:
        parts.append(f"cancelled {totals.cancelled}")
    if active is not None:
        parts.append(f"active {active}")
    parts.append(f"mean turns {number_text(totals.mean_turns, '.2f')}")
    return " · ".join(parts)


class _Row:
    """One turn row's running figures."""

    __slots__ = (
        "cached",
        "cached_prompt",
        "cancelled",
        "errors",
        "itl",
        "ok",
        "prompt",
        "reporting",
        "requests",
        "ttft",
    )

    def __init__(self, ttft_values: type, itl_values: type) -> None:
        self.requests = 0
        self.errors = 0
        self.cancelled = 0
        self.ok = 0  # ended OK: the input tokens' divisor
        self.prompt = 0  # prompt tokens of those
        self.reporting = 0  # … of those, the ones with cached tokens reported
        self.cached = 0
        self.cached_prompt = 0
        self.ttft = ttft_values()
        self.itl = itl_values()

    def add(self, records: Sequence[RequestRecord]) -> None:
        # one pass in Python over the records, then a few numpy calls for the group
        self.requests += len(records)
        first: list[float] = []
        sent: list[float] = []
        chunks: list[np.ndarray] = []
        for r in records:
            if r.error_class is not None:
                if r.error_class == CANCELLED:
                    self.cancelled += 1
                else:
                    self.errors += 1
                continue
            self.ok += 1
            self.prompt += r.prompt_tokens
            if r.cached_tokens is not None:
                self.reporting += 1
                self.cached += r.cached_tokens
                self.cached_prompt += r.prompt_tokens
            if r.first_token_at is not None:
                first.append(r.first_token_at)
                sent.append(r.sent_at)
                chunks.append(np.asarray(r.chunk_times, dtype=np.float64))
        if first:
            first_at = np.array(first, dtype=np.float64)
            self.ttft.add(first_at - np.array(sent, dtype=np.float64))
            self.itl.add(stats.requests_itls(first_at, chunks))

    def row(self, index: int) -> TurnRow:
        ttft = self.ttft.describe_ms(TTFT_PERCENTILES) if self.ttft.n else None
        itl = self.itl.describe_ms(ITL_PERCENTILES) if self.itl.n else None
        return TurnRow(
            turn=row_label(index),
            requests=self.requests,
            errors=self.errors,
            cancelled=self.cancelled,
            ttft_ms=None if ttft is None else {k: ttft[k] for k in ("mean", "p50", "p90", "p99")},
            itl_ms=None if itl is None else {k: itl[k] for k in ("p50", "p99")},
            input_tokens_mean=self.prompt / self.ok if self.ok else None,
            cached_tokens_mean=self.cached / self.reporting if self.reporting else None,
            hit_rate_pct=hit_rate_pct(self.cached, self.cached_prompt, self.reporting),
        )


_COUNTERS = ("requests", "errors", "cancelled", "ok", "prompt", "reporting", "cached", "cached_prompt")


class TurnFigures:
    """The per-turn rows of the requests fed so far (in batches of any size, any order).

    ``ttft_values``/``itl_values``: the latency stores (``core.figures.stats``): bounded
    ``RunningValues`` by default (the live builder; ``export_state`` needs them),
    ``ExactValues`` / ``MicrosecondCounts`` for a run's end and a recording.

    Records are queued and folded in when read or past ``FOLD_AT_PENDING``: the numpy calls
    of a fold cost about the same for 3 records of a turn as for 300, and the live builder
    feeds a few records at a time on the load's event loop. Every figure is the same
    however the records are grouped (the stores' sums add value after value)."""

    FOLD_AT_PENDING = 512

    def __init__(self, ttft_values: type = stats.RunningValues, itl_values: type = stats.RunningValues) -> None:
        self._ttft_values = ttft_values
        self._itl_values = itl_values
        self._rows: list[_Row] = []
        self._pending: list[RequestRecord] = []

    def __bool__(self) -> bool:
        return bool(self._rows) or bool(self._pending)

    def add(self, records: Sequence[RequestRecord]) -> None:
        """Queue records; those without a turn (not of a session workload) are skipped."""
        self._pending.extend(record for record in records if record.turn is not None)
        if len(self._pending) >= self.FOLD_AT_PENDING:
            self._fold()

    def _fold(self) -> None:
        records, self._pending = self._pending, []
        groups: dict[int, list[RequestRecord]] = {}
        last = TURN_ROWS - 1
        for record in records:
            turn: int = record.turn  # type: ignore[assignment]
            index = last if turn > last else (turn - 1 if turn > 0 else 0)  # row_index, inlined
            group = groups.get(index)
            if group is None:
                groups[index] = [record]
            else:
                group.append(record)
        if not groups:
            return
        while len(self._rows) <= max(groups):
            self._rows.append(_Row(self._ttft_values, self._itl_values))
        for index, group in groups.items():
            self._rows[index].add(group)

    def table(self, finished: int | None = None) -> TurnTable | None:
        """The rows up to the highest turn seen and the session totals (``finished``: the
        run's count of ended sessions, when known); None before any turn."""
        self._fold()
        if not self._rows:
            return None
        rows = [row.row(i) for i, row in enumerate(self._rows)]
        totals = session_totals(
            turn1_requests=self._rows[0].requests,
            requests=sum(r.requests for r in rows),
            errors=sum(r.errors for r in rows),
            cancelled=sum(r.cancelled for r in rows),
            finished=finished,
        )
        return TurnTable(rows, totals)

    # -- live checkpoints (the bounded stores only) ---------------------------------
    def export_state(self, arrays: dict[str, np.ndarray], prefix: str = "turns") -> dict[str, Any]:
        """The rows' counts as JSON-able values, their histograms in ``arrays``."""
        self._fold()
        rows = []
        for i, row in enumerate(self._rows):
            stores = {}
            for name in ("ttft", "itl"):
                store = getattr(row, name)
                assert isinstance(store, stats.RunningValues), "only bounded figures are checkpointed"
                arrays[f"{prefix}.{i}.{name}"] = store.hist.counts
                stores[name] = [store.n, store.total, store.squares, store.hist.total]
            rows.append({**{name: getattr(row, name) for name in _COUNTERS}, **stores})
        return {"rows": rows}

    @classmethod
    def restore_state(cls, state: dict[str, Any], arrays: dict[str, np.ndarray], prefix: str = "turns") -> TurnFigures:
        figures = cls()
        for i, saved in enumerate(state["rows"]):
            row = _Row(stats.RunningValues, stats.RunningValues)
            for name in _COUNTERS:
                setattr(row, name, int(saved[name]))
            for name in ("ttft", "itl"):
                store = getattr(row, name)
                store.n, store.total, store.squares, store.hist.total = saved[name]
                store.hist._counts = np.array(arrays[f"{prefix}.{i}.{name}"], dtype=np.int64)
            figures._rows.append(row)
        return figures


def turn_table(
    records: Sequence[RequestRecord],
    ttft_values: type = stats.ExactValues,
    itl_values: type = stats.ExactValues,
    finished: int | None = None,
) -> TurnTable | None:
    """The per-turn table of requests held in memory (a run's end; tests): exact
    percentiles. None when no request has a turn (the run had no sessions). ``finished``:
    the run's own count of sessions that ended (its ticks' ``sessions_finished_total``)."""
    figures = TurnFigures(ttft_values, itl_values)
    figures.add(records)
    return figures.table(finished)


def turn_sections(table: TurnTable | None) -> dict[str, Any]:
    """The result JSON's ``per_turn`` and ``sessions``: empty for a run without sessions,
    so that such a run's file keeps exactly its fields."""
    return {} if table is None else table.to_json()
