"""Where the TTFT went, on the client's side: a request's time from its send to its first
token cut at the phase times its transport marked (``RequestRecord.slot_at`` and the
rest; ``loadgen.transport.phases`` takes them).

The phases, in order, each ending at its field's time:

- ``slot``: waiting for a connection slot (the pool was at its limit) -> ``slot_at``
- ``dns``: resolving the host's name -> ``dns_at``
- ``connect``: opening a new connection, TCP and TLS -> ``connected_at``
- ``send``: writing the request -> ``request_sent_at``
- ``headers``: until the response's headers came (the server's front end, a gateway's
  queue) -> ``headers_at``
- ``first_token``: from the headers to the first token (the engine's queue and prefill)
  -> ``first_token_at``

A phase that did not happen (no wait, a reused connection, a cached name) takes no time,
and the time before a phase's mark (the client's own work) goes to that phase, so the
phases of a request add up to its TTFT exactly. A mark earlier than the one before it (a
hop that repeated a phase) counts as that one: no phase is negative.

The run's figures (summary, result JSON, report, live view) count successful requests
with a first token and phase marks, so that the phases' means add up to the mean TTFT (a
recording of an older client has no marks: no figures, nothing shown). A request that
failed (or got no token) still has, per request (``record_phases``: the CSV and Parquet
exports), the phases it reached before it ended.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rampwatch.core.figures import stats
from rampwatch.core.timeline import RequestRecord

# (phase, the record field its end is marked by, its label on screen and in reports)
PHASES: tuple[tuple[str, str, str], ...] = (
    ("slot", "slot_at", "connection slot"),
    ("dns", "dns_at", "DNS"),
    ("connect", "connected_at", "connect (TCP+TLS)"),
    ("send", "request_sent_at", "request sent"),
    ("headers", "headers_at", "response headers"),
    ("first_token", "first_token_at", "first token"),
)
PHASE_NAMES = tuple(name for name, _, _ in PHASES)
MARK_FIELDS = tuple(field for _, field, _ in PHASES[:-1])
# The figures given per phase (ms); the summary's percentiles are not used: p50 and p99 are
# what the breakdown is read by.
PHASE_PERCENTILES = (50.0, 99.0)


def phase_durations(sent_at: np.ndarray, marks: Sequence[np.ndarray], first_token_at: np.ndarray) -> np.ndarray:
    """``(len(PHASES), n)`` seconds: each request's phases, from its send (``sent_at``)
    through its ``marks`` (one array per ``MARK_FIELDS``, NaN: no such phase) to its
    first token. Each column adds up to ``first_token_at - sent_at``."""
    prev = np.asarray(sent_at, dtype=np.float64)
    out = np.empty((len(PHASES), prev.size), dtype=np.float64)
    for row, mark in enumerate(marks):
        mark = np.asarray(mark, dtype=np.float64)
        end = np.where(np.isnan(mark), prev, np.maximum(mark, prev))
        out[row] = end - prev
        prev = end
    out[-1] = np.asarray(first_token_at, dtype=np.float64) - prev
    return out


def record_phases(rec: RequestRecord) -> dict[str, float] | None:
    """One request's phases in seconds, those it reached (None: no marks). A request with
    its first token has them all (adding up to its TTFT); one that failed or got no token
    has those up to its last mark (connected, request sent, headers): the phases it
    finished, the failure came after them; the later ones are absent."""
    marks = [getattr(rec, f) for f in MARK_FIELDS]
    reached = [i for i, mark in enumerate(marks) if mark is not None]
    if not reached:
        return None
    if rec.first_token_at is not None:
        durations = phase_durations(
            np.array([rec.sent_at]), [np.array([_nan(m)]) for m in marks], np.array([rec.first_token_at])
        )
        return {name: float(durations[i, 0]) for i, name in enumerate(PHASE_NAMES)}
    return partial_phases(rec.sent_at, marks[: reached[-1] + 1])


def partial_phases(sent_at: float, marks: Sequence[float | None]) -> dict[str, float]:
    """The first ``len(marks)`` phases of a request that ended before its first token, cut
    as ``phase_durations`` cuts them (an unmarked phase: 0; a mark before the one before
    it counts as that one)."""
    out, previous = {}, sent_at
    for name, mark in zip(PHASE_NAMES, marks, strict=False):
        end = previous if mark is None else max(mark, previous)
        out[name] = end - previous
        previous = end
    return out


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


@dataclass(slots=True)
class PhaseBlock:
    """The phases of a block's successful requests that carry marks."""

    durations: np.ndarray  # (len(PHASES), n) seconds
    new_connections: int  # of them, how many opened a connection
    waited_for_slot: int  # and how many waited for a connection slot

    @classmethod
    def of(
        cls, ok: np.ndarray, sent_at: np.ndarray, first_token_at: np.ndarray, marks: Sequence[np.ndarray]
    ) -> PhaseBlock | None:
        """From a block's columns (``marks``: NaN where unmarked); None when no successful
        request with a first token has a mark."""
        marked = np.zeros(len(sent_at), dtype=bool)
        for mark in marks:
            marked |= ~np.isnan(mark)
        keep = ok & ~np.isnan(first_token_at) & marked
        if not keep.any():
            return None
        kept = [mark[keep] for mark in marks]
        return cls(
            durations=phase_durations(sent_at[keep], kept, first_token_at[keep]),
            new_connections=int((~np.isnan(kept[MARK_FIELDS.index("connected_at")])).sum()),
            waited_for_slot=int((~np.isnan(kept[MARK_FIELDS.index("slot_at")])).sum()),
        )

    @classmethod
    def from_records(cls, records: Sequence[RequestRecord]) -> PhaseBlock | None:
        if not any(getattr(r, f) is not None for r in records for f in MARK_FIELDS):
            return None  # a plain recording of an older client: nothing built
        ok = np.array([r.ok for r in records], dtype=bool)
        sent = np.array([r.sent_at for r in records], dtype=np.float64)
        first = np.array([_nan(r.first_token_at) for r in records], dtype=np.float64)
        marks = [np.array([_nan(getattr(r, f)) for r in records], dtype=np.float64) for f in MARK_FIELDS]
        return cls.of(ok, sent, first, marks)


class PhaseTotals:
    """A run's phases, block after block: exact values (the end of a run, a recording), or
    ``bounded`` (the live run-so-far figures: ``stats.RunningValues``, checkpointed)."""

    def __init__(self, bounded: bool = False) -> None:
        store = stats.RunningValues if bounded else stats.ExactValues
        self.values: list[Any] = [store() for _ in PHASES]
        self.ttft: Any = store()
        self.new_connections = 0
        self.waited_for_slot = 0

    def add(self, block: PhaseBlock) -> None:
        for store, row in zip(self.values, block.durations, strict=True):
            store.add(row)
        self.ttft.add(block.durations.sum(axis=0))
        self.new_connections += block.new_connections
        self.waited_for_slot += block.waited_for_slot

    def _stores(self) -> dict[str, stats.RunningValues]:
        stores = {**dict(zip(PHASE_NAMES, self.values)), "ttft": self.ttft}
        assert all(isinstance(s, stats.RunningValues) for s in stores.values()), "only bounded totals are checkpointed"
        return stores

    def export_state(self, arrays: dict[str, np.ndarray], prefix: str) -> dict[str, Any]:
        """A bounded total's state (``SummaryBuilder.export_state``), its histograms in
        ``arrays`` (``<prefix>.phase_<name>``)."""
        sums = {}
        for name, store in self._stores().items():
            arrays[f"{prefix}.phase_{name}"] = store.hist.counts
            sums[name] = [store.n, store.total, store.squares, store.hist.total]
        return {"sums": sums, "new_connections": self.new_connections, "waited_for_slot": self.waited_for_slot}

    @classmethod
    def restore_state(cls, state: dict[str, Any], arrays: dict[str, np.ndarray], prefix: str) -> PhaseTotals:
        totals = cls(bounded=True)
        for name, store in totals._stores().items():
            store.n, store.total, store.squares, store.hist.total = state["sums"][name]
            store.hist._counts = np.array(arrays[f"{prefix}.phase_{name}"], dtype=np.int64)
        totals.new_connections = state["new_connections"]
        totals.waited_for_slot = state["waited_for_slot"]
        return totals

    def figures(self) -> PhaseFigures:
        return PhaseFigures(
            requests=self.ttft.n,
            new_connections=self.new_connections,
            waited_for_slot=self.waited_for_slot,
            phases={name: store.describe_ms(PHASE_PERCENTILES) for name, store in zip(PHASE_NAMES, self.values)},
            ttft=self.ttft.describe_ms(PHASE_PERCENTILES),
        )


@dataclass(slots=True)
class PhaseFigures:
    """Per phase mean / p50 / p99 (ms) over the requests with marks; the phases' means add
    up to ``ttft``'s mean (over the same requests)."""

    requests: int
    new_connections: int
    waited_for_slot: int
    phases: dict[str, dict[str, float]]
    ttft: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "requests": self.requests,
            "new_connections": self.new_connections,
            "waited_for_slot": self.waited_for_slot,
            "mean_ttft_ms": self.ttft["mean"],
        }
        for name in PHASE_NAMES:
            figures = self.phases[name]
            out[f"mean_{name}_ms"] = figures["mean"]
            out[f"p50_{name}_ms"] = figures["p50"]
            out[f"p99_{name}_ms"] = figures["p99"]
        return out


def phase_lines(phases: dict[str, Any]) -> list[str]:
    """The summary's section (``PhaseFigures.to_dict``), in vLLM's row layout."""
    lines = ["{s:{c}^{n}}".format(s="Where TTFT went (client side)", n=50, c="-")]
    lines.append("{:<40} {:<10}".format("Requests with phases:", phases["requests"]))
    lines.append("{:<40} {:<10}".format("New connections:", phases["new_connections"]))
    lines.append("{:<40} {:<10}".format("Waited for a connection slot:", phases["waited_for_slot"]))
    for name, _, label in PHASES:
        mean, p50, p99 = (phases[f"{k}_{name}_ms"] for k in ("mean", "p50", "p99"))
        lines.append("{:<40} {:<10.2f}".format(f"{label} mean/p50/p99 (ms):", mean) + f" {p50:.2f} / {p99:.2f}")
    lines.append("{:<40} {:<10.2f}".format("Sum of means = mean TTFT (ms):", phases["mean_ttft_ms"]))
    return lines
