"""What the end of a run keeps in memory while it reads its recording back
(``app.session.final_figures``: ``summarise``, turns, classes); the hour-long figures are
``bench/bench_readback_rss.py``'s."""

from __future__ import annotations

import os
import sys
import tracemalloc

import pytest

from rampwatch.core.timeline import Event, RequestRecord, RunHeader, ServerSample, Tick
from rampwatch.record.analysis import class_figures, recording_turns, summarise
from rampwatch.record.reader import open_recording
from rampwatch.record.writer import RecordingWriter

URL = "http://x/metrics"
RAW_SERIES = 140  # about what a vLLM /metrics page gives a scrape


def raw_series(second: int) -> dict[str, float]:
    return {f'vllm:family_{i}{{engine="0",model_name="m",le="{i}"}}': float(second * i) for i in range(RAW_SERIES)}


@pytest.mark.slow
def test_the_read_back_keeps_the_scrapes_without_their_raw_series(tmp_path):
    seconds = 120
    path = tmp_path / "r.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=None)
    writer.on_start(RunHeader("0", 0.0, "http://x", "m", "s"))
    for s in range(seconds):
        t = float(s)
        writer.on_tick(Tick(t, 1.0, "ramping"))
        writer.on_scrape(
            ServerSample(t + 0.2, URL, True, "vllm", running=1.0, generation_tokens_total=3.0 * s, raw=raw_series(s))
        )
        writer.on_request(RequestRecord(s, t, t, t + 0.05, t + 0.01, [t + 0.02, t + 0.03], 5, 3))
        writer.flush()
    writer.on_finish(float(seconds))
    read_back(open_recording(path))  # once before measuring: what it imports is not counted
    recording = open_recording(path)
    tracemalloc.start()
    try:
        summary = read_back(recording)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert summary.completed == seconds and summary.server["max_running"] == 1.0
    # A scrape without its raw series: ~0.9 kB kept; with them (as a dict) it was ~27 kB.
    assert held < seconds * 5_000, f"{held / seconds:,.0f} bytes kept per scrape"
    assert recording.samples[-1].raw == raw_series(seconds - 1)  # still in the file for what wants them


def read_back(recording):
    recording_turns(recording)
    class_figures(recording)
    return summarise(recording)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_a_pass_over_a_recording_does_not_keep_its_file_resident(tmp_path):
    path = tmp_path / "r.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=None)
    writer.on_start(RunHeader("0", 0.0, "http://x", "m", "s"))
    for s in range(200):  # ~20 kB blocks that do not compress: a 4 MB file
        writer.on_event(Event(float(s), "info", os.urandom(10_000).hex()))
        writer.flush()
    writer.on_finish(200.0)
    size = path.stat().st_size
    recording = open_recording(path)  # checks every block's checksum
    assert len(recording.events) == 200  # decodes every block
    resident = mapped_rss_bytes(path)
    assert resident < size / 4, f"{resident:,} of the file's {size:,} bytes resident"


def mapped_rss_bytes(path) -> int:
    """This process's resident bytes of its mappings of ``path``."""
    total = 0
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and not head[0].endswith(":"):  # a mapping's first line: range perms offset dev inode path
                inside = len(head) >= 6 and head[5] == str(path)
            elif inside and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total
