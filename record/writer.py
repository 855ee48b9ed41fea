"""Writing a recording while a run goes on: a ``TimelineSink`` that buffers in memory and
appends one frame per kind to the file from a background thread, at least once a second."""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from rampwatch.core.errors import UserError
from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.files import private_file
from rampwatch.core.redact import redact_options, scrub, secret_values
from rampwatch.core.timeline import Event, RequestRecord, RunHeader, ServerSample, Tick
from rampwatch.record import format as fmt
from rampwatch.record.reader import ITEM_ORDER

log = logging.getLogger(__name__)

EXTENSION = ".rwrec"
DEFAULT_DIR = Path("recordings")

# Checkpoints every 10 s keep a seek's feeding to ~1000 requests at 100 rps. One in
# CHECKPOINT_KEY_EVERY is stored whole, the others as their difference from it (the
# per-second arrays only change near the present), so they add only a few % to the file.
# Items are fed 5 s behind the newest one so that items published slightly out of time
# order still reach the builder in replay order.
CHECKPOINT_EVERY_S = 10.0
CHECKPOINT_KEY_EVERY = 8
CHECKPOINT_LAG_S = 5.0


def default_recording_path(scenario_name: str, started_at: float | datetime, directory: Path = DEFAULT_DIR) -> Path:
    """``recordings/20261122-143000-chat.rwrec`` (local time of the run's start)."""
    if not isinstance(started_at, datetime):
        started_at = datetime.fromtimestamp(started_at)
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in scenario_name).strip("-.") or "run"
    return directory / f"{started_at.strftime('%Y%m%d-%H%M%S')}-{safe}{EXTENSION}"


class RecordingWriter:
    """Append-only, crash-safe recording of one run.

    The ``on_*`` calls only append to in-memory lists (safe to call from the event loop).
    A daemon thread encodes and writes what accumulated every ``flush_interval_s``; each
    flush is complete frames followed by ``flush()``, so a killed process leaves a file
    that reads back up to the last flush. ``on_finish`` (or ``close``) writes the rest.

    ``secrets``: literal strings (e.g. the API key) to mask wherever they would appear;
    secret values found in ``header.options`` are added automatically.
    ``flush_interval_s=None``: no thread; the caller flushes (deterministic fixtures).
    ``checkpoint_every_s``: run-time spacing of the seek checkpoints stored in the file
    (``SeriesCheckpointer``); ``None`` stores none.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        flush_interval_s: float | None = 0.5,
        secrets: set[str] | None = None,
        chunk_quantum_us: int = fmt.CHUNK_QUANTUM_US,
        checkpoint_every_s: float | None = CHECKPOINT_EVERY_S,
    ) -> None:
        self.path = Path(path)
        self._checkpointer = SeriesCheckpointer(checkpoint_every_s) if checkpoint_every_s else None
        self.flush_interval_s = flush_interval_s
        self.chunk_quantum_us = chunk_quantum_us
        self._secrets = set(secrets or ())
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._requests: list[RequestRecord] = []
        self._samples: list[ServerSample] = []
        self._ticks: list[Tick] = []
        self._events: list[Event] = []
        self._file: IO[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._written_upto = 0.0  # run time up to which the file holds the run
        self.closed = False

    # ---- TimelineSink --------------------------------------------------------------

    def on_start(self, header: RunHeader) -> None:
        self._secrets |= secret_values(header.options) | secret_values(header.scenario)
        d = header.to_dict()
        d["options"] = redact_options(d.get("options") or {})
        d["scenario"] = redact_options(d.get("scenario") or {})
        d["server_info"] = redact_options(d.get("server_info") or {})
        d = scrub(d, self._secrets)
        clean = RunHeader(**d)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = private_file(self.path, "wb")
        except (FileExistsError, NotADirectoryError) as exc:
            raise UserError(f"cannot write recording {self.path}: a parent of it is not a directory") from exc
        except OSError as exc:
            raise UserError(f"cannot write recording {self.path}: {exc.strerror or exc}") from exc
        payload = fmt.encode_header(clean)
        if self._checkpointer is not None:
            self._checkpointer.start(fmt.decode_header(payload))
        try:
            self._write(fmt.preamble() + fmt.frame(fmt.KIND_HEADER, payload, 1, 0.0, 0.0))
        except OSError as exc:
            self._stop_recording(exc)
            return
        if self.flush_interval_s is not None:
            self._thread = threading.Thread(target=self._run, name="rampwatch-recorder", daemon=True)
            self._thread.start()

    def on_request(self, record: RequestRecord) -> None:
        with self._lock:
            self._requests.append(record)

    def on_scrape(self, sample: ServerSample) -> None:
        with self._lock:
            self._samples.append(sample)

    def on_tick(self, tick: Tick) -> None:
        with self._lock:
            self._ticks.append(tick)

    def on_event(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)

    def on_finish(self, t: float) -> None:
        self.close(finish_t=t)

    # ---- writing ---------------------------------------------------------------------

    def _run(self) -> None:
        assert self.flush_interval_s is not None  # the thread runs only with an interval
        next_at = time.monotonic() + self.flush_interval_s
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += self.flush_interval_s
            if time.monotonic() > next_at:  # fell behind (slow disk): don't burst
                next_at = time.monotonic() + self.flush_interval_s
            self.flush()

    def flush(self) -> None:
        """Encode and append everything buffered so far (called by the thread; callable directly)."""
        with self._lock:
            requests, self._requests = self._requests, []
            samples, self._samples = self._samples, []
            ticks, self._ticks = self._ticks, []
            events, self._events = self._events, []
        if self._file is None or self.error is not None:
            return
        times: list[float] = []
        ends: list[float] = []
        try:
            out = []
            if samples or ticks or events:
                if self._secrets:
                    events = [
                        Event(e.t, e.kind, scrub(e.message, self._secrets), scrub(e.data, self._secrets))
                        for e in events
                    ]
                    samples = [_scrub_sample(s, self._secrets) for s in samples]
                times = [s.t for s in samples] + [t.t for t in ticks] + [e.t for e in events]
                payload = fmt.encode_meta(samples, ticks, events)
                out.append(
                    fmt.frame(fmt.KIND_META, payload, len(samples) + len(ticks) + len(events), min(times), max(times))
                )
                if self._checkpointer is not None:
                    self._checkpointer.add_meta(payload)
            if requests:
                if self._secrets:
                    requests = [
                        dataclasses.replace(r, error=scrub(r.error, self._secrets)) if r.error else r for r in requests
                    ]
                ends = [r.end_at for r in requests]
                payload = fmt.encode_requests(requests, self.chunk_quantum_us)
                out.append(fmt.frame(fmt.KIND_REQUESTS, payload, len(requests), min(ends), max(ends)))
                if self._checkpointer is not None:
                    self._checkpointer.add_requests(payload)
            if self._checkpointer is not None:
                out += self._checkpointer.frames()
            if out:
                self._write(b"".join(out))
                self._written_upto = max([self._written_upto, *times, *ends])
        except Exception as exc:  # never take the run down; the run's result reports it
            self._stop_recording(exc)

    def _stop_recording(self, exc: BaseException) -> None:
        """The recording ends here (disk full, I/O error, an encoding bug); the run goes on.
        What the file holds so far stays readable: the reader salvages up to a cut frame."""
        if self.error is not None:
            return
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        self.error = RecordingStopped(f"stopped at {self._written_upto:.1f} s of the run: {reason}")
        log.error("recording %s %s", self.path, self.error)

    def _write(self, data: bytes) -> None:
        with self._write_lock:
            assert self._file is not None
            self._file.write(data)
            self._file.flush()

    def close(self, finish_t: float | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()
        if self._file is not None:
            if finish_t is not None and self.error is None:
                try:
                    self._write(fmt.frame(fmt.KIND_FINISH, fmt.encode_finish(finish_t), 1, finish_t, finish_t))
                except OSError as exc:
                    self._stop_recording(exc)
            try:
                self._file.close()
            except OSError as exc:  # its buffer could not be flushed: what did not fit is lost
                self._stop_recording(exc)

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class RecordingStopped(Exception):
    """Why and when the recording stopped while the run went on."""


class SeriesCheckpointer:
    """Feeds what the file holds (decoded back, so values are exactly what a reader sees)
    into a ``SeriesBuilder``, in the reader's replay order, and yields a checkpoint frame
    holding the builder's state at every multiple of ``every_s`` of run time.

    An item that arrives after the builder has been fed past its time would make later
    states differ from a replay: checkpointing stops there (replays then fall back to
    building their own)."""

    def __init__(self, every_s: float, lag_s: float = CHECKPOINT_LAG_S, key_every: int = CHECKPOINT_KEY_EVERY) -> None:
        self.every_s = float(every_s)
        self.key_every = key_every
        self._count = 0
        self._key: tuple[float, dict[str, Any]] | None = None
        self.lag_s = lag_s
        self._builder: SeriesBuilder | None = None
        self._pending: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._fed_upto = -math.inf
        self._latest = -math.inf
        self._next = self.every_s
        self.stopped = False

    def start(self, header: RunHeader) -> None:
        self._builder = SeriesBuilder()
        self._builder.on_start(header)

    def _queue(self, items: list[tuple[float, int, Any]]) -> None:
        for t, order, value in items:
            if t <= self._fed_upto:
                self._stop(f"an item at {t:.3f} s arrived after the series reached {self._fed_upto:.3f} s")
                return
            self._pending.append((t, order, self._seq, value))
            self._seq += 1
            self._latest = max(self._latest, t)

    def add_meta(self, payload: bytes) -> None:
        if self.stopped:
            return
        samples, ticks, events = fmt.decode_meta(payload)
        self._queue(
            [(x.t, ITEM_ORDER["sample"], x) for x in samples]
            + [(x.t, ITEM_ORDER["tick"], x) for x in ticks]
            + [(x.t, ITEM_ORDER["event"], x) for x in events]
        )

    def add_requests(self, payload: bytes) -> None:
        if self.stopped:
            return
        self._queue([(r.end_at, ITEM_ORDER["request"], r) for r in fmt.decode_requests(payload)])

    def _feed_upto(self, t: float) -> None:
        ready = [it for it in self._pending if it[0] <= t]
        if ready:
            self._pending = [it for it in self._pending if it[0] > t]
            ready.sort(key=lambda it: (it[0], it[1], it[2]))
            b = self._builder
            assert b is not None, "start() comes first"
            handlers: dict[int, Callable[[Any], None]] = {
                ITEM_ORDER["tick"]: b.on_tick,
                ITEM_ORDER["sample"]: b.on_scrape,
                ITEM_ORDER["event"]: b.on_event,
                ITEM_ORDER["request"]: b.on_request,
            }
            for _t, order, _seq, value in ready:
                handlers[order](value)
        self._fed_upto = max(self._fed_upto, t)

    def frames(self) -> list[bytes]:
        """Checkpoint frames that became ready (to append after this flush's data frames)."""
        if self.stopped or self._builder is None:
            return []
        out = []
        try:
            horizon = self._latest - self.lag_s
            while self._next <= horizon:
                self._feed_upto(self._next)
                state, arrays = self._builder.export_state()
                if self._count % self.key_every == 0:
                    payload = fmt.encode_checkpoint(self._next, state, arrays)
                    self._key = (self._next, {k: a.copy() for k, a in arrays.items()})
                else:
                    payload = fmt.encode_checkpoint(self._next, state, arrays, base=self._key)
                self._count += 1
                out.append(fmt.frame(fmt.KIND_CHECKPOINT, payload, 1, self._next, self._next))
                self._next += self.every_s
            if horizon > self._fed_upto:
                self._feed_upto(horizon)
        except Exception as exc:  # checkpoints are an optimisation: never lose the recording
            self._stop(f"{type(exc).__name__}: {exc}")
            return []
        return out

    def _stop(self, why: str) -> None:
        log.info("recording: seek checkpoints stop here (%s); replay will build its own", why)
        self.stopped = True
        self._pending = []
        self._builder = None


def _scrub_sample(s: ServerSample, secrets: set[str]) -> ServerSample:
    return dataclasses.replace(s, url=scrub(s.url, secrets), error=scrub(s.error, secrets))
