"""Whole-recording figures shared by report, export and compare."""

from __future__ import annotations

from typing import Any

from loadgen.timeline import Snapshot
from record.reader import Recording
from record.replay import feed


def benchmark_duration(recording: Recording, records: list | None = None) -> float:
    """First send to last completion, as ``vllm bench serve`` measures it."""
    records = recording.requests if records is None else records
    if not records:
        return recording.duration_s
    return max(r.end_at for r in records) - min(r.sent_at for r in records)


def summarise(recording: Recording, records: list | None = None, **options: Any) -> dict[str, Any]:
    from loadgen.summary import compute_summary

    records = recording.requests if records is None else records
    return compute_summary(recording.header, records, recording.samples, recording.events,
                           benchmark_duration(recording, records), **options)


def final_snapshot(recording: Recording) -> Snapshot:
    """The series of the whole run, as the live UI showed them at the end."""
    from loadgen.series import SeriesBuilder

    builder = SeriesBuilder()
    builder.on_start(recording.header)
    feed(builder, recording.items_between(float("-inf"), recording.duration_s))
    if recording.finished:
        builder.on_finish(recording.duration_s)
    return builder.snapshot(now=recording.duration_s)
