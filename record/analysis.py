"""Whole-recording figures shared by report, export and compare.

``summarise`` feeds the recording to ``loadgen.summary.SummaryBuilder`` block by block on
numpy arrays instead of building a ``RequestRecord`` (and a Python float per chunk) for
every request: a 1-hour, 100 rps recording holds ~90 M chunk times, which as Python
objects need gigabytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rampwatch.core.timeline import Snapshot
from rampwatch.loadgen import stats
from rampwatch.loadgen.summary import RequestBlock, Summary, SummaryBuilder, knee_rps, server_figures
from rampwatch.record import format as fmt
from rampwatch.record.reader import Recording
from rampwatch.record.replay import feed


def summarise(recording: Recording, **options: Any) -> Summary:
    """The recording's ``Summary``: the same builder and figures as the end of the run
    (ITL percentiles from exact µs order statistics, ``stats.MicrosecondCounts``).

    ``options`` are ``SummaryBuilder``'s (``slo``, ``gpu_price_per_hour``, ``percentiles``);
    the run's own SLOs and GPU price by default, so a report matches the summary printed live.
    """
    header = recording.header
    if header is not None:
        options.setdefault("slo", (header.scenario or {}).get("slo") or None)
        options.setdefault("gpu_price_per_hour", (header.options or {}).get("gpu_price_per_hour"))
    frames = [f for f in recording.request_frames if f.count]
    # A first pass over the scalars: the token bins start at a send the blocks share.
    starts = []
    for info in frames:
        c = recording.request_columns(info, with_chunks=False)
        use = _succeeded(c) & c.has_first
        if use.any():
            starts.append(float(c.sent_at[use].min()))
    builder = SummaryBuilder(**options, token_bins_from=min(starts, default=None), itl_values=stats.MicrosecondCounts)
    for info in frames:
        builder.add_block(request_block(recording.request_columns(info, with_chunks=True)))
    return builder.build(
        header, server_figures(recording.samples), knee_rps(recording.events), idle_duration_s=recording.duration_s
    )


def _succeeded(c: fmt.RequestColumns) -> np.ndarray:
    return np.array([e is None for e in c.strings["error_class"]], dtype=bool)


def request_block(c: fmt.RequestColumns) -> RequestBlock:
    """A requests block (with its chunks) as the builder's input: the values
    ``RequestBlock.from_records`` gives for the same requests."""
    ok = _succeeded(c)
    counts = c.n_chunks.astype(np.int64)
    has_first = c.has_first.astype(bool)
    use = ok & has_first
    assert c.chunk_times is not None, "read with its chunks"
    return RequestBlock(
        error_classes=c.strings["error_class"],
        sent_at=c.sent_at,
        end_at=c.end_at,
        client_queue_s=np.maximum(0.0, c.sent_at - c.scheduled_at),
        first_token_at=np.where(has_first, c.first_token_at, np.nan),
        prompt_tokens=c.prompt_tokens.astype(np.int64),
        completion_tokens=c.completion_tokens.astype(np.int64),
        tokens_from_usage=(c.flags & 1).astype(bool),
        itls=_block_itls(c, ok),
        token_times=np.concatenate([c.first_token_at[use], c.chunk_times[np.repeat(use, counts)]]),
    )


def _block_itls(c: fmt.RequestColumns, ok: np.ndarray) -> np.ndarray:
    """ITLs of the block's successful requests with a first token (``RequestRecord.itls``)."""
    assert c.chunk_times is not None, "read with_chunks=True"
    counts = c.n_chunks.astype(np.int64)
    use = ok & c.has_first & (counts > 0)
    if not use.any():
        return np.zeros(0)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    owner = np.repeat(use, counts)
    prev = np.empty_like(c.chunk_times)
    prev[1:] = c.chunk_times[:-1]
    prev[starts[counts > 0]] = c.first_token_at[counts > 0]
    return stats.clean_itls((c.chunk_times - prev)[owner])


def final_snapshot(recording: Recording) -> Snapshot:
    """The series of the whole run, as the live UI showed them at the end."""
    from rampwatch.loadgen.series import SeriesBuilder

    stored = recording.checkpoint(recording.duration_s) if recording.checkpoint_frames else None
    builder = None
    if stored is not None:  # the last stored state, plus what follows it
        t0, state, arrays = stored
        builder = SeriesBuilder.from_state(recording.header, state, arrays)
        if not builder.steps_complete:  # written before the step table: build it from the start
            builder = None
    if builder is None:
        t0 = float("-inf")
        builder = SeriesBuilder()
        builder.on_start(recording.header)
    feed(builder, recording.items_between(t0, recording.duration_s))
    if recording.finished:
        builder.on_finish(recording.duration_s)
    return builder.snapshot(now=recording.duration_s)
