"""The 1-second series a run shows, built incrementally from the timeline stream.

``SeriesBuilder`` is a ``TimelineSink``: feed it the live stream or a recording and
``snapshot()`` returns the same ``Snapshot`` for the same input (nothing depends on
wall time or on when ``snapshot`` is called). It keeps per-second bins, not records:

- counts per second: offered and sent from the ticks' running totals (each tick's
  increase spread over the time since the previous tick), so they are current while
  requests are still in flight; completed and errors (``end_at``), client output tokens
  (completion tokens of requests that ended OK in the second). A stream whose ticks
  carry no totals (older recordings) counts offered by ``scheduled_at`` and sent by
  ``sent_at`` from the records, which arrive when a request *ends*;
- ``target_rps`` and ``in_flight``: the last tick in the second;
- sessions (a session workload): ``sessions_active`` from the last tick in the second,
  ``sessions_started_per_s`` / ``sessions_finished_per_s`` from the ticks' running totals
  spread as offered and sent are (0 in other runs);
- ``running``, ``waiting``, ``kv_usage_pct``: the last scrape in the second, summed over
  URLs (KV averaged), NaN in a second without a good scrape;
- server token rates and preemptions: each URL's counter increase between two
  successive good scrapes (reset-safe, ``counters``) is spread uniformly over the
  interval between them and divided by the covered time of each second, then summed
  over URLs; ``prefix_hit_pct`` is Δhits/Δqueries over the last ``window_s`` seconds;
- GPU series (``GPU_SERIES``) from GPU samples (``ServerSample.is_gpu``: NVML, a DCGM
  exporter), the last in the second: utilisation and SM clock averaged over the GPUs,
  power and memory summed, over the sources not stale; they never touch the server's
  figures or its staleness, and a failed one is counted as a scrape failure of its URL;
- TTFT / ITL p50/p90/p99: over the requests that ended OK in the last ``window_s``
  seconds (10 by default), from log histograms (values within ~1% of exact). A second's
  value is frozen ``grace_s`` after the second ends; a record arriving later still
  counts in the run summary but not in that frozen value;
- a session workload's figures by turn index (``core.figures.turns``: TTFT, input tokens,
  prefix-cache hit rate per turn, session totals), from the records, bounded.

Finished requests are folded in by batches: ``on_request`` only queues the record, and
the queue is folded in (counts, histograms, summary) before a second is frozen, before
anything is read and past ``FOLD_AT_QUEUED``. Every figure is the same as if each
record were folded in on arrival (counts and histograms are sums of integers, the
summary's running sums add value after value), while the run's event loop, which calls
``on_request`` as each request ends, spends about a microsecond there instead of the
~100 µs of numpy calls one record costs on its own: that time delayed the next socket
read, and so the arrival time of the chunks in it.

Only whole seconds appear in a snapshot while running (``times`` are bin starts);
after ``on_finish`` the last partial second is included.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import Any

import numpy as np

from rampwatch.core.figures.classes import class_slos
from rampwatch.core.figures.client_lag import ClientTotals
from rampwatch.core.figures.counters import CounterTracker
from rampwatch.core.figures.gpu import combine_gpus, gpu_aggregates
from rampwatch.core.figures.samples import combine_samples
from rampwatch.core.figures.segments import CONFIG_EVENT, SegmentTable, config_segments, segment_index, segment_table
from rampwatch.core.figures.stats import LogHistogram
from rampwatch.core.figures.steps import StepTracker
from rampwatch.core.figures.summary import GpuTotals, RequestBlock, Summary, SummaryBuilder, knee_explanation, knee_rps
from rampwatch.core.figures.turns import TurnFigures
from rampwatch.core.timeline import (
    CANCELLED,
    CLASS_SERIES_NAMES,
    ERROR_SERIES,
    GPU_SERIES,
    SERIES_NAMES,
    ClassFigures,
    Event,
    RequestRecord,
    RunHeader,
    ScrapeErrorLine,
    ServerSample,
    Snapshot,
    Tick,
    error_group,
    metrics_stale_after_s,
)

_QS = (0.5, 0.9, 0.99)
_SESSION_RATES = ("sessions_started_per_s", "sessions_finished_per_s")
# The windowed percentiles, one histogram per metric and second of completion. E2E latency
# is drawn per class only (``CLASS_SERIES_NAMES``): a class builder keeps its histograms
# (``e2e_latency``), the run's own builder does not spend its event loop and checkpoints on them.
RUN_HIST_METRICS = ("ttft", "itl")
CLASS_HIST_METRICS = (*RUN_HIST_METRICS, "e2el")


def latency_series(metrics: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{metric}_{q}" for metric in metrics for q in ("p50", "p90", "p99"))


# Queued records are folded in once there are this many (a second's freeze and every read
# fold them sooner): enough for numpy's per-call cost to be shared, few enough that one
# fold is a short pause (~0.2 ms), not one long one per second.
FOLD_AT_QUEUED = 16


class _Growable:
    """A float array indexed by second that grows on demand."""

    __slots__ = ("data", "fill")

    def __init__(self, fill: float, capacity: int = 256) -> None:
        self.fill = fill
        self.data = np.full(capacity, fill, dtype=np.float64)

    def _ensure(self, i: int) -> None:
        if i >= self.data.size:
            size = self.data.size
            while size <= i:
                size *= 2
            grown = np.full(size, self.fill, dtype=np.float64)
            grown[: self.data.size] = self.data
            self.data = grown

    def add(self, i: int, v: float) -> None:
        self._ensure(i)
        self.data[i] += v

    def set(self, i: int, v: float) -> None:
        self._ensure(i)
        self.data[i] = v

    def head(self, n: int) -> np.ndarray:
        self._ensure(max(n - 1, 0))
        return self.data[:n]


def _sec(t: float) -> int:
    return max(0, int(math.floor(t)))


def _schedule_of(header: RunHeader | None) -> tuple[str | None, float | None]:
    """(schedule kind, planned duration) for the step table, from the run's header."""
    if header is None:
        return None, None
    schedule = header.scenario.get("schedule") if isinstance(header.scenario, dict) else None
    kind = schedule.get("kind") if isinstance(schedule, dict) else None
    return (kind if isinstance(kind, str) else None), header.planned_duration_s


class SeriesBuilder:
    """Incremental 1-second series + run-so-far summary; see the module docstring."""

    def __init__(
        self,
        window_s: int = 10,
        grace_s: float = 2.0,
        slo: dict[str, float] | None = None,
        gpu_price_per_hour: float | None = None,
        e2e_latency: bool = False,
    ) -> None:
        self.window_s = int(window_s)
        self._hist_metrics = CLASS_HIST_METRICS if e2e_latency else RUN_HIST_METRICS
        self._latency_series = latency_series(self._hist_metrics)
        self.grace_s = grace_s
        self.header: RunHeader | None = None
        self.state = "starting"
        self.target_rps = 0.0
        self.in_flight = 0
        self.oldest_sent_at: float | None = None
        self.planned_end_s: float | None = None  # from ticks; None: the header's plan
        self.events: list[Event] = []
        self.now = 0.0
        self.finished_at: float | None = None
        self.server_metrics_available = False
        self._counts = {
            name: _Growable(0.0)
            for name in (
                "offered_rps",
                "sent_rps",
                "completed_rps",
                "error_rps",
                "client_output_tps",
                *ERROR_SERIES.values(),
            )
        }
        self._last = {
            name: _Growable(math.nan)
            for name in (
                "target_rps",
                "in_flight",
                "running",
                "waiting",
                "kv_usage_pct",
                "client_queued",
                "client_lag_ms",
                *GPU_SERIES,
            )
        }
        self._last["sessions_active"] = _Growable(0.0)
        # Sessions started / ended per second from the ticks' totals, and the last totals.
        self._session_counts = {name: _Growable(0.0) for name in _SESSION_RATES}
        self._session_totals = (0.0, 0, 0)
        self.last_good_scrape_t: float | None = None
        # GPU telemetry: each source's latest good sample, when the newest was, run totals
        self._gpu_latest: dict[str, ServerSample] = {}
        self.last_good_gpu_t: float | None = None
        self.gpu_totals = GpuTotals()
        self.client_totals = ClientTotals()  # the client's self-check, from the ticks
        # (url, reason) -> the line the events panel shows for it
        self._scrape_errors: dict[tuple[str, str], ScrapeErrorLine] = {}
        self._tick_counts = {name: _Growable(0.0) for name in ("offered_rps", "sent_rps")}
        self._tick_totals: tuple[float, int, int] | None = None  # (t, offered, sent) of the last tick
        self._tracker = CounterTracker()
        # url -> field -> (amount, covered seconds)
        self._spread: dict[str, dict[str, tuple[_Growable, _Growable]]] = {}
        self._hists: dict[int, tuple[LogHistogram, ...]] = {}  # one per self._hist_metrics
        self._final = {name: _Growable(math.nan) for name in self._latency_series}
        self._final_upto = 0  # seconds below this are frozen
        self._newly_final: list[int] = []
        self._queued: list[RequestRecord] = []  # finished requests not folded in yet
        self.summary = SummaryBuilder(slo, gpu_price_per_hour, bounded=True)
        # After a server restart (``config`` event), one run-so-far summary per
        # configuration, of the requests sent while it served (``core.figures.segments``);
        # empty while the run has one configuration.
        self._segment_starts: list[float] = []
        self._segment_summaries: list[SummaryBuilder] = []
        self.steps = StepTracker()
        # A session workload's figures by turn index (``core.figures.turns``); None until a
        # request with a turn ends (runs without sessions never have them).
        self.turns: TurnFigures | None = None
        # A mixture's classes (``loadgen.workload.mixture``): one builder each, fed the class's
        # requests; a class builder has its name here and no classes of its own.
        self._classes: dict[str, SeriesBuilder] = {}
        self.class_name: str | None = None

    # -- state ----------------------------------------------------------------------
    def export_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The builder's whole state as JSON-able values plus named numpy arrays.

        ``from_state(header, *builder.export_state())`` is a builder that behaves exactly as
        this one from here on (recordings store it as seek checkpoints). The header is
        not included: the recording has it.
        """
        self._fold_queued()
        arrays: dict[str, np.ndarray] = {}

        def put_growables(prefix: str, table: dict[str, _Growable]) -> list[list[Any]]:
            out = []
            for name, g in table.items():
                arrays[f"{prefix}.{name}"] = g.data
                out.append([name, g.fill])
            return out

        spread = []
        for i, (url, fields) in enumerate(self._spread.items()):
            for field, (amount, covered) in fields.items():
                arrays[f"spread.{i}.{field}.amount"] = amount.data
                arrays[f"spread.{i}.{field}.covered"] = covered.data
                spread.append([url, i, field])
        seconds = sorted(self._hists)
        if seconds:
            arrays["hists"] = np.stack([np.stack([h.counts for h in self._hists[b]]) for b in seconds])
        meta = {
            "window_s": self.window_s,
            "grace_s": self.grace_s,
            "state": self.state,
            "target_rps": self.target_rps,
            "in_flight": self.in_flight,
            "oldest_sent_at": self.oldest_sent_at,
            "planned_end_s": self.planned_end_s,
            "events": [e.to_dict() for e in self.events],
            "now": self.now,
            "finished_at": self.finished_at,
            "server_metrics_available": self.server_metrics_available,
            "counts": put_growables("counts", self._counts),
            "last": put_growables("last", self._last),
            "tick_counts": put_growables("tick_counts", self._tick_counts),
            "session_counts": put_growables("session_counts", self._session_counts),
            "session_totals": list(self._session_totals),
            "final": put_growables("final", self._final),
            "tick_totals": self._tick_totals,
            "tracker": [s.to_dict() for s in self._tracker.latest()],
            "spread": spread,
            "hist_seconds": seconds,
            "hist_totals": [[h.total for h in self._hists[b]] for b in seconds],
            "final_upto": self._final_upto,
            "last_good_scrape_t": self.last_good_scrape_t,
            "scrape_errors": [
                [e.url, e.message, e.count, e.first_t, e.last_t, e.gpu] for e in self._scrape_errors.values()
            ],
            "gpu_latest": [s.to_dict() for s in self._gpu_latest.values()],
            "last_good_gpu_t": self.last_good_gpu_t,
            "gpu_totals": self.gpu_totals.export_state(),
            "client_totals": self.client_totals.export_state(),
            "newly_final": list(self._newly_final),
            "summary": self.summary.export_state(arrays),
            "steps": self.steps.export_state(arrays),
        }
        if self.turns is not None:
            meta["turns"] = self.turns.export_state(arrays)
        if self._classes:
            classes = []
            for i, (name, sub) in enumerate(self._classes.items()):
                sub_meta, sub_arrays = sub.export_state()
                arrays.update({f"class{i}/{key}": value for key, value in sub_arrays.items()})
                classes.append([name, sub_meta])
            meta["classes"] = classes
        if self._segment_starts:
            meta["config_segments"] = {
                "starts": list(self._segment_starts),
                "summaries": [b.export_state(arrays, f"segment{i}") for i, b in enumerate(self._segment_summaries)],
            }
        return meta, arrays

    @classmethod
    def from_state(
        cls, header: RunHeader | None, meta: dict[str, Any], arrays: dict[str, np.ndarray], e2e_latency: bool = False
    ) -> SeriesBuilder:
        """A builder restored from ``export_state()`` output of the current schema (see
        there); ``e2e_latency`` as the builder had it (a mixture's class builder). A
        recording's older checkpoints are brought to it by ``record.checkpoint``."""
        sm = meta["summary"]
        b = cls(
            window_s=meta["window_s"],
            grace_s=meta["grace_s"],
            slo=sm["slo"],
            gpu_price_per_hour=sm["gpu_price_per_hour"],
            e2e_latency=e2e_latency,
        )
        b.header = header
        b.state = meta["state"]
        b.target_rps = meta["target_rps"]
        b.in_flight = meta["in_flight"]
        b.oldest_sent_at = meta["oldest_sent_at"]
        b.planned_end_s = meta["planned_end_s"]
        b.events = [Event(**e) for e in meta["events"]]
        b.now = meta["now"]
        b.finished_at = meta["finished_at"]
        b.server_metrics_available = meta["server_metrics_available"]

        def growables(prefix: str, specs: list[list[Any]]) -> dict[str, _Growable]:
            out = {}
            for name, fill in specs:
                g = _Growable(fill, capacity=1)
                g.data = np.array(arrays[f"{prefix}.{name}"], dtype=np.float64)
                out[name] = g
            return out

        b._counts = growables("counts", meta["counts"])
        b._last = growables("last", meta["last"])
        b._session_counts = growables("session_counts", meta["session_counts"])
        b._session_totals = tuple(meta["session_totals"])
        b.last_good_scrape_t = meta["last_good_scrape_t"]
        for url, message, count, first_t, last_t, gpu in meta["scrape_errors"]:
            b._scrape_errors[(url, message)] = ScrapeErrorLine(url, message, count, first_t, last_t, bool(gpu))
        for d in meta["gpu_latest"]:
            sample = ServerSample(**d)
            b._gpu_latest[sample.url] = sample
        b.last_good_gpu_t = meta["last_good_gpu_t"]
        b.gpu_totals = GpuTotals.restore_state(meta["gpu_totals"])
        b.client_totals = ClientTotals.restore_state(meta["client_totals"])
        b._tick_counts = growables("tick_counts", meta["tick_counts"])
        b._final = growables("final", meta["final"])
        b._tick_totals = tuple(meta["tick_totals"]) if meta["tick_totals"] is not None else None
        for d in meta["tracker"]:
            b._tracker.update(ServerSample(**d))
        for url, i, field in meta["spread"]:
            amount, covered = _Growable(0.0, capacity=1), _Growable(0.0, capacity=1)
            amount.data = np.array(arrays[f"spread.{i}.{field}.amount"], dtype=np.float64)
            covered.data = np.array(arrays[f"spread.{i}.{field}.covered"], dtype=np.float64)
            b._spread.setdefault(url, {})[field] = (amount, covered)
        for k, (sec, totals) in enumerate(zip(meta["hist_seconds"], meta["hist_totals"])):
            hists = tuple(LogHistogram() for _ in b._hist_metrics)
            for j, hist in enumerate(hists):
                hist._counts = np.array(arrays["hists"][k, j], dtype=np.int64)
                hist.total = totals[j]
            b._hists[sec] = hists
        b._final_upto = meta["final_upto"]
        b._newly_final = list(meta["newly_final"])
        b.summary = SummaryBuilder.restore_state(sm, arrays)
        b.steps = StepTracker.restore_state(meta["steps"], arrays)
        # Optional parts: a run without a restart, sessions or a mixture has none.
        if "config_segments" in meta:
            segments = meta["config_segments"]
            b._segment_starts = [float(t) for t in segments["starts"]]
            b._segment_summaries = [
                SummaryBuilder.restore_state(state, arrays, f"segment{i}")
                for i, state in enumerate(segments["summaries"])
            ]
        if "turns" in meta:
            b.turns = TurnFigures.restore_state(meta["turns"], arrays)
        for i, (name, sub_meta) in enumerate(meta.get("classes", [])):
            prefix = f"class{i}/"
            sub_arrays = {key[len(prefix) :]: a for key, a in arrays.items() if key.startswith(prefix)}
            sub = b._classes[name] = cls.from_state(header, sub_meta, sub_arrays, e2e_latency=True)
            sub.class_name = name
        return b

    # -- TimelineSink ---------------------------------------------------------------
    def on_start(self, header: RunHeader) -> None:
        self.header = header
        self.state = "starting"
        self.steps.configure(*_schedule_of(header))
        if self.class_name is None:
            for name in class_slos(header.scenario):  # every class shown from the start
                self._class_builder(name)

    def on_request(self, record: RequestRecord) -> None:
        self._queued.append(record)
        if len(self._queued) >= FOLD_AT_QUEUED:
            self._fold_queued()
        self._advance(record.end_at)

    def _fold_queued(self) -> None:
        """Fold the queued records in, in arrival order (see the module docstring)."""
        records, self._queued = self._queued, []
        if not records:
            return
        c = self._counts
        for record in records:
            if self.class_name is None:  # a class builder keeps no step table
                self.steps.on_request(record)
                if record.request_class is not None:
                    self._class_builder(record.request_class)._queued.append(record)
            c["offered_rps"].add(_sec(record.scheduled_at), 1.0)
            c["sent_rps"].add(_sec(record.sent_at), 1.0)
            end = _sec(record.end_at)
            if record.error_class == CANCELLED:
                pass  # cancelled by the run: neither completed nor failed
            elif record.ok:
                c["completed_rps"].add(end, 1.0)
                c["client_output_tps"].add(end, float(record.completion_tokens))
            else:
                c["error_rps"].add(end, 1.0)
                group = error_group(record.error_class)
                if group is not None:
                    c[ERROR_SERIES[group]].add(end, 1.0)
        # one block per run of records that ended in the same second (usually one or two)
        start = 0
        for i in range(1, len(records) + 1):
            if i == len(records) or _sec(records[i].end_at) != _sec(records[start].end_at):
                self._fold_block(_sec(records[start].end_at), records[start:i])
                start = i
        if any(record.turn is not None for record in records):
            if self.turns is None:
                self.turns = TurnFigures()
            self.turns.add(records)

    def _fold_block(self, end: int, records: list[RequestRecord]) -> None:
        block = RequestBlock.from_records(records)
        ok = np.fromiter((e is None for e in block.error_classes), dtype=bool, count=len(records))
        if ok.any():
            hists = self._hists.get(end)
            if hists is None:
                hists = self._hists[end] = tuple(LogHistogram() for _ in self._hist_metrics)
            first = block.first_token_at[ok]
            ttft = first - block.sent_at[ok]
            hists[0].add(ttft[~np.isnan(first)])
            hists[1].add(block.itls)
            if len(hists) > 2:  # E2E (a class builder)
                hists[2].add(block.end_at[ok] - block.sent_at[ok])
        good_before = self.summary.good
        self.summary.add_block(block)
        good = self._counts.get("good_rps")  # a class builder's, under an SLO
        if good is not None:
            good.add(end, float(self.summary.good - good_before))
        if self._segment_starts:
            self._fold_into_segments(records, block)

    def _fold_into_segments(self, records: list[RequestRecord], block: RequestBlock) -> None:
        groups: dict[int, list[RequestRecord]] = {}
        for record in records:
            groups.setdefault(segment_index(self._segment_starts, record.sent_at), []).append(record)
        for index, group in groups.items():
            whole = len(group) == len(records)
            self._segment_summaries[index].add_block(block if whole else RequestBlock.from_records(group))

    def configurations(self, now: float, arrays: dict[str, np.ndarray]) -> SegmentTable | None:
        """The side-by-side table of the configurations so far (None: one so far)."""
        if not self._segment_starts:
            return None
        segments = config_segments(self.header, self.events, now)
        summaries = []
        for segment, builder in zip(segments, self._segment_summaries, strict=False):
            last = segment.index == len(segments)
            lo, hi = int(segment.start_s), int(math.ceil(segment.end_s))
            inside = {name: values[lo:hi] for name, values in arrays.items()}
            knee = knee_rps([e for e in self.events if segment.start_s <= e.t and (e.t < segment.end_s or last)])
            summaries.append(builder.build(self.header, server=self.server_summary(inside), knee=knee))
        return segment_table(segments[: len(summaries)], summaries)

    def on_scrape(self, sample: ServerSample) -> None:
        if sample.is_gpu:
            self._on_gpu_sample(sample)
        elif sample.ok:
            self.server_metrics_available = True
            self.last_good_scrape_t = sample.t
            step = self._tracker.update(sample)
            # Counters that grew over an outage are not spread over it: the seconds the
            # server was not seen stay a gap rather than a line of made-up averages.
            if step is not None and step[0] <= metrics_stale_after_s(self.header):
                self._spread_deltas(sample.url, sample.t - step[0], sample.t, step[1])
            self._set_gauges(sample.t)
        else:
            self._count_scrape_error(sample)
        self._advance(sample.t)

    def _on_gpu_sample(self, sample: ServerSample) -> None:
        if not sample.ok:
            self._count_scrape_error(sample)
            return
        self._gpu_latest[sample.url] = sample
        self.last_good_gpu_t = sample.t
        self.gpu_totals.add(sample)
        s = _sec(sample.t)
        for name, value in gpu_aggregates(combine_gpus(self._fresh_gpu_samples(sample.t))).items():
            self._last[name].set(s, value)

    def _fresh_gpu_samples(self, t: float) -> list[ServerSample]:
        """The latest sample of each GPU source not stale at ``t``: a source that stopped
        answering no longer counts in the sums (its last power is not its current one)."""
        stale_after = metrics_stale_after_s(self.header)
        return [s for s in self._gpu_latest.values() if t - s.t <= stale_after]

    def _count_scrape_error(self, sample: ServerSample) -> None:
        message = sample.error or "failed"
        line = self._scrape_errors.pop((sample.url, message), None)
        if line is None:
            line = ScrapeErrorLine(sample.url, message, 0, sample.t, sample.t, gpu=sample.is_gpu)
        line.count += 1
        line.last_t = max(line.last_t, sample.t)
        self._scrape_errors[(sample.url, message)] = line  # re-inserted: newest last

    def on_tick(self, tick: Tick) -> None:
        self.state = tick.state
        self.target_rps = tick.target_rps
        self.in_flight = tick.in_flight
        self.oldest_sent_at = tick.oldest_sent_at
        if tick.planned_end_s is not None:
            self.planned_end_s = tick.planned_end_s
        s = _sec(tick.t)
        self._last["target_rps"].set(s, tick.target_rps)
        self._last["in_flight"].set(s, float(tick.in_flight))
        self._last["client_queued"].set(s, float(tick.client_queued))
        self._last["sessions_active"].set(s, float(tick.active_sessions))
        if tick.loop_lag_max_ms is not None:
            self._last["client_lag_ms"].set(s, tick.loop_lag_max_ms)
        self.client_totals.add(tick.loop_lag, tick.loop_lag_max_ms, tick.client_counts)
        prev_t, prev_started, prev_finished = self._session_totals
        if tick.sessions_started_total != prev_started or tick.sessions_finished_total != prev_finished:
            self._spread_counts(
                prev_t,
                tick.t,
                {
                    "sessions_started_per_s": tick.sessions_started_total - prev_started,
                    "sessions_finished_per_s": tick.sessions_finished_total - prev_finished,
                },
                self._session_counts,
            )
        self._session_totals = (tick.t, tick.sessions_started_total, tick.sessions_finished_total)
        # The run's exact peak when the tick has it (older recordings: the ticks' own counts).
        peak = tick.in_flight if tick.peak_in_flight is None else tick.peak_in_flight
        self.summary.peak_in_flight = max(self.summary.peak_in_flight, peak)
        self.steps.on_tick(tick.t, tick.state, tick.target_rps, tick.in_flight, tick.oldest_sent_at)
        if tick.offered_total is not None and tick.sent_total is not None:
            prev_t, prev_offered, prev_sent = self._tick_totals or (0.0, 0, 0)
            self._spread_counts(
                prev_t,
                tick.t,
                {
                    "offered_rps": tick.offered_total - prev_offered,
                    "sent_rps": tick.sent_total - prev_sent,
                },
            )
            self._tick_totals = (tick.t, tick.offered_total, tick.sent_total)
        self._advance(tick.t)

    def _spread_counts(
        self, t0: float, t1: float, deltas: dict[str, int], into: dict[str, _Growable] | None = None
    ) -> None:
        into = self._tick_counts if into is None else into
        if t1 <= t0:
            for name, delta in deltas.items():
                into[name].add(_sec(t1), float(delta))
            return
        span = t1 - t0
        for b in range(_sec(t0), _sec(t1) + 1):
            overlap = min(t1, b + 1.0) - max(t0, float(b))
            if overlap > 0:
                for name, delta in deltas.items():
                    into[name].add(b, delta * overlap / span)

    def on_event(self, event: Event) -> None:
        if event.kind == CONFIG_EVENT:
            self._start_segment(event.t)
        self.events.append(event)
        self.steps.on_event(event)
        self._advance(event.t)

    def _start_segment(self, t: float) -> None:
        """A restart: the requests sent from ``t`` on count for a new configuration. At the
        first one, every request folded so far was sent before it: the first
        configuration's summary starts as the run's."""
        if not self._segment_starts:
            self._segment_starts.append(0.0)
            self._segment_summaries.append(copy.deepcopy(self.summary))
        self._segment_starts.append(t)
        self._segment_summaries.append(SummaryBuilder(self.summary.slo, self.summary.gpu_price_per_hour, bounded=True))

    def on_finish(self, t: float) -> None:
        self.finished_at = t
        self.state = "done"
        for sub in self._classes.values():
            sub.on_finish(t)
        self._advance(t)

    @property
    def sessions_finished(self) -> int | None:
        """The run's count of sessions that ended, from the last tick of a session
        workload (None in other runs and recordings whose ticks carry no sessions)."""
        _, started, finished = self._session_totals
        return int(finished) if started else None

    def _class_builder(self, name: str) -> SeriesBuilder:
        """The builder of a mixture's class, made on first need: the header's classes at
        the start, a class the header does not name (judged by the run's SLO) when its
        first request is folded in."""
        sub = self._classes.get(name)
        if sub is None:
            scenario = self.header.scenario if self.header is not None else None
            slo = class_slos(scenario).get(name, self.summary.slo)
            sub = self._classes[name] = SeriesBuilder(self.window_s, self.grace_s, slo=slo, e2e_latency=True)
            sub.class_name = name
            sub.header = self.header
            if slo:
                sub._counts["good_rps"] = _Growable(0.0)
        return sub

    def class_figures(self, now: float, last_bins: int | None = None) -> list[ClassFigures]:
        """Each class's series (their last ``last_bins`` bins only, if given) and
        run-so-far summary at ``now``."""
        out = []
        for name, sub in self._classes.items():
            times, arrays = sub._arrays(now)
            cut = 0 if last_bins is None else max(0, len(times) - last_bins)
            nan = [math.nan] * (len(times) - cut)
            summary = sub.summary.build(self.header, duration_s=now)
            series = {key: arrays[key][cut:].tolist() if key in arrays else nan for key in CLASS_SERIES_NAMES}
            out.append(ClassFigures(name, series, summary.to_dict()))
        return out

    # -- building -------------------------------------------------------------------
    def _advance(self, t: float) -> None:
        if t > self.now:
            self.now = t
        last_final = math.floor(self.now - 1.0 - self.grace_s)
        if self._final_upto <= last_final:
            self._fold_queued()
        while self._final_upto <= last_final:
            self._freeze(self._final_upto)
            self._final_upto += 1
        for sub in self._classes.values():
            sub._advance(t)

    def _window_hists(self, b: int) -> list[LogHistogram]:
        parts = [self._hists[i] for i in range(b - self.window_s + 1, b + 1) if i in self._hists]
        return [LogHistogram.sum(p[j] for p in parts) for j in range(len(self._hist_metrics))]

    def _latency_at(self, b: int) -> list[float]:
        return [q for hist in self._window_hists(b) for q in hist.quantiles(_QS)]

    def _freeze(self, b: int) -> None:
        for name, value in zip(self._latency_series, self._latency_at(b)):
            self._final[name].set(b, value)
        for old in [i for i in self._hists if i <= b - self.window_s + 1]:
            del self._hists[old]
        self._newly_final.append(b)

    def _set_gauges(self, t: float) -> None:
        # A replica whose /metrics went stale no longer counts in the sums: its last
        # running/waiting are not its current ones.
        stale_after = metrics_stale_after_s(self.header)
        combined = combine_samples([s for s in self._tracker.latest() if t - s.t <= stale_after])
        s = _sec(t)
        if combined.running is not None:
            self._last["running"].set(s, float(combined.running))
        if combined.waiting is not None:
            self._last["waiting"].set(s, float(combined.waiting))
        if combined.kv_usage is not None:
            self._last["kv_usage_pct"].set(s, 100.0 * combined.kv_usage)
        self.steps.on_gauges(
            t,
            None if combined.waiting is None else float(combined.waiting),
            None if combined.kv_usage is None else 100.0 * combined.kv_usage,
        )

    def _spread_deltas(self, url: str, t0: float, t1: float, deltas: dict[str, float | None]) -> None:
        per_url = self._spread.setdefault(url, {})
        span = t1 - t0
        first, last = _sec(t0), _sec(t1)
        overlaps = [(b, min(t1, b + 1.0) - max(t0, float(b))) for b in range(first, last + 1)]
        for field, delta in deltas.items():
            if delta is None:
                continue
            amount, covered = per_url.get(field) or per_url.setdefault(field, (_Growable(0.0), _Growable(0.0)))
            rate = delta / span
            for b, overlap in overlaps:
                if overlap > 0:
                    amount.add(b, rate * overlap)
                    covered.add(b, overlap)

    def _server_rate(self, field: str, n: int) -> np.ndarray:
        total = np.full(n, math.nan)
        for per_url in self._spread.values():
            pair = per_url.get(field)
            if pair is None:
                continue
            amount, covered = pair[0].head(n), pair[1].head(n)
            has = covered > 0
            rate = np.divide(amount, covered, out=np.zeros(n), where=has)
            total = np.where(has, np.nan_to_num(total) + rate, total)
        return total

    def _n_bins(self, now: float) -> int:
        if self.finished_at is not None and now >= self.finished_at:
            return int(math.ceil(now))
        return int(math.floor(now))

    def series(self, now: float | None = None) -> tuple[list[float], dict[str, np.ndarray]]:
        """``(times, {name: array})`` for every name in ``SERIES_NAMES``."""
        times, arrays = self._arrays(now)
        return times, {name: arrays[name] for name in SERIES_NAMES}

    def _arrays(self, now: float | None, unfrozen: bool = True) -> tuple[list[float], dict[str, np.ndarray]]:
        """Every series plus the per-second prefix hit and query rates behind the ratio;
        without ``unfrozen``, the latency percentiles of the seconds not frozen yet are
        left NaN (their windows are most of the cost, and a reader of frozen seconds
        only, the knee's, need not pay it)."""
        self._fold_queued()
        now = self.now if now is None else now
        n = max(0, self._n_bins(now))
        out: dict[str, np.ndarray] = {}
        for name, g in self._counts.items():
            out[name] = g.head(n).copy()
        if self._tick_totals is not None:
            for name, g in self._tick_counts.items():
                out[name] = g.head(n).copy()
        for name, g in self._last.items():
            out[name] = g.head(n).copy()
        for name, g in self._session_counts.items():
            out[name] = g.head(n).copy()
        out["server_prompt_tps"] = self._server_rate("prompt_tokens_total", n)
        out["server_generation_tps"] = self._server_rate("generation_tokens_total", n)
        out["preemptions"] = self._server_rate("preemptions_total", n)
        hits = self._server_rate("prefix_hits_total", n)
        queries = self._server_rate("prefix_queries_total", n)
        out["prefix_hit_pct"] = self._window_ratio(hits, queries)
        out["_prefix_hits"], out["_prefix_queries"] = hits, queries
        for name in self._latency_series:
            out[name] = self._final[name].head(n).copy()
        for b in range(min(self._final_upto, n), n if unfrozen else 0):
            for name, value in zip(self._latency_series, self._latency_at(b)):
                out[name][b] = value
        return [float(i) for i in range(n)], out

    def _window_ratio(self, num: np.ndarray, den: np.ndarray) -> np.ndarray:
        n = num.size
        if n == 0:
            return num.copy()
        cn = np.concatenate(([0.0], np.cumsum(np.nan_to_num(num))))
        cd = np.concatenate(([0.0], np.cumsum(np.nan_to_num(den))))
        idx = np.arange(1, n + 1)
        lo = np.maximum(idx - self.window_s, 0)
        wn, wd = cn[idx] - cn[lo], cd[idx] - cd[lo]
        return np.divide(100.0 * wn, wd, out=np.full(n, math.nan), where=wd > 0)

    def take_completed_seconds(self) -> list[tuple[float, dict[str, float]]]:
        """Seconds frozen since the last call, with every series' value in them.

        For the knee detector: the runner calls this after feeding items and passes each
        ``(t, values)`` to ``KneeDetector.update`` (see ``knee.feed``).
        """
        if not self._newly_final:
            return []
        seconds, self._newly_final = self._newly_final, []
        _, arrays = self._arrays(None, unfrozen=False)  # the seconds are frozen ones
        return [(float(b), {name: float(arrays[name][b]) for name in SERIES_NAMES}) for b in seconds]

    def server_summary(self, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        """Run-so-far server figures from the series (``_arrays`` output)."""

        def agg(fn, arr):
            arr = arr[~np.isnan(arr)]
            return float(fn(arr)) if arr.size else None

        hits = float(np.nansum(arrays["_prefix_hits"]))
        queries = float(np.nansum(arrays["_prefix_queries"]))
        return {
            "available": self.server_metrics_available,
            "avg_prompt_throughput": agg(np.mean, arrays["server_prompt_tps"]),
            "avg_generation_throughput": agg(np.mean, arrays["server_generation_tps"]),
            "max_running": agg(np.max, arrays["running"]),
            "max_waiting": agg(np.max, arrays["waiting"]),
            "max_kv_usage_pct": agg(np.max, arrays["kv_usage_pct"]),
            "prefix_hit_pct": float(100 * hits / queries) if queries else None,
            "preemptions": agg(np.sum, arrays["preemptions"]),
        }

    def run_summary(self, now: float, arrays: dict[str, np.ndarray] | None = None, **build: Any) -> Summary:
        """The run-so-far ``Summary`` at ``now`` (bounded: percentiles within a 1 % bucket)."""
        if arrays is None:
            arrays = self._arrays(now)[1]
        return self.summary.build(
            self.header,
            server=self.server_summary(arrays),
            knee=knee_rps(self.events),
            gpu=self.gpu_totals.figures(),
            knee_why=knee_explanation(self.events),
            client=self.client_totals.figures(),
            **build,
        )

    def snapshot(self, now: float | None = None, last_bins: int | None = None) -> Snapshot:
        """The run at ``now``; with ``last_bins``, its series hold only their last
        ``last_bins`` bins (everything else whole): turning a day's bins into Python lists
        takes ~1 s, which a reader of the newest seconds (headless progress) need not pay."""
        now = self.now if now is None else now
        times, arrays = self._arrays(now)
        summary = self.run_summary(now, arrays, duration_s=now).to_dict()
        cut = 0 if last_bins is None else max(0, len(times) - last_bins)
        return Snapshot(
            t=now,
            header=self.header,
            state=self.state,
            target_rps=self.target_rps,
            times=times[cut:],
            series={name: arrays[name][cut:].tolist() for name in SERIES_NAMES},
            in_flight=self.in_flight,
            events=list(self.events),
            summary=summary,
            server_metrics_available=self.server_metrics_available,
            last_good_scrape_t=self.last_good_scrape_t,
            scrape_errors=[replace(line) for line in self._scrape_errors.values()],
            planned_duration_s=self.planned_end_s
            if self.planned_end_s is not None
            else (self.header.planned_duration_s if self.header else None),
            oldest_in_flight_sent_at=self.oldest_sent_at if self.state != "done" else None,
            steps=self.steps.rows(now),
            gpus=combine_gpus(list(self._gpu_latest.values())) if self._gpu_latest else {},
            last_good_gpu_t=self.last_good_gpu_t,
            configurations=self.configurations(now, arrays),
            turns=None if self.turns is None else self.turns.table(self.sessions_finished),
            classes=self.class_figures(now, last_bins),
        )
