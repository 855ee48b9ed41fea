"""Crash safety, corruption, foreign files, version dispatch and secrets."""

from __future__ import annotations

import re
import signal
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from rampwatch.core.errors import UserError
from rampwatch.core.redact import REDACTED, redact_options
from rampwatch.core.timeline import Event, RequestRecord, RunHeader
from rampwatch.record import format as fmt
from rampwatch.record.reader import SCANNERS, open_recording
from rampwatch.record.replay import ReplayTimeline
from rampwatch.record.writer import RecordingWriter
from tests.record import v1_tiny
from tests.record.helpers import FedLog, assert_request_close
from tests.synthetic import SyntheticRun, play_synthetic


def _write_small(path: Path, duration=12.0) -> None:
    writer = RecordingWriter(path, flush_interval_s=None)
    play_synthetic(
        SyntheticRun(duration_s=duration, end_rps=6, mean_chunks=20, seed=5), writer, on_flush=lambda _t: writer.flush()
    )


# ---- truncation and corruption -----------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 7, 40, 333])
def test_truncated_tail_opens_with_a_warning(tmp_path, cut):
    path = tmp_path / "r.rwrec"
    _write_small(path)
    full = open_recording(path)
    n_full = len(full.requests)
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    rec = open_recording(path)
    assert not rec.finished
    assert any("truncated" in w or "damaged" in w or "no end marker" in w for w in rec.warnings)
    assert 0 < len(rec.requests) <= n_full
    assert rec.duration_s > 0


def test_a_corrupted_byte_loses_its_block_and_the_rest_replays(tmp_path):
    """(tests/faults/test_damaged_recordings.py has the cases one by one.)"""
    path = tmp_path / "r.rwrec"
    _write_small(path)
    n_full = len(open_recording(path).requests)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    rec = open_recording(path)
    assert len(rec.damage) == 1 and re.match(re.escape(str(path)) + r": bytes [\d,]+–[\d,]+ lost \(", rec.damage[0])
    assert 0 < len(rec.requests) < n_full


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty file"),
        (b"id,ttft\n1,0.2\n", "not a rampwatch recording"),
        (b"RWREC\x00\r\n" + struct.pack("<HHI", 99, 0, 0), "newer than this rampwatch"),
        (b"RWREC\x00\r\n" + struct.pack("<HHI", 0, 0, 0), "unknown recording format version 0"),
        (fmt.preamble(), "truncated before its header"),
        (fmt.preamble() + fmt.frame(fmt.KIND_META, b"x", 1, 0, 0), "no header"),
        (fmt.preamble() + fmt.frame(fmt.KIND_HEADER, b"not zlib", 1, 0, 0), "unreadable header"),
    ],
)
def test_bad_files_raise_one_line_user_errors(tmp_path, content, message):
    path = tmp_path / "bad.rwrec"
    path.write_bytes(content)
    with pytest.raises(UserError, match=message) as info:
        open_recording(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(UserError, match="no such recording"):
        open_recording(tmp_path / "nope.rwrec")
    with pytest.raises(UserError, match="directory"):
        open_recording(tmp_path)


# ---- version dispatch -------------------------------------------------------------------


def test_committed_v1_file_still_reads():
    assert 1 in SCANNERS
    rec = open_recording(v1_tiny.PATH)
    assert rec.format_version == 1
    assert rec.header == v1_tiny.HEADER
    assert rec.ticks == v1_tiny.TICKS
    assert rec.events == v1_tiny.EVENTS
    assert rec.samples == v1_tiny.SAMPLES
    assert rec.duration_s == v1_tiny.FINISH_T and rec.warnings == []
    assert len(rec.requests) == len(v1_tiny.REQUESTS)
    for a, b in zip(v1_tiny.REQUESTS, rec.requests):
        assert_request_close(a, b)


# ---- crash safety: a real writer process killed with SIGKILL ----------------------------

_WRITER_SCRIPT = r"""
import time
from rampwatch.core.timeline import Tick, Event, RequestRecord, RunHeader
from rampwatch.record.writer import RecordingWriter
w = RecordingWriter({path!r}, flush_interval_s=0.1)
w.on_start(RunHeader("0", 0.0, "http://127.0.0.1:1", "m", "killed"))
t0 = time.monotonic(); i = 0
while time.monotonic() - t0 < 60:
    t = time.monotonic() - t0
    w.on_request(RequestRecord(i, t, t, t + 0.001, t + 0.0005, [t + 0.0007, t + 0.0009], 5, 3))
    if i % 50 == 0:
        w.on_tick(Tick(t, 10.0, "ramping", in_flight=1))
        w.on_event(Event(t, "info", f"beat {{i}}"))
    i += 1
    time.sleep(0.002)
"""


@pytest.mark.slow
def test_kill_9_leaves_a_replayable_file(tmp_path):
    path = tmp_path / "killed.rwrec"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER_SCRIPT.format(path=str(path))])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if path.exists() and path.stat().st_size > 20_000:
                break
            time.sleep(0.05)
        time.sleep(0.13)  # likely mid-run, between or during flushes
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    rec = open_recording(path)
    assert not rec.finished
    assert any("no end marker" in w for w in rec.warnings)
    requests = rec.requests
    assert len(requests) > 100
    assert [r.id for r in requests] == list(range(len(requests)))  # nothing lost before the last flush
    assert rec.ticks and rec.events
    timeline = ReplayTimeline(rec, builder_factory=FedLog, warm_up=False, clock=lambda: 0.0)
    timeline.seek(rec.duration_s)
    fed = timeline.snapshot().summary["fed"]
    assert sum(1 for kind, _ in fed if kind == "request") == len(requests)


# ---- secrets --------------------------------------------------------------------------

SECRET = "sk-live-9f8e7d6c5b4a3210SECRET"


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"api_key": SECRET, "rate": 5}, {"api_key": REDACTED, "rate": 5}),
        ({"api-key": SECRET}, {"api-key": REDACTED}),
        ({"headers": {"Authorization": f"Bearer {SECRET}"}}, {"headers": {"Authorization": REDACTED}}),
        ({"extra": f"Bearer {SECRET}"}, {"extra": f"Bearer {REDACTED}"}),
        ({"argv": ["--api-key", SECRET, "--rate", "5"]}, {"argv": ["--api-key", REDACTED, "--rate", "5"]}),
        ({"argv": [f"--api-key={SECRET}"]}, {"argv": [f"--api-key={REDACTED}"]}),
        ({"hf_token": SECRET, "max_tokens": 128}, {"hf_token": REDACTED, "max_tokens": 128}),
        ({"api_key": None}, {"api_key": None}),
    ],
)
def test_redact_options(options, expected):
    assert redact_options(options) == expected


def _all_bytes_decompressed(data: bytes) -> bytes:
    """The raw file plus every zlib stream found in it, decompressed."""
    out = [data]
    for i in range(len(data) - 1):
        if data[i] == 0x78 and data[i + 1] in (0x01, 0x5E, 0x9C, 0xDA):
            try:
                out.append(zlib.decompressobj().decompress(data[i:]))
            except zlib.error:
                pass
    return b"".join(out)


def test_api_key_never_reaches_the_file(tmp_path):
    path = tmp_path / "secret.rwrec"
    header = RunHeader(
        "0",
        0.0,
        "http://127.0.0.1:8000",
        "m",
        "s",
        scenario={"headers": {"Authorization": f"Bearer {SECRET}"}},
        options={"api_key": SECRET, "argv": ["rampwatch", "run", "--api-key", SECRET]},
    )
    w = RecordingWriter(path, flush_interval_s=None)
    w.on_start(header)
    w.on_request(RequestRecord(1, 0, 0, 1, error_class="http_401", error=f"401: invalid key {SECRET}"))
    w.on_event(Event(0.5, "error", f"auth failed for {SECRET}"))
    w.on_finish(1.0)
    blob = _all_bytes_decompressed(path.read_bytes())
    assert len(blob) > len(path.read_bytes())  # the compressed streams were found and opened
    assert SECRET.encode() not in blob
    rec = open_recording(path)
    assert rec.header.options["api_key"] == REDACTED
    assert SECRET not in rec.requests[0].error and SECRET not in rec.events[0].message
