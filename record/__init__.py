"""Session recordings: format, writer, reader and replay timeline, summaries and exports."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rampwatch.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from rampwatch.record.analysis import adapter_figures, class_figures, comparison_samples, recording_turns, summarise
    from rampwatch.record.cli_compare import compare_rows, load_warning, shared_cache_warning
    from rampwatch.record.cli_export import write_bench_result
    from rampwatch.record.reader import Recording, open_recording, print_warnings
    from rampwatch.record.replay import ReplayTimeline
    from rampwatch.record.sweep_report import write_sweep_report
    from rampwatch.record.writer import RecordingWriter, default_recording_path

# module -> the public names it defines, loaded on first use
_MODULES: dict[str, tuple[str, ...]] = {
    "analysis": (
        "adapter_figures",
        "class_figures",
        "comparison_samples",
        "recording_turns",
        "summarise",
    ),
    "cli_compare": (
        "compare_rows",
        "load_warning",
        "shared_cache_warning",
    ),
    "cli_export": ("write_bench_result",),
    "reader": (
        "Recording",
        "open_recording",
        "print_warnings",
    ),
    "replay": ("ReplayTimeline",),
    "sweep_report": ("write_sweep_report",),
    "writer": (
        "RecordingWriter",
        "default_recording_path",
    ),
}
__all__ = [
    "Recording",
    "RecordingWriter",
    "ReplayTimeline",
    "adapter_figures",
    "class_figures",
    "compare_rows",
    "comparison_samples",
    "default_recording_path",
    "load_warning",
    "open_recording",
    "print_warnings",
    "recording_turns",
    "shared_cache_warning",
    "summarise",
    "write_bench_result",
    "write_sweep_report",
]
__getattr__ = lazy_attributes(__name__, _MODULES)
