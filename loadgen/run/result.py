"""What a run's end returns (``RunResult``, its ``RequestCounts``) and the sink that keeps
it in fixed size while the run goes (``RunCollector``).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, replace

from rampwatch.core.figures.summary import Summary
from rampwatch.core.timeline import CANCELLED, Event, RequestRecord, RunHeader, ServerSample, Tick


@dataclass
class RequestCounts:
    """How many requests a run ended, and how many of those the server had a chance to
    answer (not cancelled by a stop) failed: the exit code's error rate, in fixed size."""

    ended: int = 0
    judged: int = 0  # not cancelled
    failed: int = 0  # judged and not ok

    def add(self, record: RequestRecord) -> None:
        self.ended += 1
        if record.error_class != CANCELLED:
            self.judged += 1
            self.failed += not record.ok

    @classmethod
    def of(cls, records: list[RequestRecord]) -> RequestCounts:
        counts = cls()
        for record in records:
            counts.add(record)
        return counts


@dataclass
class RunResult:
    duration_s: float
    # Only with RunOptions.keep_records: a run's final figures come from its recording.
    requests: list[RequestRecord]
    samples: list[ServerSample]
    events: list[Event]
    header: RunHeader
    interrupted: bool = False  # stopped before the schedule ended, or requests were cancelled
    recording_error: str | None = None  # set where the recording is closed (the UI's run process)
    # A session workload's sessions that ended (its ticks' sessions_finished_total).
    sessions_finished: int | None = None
    counts: RequestCounts | None = None  # None: counted from ``requests``
    # The live run-so-far summary at the end (bounded: percentiles from 1 % log buckets):
    # the figures that stand when the recording failed and the exact ones cannot be read.
    live_summary: Summary | None = None
    # Each request's answer by id, with RunOptions.save_generated_texts only (the result
    # JSON's generated_texts; recordings do not keep answers).
    generated_texts: dict[int, str] | None = None

    def __post_init__(self) -> None:
        if self.counts is None:
            self.counts = RequestCounts.of(self.requests)

    @property
    def error_rate(self) -> float:
        """Failed fraction of the requests the server had a chance to answer: requests
        cancelled by a stop (Ctrl-C, grace period over) count neither way."""
        assert self.counts is not None
        return self.counts.failed / self.counts.judged if self.counts.judged else 0.0


class RunCollector:
    """Keeps what the run's end needs in fixed size: request counts and the events (a
    few per steering call, knee, restart or scrape failure streak, not per request or
    per second). Records and scrapes only with ``keep_records``; answers' texts only with
    ``keep_texts``."""

    def __init__(self, keep_records: bool = False, keep_texts: bool = False) -> None:
        self.keep_records = keep_records
        self.requests: list[RequestRecord] = []
        self.samples: list[ServerSample] = []
        self.events: list[Event] = []
        self.counts = RequestCounts()
        self.generated_texts: dict[int, str] | None = {} if keep_texts else None
        self.header: RunHeader | None = None

    def on_start(self, header: RunHeader) -> None:
        self.header = header

    def on_request(self, record: RequestRecord) -> None:
        self.counts.add(record)
        if self.generated_texts is not None and record.generated_text:
            self.generated_texts[record.id] = record.generated_text
        if self.keep_records:
            # Packed, a chunk time takes 8 bytes instead of a list's 32.
            self.requests.append(replace(record, chunk_times=array("d", record.chunk_times)))

    def on_scrape(self, sample: ServerSample) -> None:
        if self.keep_records:
            self.samples.append(sample)

    def on_tick(self, tick: Tick) -> None:
        pass

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def on_finish(self, t: float) -> None:
        pass
