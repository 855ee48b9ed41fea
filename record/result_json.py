"""The one writer of the result JSON (``core.figures.bench_result``'s schema), for
``rampwatch export``, the end of a run, and records held in memory alike.

The per-request lists (``itls`` holds every chunk gap of the run) are written block by
block, never all in memory at once: a recording's request frames one by one, read as
columns where a list needs no chunk times. A mixture's ``per_class`` section has each
class's result in the top level's schema: its figures, its requests' lists (streamed the
same way), and ``None`` for a run-wide figure that no class has alone (the GPUs' energy).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TextIO

import numpy as np

from rampwatch.core import strict_json
from rampwatch.core.figures.adapters import adapter_results, adapter_summaries
from rampwatch.core.figures.bench_result import PER_REQUEST_KEYS, REQUEST_LISTS, dump_list, result_fields
from rampwatch.core.figures.search import search_section
from rampwatch.core.figures.summary import Summary
from rampwatch.core.figures.turns import TurnTable, turn_sections
from rampwatch.core.files import private_file
from rampwatch.core.timeline import RequestRecord, RunHeader

if TYPE_CHECKING:
    from rampwatch.record.reader import Recording

# (per-request key, request class or None for every request) -> the list's parts in order
ListParts = Callable[[str, str | None], Iterable[list[Any]]]


def write_bench_result(
    recording: Recording,
    summary: Summary,
    path: Path | TextIO,
    detailed: bool = False,
    texts: dict[int, str] | None = None,
) -> None:
    """A recording's result JSON. ``texts``: the answers by request id (a run that kept
    them; recordings do not). ``path``: a file (made 0600), or a stream (``export -o -``:
    standard output)."""
    from rampwatch.record.analysis import adapter_figures, class_figures, recording_turns

    def parts(key: str, request_class: str | None) -> Iterable[list[Any]]:
        for info in recording.request_frames:
            yield _frame_list(recording, info, key, texts, request_class)

    result = result_fields(summary, recording.header, recording.request_count, detailed=detailed)
    result.update(turn_sections(recording_turns(recording)))
    result.update(adapter_section(adapter_figures(recording)))
    result.update(search_section(recording.events))
    _write(path, result, summary, recording.header, class_figures(recording), detailed, parts)


def write_records_result(
    header: RunHeader | None,
    records: Sequence[RequestRecord],
    summary: Summary,
    path: Path | TextIO,
    detailed: bool = False,
    classes: Mapping[str, Summary] | None = None,
    turns: TurnTable | None = None,
) -> None:
    """The result JSON of requests held in memory (``RunOptions.keep_records``), with
    their classes' figures (``classes.class_summaries``) and the turn table, if any."""

    def parts(key: str, request_class: str | None) -> Iterable[list[Any]]:
        chosen = records if request_class is None else [r for r in records if r.request_class == request_class]
        return [REQUEST_LISTS[key](chosen)]

    result = result_fields(summary, header, len(records), detailed=detailed)
    result.update(turn_sections(turns))
    result.update(adapter_section(adapter_summaries(header, records)))
    _write(path, result, summary, header, classes or {}, detailed, parts)


def adapter_section(adapters: Mapping[str, Summary]) -> dict[str, Any]:
    """``rampwatch_per_adapter``: each LoRA adapter's figures (``core.figures.adapters``);
    nothing for a run without adapters."""
    return {"rampwatch_per_adapter": adapter_results(adapters)} if adapters else {}


def _write(
    path: Path | TextIO,
    result: dict[str, Any],
    summary: Summary,
    header: RunHeader | None,
    classes: Mapping[str, Summary],
    detailed: bool,
    parts: ListParts,
) -> None:
    per_class = {}
    for name, figures in classes.items():
        one = result_fields(figures, header, figures.completed + figures.failed + figures.cancelled, detailed=detailed)
        per_class[name] = {key: one.get(key) for key in result}
    if per_class:
        result["per_class"] = per_class
    if not isinstance(path, Path):
        _write_object(path, result, None, parts)
        path.write("\n")
        return
    with private_file(path, "w") as f:
        _write_object(f, result, None, parts)
        f.write("\n")


def _write_object(f: IO[str], fields: dict[str, Any], request_class: str | None, parts: ListParts) -> None:
    f.write("{")
    for i, (key, value) in enumerate(fields.items()):
        f.write(("," if i else "") + "\n " + json.dumps(key) + ": ")
        if key == "per_class":
            f.write("{")
            for j, (name, class_fields) in enumerate(value.items()):
                f.write(("," if j else "") + "\n " + json.dumps(name) + ": ")
                _write_object(f, class_fields, name, parts)
            f.write("}")
        elif key not in PER_REQUEST_KEYS:
            f.write(strict_json.dumps(value, default=str))  # NaN as null (dumps_bench_result)
        else:
            f.write("[")
            first = True
            for part in parts(key, request_class):
                if part:
                    f.write(("" if first else ", ") + dump_list(part)[1:-1].decode())
                    first = False
            f.write("]")
    f.write("\n}")


# ---- a recording's lists, one request frame at a time -----------------------------------


def _frame_list(
    recording: Recording, info, key: str, texts: dict[int, str] | None = None, request_class: str | None = None
) -> list[Any]:
    """One frame's share of a per-request list (the values of ``REQUEST_LISTS``), of one
    class's requests only with ``request_class``."""
    if request_class is None:
        return _block_list(recording, info, key, texts)
    classes = recording.request_columns(info, with_chunks=False).strings.get("request_class")
    if classes is None:
        return []
    if key == "itls":
        return REQUEST_LISTS["itls"]([r for r in recording.decode_requests(info) if r.request_class == request_class])
    values = _block_list(recording, info, key, texts)
    return [v for v, c in zip(values, classes) if c == request_class]


def _block_list(recording: Recording, info, key: str, texts: dict[int, str] | None = None) -> list[Any]:
    """``REQUEST_LISTS[key]`` of a frame's requests, from its columns (itls: its records)."""
    if key == "itls":
        return REQUEST_LISTS["itls"](recording.decode_requests(info))
    c = recording.request_columns(info, with_chunks=False)
    ok = np.array([e is None for e in c.strings["error_class"]], dtype=bool)
    if key == "input_lens":
        return c.prompt_tokens.tolist()
    if key == "output_lens":
        return np.where(ok, np.where(c.completion_tokens == 0, 1, c.completion_tokens), 0).tolist()
    if key == "ttfts":
        ttft = np.where(c.has_first, c.first_token_at - c.sent_at, 0.0)
        return np.where(ok & (ttft != 0.0), ttft, 0.0).tolist()
    if key == "latencies":
        return np.where(ok, c.end_at - c.sent_at, 0.0).tolist()
    if key == "start_times":
        return c.sent_at.tolist()
    if key == "queue_times":
        return np.maximum(0.0, c.sent_at - c.scheduled_at).tolist()
    if key == "generated_texts":  # recordings do not keep the answers' texts
        return [""] * c.n if texts is None else [texts.get(int(i), "") for i in c.ids]
    if key == "errors":
        return [
            "" if e is None else f"{e}: {msg or ''}" for e, msg in zip(c.strings["error_class"], c.strings["error"])
        ]
    raise KeyError(key)
