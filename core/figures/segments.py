"""A run split by server configuration: one segment from the start, then one more for
each ``config`` event (the server restarted with other engine arguments).

A segment covers [start, next segment's start); its figures are the ONE run summary
(``core.figures.summary.SummaryBuilder``) over the requests *sent* within it — a request sent
before a restart belongs to the old configuration even when it ended after — the
``/metrics`` scrapes taken within it and the knee marked within it.

The first configuration is the run's own: the serve command of the run's header (``--serve``,
kept in the header's options), or none when rampwatch did not start the server. The
table (``segment_table``) has one column per configuration, the engine arguments that
differ between them first, then the figures; the text report, the HTML report and the
screens all print it from here.
"""

from __future__ import annotations

import bisect
import math
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rampwatch.core.figures.summary import RequestBlock, Summary, SummaryBuilder, knee_rps, server_figures
from rampwatch.core.text import column_groups
from rampwatch.core.timeline import Event, RequestRecord, RunHeader, ServerSample

CONFIG_EVENT = "config"
# How a restarted run continues its schedule: from the ramp's start, or held at the rate
# it had when the load stopped.
RESUME_CHOICES = ("start", "current")
# What a segment's figures cover, said wherever the table is shown.
SEGMENT_NOTE = (
    "one column per server configuration; each one's figures are the run summary of the "
    "requests sent while it served (a request sent before a restart counts for the old one)"
)
RESUME_TEXT = {"start": "from the start of the ramp", "current": "at the current rate"}


@dataclass(frozen=True)
class ConfigSegment:
    """One configuration's stretch of the run."""

    index: int  # 1, 2, … in time order
    start_s: float
    end_s: float
    command: str | None  # the serve command (redacted); None: not started by rampwatch
    # Engine arguments changed against the previous segment: (name, old, new), None = unset.
    diff: list[tuple[str, Any, Any]] = field(default_factory=list)
    resume: str | None = None  # RESUME_CHOICES, for the segments after a restart

    @property
    def label(self) -> str:
        """The configuration's name on charts, bars and table headers: C1, C2, …"""
        return f"C{self.index}"


def diff_text(diff: Sequence[tuple[str, Any, Any]]) -> str:
    """``--max-num-seqs 8 → 64, --enforce-eager (unset) → on``: a diff on one line."""
    if not diff:
        return "same arguments"
    return ", ".join(f"--{name.replace('_', '-')} {_value_text(old)} → {_value_text(new)}" for name, old, new in diff)


def config_event(
    t: float, command: str, diff: Sequence[tuple[str, Any, Any]], resume: str, restart_started_at: float
) -> Event:
    """The mark a restart leaves in the timeline: the new (redacted) serve command, the
    whole argument diff and how the schedule went on."""
    return Event(
        t,
        CONFIG_EVENT,
        f"server restarted: {diff_text(diff)}; resumed {RESUME_TEXT.get(resume, resume)}",
        {
            "command": command,
            "diff": [[name, old, new] for name, old, new in diff],
            "resume": resume,
            "restart_started_at": restart_started_at,
        },
    )


def first_command(header: RunHeader | None) -> str | None:
    """The run's first serve command, as the header keeps it (redacted)."""
    if header is None:
        return None
    serve = header.options.get("serve") if isinstance(header.options, dict) else None
    return serve if isinstance(serve, str) and serve else None


def _diff_rows(value: Any) -> list[tuple[str, Any, Any]]:
    """A ``config`` event's ``diff`` as tuples; anything malformed is left out."""
    rows = []
    for row in value if isinstance(value, list) else []:
        if isinstance(row, (list, tuple)) and len(row) == 3 and isinstance(row[0], str):
            rows.append((row[0], row[1], row[2]))
    return rows


def config_segments(header: RunHeader | None, events: Iterable[Event], end_s: float) -> list[ConfigSegment]:
    """The run's configurations in time order: always at least one (the run's own)."""
    marks = sorted((e for e in events if e.kind == CONFIG_EVENT), key=lambda e: e.t)
    starts = [0.0] + [e.t for e in marks]
    ends = [e.t for e in marks] + [max(end_s, starts[-1])]
    segments = [ConfigSegment(1, starts[0], ends[0], first_command(header))]
    for i, event in enumerate(marks, start=2):
        command = event.data.get("command")
        resume = event.data.get("resume")
        segments.append(
            ConfigSegment(
                i,
                starts[i - 1],
                ends[i - 1],
                command if isinstance(command, str) else None,
                _diff_rows(event.data.get("diff")),
                resume if resume in RESUME_CHOICES else None,
            )
        )
    return segments


def segment_index(starts: Sequence[float], t: float) -> int:
    """Which segment (0-based) a time falls in, given the segments' start times."""
    return max(0, bisect.bisect_right(starts, t) - 1)


class SegmentSummaries:
    """One ``SummaryBuilder`` per configuration, fed requests in any grouping: each
    request goes to the segment it was sent in."""

    def __init__(self, segments: Sequence[ConfigSegment], **builder_options: Any) -> None:
        self.segments = list(segments)
        self._starts = [s.start_s for s in self.segments]
        self.builders = [SummaryBuilder(**builder_options) for _ in self.segments]

    def add_records(self, records: Sequence[RequestRecord]) -> None:
        groups: list[list[RequestRecord]] = [[] for _ in self.segments]
        for record in records:
            groups[segment_index(self._starts, record.sent_at)].append(record)
        for builder, group in zip(self.builders, groups, strict=True):
            if group:
                builder.add_block(RequestBlock.from_records(group))

    def build(
        self, header: RunHeader | None, samples: Sequence[ServerSample], events: Sequence[Event]
    ) -> list[Summary]:
        """Each segment's summary: its requests, its scrapes, its knee."""
        summaries = []
        for segment, builder in zip(self.segments, self.builders, strict=True):
            inside = _within(segment, self.segments)
            summaries.append(
                builder.build(
                    header,
                    server_figures([s for s in samples if inside(s.t)]),
                    knee_rps([e for e in events if inside(e.t)]),
                    idle_duration_s=segment.end_s - segment.start_s,
                )
            )
        return summaries


def _within(segment: ConfigSegment, segments: Sequence[ConfigSegment]):
    """Whether a time belongs to the segment: [start, end), the last one closed."""
    last = segment.index == len(segments)
    return lambda t: segment.start_s <= t and (t < segment.end_s or last)


# -- the side-by-side table ---------------------------------------------------------------


def _value_text(value: Any) -> str:
    if value is None:
        return "(unset)"
    if value is True:
        return "on"
    if value is False:
        return "off"
    return str(value)


def argument_rows(segments: Sequence[ConfigSegment]) -> list[tuple[str, list[str]]]:
    """The engine arguments that differ between configurations, one row each, with each
    configuration's value: a change carries forward until the next one changes it again."""
    names: list[str] = []
    for segment in segments:
        for name, _, _ in segment.diff:
            if name not in names:
                names.append(name)
    rows = []
    for name in names:
        values: list[Any] = [None] * len(segments)
        known = [False] * len(segments)
        for i, segment in enumerate(segments):
            for changed, old, new in segment.diff:
                if changed != name:
                    continue
                for j in range(i - 1, -1, -1):  # the old value held since the last change
                    if known[j]:
                        break
                    values[j], known[j] = old, True
                values[i], known[i] = new, True
            if not known[i] and i > 0 and known[i - 1]:
                values[i], known[i] = values[i - 1], True
        rows.append((f"--{name.replace('_', '-')}", [_value_text(v) for v in values]))
    return rows


def number_cell(v: float | None, fmt: str = ".2f") -> str:
    """A table cell: the number in ``fmt``, ``-`` when it is unknown (None or NaN)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return format(v, fmt)


def figure_rows(segments: Sequence[ConfigSegment], summaries: Sequence[Summary]) -> list[tuple[str, list[str]]]:
    """Each configuration's figures, one row each."""

    def row(label: str, value) -> tuple[str, list[str]]:
        return label, [value(segment, s) for segment, s in zip(segments, summaries, strict=True)]

    def ms(metric: str, p: str):
        return lambda _, s: number_cell(s.latency(metric).percentiles.get(p))

    return [
        row("time", lambda seg, _: f"{_clock(seg.start_s)}–{_clock(seg.end_s)}"),
        row("requests sent", lambda _, s: str(s.completed + s.failed + s.cancelled)),
        row("completed req/s", lambda _, s: number_cell(s.request_throughput)),
        row("output tok/s", lambda _, s: number_cell(s.output_throughput, ".1f")),
        row("TTFT p50 ms", ms("ttft", "p50")),
        row("TTFT p99 ms", ms("ttft", "p99")),
        row("ITL p50 ms", ms("itl", "p50")),
        row("ITL p99 ms", ms("itl", "p99")),
        row("failed", lambda _, s: str(s.failed)),
        row("cancelled", lambda _, s: str(s.cancelled)),
        row("peak KV %", lambda _, s: number_cell(s.server.get("max_kv_usage_pct"), ".1f")),
        row("knee req/s", lambda _, s: number_cell(s.knee_rps)),
    ]


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    minutes, secs = divmod(seconds, 60)
    return f"{minutes:02d}:{secs:02d}"


@dataclass(frozen=True)
class SegmentTable:
    """The side-by-side table: a header per configuration, then rows of (label, cells)."""

    columns: list[str]  # "C1", "C2", …
    commands: list[str]  # each configuration's serve command ("" when unknown)
    rows: list[tuple[str, list[str]]]
    argument_count: int  # the first rows that are engine arguments

    def text(self, width: int | None = None) -> str:
        """The table as fixed-width text (``rampwatch report``, a run's summary). Given a
        terminal's ``width``, a cell of several words wraps within its column (never
        mid-word) and, when the columns still do not fit, they are printed in groups,
        each under the labels again."""
        label_w = max(len(label) for label, _ in self.rows)
        widths = [max(len(col), *(len(cells[i]) for _, cells in self.rows)) for i, col in enumerate(self.columns)]
        if width is not None:
            widths = self._narrowed(widths, width - label_w - 2)
        groups = [list(range(len(self.columns)))] if width is None else column_groups(widths, width - label_w - 2)
        blocks = [self._block(group, label_w, widths) for group in groups]
        lines = "\n\n".join(blocks).split("\n")
        lines += [f"{col}: {cmd}" for col, cmd in zip(self.columns, self.commands, strict=True) if cmd]
        return "\n".join(lines)

    def _narrowed(self, widths: list[int], room: int) -> list[int]:
        """The columns' widths once cells of several words may wrap, the widest narrowed
        first, until the table fits ``room`` or no column can narrow further (none below
        its header or its longest word)."""
        floors = [
            max(len(col), *(len(word) for _, cells in self.rows for word in cells[i].split()))
            for i, col in enumerate(self.columns)
        ]
        widths = list(widths)
        while sum(widths) + 2 * (len(widths) - 1) > room:
            narrowable = [i for i, w in enumerate(widths) if w > floors[i]]
            if not narrowable:
                break
            widest = max(narrowable, key=lambda i: widths[i])
            widths[widest] -= 1
        return widths

    def _block(self, group: list[int], label_w: int, widths: list[int]) -> str:
        lines = [" " * label_w + "  " + "  ".join(self.columns[i].rjust(widths[i]) for i in group)]
        for n, (label, cells) in enumerate(self.rows):
            if n == self.argument_count and n:
                lines.append("-" * len(lines[0]))
            wrapped = [textwrap.wrap(cells[i], widths[i]) or [""] for i in group]
            for k in range(max(len(parts) for parts in wrapped)):
                parts = [p[k] if k < len(p) else "" for p in wrapped]
                lines.append(
                    (label if k == 0 else "").ljust(label_w)
                    + "  "
                    + "  ".join(part.rjust(widths[i]) for part, i in zip(parts, group, strict=True))
                )
        return "\n".join(line.rstrip() for line in lines)


def segment_table(segments: Sequence[ConfigSegment], summaries: Sequence[Summary]) -> SegmentTable:
    arguments = argument_rows(segments)
    return SegmentTable(
        columns=[s.label for s in segments],
        commands=[s.command or "" for s in segments],
        rows=arguments + figure_rows(segments, summaries),
        argument_count=len(arguments),
    )


def restarted(segments: Sequence[ConfigSegment]) -> bool:
    """Whether the run has more than one configuration (the only case anything is shown)."""
    return len(segments) > 1
