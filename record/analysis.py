"""Whole-recording figures shared by report, export and compare.

``summarise`` feeds the recording to ``core.figures.summary.SummaryBuilder`` block by block on
numpy arrays instead of building a ``RequestRecord`` (and a Python float per chunk) for
every request: a 1-hour, 100 rps recording holds ~90 M chunk times, which as Python
objects need gigabytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from rampwatch.core.figures import stats
from rampwatch.core.figures.adapters import AdapterSummaries
from rampwatch.core.figures.classes import ClassSummaries, class_table
from rampwatch.core.figures.client_lag import client_figures
from rampwatch.core.figures.knee_explain import knee_explanation_of
from rampwatch.core.figures.phases import MARK_FIELDS, PhaseBlock
from rampwatch.core.figures.reasoning import ReasoningBlock
from rampwatch.core.figures.segments import (
    ConfigSegment,
    SegmentSummaries,
    SegmentTable,
    config_segments,
    restarted,
    segment_table,
)
from rampwatch.core.figures.summary import (
    KNEE_REVIEW,
    RequestBlock,
    Summary,
    SummaryBuilder,
    gpu_figures,
    knee_explanation,
    knee_rps,
    server_figures,
)
from rampwatch.core.figures.turns import TurnFigures, TurnTable
from rampwatch.core.text import server_text
from rampwatch.core.timeline import CANCELLED, Event, Snapshot
from rampwatch.record import format as fmt
from rampwatch.record.checkpoint import series_builder, stored_builder
from rampwatch.record.reader import Recording
from rampwatch.record.replay import feed
from rampwatch.record.significance import Samples


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
    builder = SummaryBuilder(**options, token_bins_from=first_token_send(recording), itl_values=stats.MicrosecondCounts)
    for info in frames:
        builder.add_block(request_block(recording.request_columns(info, with_chunks=True)))
    return builder.build(
        header,
        server_figures(recording.samples_without_raw),
        knee_rps(recording.events),
        idle_duration_s=recording.duration_s,
        gpu=gpu_figures(recording.samples_without_raw),
        knee_why=knee_explanation(recording.events),
        client=client_figures(recording.ticks),
    )


def first_token_send(recording: Recording) -> float | None:
    """``summary.first_token_send`` of a recording, from a first pass over its scalars:
    where the token bins start, a send every block shares."""
    starts = []
    for info in (f for f in recording.request_frames if f.count):
        c = recording.request_columns(info, with_chunks=False)
        use = _succeeded(c) & c.has_first
        if use.any():
            starts.append(float(c.sent_at[use].min()))
    return min(starts, default=None)


def with_knee_explanation(summary: Summary, snapshot: Snapshot) -> Summary:
    """The summary with its knee explained: a knee recorded before explanations is
    explained from the recording's series (``knee_explain.knee_explanation_of``)."""
    if summary.knee_explanation is not None or summary.knee_rps is None:
        return summary
    found = knee_explanation_of(snapshot)
    return summary if found is None else replace(summary, knee_explanation=found[1].to_dict())


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
        error_messages=c.strings["error"],
        sent_at=c.sent_at,
        end_at=c.end_at,
        client_queue_s=np.maximum(0.0, c.sent_at - c.scheduled_at),
        first_token_at=np.where(has_first, c.first_token_at, np.nan),
        prompt_tokens=c.prompt_tokens.astype(np.int64),
        completion_tokens=c.completion_tokens.astype(np.int64),
        tokens_from_usage=(c.flags & 1).astype(bool),
        itls=_block_itls(c, ok),
        token_times=np.concatenate([c.first_token_at[use], c.chunk_times[np.repeat(use, counts)]]),
        images=c.strings.get("images") or (),
        reasoning=_reasoning_block(c, ok),
        phases=_phase_block(c, ok),
    )


def _phase_block(c: fmt.RequestColumns, ok: np.ndarray) -> PhaseBlock | None:
    """Where the block's TTFTs went (``RequestBlock.phases``): None without phase marks
    (every recording made before them)."""
    if not any(key in c.strings for key in MARK_FIELDS):
        return None
    q_s = c.strings.get("time_quantum_us", 1) / 1e6  # stored in time quanta
    marks = [
        np.array([np.nan if v is None else v * q_s for v in c.strings.get(key) or [None] * c.n], dtype=np.float64)
        for key in MARK_FIELDS
    ]
    first = np.where(c.has_first.astype(bool), c.first_token_at, np.nan)
    return PhaseBlock.of(ok, c.sent_at, first, marks)


def _reasoning_block(c: fmt.RequestColumns, ok: np.ndarray) -> ReasoningBlock | None:
    """The block's reasoning side (``RequestBlock.reasoning``): None for a block whose
    requests did not reason (no such columns: every plain run's)."""
    if "first_answer_at" not in c.strings and "reasoning_tokens" not in c.strings:
        return None
    assert c.chunk_times is not None, "read with its chunks"
    none = [None] * c.n
    return ReasoningBlock.of_columns(
        ok=ok,
        sent_at=c.sent_at,
        first_token_at=np.where(c.has_first.astype(bool), c.first_token_at, np.nan),
        completion_tokens=c.completion_tokens.astype(np.int64),
        first_answer_at=_answer_times(c) or none,
        reasoning_tokens=c.strings.get("reasoning_tokens") or none,
        reasoning_from_usage=c.strings.get("reasoning_from_usage") or none,
        chunk_times=c.chunk_times,
        counts=c.n_chunks.astype(np.int64),
    )


def _answer_times(c: fmt.RequestColumns) -> list[float | None] | None:
    """The block's ``first_answer_at`` in seconds (stored in time quanta, as the writer
    keeps it: ``format.decode_requests``)."""
    stored = c.strings.get("first_answer_at")
    if stored is None:
        return None
    q_t = c.strings.get("time_quantum_us", 1) / 1e6
    return [None if v is None else v * q_t for v in stored]


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
    stored = None
    try:  # the last stored state, plus what follows it
        stored = stored_builder(recording, recording.duration_s)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError):
        # A checkpoint too old (``CheckpointTooOld``, a ValueError: from before the step
        # table), of a newer schema, or damaged: it only saves time, so build from the
        # start, as the replay does (``ReplayTimeline._restore``).
        pass
    t0, builder = stored if stored is not None else (float("-inf"), series_builder(recording.header))
    feed(builder, recording.items_between(t0, recording.duration_s))
    if recording.finished:
        builder.on_finish(recording.duration_s)
    return builder.snapshot(now=recording.duration_s)


# A comparison keeps the ITLs of at most about this many requests (a random, seeded share
# of them, whole): an hour at 100 rps holds ~90 M chunk gaps, far more than memory wants
# and than the bootstrap uses (``significance.MAX_VALUES``).
MAX_ITL_REQUESTS = 5_000


def comparison_samples(recording: Recording, seed: int = 0) -> dict[str, Samples]:
    """A recording's values that ``rampwatch compare`` resamples (``record.significance``).

    Per request: ``ttft_ms``, ``tpot_ms``, ``e2el_ms`` (successful requests, as the summary
    takes them), ``ttfa_ms`` (a reasoning model's time to first answer: the TTFT of a
    request that did not reason, none for one cut short while thinking) and ``error_pct`` (100 for a failed request, 0 for a completed one; a cancelled one is
    neither, as in the summary's error rate); ``itl_ms``, every
    chunk gap grouped by its request. Per second of the run's window (first send to last
    completion): ``completed_per_s``, ``output_tokens_per_s`` and ``total_tokens_per_s``
    (completion and prompt tokens of the requests that completed in the second). The ITLs
    are those of about ``MAX_ITL_REQUESTS`` requests at most, picked at random (``seed``)."""
    rng = np.random.default_rng(seed)
    keep_itls = min(1.0, MAX_ITL_REQUESTS / max(recording.request_count, 1))
    ttft, tpot, e2el, errors, itl, itl_owner, ttfa = [], [], [], [], [], [], []
    sent, ends, outputs, totals = [], [], [], []
    first_id = 0
    for info in (f for f in recording.request_frames if f.count):
        c = recording.request_columns(info, with_chunks=True)
        ok = _succeeded(c)
        has_first = c.has_first.astype(bool)
        # as the summary's error rate: failed over ended, a cancelled request neither
        counted = np.array([e != CANCELLED for e in c.strings["error_class"]], dtype=bool)
        errors.append(np.where(ok, 0.0, 100.0)[counted])
        sent.append(c.sent_at)
        use = ok & has_first
        ttft.append((c.first_token_at - c.sent_at)[use] * 1000)
        thinking = _reasoning_block(c, ok)
        if thinking is None:
            ttfa.append(ttft[-1])
        else:
            ttfa.append(thinking.ttfa_s[~np.isnan(thinking.ttfa_s)] * 1000)
        e2el.append((c.end_at - c.sent_at)[ok] * 1000)
        many = use & (c.completion_tokens > 1)
        tpot.append(((c.end_at - c.first_token_at) / np.maximum(c.completion_tokens - 1, 1))[many] * 1000)
        gaps = _block_itls(c, ok)  # the gaps of the requests in `use`, request after request
        with_gaps = use & (c.n_chunks > 0)
        owners = np.repeat(np.arange(c.n), c.n_chunks.astype(np.int64) * with_gaps)
        chosen = rng.random(c.n) < keep_itls
        itl.append(gaps[chosen[owners]] * 1000)
        itl_owner.append(owners[chosen[owners]] + first_id)
        ends.append(c.end_at[ok])
        out = stats.output_lens(c.completion_tokens[ok].astype(np.int64))
        outputs.append(out)
        totals.append(out + c.prompt_tokens[ok].astype(np.int64))
        first_id += c.n
    samples = {
        "ttft_ms": Samples.of(_join(ttft)),
        "tpot_ms": Samples.of(_join(tpot)),
        "e2el_ms": Samples.of(_join(e2el)),
        "ttfa_ms": Samples.of(_join(ttfa)),
        "error_pct": Samples.of(_join(errors)),
        "itl_ms": Samples.of(_join(itl), _join(itl_owner).astype(np.int64)),
    }
    end_at = _join(ends)
    start = float(_join(sent).min()) if sent and any(s.size for s in sent) else 0.0
    seconds = int(math.ceil(float(end_at.max()) - start)) if end_at.size else 0
    for name, weights in (
        ("completed_per_s", None),
        ("output_tokens_per_s", _join(outputs)),
        ("total_tokens_per_s", _join(totals)),
    ):
        bins = np.zeros(0)
        if seconds > 0:
            index = np.minimum((end_at - start).astype(np.int64), seconds - 1)
            bins = np.bincount(index, weights=weights, minlength=seconds).astype(np.float64)
        samples[name] = Samples.of(bins)
    return samples


def _join(parts: list[np.ndarray]) -> np.ndarray:
    parts = [p for p in parts if p.size]
    return np.concatenate(parts) if parts else np.zeros(0)


# The run's timeline as the HTML report's marks table and `rampwatch report` list it.
TABLE_MARK_KINDS = ("start", "knee", "hold", "resume", "set_rate", "mark", "config", "stop")


def timeline_marks(events: Sequence[Event]) -> list[Event]:
    """Start, knee, the review that settled the knee's explanation, holds, resumes, rate
    changes, marks, restarts, the stop, and the started server's exit or failed start,
    in time order."""
    return sorted(
        (e for e in events if e.kind in TABLE_MARK_KINDS or _server_exit(e) or _knee_review(e)), key=lambda e: e.t
    )


def _knee_review(event: Event) -> bool:
    """The info event that settled (revised or confirmed) a knee's explanation: without
    it the timeline would show only the knee's provisional reading."""
    return event.kind == "info" and bool(event.data.get(KNEE_REVIEW))


def _server_exit(event: Event) -> bool:
    """An error event that says the server rampwatch started exited (or never started)."""
    return event.kind == "error" and "server_exit_code" in event.data


def mark_note(event: Event) -> str:
    """The table's note: a rate change, hold or resume adds the rate before and after."""
    before, after = event.data.get("before_rps"), event.data.get("after_rps")
    if event.kind in ("set_rate", "hold", "resume") and _is_number(before) and _is_number(after):
        return f"{event.message} ({before:.3g} → {after:.3g} req/s)"
    return event.message


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


MARK_KIND_NAMES = {"set_rate": "rate change", "config": "restart", "error": "server", "info": "knee review"}


def format_timeline(events: Sequence[Event]) -> str:
    """``timeline_marks`` as text lines under a heading (empty when there are none)."""

    marks = timeline_marks(events)
    if not marks:
        return ""
    lines = ["{s:{c}^{n}}".format(s=" Timeline ", n=50, c="-")]
    for e in marks:
        minutes, seconds = divmod(e.t, 60.0)
        kind = MARK_KIND_NAMES.get(e.kind, e.kind)
        lines.append(f"{int(minutes):02d}:{seconds:04.1f}  {kind:<11}  {server_text(mark_note(e))}")
    return "\n".join(lines)


def configuration_segments(recording: Recording) -> tuple[list[ConfigSegment], list[Summary]]:
    """The recording's configurations and each one's summary (``core.figures.segments``: the
    requests sent within it), fed block by block; ITLs kept as ``summarise`` keeps them."""
    header = recording.header
    segments = config_segments(header, recording.events, recording.duration_s)
    options: dict[str, Any] = {}
    if header is not None:
        options["slo"] = (header.scenario or {}).get("slo") or None
        options["gpu_price_per_hour"] = (header.options or {}).get("gpu_price_per_hour")
    accumulator = SegmentSummaries(segments, itl_values=stats.MicrosecondCounts, **options)
    for info in (f for f in recording.request_frames if f.count):
        accumulator.add_records(recording.decode_requests(info))
    return segments, accumulator.build(header, recording.samples_without_raw, recording.events)


def configuration_table(recording: Recording) -> SegmentTable | None:
    """The side-by-side table of a restarted run; None for a run with one configuration."""
    if not restarted(config_segments(recording.header, recording.events, recording.duration_s)):
        return None
    return segment_table(*configuration_segments(recording))


def recording_turns(recording: Recording) -> TurnTable | None:
    """The recording's figures by turn index (``core.figures.turns``: exact TTFTs, ITLs on the
    µs grid as ``summarise`` keeps them); None for a run without sessions. Only the blocks
    with a turn column are decoded into records."""
    figures = TurnFigures(stats.ExactValues, stats.MicrosecondCounts)
    for info in (f for f in recording.request_frames if f.count):
        if "turn" in recording.request_columns(info, with_chunks=False).strings:
            figures.add(recording.decode_requests(info))
    # the run's count of ended sessions, when its ticks carry one
    counts = (tick.sessions_finished_total for tick in reversed(recording.ticks) if tick.sessions_started_total)
    return figures.table(next(counts, None))


def class_figures(recording: Recording) -> dict[str, Summary]:
    """Each class's summary of a mixture's recording (``core.figures.classes``: its requests,
    its SLO), fed block by block; ITLs kept as ``summarise`` keeps them. Empty for a
    recording without classes (any before mixtures)."""
    return _group_figures(recording, ClassSummaries)


def _group_figures(recording: Recording, groups: type[ClassSummaries]) -> dict[str, Summary]:
    """The summaries of ``groups`` (classes, adapters) from the request blocks that carry
    its ``group_key`` column; only those blocks are decoded. The header's groups are
    there even without requests; none when neither names one."""
    header = recording.header
    options: dict[str, Any] = {}
    if header is not None:
        options["gpu_price_per_hour"] = (header.options or {}).get("gpu_price_per_hour")
    frames = [
        f
        for f in recording.request_frames
        if f.count and groups.group_key in recording.request_columns(f, with_chunks=False).strings
    ]
    bins_from = first_token_send(recording) if frames else None
    accumulator = groups(header, itl_values=stats.MicrosecondCounts, token_bins_from=bins_from, **options)
    for info in frames:
        accumulator.add_records(recording.decode_requests(info))
    return accumulator.build(header, recording.duration_s)


def classes_table(summaries: dict[str, Summary]) -> SegmentTable | None:
    """The classes side by side; None outside a mixture."""
    return class_table({name: s.to_dict() for name, s in summaries.items()}) if summaries else None


def adapter_figures(recording: Recording) -> dict[str, Summary]:
    """Each LoRA adapter's summary (``core.figures.adapters``), fed block by block as
    ``class_figures``; empty for a recording whose requests name no adapter."""
    return _group_figures(recording, AdapterSummaries)
