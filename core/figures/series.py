"""The 1-second series a run shows, built incrementally from the timeline stream.

``SeriesBuilder`` is a ``TimelineSink``: feed it the live stream or a recording and
``snapshot()`` returns the same ``Snapshot`` for the same input (nothing depends on
wall time or on when ``snapshot`` is called). It keeps per-second bins, not records, in
smaller builders it feeds:

- the request and session counts per second (``series_bins.RequestBins``);
- ``target_rps``, ``in_flight``, the client's queue and loop lag and ``sessions_active``:
  the last tick in the second (a table of last values the scrapes' gauges share);
- the server's gauges and counter rates, the GPUs' series and the scrape failures
  (``series_server``);
- TTFT / ITL p50/p90/p99 over a window of seconds, frozen ``grace_s`` after each second
  (``series_latency.LatencyWindows``);
- the run-so-far summary (``SummaryBuilder``, bounded), one per configuration after a
  server restart (``core.figures.segments``), the step table (``core.figures.steps``), a
  session workload's figures by turn index (``core.figures.turns``) and a mixture's
  classes (one ``SeriesBuilder`` each, ``core.figures.classes``).

Finished requests are folded in by batches: ``on_request`` only queues the record, and
the queue is folded in (counts, histograms, summary) before a second is frozen, before
anything is read and past ``FOLD_AT_QUEUED``. Every figure is the same as if each
record were folded in on arrival (counts and histograms are sums of integers, the
summary's running sums add value after value), while the run's event loop, which calls
``on_request`` as each request ends, spends about a microsecond there instead of the
~100 µs of numpy calls one record costs on its own: that time delayed the next socket
read, and so the arrival time of the chunks in it.

Only whole seconds appear in a snapshot while running (``times`` are bin starts);
after ``on_finish`` the last partial second is included. ``export_state`` /
``from_state`` (``series_state``) are the builder's state in the current checkpoint
schema; a recording's older checkpoints are upgraded by ``record.checkpoint``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import Any

import numpy as np

from rampwatch.core.figures import series_state
from rampwatch.core.figures.adapters import scenario_adapters
from rampwatch.core.figures.classes import class_slos
from rampwatch.core.figures.client_lag import ClientTotals
from rampwatch.core.figures.lora import LoraSeconds, lora_state
from rampwatch.core.figures.segments import CONFIG_EVENT, SegmentTable, config_segments, segment_index, segment_table
from rampwatch.core.figures.series_bins import Growable, RequestBins, sec
from rampwatch.core.figures.series_latency import (
    CLASS_HIST_METRICS,
    RUN_HIST_METRICS,
    LatencyWindows,
    latency_series,
)
from rampwatch.core.figures.series_reasoning import REASONING_SERIES, ReasoningSeries
from rampwatch.core.figures.series_server import GpuSeries, ServerSeries
from rampwatch.core.figures.speculation import SPEC_SERIES_NAMES
from rampwatch.core.figures.steps import StepTracker
from rampwatch.core.figures.summary import (
    GpuTotals,
    RequestBlock,
    Summary,
    SummaryBuilder,
    knee_explanation,
    knee_rps,
)
from rampwatch.core.figures.turns import TurnFigures
from rampwatch.core.timeline import (
    CLASS_SERIES_NAMES,
    GPU_SERIES,
    SERIES_NAMES,
    ClassFigures,
    Event,
    RequestRecord,
    RunHeader,
    ServerSample,
    Snapshot,
    Tick,
)

__all__ = ["CLASS_HIST_METRICS", "FOLD_AT_QUEUED", "RUN_HIST_METRICS", "SeriesBuilder", "latency_series"]

# Queued records are folded in once there are this many (a second's freeze and every read
# fold them sooner): enough for numpy's per-call cost to be shared, few enough that one
# fold is a short pause (~0.2 ms), not one long one per second.
FOLD_AT_QUEUED = 16


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
        self.bins = RequestBins()
        # The last value in each second: the ticks' and the scrapes' gauges.
        self.gauges = {
            name: Growable(math.nan)
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
        self.gauges["sessions_active"] = Growable(0.0)
        self.server = ServerSeries()
        self.gpu = GpuSeries()
        self.client_totals = ClientTotals()  # the client's self-check, from the ticks
        self.latency = LatencyWindows(self.window_s, grace_s, CLASS_HIST_METRICS if e2e_latency else RUN_HIST_METRICS)
        self._queued: list[RequestRecord] = []  # finished requests not folded in yet
        self.summary = SummaryBuilder(slo, gpu_price_per_hour, bounded=True)
        # After a server restart (``config`` event), one run-so-far summary per
        # configuration, of the requests sent while it served (``core.figures.segments``);
        # empty while the run has one configuration.
        self.segment_starts: list[float] = []
        self.segment_summaries: list[SummaryBuilder] = []
        self.steps = StepTracker()
        # A session workload's figures by turn index (``core.figures.turns``); None until a
        # request with a turn ends (runs without sessions never have them).
        self.turns: TurnFigures | None = None
        # A mixture's classes (``loadgen.workload.mixture``): one builder each, fed the class's
        # requests; a class builder has its name here and no classes of its own.
        self.classes: dict[str, SeriesBuilder] = {}
        self.class_name: str | None = None
        # The server's LoRA adapters (vllm:lora_requests_info) per second, for the knee's
        # rules and the live view; empty where the server exports none.
        self.lora = LoraSeconds()
        # A reasoning run's TTFA and reasoning-share series, from its first request that
        # reasoned (``series_reasoning``); None in a plain run.
        self.reasoning: ReasoningSeries | None = None

    # -- the parts' figures, by their old names --------------------------------------
    @property
    def server_metrics_available(self) -> bool:
        return self.server.metrics_available

    @property
    def last_good_scrape_t(self) -> float | None:
        return self.server.last_good_scrape_t

    @property
    def last_good_gpu_t(self) -> float | None:
        return self.gpu.last_good_t

    @property
    def gpu_totals(self) -> GpuTotals:
        return self.gpu.totals

    @property
    def sessions_finished(self) -> int | None:
        """The run's count of sessions that ended, from the last tick of a session
        workload (None in other runs and recordings whose ticks carry no sessions)."""
        return self.bins.sessions_finished

    # -- state ----------------------------------------------------------------------
    def export_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The builder's whole state as JSON-able values plus named numpy arrays.

        ``from_state(header, *builder.export_state())`` is a builder that behaves exactly as
        this one from here on (recordings store it as seek checkpoints). The header is
        not included: the recording has it.
        """
        self._fold_queued()
        return series_state.export_state(self)

    @classmethod
    def from_state(
        cls, header: RunHeader | None, meta: dict[str, Any], arrays: dict[str, np.ndarray], e2e_latency: bool = False
    ) -> SeriesBuilder:
        """A builder restored from ``export_state()`` output of the current schema (see
        there); ``e2e_latency`` as the builder had it (a mixture's class builder). A
        recording's older checkpoints are brought to it by ``record.checkpoint``."""
        return series_state.restore_state(cls, header, meta, arrays, e2e_latency)

    # -- TimelineSink ---------------------------------------------------------------
    def on_start(self, header: RunHeader) -> None:
        self.header = header
        self.state = "starting"
        self.steps.configure(*_schedule_of(header))
        if self.class_name is None:
            # every class shown from the start; without a mixture, every LoRA adapter
            for name in class_slos(header.scenario) or scenario_adapters(header.scenario):
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
        if self.class_name is None:  # a class builder keeps no step table
            for record in records:
                self.steps.on_request(record)
                # a mixture's class; in a run without one, the LoRA adapter (core.figures.adapters)
                group = record.request_class if record.request_class is not None else record.adapter
                if group is not None:
                    self._class_builder(group)._queued.append(record)
        self.bins.add_records(records)
        # one block per run of records that ended in the same second (usually one or two)
        start = 0
        for i in range(1, len(records) + 1):
            if i == len(records) or sec(records[i].end_at) != sec(records[start].end_at):
                self._fold_block(sec(records[start].end_at), records[start:i])
                start = i
        if any(record.turn is not None for record in records):
            if self.turns is None:
                self.turns = TurnFigures()
            self.turns.add(records)

    def _fold_block(self, end: int, records: list[RequestRecord]) -> None:
        block = RequestBlock.from_records(records)
        ok = np.fromiter((e is None for e in block.error_classes), dtype=bool, count=len(records))
        self.latency.add_block(end, block, ok)
        if block.reasoning is not None and self.reasoning is None:
            self.reasoning = ReasoningSeries(self.window_s, self.grace_s)
        if self.reasoning is not None:
            self.reasoning.add_block(end, block, ok)
        good_before = self.summary.good
        self.summary.add_block(block)
        good = self.bins.counts.get("good_rps")  # a class builder's, under an SLO
        if good is not None:
            good.add(end, float(self.summary.good - good_before))
        if self.segment_starts:
            self._fold_into_segments(records, block)

    def _fold_into_segments(self, records: list[RequestRecord], block: RequestBlock) -> None:
        groups: dict[int, list[RequestRecord]] = {}
        for record in records:
            groups.setdefault(segment_index(self.segment_starts, record.sent_at), []).append(record)
        for index, group in groups.items():
            whole = len(group) == len(records)
            self.segment_summaries[index].add_block(block if whole else RequestBlock.from_records(group))

    def configurations(self, now: float, arrays: dict[str, np.ndarray]) -> SegmentTable | None:
        """The side-by-side table of the configurations so far (None: one so far)."""
        if not self.segment_starts:
            return None
        segments = config_segments(self.header, self.events, now)
        summaries = []
        for segment, builder in zip(segments, self.segment_summaries, strict=False):
            last = segment.index == len(segments)
            lo, hi = int(segment.start_s), int(math.ceil(segment.end_s))
            inside = {name: values[lo:hi] for name, values in arrays.items()}
            knee = knee_rps([e for e in self.events if segment.start_s <= e.t and (e.t < segment.end_s or last)])
            summaries.append(builder.build(self.header, server=self.server_summary(inside), knee=knee))
        return segment_table(segments[: len(summaries)], summaries)

    def on_scrape(self, sample: ServerSample) -> None:
        if sample.is_gpu and sample.ok:
            self.gpu.on_good_sample(sample, self.header, self.gauges)
        elif sample.ok:
            self.server.on_good_scrape(sample, self.header, self.gauges, self.steps)
            self.lora.add(sample)
        else:
            self.server.count_error(sample)
        self._advance(sample.t)

    def on_tick(self, tick: Tick) -> None:
        self.state = tick.state
        self.target_rps = tick.target_rps
        self.in_flight = tick.in_flight
        self.oldest_sent_at = tick.oldest_sent_at
        if tick.planned_end_s is not None:
            self.planned_end_s = tick.planned_end_s
        s = sec(tick.t)
        self.gauges["target_rps"].set(s, tick.target_rps)
        self.gauges["in_flight"].set(s, float(tick.in_flight))
        self.gauges["client_queued"].set(s, float(tick.client_queued))
        self.gauges["sessions_active"].set(s, float(tick.active_sessions))
        if tick.loop_lag_max_ms is not None:
            self.gauges["client_lag_ms"].set(s, tick.loop_lag_max_ms)
        self.client_totals.add(tick.loop_lag, tick.loop_lag_max_ms, tick.client_counts)
        self.bins.on_tick(tick)
        # The run's exact peak when the tick has it (older recordings: the ticks' own counts).
        peak = tick.in_flight if tick.peak_in_flight is None else tick.peak_in_flight
        self.summary.peak_in_flight = max(self.summary.peak_in_flight, peak)
        self.steps.on_tick(tick.t, tick.state, tick.target_rps, tick.in_flight, tick.oldest_sent_at)
        self._advance(tick.t)

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
        if not self.segment_starts:
            self.segment_starts.append(0.0)
            self.segment_summaries.append(copy.deepcopy(self.summary))
        self.segment_starts.append(t)
        self.segment_summaries.append(SummaryBuilder(self.summary.slo, self.summary.gpu_price_per_hour, bounded=True))

    def on_finish(self, t: float) -> None:
        self.finished_at = t
        self.state = "done"
        for sub in self.classes.values():
            sub.on_finish(t)
        self._advance(t)

    # -- a mixture's classes ----------------------------------------------------------
    def _class_builder(self, name: str) -> SeriesBuilder:
        """The builder of a mixture's class, made on first need: the header's classes at
        the start, a class the header does not name (judged by the run's SLO) when its
        first request is folded in."""
        sub = self.classes.get(name)
        if sub is None:
            scenario = self.header.scenario if self.header is not None else None
            slo = class_slos(scenario).get(name, self.summary.slo)
            sub = self.classes[name] = SeriesBuilder(self.window_s, self.grace_s, slo=slo, e2e_latency=True)
            sub.class_name = name
            sub.header = self.header
            if slo:
                sub.bins.counts["good_rps"] = Growable(0.0)
        return sub

    def class_figures(self, now: float, last_bins: int | None = None) -> list[ClassFigures]:
        """Each class's series (their last ``last_bins`` bins only, if given) and
        run-so-far summary at ``now``."""
        out = []
        for name, sub in self.classes.items():
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
        last_due = self.latency.last_due(self.now)
        if self.latency.final_upto <= last_due:
            self._fold_queued()
        self.latency.freeze_upto(last_due)
        if self.reasoning is not None:
            self.reasoning.freeze_upto(last_due)
        for sub in self.classes.values():
            sub._advance(t)

    def _n_bins(self, now: float) -> int:
        if self.finished_at is not None and now >= self.finished_at:
            return int(math.ceil(now))
        return int(math.floor(now))

    def series(self, now: float | None = None) -> tuple[list[float], dict[str, np.ndarray]]:
        """``(times, {name: array})`` for every name in ``SERIES_NAMES``."""
        times, arrays = self._arrays(now)
        return times, {name: arrays[name] for name in self.series_names(arrays)}

    def series_names(self, arrays: dict[str, np.ndarray]) -> tuple[str, ...]:
        """``SERIES_NAMES``, speculative decoding's series when the server speculates, and
        the multimodal cache's once it counted a query (``ServerSeries.optional_series``)."""
        names = SERIES_NAMES + SPEC_SERIES_NAMES if self.server.spec_available else SERIES_NAMES
        return (*names, *self.server.optional_series(arrays))

    def _arrays(self, now: float | None, unfrozen: bool = True) -> tuple[list[float], dict[str, np.ndarray]]:
        """Every series plus the per-second prefix hit and query rates behind the ratio;
        without ``unfrozen``, the latency percentiles of the seconds not frozen yet are
        left NaN (``LatencyWindows.arrays``)."""
        self._fold_queued()
        now = self.now if now is None else now
        n = max(0, self._n_bins(now))
        out: dict[str, np.ndarray] = {}
        self.bins.arrays(n, out)
        for name, g in self.gauges.items():
            out[name] = g.head(n).copy()
        self.server.arrays(n, out, self.window_s)
        self.latency.arrays(n, out, unfrozen)
        return [float(i) for i in range(n)], out

    def take_completed_seconds(self) -> list[tuple[float, dict[str, float]]]:
        """Seconds frozen since the last call, with every series' value in them.

        For the knee detector: the runner calls this after feeding items and passes each
        ``(t, values)`` to ``KneeDetector.update`` (see ``knee.feed``).
        """
        if not self.latency.newly_final:
            return []
        seconds = self.latency.take_newly_final()
        _, arrays = self._arrays(None, unfrozen=False)  # the seconds are frozen ones
        names = self.series_names(arrays)
        if self.reasoning is not None:  # a reasoning run's knee can say when the answer slowed
            self.reasoning.arrays(len(arrays["ttft_p50"]), arrays, unfrozen=False)
            names = (*names, *REASONING_SERIES)
        return [(float(b), {name: float(arrays[name][b]) for name in names} | self.lora.at(b)) for b in seconds]

    def server_summary(self, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        """Run-so-far server figures from the series (``_arrays`` output)."""
        return self.server.summary(arrays)

    def run_summary(self, now: float, arrays: dict[str, np.ndarray] | None = None, **build: Any) -> Summary:
        """The run-so-far ``Summary`` at ``now`` (bounded: percentiles within a 1 % bucket)."""
        if arrays is None:
            arrays = self._arrays(now)[1]
        return self.summary.build(
            self.header,
            server=self.server_summary(arrays),
            knee=knee_rps(self.events),
            gpu=self.gpu.totals.figures(),
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
            series={name: arrays[name][cut:].tolist() for name in self.series_names(arrays)},
            in_flight=self.in_flight,
            events=list(self.events),
            summary=summary,
            server_metrics_available=self.server.metrics_available,
            last_good_scrape_t=self.server.last_good_scrape_t,
            scrape_errors=[replace(line) for line in self.server.scrape_errors.values()],
            planned_duration_s=self.planned_end_s
            if self.planned_end_s is not None
            else (self.header.planned_duration_s if self.header else None),
            oldest_in_flight_sent_at=self.oldest_sent_at if self.state != "done" else None,
            steps=self.steps.rows(now),
            gpus=self.gpu.gpus(),
            last_good_gpu_t=self.gpu.last_good_t,
            configurations=self.configurations(now, arrays),
            turns=None if self.turns is None else self.turns.table(self.bins.sessions_finished),
            classes=self.class_figures(now, last_bins),
            lora=lora_state(self.lora.latest),
            reasoning=self._reasoning_series(len(times), cut),
        )

    def _reasoning_series(self, n: int, cut: int) -> dict[str, list[float]] | None:
        """A reasoning run's series (``series_reasoning``) from bin ``cut`` on; None in a plain run."""
        if self.reasoning is None:
            return None
        out: dict[str, np.ndarray] = {}
        self.reasoning.arrays(n, out)
        return {name: out[name][cut:].tolist() for name in REASONING_SERIES}
