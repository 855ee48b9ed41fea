"""Opening a recording: version dispatch, frame index, tolerant tail, lazy block decoding."""

from __future__ import annotations

import math
import mmap
import os
import struct
import sys
import threading
import zlib
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rampwatch.core.errors import UserError
from rampwatch.core.timeline import Event, RequestRecord, RunHeader, ServerSample, Tick
from rampwatch.record import format as fmt

_SLACK_S = 2e-6
_DECODE_ERRORS = (zlib.error, ValueError, KeyError, TypeError, IndexError, struct.error)
# What a lost block reads as: nothing, so the rest of the file still replays.
_EMPTY_BLOCK: dict[int, Callable[[], Any]] = {fmt.KIND_REQUESTS: list, fmt.KIND_META: lambda: ([], [], [])}

# Order of items sharing one timestamp when the stream is replayed.
ITEM_ORDER = {"tick": 0, "sample": 1, "event": 2, "request": 3}


@dataclass(slots=True)
class Item:
    t: float
    kind: str  # "request", "sample", "tick", "event"
    value: Any


class Recording:
    """A recording opened for reading. Blocks are decoded on demand (and cached a little),
    so opening a large file only reads frame headers and checks CRCs."""

    def __init__(
        self,
        path: Path,
        version: int,
        header: RunHeader,
        frames: list[fmt.FrameInfo],
        data: mmap.mmap | bytes,
        finish_t: float | None,
        warnings: list[str],
        decoders: dict[int, Callable[[bytes], Any]],
        damage: list[str] | None = None,
    ) -> None:
        self.path = path
        self.format_version = version
        self.header = header
        # ``damage``: data lost to corruption (a command that reads the file exits non-zero);
        # ``warnings``: everything worth saying, the damage first.
        self.damage = list(damage or [])
        self.warnings = self.damage + warnings
        self.finished = finish_t is not None
        self._data = data
        self._decoders = decoders
        self._cache: OrderedDict[int, Any] = OrderedDict()
        self._cache_lock = threading.Lock()
        self.request_frames = [f for f in frames if f.kind == fmt.KIND_REQUESTS]
        self.meta_frames = [f for f in frames if f.kind == fmt.KIND_META]
        last = max((f.t_last for f in self.request_frames + self.meta_frames), default=0.0)
        self.duration_s = finish_t if finish_t is not None else last
        self.request_count = sum(f.count for f in self.request_frames)
        # Frames are appended in time order, but a frame's items may straddle its
        # neighbours' a little; the running max of t_last keeps bisection correct.
        self._req_first = np.array([f.t_first for f in self.request_frames], dtype=float)
        self._req_last_max = np.maximum.accumulate(np.array([f.t_last for f in self.request_frames] or [0.0]))
        self._meta_first = np.array([f.t_first for f in self.meta_frames], dtype=float)
        self._meta_last_max = np.maximum.accumulate(np.array([f.t_last for f in self.meta_frames] or [0.0]))
        self._meta_all: tuple[list[ServerSample], list[Tick], list[Event]] | None = None
        self.checkpoint_frames = _usable_checkpoints(frames)
        self._checkpoint_at = {f.t_first: f for f in frames if f.kind == fmt.KIND_CHECKPOINT}
        self.checkpoint_times = [f.t_first for f in self.checkpoint_frames]

    # ---- blocks ----------------------------------------------------------------------

    def _payload(self, info: fmt.FrameInfo) -> bytes:
        """A block's bytes, copied out of the file's mapping; the mapped pages are let go
        (``release_pages``), so a whole-file pass does not keep the file resident."""
        payload = bytes(self._data[info.offset : info.offset + info.length])
        release_pages(self._data, info.offset, info.offset + info.length)
        return payload

    def _decode(self, info: fmt.FrameInfo) -> Any:
        with self._cache_lock:
            hit = self._cache.get(info.offset)
            if hit is not None:
                self._cache.move_to_end(info.offset)
                return hit
        value = self._decode_uncached(info)
        with self._cache_lock:
            self._cache[info.offset] = value
            if len(self._cache) > 64:
                self._cache.popitem(last=False)
        return value

    @staticmethod
    def _overlapping(
        frames: list[fmt.FrameInfo], firsts: np.ndarray, last_max: np.ndarray, t_from: float, t_to: float
    ) -> list[fmt.FrameInfo]:
        if not frames:
            return []
        # Frame bounds hold the unrounded times; widen by the storage quantum.
        t_from -= _SLACK_S
        t_to += _SLACK_S
        lo = int(np.searchsorted(last_max, t_from, side="left"))
        hi = int(np.searchsorted(firsts, t_to, side="right")) if _sorted(firsts) else len(frames)
        return [f for f in frames[lo:hi] if f.t_last >= t_from and f.t_first <= t_to]

    def iter_requests(self, t_from: float = float("-inf"), t_to: float = float("inf")) -> Iterator[RequestRecord]:
        """Requests whose ``end_at`` lies in [t_from, t_to], in recorded order."""
        for f in self._overlapping(self.request_frames, self._req_first, self._req_last_max, t_from, t_to):
            for r in self._decode(f):
                if t_from <= r.end_at <= t_to:
                    yield r

    def decode_requests(self, info: fmt.FrameInfo) -> list[RequestRecord]:
        """One requests block as records (uncached; for whole-file passes)."""
        return self._decode_uncached(info)

    def request_columns(self, info: fmt.FrameInfo, with_chunks: bool = True) -> fmt.RequestColumns:
        """One requests block as arrays (uncached; for whole-file passes); an undecodable
        block reads as empty and is reported in ``damage``."""
        payload = self._payload(info)
        try:
            return fmt.decode_request_columns(payload, with_chunks)
        except _DECODE_ERRORS as exc:
            self._lost(info, exc)
            return fmt.decode_request_columns(fmt.encode_requests([]), with_chunks)

    def _lost(self, info: fmt.FrameInfo, exc: BaseException) -> None:
        """A block whose checksum held but whose content does not decode (a bomb, a bug)."""
        message = (
            f"{self.path}: {fmt.KINDS.get(info.kind, 'a')} block at byte {info.offset - fmt.FRAME.size:,} lost "
            f"({info.count:,} items, run time {info.t_first:.1f}–{info.t_last:.1f} s): {exc}"
        )
        with self._cache_lock:
            if message not in self.damage:
                self.damage.append(message)
                self.warnings.insert(len(self.damage) - 1, message)

    @property
    def requests(self) -> list[RequestRecord]:
        """All requests (materialised; for a long run this holds every chunk time in memory)."""
        return list(self.iter_requests())

    def _meta(self) -> tuple[list[ServerSample], list[Tick], list[Event]]:
        """Every meta block's items, the scrapes without their raw series, kept once decoded."""
        if self._meta_all is None:
            self._meta_all = self._all_meta(with_raw=False)
        return self._meta_all

    def _all_meta(self, with_raw: bool) -> tuple[list[ServerSample], list[Tick], list[Event]]:
        samples: list[ServerSample] = []
        ticks: list[Tick] = []
        events: list[Event] = []
        for f in self.meta_frames:
            s, t, e = self._decode_uncached(f, with_raw=with_raw)
            samples += s
            ticks += t
            events += e
        return samples, ticks, events

    def _decode_uncached(self, info: fmt.FrameInfo, **options: Any) -> Any:
        payload = self._payload(info)
        try:
            return self._decoders[info.kind](payload, **options)
        except _DECODE_ERRORS as exc:
            if info.kind not in _EMPTY_BLOCK:
                raise UserError(f"{self.path}: corrupted block at byte {info.offset} ({exc})") from exc
            self._lost(info, exc)
            return _EMPTY_BLOCK[info.kind]()

    @property
    def samples(self) -> list[ServerSample]:
        """Every scrape as recorded, its raw series included; decoded again on each call
        (an hour of vLLM scrapes, one a second, is ~100 MB of Python dicts): figures
        read ``samples_without_raw``."""
        return self._all_meta(with_raw=True)[0]

    @property
    def samples_without_raw(self) -> list[ServerSample]:
        """Every scrape with its ``raw`` series left empty: all that the figures read (the
        summed fields, per engine, per GPU), kept once decoded."""
        return self._meta()[0]

    @property
    def ticks(self) -> list[Tick]:
        return self._meta()[1]

    @property
    def events(self) -> list[Event]:
        return self._meta()[2]

    def marks(self) -> list[Event]:
        """Knee and user marks, in time order (what jump-to offers)."""
        return sorted((e for e in self.events if e.kind in ("knee", "mark")), key=lambda e: e.t)

    def items_between(self, t_from: float, t_to: float) -> list[Item]:
        """Every item with ``t_from < time <= t_to``, in replay order (time, then kind).

        A request's time is its ``end_at``: that is when a live run publishes it.
        """
        if t_to >= self.duration_s:
            # Stored times are rounded (requests to 1 µs), so an item at the very end can
            # read back a hair after the end: the end includes everything.
            t_to = math.inf
        out: list[Item] = []
        for f in self._overlapping(self.meta_frames, self._meta_first, self._meta_last_max, t_from, t_to):
            samples, ticks, events = self._decode(f)
            out += [Item(x.t, "sample", x) for x in samples if t_from < x.t <= t_to]
            out += [Item(x.t, "tick", x) for x in ticks if t_from < x.t <= t_to]
            out += [Item(x.t, "event", x) for x in events if t_from < x.t <= t_to]
        for f in self._overlapping(self.request_frames, self._req_first, self._req_last_max, t_from, t_to):
            out += [Item(r.end_at, "request", r) for r in self._decode(f) if t_from < r.end_at <= t_to]
        out.sort(key=lambda it: (it.t, ITEM_ORDER[it.kind]))
        return out

    def checkpoint(self, t: float) -> tuple[float, dict[str, Any], dict[str, np.ndarray]] | None:
        """The latest stored builder checkpoint at or before ``t``: ``(time, state, arrays)``
        as stored, for ``checkpoint.read_checkpoint``; ``None`` if there is none (older files)."""
        i = bisect_right(self.checkpoint_times, t)
        if i == 0:
            return None
        info = self.checkpoint_frames[i - 1]
        payload = self._payload(info)
        try:
            base_t = fmt.checkpoint_base(payload)
            base_arrays = None
            if base_t is not None:
                base = self._checkpoint_at.get(base_t)
                if base is None:
                    raise ValueError(f"its base checkpoint at {base_t} s is missing")
                base_arrays = fmt.decode_checkpoint(self._payload(base))[2]
            return fmt.decode_checkpoint(payload, base_arrays)
        except (zlib.error, ValueError, KeyError, TypeError, IndexError, struct.error) as exc:
            raise UserError(f"{self.path}: unreadable checkpoint at byte {info.offset} ({exc})") from exc

    def close(self) -> None:
        if isinstance(self._data, mmap.mmap):
            try:
                self._data.close()
            except BufferError:  # a view is still alive; the GC will release it
                pass

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _usable_checkpoints(frames: list[fmt.FrameInfo]) -> list[fmt.FrameInfo]:
    """Checkpoint frames a replay may restore, in time order.

    A checkpoint at ``T`` holds the state after every item with time <= T. It is only
    usable if no item at or before ``T`` (widened by the storage quantum) was written
    after it, which the frame heads tell without decoding anything.
    """
    usable = []
    later_first = math.inf
    for f in reversed(frames):
        if f.kind == fmt.KIND_CHECKPOINT:
            if f.t_first + _SLACK_S < later_first:
                usable.append(f)
        elif f.kind in (fmt.KIND_REQUESTS, fmt.KIND_META):
            later_first = min(later_first, f.t_first)
    usable.sort(key=lambda f: f.t_first)
    return usable


_FAULT_AROUND = 64 * 1024


def release_pages(data: mmap.mmap | bytes, start: int, end: int) -> None:
    """Drop the pages of ``data[start:end]`` from this process's resident set. They stay
    in the page cache, and touching them again reads them back from it: without this, a
    pass over a recording maps the whole file in (~70 MB for an hour at 100 req/s)."""
    if not isinstance(data, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return
    # A fault maps the cached pages around the faulting one too (Linux's fault-around,
    # 64 kB): reading a block maps some of the block before it again.
    start = max(0, start - _FAULT_AROUND)
    start -= start % mmap.PAGESIZE  # madvise takes whole pages
    try:
        data.madvise(mmap.MADV_DONTNEED, start, min(end, len(data)) - start)
    except (OSError, ValueError):  # only memory is at stake: reading goes on as before
        pass


def _sorted(a: np.ndarray) -> bool:
    return bool(a.size < 2 or np.all(a[1:] >= a[:-1]))


# ---- version dispatch ---------------------------------------------------------------------
#
# Each format version maps to a function that scans the body and returns the pieces a
# Recording needs. A new version adds an entry; old entries stay so old files keep opening.


_MAX_PLAUSIBLE_COUNT = 100_000_000  # items in one block; a frame header past it is garbage
_RESYNC_WINDOW = 64 * 1024 * 1024


def _frame_problem(data: mmap.mmap | bytes, pos: int, size: int) -> tuple[fmt.FrameInfo | None, str | None]:
    """The intact frame at ``pos``, or why there is none there."""
    if size - pos < fmt.FRAME.size:
        return None, f"{size - pos} stray bytes"
    length, kind, count, crc, t_first, t_last = fmt.FRAME.unpack_from(data, pos)
    body = pos + fmt.FRAME.size
    if body + length > size:
        return None, f"a block of {length:,} bytes runs past the end of the file"
    if zlib.crc32(memoryview(data)[body : body + length]) != crc:
        what = fmt.KINDS.get(kind, f"kind {kind}")
        return None, f"checksum mismatch in a {what} block of {count:,} items, run time {t_first:.1f}–{t_last:.1f} s"
    return fmt.FrameInfo(body, kind, count, length, crc, t_first, t_last), None


def next_intact_frame(data: mmap.mmap | bytes, start: int, size: int) -> int | None:
    """The first offset at or after ``start`` where an intact frame of a known kind begins
    (its header plausible and its checksum right), to read on past a damaged stretch."""
    buf = np.frombuffer(data, dtype=np.uint8)
    last = size - fmt.FRAME.size  # the last offset a frame header fits at
    kinds = np.array(sorted(fmt.KINDS), dtype=np.uint8)
    for lo in range(start, last + 1, _RESYNC_WINDOW):
        hi = min(last, lo + _RESYNC_WINDOW - 1)
        q = np.flatnonzero(np.isin(buf[lo + 4 : hi + 5], kinds)) + lo
        if not q.size:
            continue
        length = sum(buf[q + i].astype(np.int64) << (8 * i) for i in range(4))
        count = sum(buf[q + 5 + i].astype(np.int64) << (8 * i) for i in range(4))
        q = q[(length <= size - q - fmt.FRAME.size) & (count <= _MAX_PLAUSIBLE_COUNT)]
        for pos in q.tolist():
            t_first, t_last = struct.unpack_from("<dd", data, pos + 13)
            if not (math.isfinite(t_first) and math.isfinite(t_last) and -1.0 <= t_first <= t_last + 1.0):
                continue
            if _frame_problem(data, pos, size)[0] is not None:
                return pos
    return None


def _scan_v1(path: Path, data: mmap.mmap | bytes, start: int, warnings: list[str], damage: list[str]):
    frames: list[fmt.FrameInfo] = []
    size = len(data)
    pos = start
    finish_t = None
    while pos < size:
        info, problem = _frame_problem(data, pos, size)
        if info is None:
            if not frames:
                raise UserError(f"{path}: corrupted recording (its header block at byte {pos} is damaged: {problem})")
            resume = next_intact_frame(data, pos + 1, size)
            if resume is None:  # nothing intact after it: where a killed writer stopped
                warnings.append(
                    f"{path}: truncated tail at byte {pos} ({problem}) ignored; "
                    "the run was probably stopped mid-write — replay stops at the last complete block"
                )
                break
            damage.append(f"{path}: bytes {pos:,}–{resume:,} lost ({problem}); read on from the next intact block")
            pos = resume
            continue
        if not frames and info.kind != fmt.KIND_HEADER:
            raise UserError(f"{path}: corrupted recording (no header block)")
        if info.kind == fmt.KIND_FINISH:
            try:
                finish_t = fmt.decode_finish(bytes(data[info.offset : info.offset + info.length]))
            except (ValueError, KeyError, TypeError):
                damage.append(f"{path}: end marker at byte {pos:,} unreadable")
        elif info.kind not in fmt.KINDS:
            warnings.append(f"{path}: skipped a block of unknown kind {info.kind} at byte {pos}")
        else:
            frames.append(info)
        release_pages(data, pos, info.offset + info.length)  # checked; read again when decoded
        pos = info.offset + info.length
    if not frames:
        raise UserError(f"{path}: corrupted recording (truncated before its header)")
    h = frames[0]
    try:
        header = fmt.decode_header(bytes(data[h.offset : h.offset + h.length]))
    except (zlib.error, ValueError, TypeError) as exc:
        raise UserError(f"{path}: corrupted recording (unreadable header: {exc})") from exc
    decoders = {
        fmt.KIND_REQUESTS: fmt.decode_requests,
        fmt.KIND_META: fmt.decode_meta,
        fmt.KIND_CHECKPOINT: fmt.decode_checkpoint,
    }
    if finish_t is None:
        warnings.append(f"{path}: the run has no end marker (interrupted?); replay covers what was flushed")
    return header, frames[1:], finish_t, decoders


SCANNERS: dict[int, Callable] = {1: _scan_v1}


def print_warnings(recording: Recording, command: str) -> int:
    """After a command has read a recording: its warnings on stderr, then, when it lost data
    to damage, one line saying so; the command's exit code (1 for damage, else 0)."""
    for warning in recording.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not recording.damage:
        return 0
    n = len(recording.damage)
    print(
        f"rampwatch {command}: {recording.path} is damaged: {n} damaged part{'s' if n != 1 else ''} skipped "
        "(see the warnings above)",
        file=sys.stderr,
    )
    return 1


def open_recording(path: str | os.PathLike) -> Recording:
    """Open a ``.rwrec`` file of any supported format version.

    Raises ``UserError`` (one line naming the file) for a missing, foreign, corrupted or
    too-new file. A truncated tail (killed writer) opens with a warning in ``.warnings``.
    """
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such recording")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, not a recording")
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise UserError(f"{path}: empty file, not a rampwatch recording")
            data: mmap.mmap | bytes = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except PermissionError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from exc
    if len(data) < fmt.PREAMBLE.size or data[: len(fmt.MAGIC)] != fmt.MAGIC:
        raise UserError(f"{path}: not a rampwatch recording (unknown file format)")
    _magic, version, _r1, _r2 = fmt.PREAMBLE.unpack_from(data, 0)
    scanner = SCANNERS.get(version)
    if scanner is None:
        newest = max(SCANNERS)
        if version > newest:
            raise UserError(
                f"{path}: recording format version {version} is newer than this rampwatch "
                f"reads (up to {newest}); upgrade rampwatch"
            )
        raise UserError(f"{path}: unknown recording format version {version}")
    warnings: list[str] = []
    damage: list[str] = []
    header, frames, finish_t, decoders = scanner(path, data, fmt.PREAMBLE.size, warnings, damage)
    return Recording(path, version, header, frames, data, finish_t, warnings, decoders, damage)
