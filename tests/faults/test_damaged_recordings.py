"""A damaged recording says what is wrong and where, replays everything that is intact,
and makes `report` and `export` exit non-zero; a block that would inflate past what the
format allows (a zlib bomb) is refused without inflating it."""

from __future__ import annotations

import json
import re
import resource
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from rampwatch.core.errors import UserError
from rampwatch.record import format as fmt
from rampwatch.record.reader import open_recording
from rampwatch.record.writer import RecordingWriter
from tests.synthetic import SyntheticRun, play_synthetic


def write_recording(path: Path) -> None:
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=None)
    play_synthetic(
        SyntheticRun(duration_s=20.0, end_rps=6, mean_chunks=20, seed=3), writer, on_flush=lambda _t: writer.flush()
    )


def frames_of(data: bytes) -> list[tuple[int, int, int]]:
    """(offset of the frame header, kind, count) of every frame."""
    out, pos = [], fmt.PREAMBLE.size
    while pos < len(data):
        length, kind, count, *_ = fmt.FRAME.unpack_from(data, pos)
        out.append((pos, kind, count))
        pos += fmt.FRAME.size + length
    return out


@pytest.fixture
def recording(tmp_path) -> Path:
    path = tmp_path / "run.rwrec"
    write_recording(path)
    return path


def first_requests_frame(data: bytes) -> tuple[int, int]:
    return next((pos, count) for pos, kind, count in frames_of(data) if kind == fmt.KIND_REQUESTS)


def report(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "report", str(path)], capture_output=True, text=True, timeout=60
    )


@pytest.mark.slow
@pytest.mark.parametrize("length", [0, 1, 2**31, 2**32 - 1])
def test_a_corrupted_length_in_the_first_requests_block_loses_that_stretch_only(recording, length):
    data = bytearray(recording.read_bytes())
    total = open_recording(recording).request_count
    pos, count = first_requests_frame(bytes(data))
    struct.pack_into("<I", data, pos, length)
    recording.write_bytes(bytes(data))
    damaged = open_recording(recording)
    assert len(damaged.damage) == 1
    assert damaged.damage[0].startswith(f"{recording}: bytes {pos:,}–")
    assert damaged.request_count == total - count  # everything else is still there
    assert len(damaged.requests) == total - count
    proc = report(recording)
    assert proc.returncode == 1
    assert "Successful requests:" in proc.stdout
    assert f"warning: {damaged.damage[0]}" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"rampwatch report: {recording} is damaged: 1 damaged part skipped (see the warnings above)"
    )


def test_a_checksum_mismatch_loses_that_block_only(recording):
    data = bytearray(recording.read_bytes())
    total = open_recording(recording).request_count
    pos, count = first_requests_frame(bytes(data))
    data[pos + fmt.FRAME.size + 3] ^= 0x55  # inside the payload
    recording.write_bytes(bytes(data))
    damaged = open_recording(recording)
    assert [m.split(" (")[0] for m in damaged.damage] == [
        f"{recording}: bytes {pos:,}–{pos + fmt.FRAME.size + fmt.FRAME.unpack_from(data, pos)[0]:,} lost"
    ]
    assert f"checksum mismatch in a requests block of {count:,} items" in damaged.damage[0]
    assert damaged.request_count == total - count


@pytest.mark.slow
def test_a_damaged_header_is_one_line(recording):
    data = bytearray(recording.read_bytes())
    data[fmt.PREAMBLE.size + fmt.FRAME.size + 2] ^= 0xFF
    recording.write_bytes(bytes(data))
    with pytest.raises(
        UserError,
        match=r"run\.rwrec: corrupted recording \(its header block at byte 16 is damaged: "
        r"checksum mismatch",
    ):
        open_recording(recording)
    proc = report(recording)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def bomb_frame(kind: int, count: int) -> bytes:
    """A block with a valid checksum that inflates to 1 GiB."""
    payload = zlib.compress(b"\0" * (1 << 30), 9)
    if kind == fmt.KIND_REQUESTS:  # the requests layout: its head, then compressed scalars
        payload = struct.pack("<III", count, len(payload), 0) + payload
    return fmt.frame(kind, payload, count, 5.0, 5.5)


@pytest.mark.slow
@pytest.mark.parametrize("kind", [fmt.KIND_REQUESTS, fmt.KIND_META])
def test_a_zlib_bomb_block_is_refused_without_inflating_it(recording, kind):
    with open(recording, "ab") as f:
        f.write(bomb_frame(kind, 3))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rec = open_recording(recording)
    requests, events = rec.requests, rec.events  # decodes every block
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 200, f"reading grew the peak RSS by {grown_mb:.0f} MB"
    assert requests and events
    lost = [m for m in rec.damage if "inflates past" in m]
    assert len(lost) == 1 and f"{fmt.KINDS[kind]} block at byte" in lost[0]
    assert "more than the format allows" in lost[0]


def test_inflate_stops_at_its_limit():
    data = zlib.compress(b"x" * 10_000)
    assert fmt.inflate(data, 10_000) == b"x" * 10_000
    with pytest.raises(ValueError, match="inflates past 9,999 bytes"):
        fmt.inflate(data, 9_999)
    with pytest.raises(ValueError, match="truncated"):
        fmt.inflate(data[:-4], 10_000)


def with_header_fields(path: Path, **fields) -> None:
    """``path`` rewritten with its header's ``fields`` replaced (a valid block, wrong contents)."""
    data = path.read_bytes()
    (pos, _kind, _count), (next_pos, *_rest) = frames_of(data)[:2]
    header = open_recording(path).header.to_dict() | fields
    payload = zlib.compress(json.dumps(header).encode())
    path.write_bytes(data[:pos] + fmt.frame(fmt.KIND_HEADER, payload, 1, 0.0, 0.0) + data[next_pos:])


@pytest.mark.parametrize(
    "fields, said",
    [
        ({"options": "x"}, "field options: expected dict[str, Any], got str"),
        ({"scenario": 3}, "field scenario: expected dict[str, Any], got int"),
        ({"planned_duration_s": "abc"}, "field planned_duration_s: expected float | None, got str"),
        ({"metrics_urls": {"a": 1}}, "field metrics_urls: expected list[str], got dict"),
        ({"started_at_unix": True}, "field started_at_unix: expected float, got bool"),
    ],
)
def test_a_header_field_of_the_wrong_type_is_one_line_naming_it(tmp_path, fields, said, capsys):
    """Each reader of the header (report, export, compare, replay) ended in a traceback
    far from the file (`'str' object has no attribute 'get'`)."""
    from rampwatch.app.cli import main

    path = tmp_path / "run.rwrec"
    write_recording(path)
    with_header_fields(path, **fields)
    with pytest.raises(UserError, match=re.escape(f"run.rwrec: corrupted recording (unreadable header: {said})")):
        open_recording(path)
    for argv in (["report", str(path)], ["export", str(path), "-o", str(tmp_path / "out.json")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], err
