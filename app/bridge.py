"""Running a live load in a forked child process, so drawing the UI can never delay a
send.

The run process owns the run (its coroutine, the series builder, the run control). The
UI process only ever

- reads the latest Snapshot the run process published over the pipe, or the one it
  built from the run's items the run process forwarded (``SeriesMirror``)
  (``ProcessBridge.snapshot``), and
- sends RunControl calls down the same pipe (``ProcessBridge.control``), which the run
  process applies on its own event loop,

so nothing the run owns is touched from two processes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import io
import logging
import math
import multiprocessing
import os
import pickle
import signal
import struct
import threading
from collections.abc import Awaitable, Callable
from multiprocessing.process import BaseProcess
from typing import Any

from rampwatch.core.controls import RunControl
from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.timeline import (
    ClassFigures,
    Event,
    RequestRecord,
    RunHeader,
    ServerSample,
    Snapshot,
    Tick,
    TimelineSink,
)
from rampwatch.loadgen.run import eventloop

log = logging.getLogger(__name__)

PUBLISH_INTERVAL_S = 0.25


class ForwardingControl:
    """A RunControl that hands every call to ``_forward(name, *args)``: the UI steers a
    run in another process through one of these."""

    def _forward(self, name: str, *args: Any) -> None:
        raise NotImplementedError

    def hold(self) -> None:
        self._forward("hold")

    def resume(self) -> None:
        self._forward("resume")

    def set_rate(self, rps: float) -> None:
        self._forward("set_rate", rps)

    def step_rate(self, delta_rps: float) -> None:
        self._forward("step_rate", delta_rps)

    def mark(self, note: str) -> None:
        self._forward("mark", note)

    def stop(self) -> None:
        self._forward("stop")

    def cancel_in_flight(self) -> None:
        self._forward("cancel_in_flight")

    def server_exited(self, message: str, exit_code: int | None, log_tail: list[str]) -> None:
        self._forward("server_exited", message, exit_code, log_tail)

    # a server restart (``app.restart``): the run's side of it
    def pause_for_restart(self) -> None:
        self._forward("pause_for_restart")

    def resume_after_restart(self, command: str, diff: list, resume: str) -> None:
        self._forward("resume_after_restart", command, diff, resume)

    def restart_failed(self, message: str, exit_code: int | None = None, log_tail: list[str] | None = None) -> None:
        self._forward("restart_failed", message, exit_code, log_tail)


@dataclasses.dataclass
class SeriesMirror:
    """The live screen's series built in the UI process, not on the run's loop: building
    and pickling a snapshot there held the loop ~2-3 ms every 250 ms
    (bench/bench_loop_stalls.py). The run process forwards each item its sinks get
    (pickled one by one as it comes: a few µs each) and ships them every publish; the UI
    process feeds ``builder`` with them, in the same order, and builds the snapshots
    itself: the same ones, as a ``SeriesBuilder`` gives the same snapshot for the same
    input. ``attach(sink)`` (called in the run process, before the run) adds the
    forwarding sink to the run's; ``now()`` is the run's clock there."""

    builder: SeriesBuilder  # the run's own, never fed in this process (the run is forked)
    attach: Callable[[TimelineSink], None]
    now: Callable[[], float]


# Items a UI that stopped reading (stalled at idle priority on a busy machine) has not
# taken: past this, the run process stops forwarding and publishes its own snapshots.
MIRROR_MAX_PENDING_BYTES = 64 * 1024 * 1024


class ItemForwarder:
    """A ``TimelineSink`` in the run process: every item, pickled as it comes, until
    ``take()`` hands the lot to the publisher; ``given_up`` once more than
    ``MIRROR_MAX_PENDING_BYTES`` waited (it then keeps nothing)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._pending = 0
        self.max_pending_bytes = MIRROR_MAX_PENDING_BYTES
        self.given_up = False

    def _add(self, name: str, item: Any) -> None:
        if self.given_up:
            return
        part = pickle.dumps((name, item), protocol=pickle.HIGHEST_PROTOCOL)
        self._parts.append(part)
        self._pending += len(part)
        if self._pending > self.max_pending_bytes:
            self.given_up = True
            self._parts, self._pending = [], 0

    def on_start(self, header: RunHeader) -> None:
        self._add("on_start", header)

    def on_request(self, record: RequestRecord) -> None:
        self._add("on_request", record)

    def on_scrape(self, sample: ServerSample) -> None:
        self._add("on_scrape", sample)

    def on_tick(self, tick: Tick) -> None:
        self._add("on_tick", tick)

    def on_event(self, event: Event) -> None:
        self._add("on_event", event)

    def on_finish(self, t: float) -> None:
        self._add("on_finish", t)

    def take(self) -> bytes:
        parts, self._parts, self._pending = self._parts, [], 0
        return b"".join(parts)


def feed_items(builder: SeriesBuilder, items: bytes) -> None:
    """``ItemForwarder.take()``'s items, into ``builder`` in their order."""
    stream = io.BytesIO(items)
    while stream.tell() < len(items):
        name, item = pickle.load(stream)
        getattr(builder, name)(item)


# A thread is not enough: the UI's drawing is pure Python and holds the GIL, which
# delays a run thread's wake-ups by tens of milliseconds at p99 (bench/bench_tui_lateness.py
# --with-thread). The run therefore goes into a forked child process with its own
# interpreter; the UI process keeps only a pipe to it.


def _child_main(
    conn,
    run_coro_factory,
    snapshot_fn,
    control,
    publish_interval: float,
    log_path: str | None,
    mirror=None,
    after: Callable[[], object] | None = None,
) -> None:
    # The terminal's hangup is the UI process's to handle (``--on-hangup``); this process
    # follows the UI through the pipe, whatever it decides.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    # A Textual screen shown before the fork (the server's start screen) leaves its
    # driver's SIGTSTP/SIGCONT/SIGWINCH handlers installed: the SIGCONT of a hangup would
    # restart that driver's threads here, reading the dead terminal in a loop and holding
    # this process at its exit.
    for sig in (signal.SIGTSTP, signal.SIGCONT, signal.SIGWINCH):
        signal.signal(sig, signal.SIG_DFL)
    if log_path:
        # The terminal belongs to the UI: whatever the run prints goes to a log the parent
        # shows after the UI has closed.
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)

    async def main():
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(run_coro_factory())
        fileno = conn.fileno()

        def on_command() -> None:
            try:
                name, args = conn.recv()
            except (EOFError, OSError):
                loop.remove_reader(fileno)
                control.stop()  # the UI is gone: finish gracefully, keep the recording
                return
            if name == "cancel":
                task.cancel()
                return
            method = getattr(control, name, None)
            if method is not None:  # a control lacking a method (a test's) ignores the call
                method(*args)

        delta = delta_of(snapshot_fn)
        forwarder = None
        if mirror is not None:
            forwarder = ItemForwarder()
            mirror.attach(forwarder)

        async def publisher() -> None:
            count = 0
            mirrored = forwarder
            while True:
                await asyncio.sleep(publish_interval)
                if unread_bytes(fileno) > 0:
                    # The UI has not taken the last one yet (it is busy, or at idle
                    # priority on a busy machine): skip this one rather than block the
                    # run's loop on a full socket (a mirror's items wait for the next).
                    continue
                if mirrored is not None and not mirrored.given_up:
                    conn.send(("items", (mirror.now(), mirrored.take())))
                    continue
                if mirrored is not None:  # the run's own snapshots from here on, a whole one first
                    mirrored, count = None, 0
                if count % FULL_SNAPSHOT_EVERY == 0:
                    conn.send(("snapshot", snapshot_fn()))
                else:
                    conn.send(("delta", delta()))
                count += 1

        loop.add_reader(fileno, on_command)
        # uvloop's add_reader makes the socket non-blocking; the pipe's sends expect a
        # blocking one (a large snapshot or result would fail with BlockingIOError).
        os.set_blocking(fileno, True)
        pub = asyncio.ensure_future(publisher())
        try:
            return await task
        finally:
            pub.cancel()
            loop.remove_reader(fileno)
            try:  # the run's end: never a snapshot shared just before it (app.control)
                conn.send(("snapshot", getattr(snapshot_fn, "fresh", snapshot_fn)()))
            except Exception:
                pass

    try:
        result = eventloop.run(main())
        os.set_blocking(conn.fileno(), True)
        try:
            conn.send(("result", result))
        except Exception:
            conn.send(("result", None))
    except BaseException as exc:  # the UI process re-raises it
        try:
            conn.send(("error", exc))
        except Exception:
            conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))
        return
    finally:
        conn.close()
    if after is not None:  # the result is with the UI: what this process still does
        after()


# Pickling a whole snapshot costs the run's loop ~1.4 ms (and a 650 KB pipe write)
# after an hour of one-second bins; only the recent bins change between two publishes.
# The run therefore sends the last TAIL_BINS bins, and the whole snapshot every
# FULL_SNAPSHOT_EVERY publishes so that later changes to older bins still arrive.
TAIL_BINS = 120
FULL_SNAPSHOT_EVERY = 20


def unread_bytes(fileno: int) -> int:
    """Bytes this end has sent that the other end has not read yet (Linux SIOCOUTQ on a
    Unix socket); 0 where that cannot be asked."""
    try:
        import fcntl  # POSIX only: elsewhere nothing is asked

        return struct.unpack("i", fcntl.ioctl(fileno, SIOCOUTQ, b"\0\0\0\0"))[0]
    except (ImportError, OSError):
        return 0


SIOCOUTQ = 0x5411


def tail_of(snapshot: Snapshot, bins: int = TAIL_BINS) -> tuple[int, Snapshot]:
    """(index of the first bin kept, the snapshot with only its last ``bins`` bins). A
    snapshot of its last bins only (``SeriesBuilder.snapshot(last_bins=…)``) starts at the
    bin its first time names (bins are whole seconds from 0)."""
    first = int(snapshot.times[0]) if snapshot.times else 0
    start = max(0, len(snapshot.times) - bins)
    if start == 0:
        return first, snapshot
    series = {name: values[start:] for name, values in snapshot.series.items()}
    classes = [
        dataclasses.replace(c, series={name: values[start:] for name, values in c.series.items()})
        for c in snapshot.classes
    ]
    reasoning = None if snapshot.reasoning is None else {k: v[start:] for k, v in snapshot.reasoning.items()}
    tail = dataclasses.replace(
        snapshot, times=snapshot.times[start:], series=series, classes=classes, reasoning=reasoning
    )
    return first + start, tail


def delta_of(snapshot_fn: Callable[..., Snapshot]) -> Callable[[], tuple[int, Snapshot]]:
    """What a publisher sends between whole snapshots: ``tail_of`` a snapshot of the newest
    bins only when ``snapshot_fn`` builds one (``Run.snapshot(last_bins=…)``: a long run's
    whole series cost ~1 s a day to build), else of a whole one."""
    if "last_bins" in inspect.signature(snapshot_fn).parameters:
        return lambda: tail_of(snapshot_fn(last_bins=TAIL_BINS))
    return lambda: tail_of(snapshot_fn())


def with_tail(base: Snapshot, start: int, tail: Snapshot) -> Snapshot:
    """``tail`` with its bins before ``start`` taken from ``base`` (the previous snapshot)."""
    if start == 0:
        return tail
    if len(base.times) < start:
        raise ValueError(f"snapshot tail from bin {start} on a base of {len(base.times)} bins")
    series = {name: base.series.get(name, [])[:start] + values for name, values in tail.series.items()}
    return dataclasses.replace(
        tail,
        times=base.times[:start] + tail.times,
        series=series,
        classes=_classes_with_tail(base, start, tail),
        reasoning=_reasoning_with_tail(base, start, tail),
    )


def _reasoning_with_tail(base: Snapshot, start: int, tail: Snapshot) -> dict[str, list[float]] | None:
    """A reasoning run's series, as ``with_tail`` does the run's: NaN before the tail when
    the base had none yet (no request had reasoned then)."""
    if tail.reasoning is None:
        return None
    before = base.reasoning or {}
    return {name: (before.get(name) or [math.nan] * start)[:start] + values for name, values in tail.reasoning.items()}


def _classes_with_tail(base: Snapshot, start: int, tail: Snapshot) -> list[ClassFigures]:
    """A mixture's class series, as ``with_tail`` does the run's; a class the base did not
    have yet is NaN before the tail (it had no request then)."""
    before = {c.name: c.series for c in base.classes}
    out = []
    for c in tail.classes:
        old = before.get(c.name, {})
        series = {name: (old.get(name) or [math.nan] * start)[:start] + values for name, values in c.series.items()}
        out.append(dataclasses.replace(c, series=series))
    return out


class _PipeControl(ForwardingControl):
    """RunControl calls sent to the run process; dropped once the run has ended."""

    def __init__(self, bridge: ProcessBridge) -> None:
        self._bridge = bridge

    def _forward(self, name: str, *args: Any) -> None:
        self._bridge._send(name, args)


class ProcessBridge:
    """Runs ``run_coro_factory()`` in a forked child process and publishes
    ``snapshot_fn()`` (called there) every ``publish_interval`` seconds. It is the UI's
    ``SnapshotSource``; ``control`` is the RunControl that forwards to the run.

    ``run_coro_factory``, ``snapshot_fn`` and ``control`` are used in the child (they
    are inherited by fork, not pickled), so build them before ``start()`` and start no
    threads or event loops in them before it. Snapshots, results and exceptions come
    back pickled.
    """

    def __init__(
        self,
        run_coro_factory: Callable[[], Awaitable[Any]],
        snapshot_fn: Callable[[], Snapshot],
        control: RunControl,
        *,
        publish_interval: float = PUBLISH_INTERVAL_S,
        log_path: str | None = None,
        mirror: SeriesMirror | None = None,
        mirror_priority: str = "normal",
        after: Callable[[], object] | None = None,
    ) -> None:
        self._ctx = multiprocessing.get_context("fork")
        # after: called in the run's process once its result is sent (the process then
        # goes on without the UI waiting for it: ``wait_process``)
        self._args = (run_coro_factory, snapshot_fn, control, publish_interval, log_path, mirror, after)
        self._after = after
        self._mirror = mirror
        self._mirror_priority = mirror_priority  # lower_ui_priority's policy for the building
        self._mirrored = 0  # item batches fed to the mirror
        self._conn, self._child_conn = self._ctx.Pipe(duplex=True)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._latest: Snapshot = Snapshot.empty()
        self._process: BaseProcess | None = None
        self._reader: threading.Thread | None = None
        self.control = _PipeControl(self)
        self.log_path = log_path
        self.done = False
        self.failure: BaseException | None = None
        self.result: Any = None
        self.snapshots_published = 0

    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._latest

    def start(self) -> ProcessBridge:
        process = self._ctx.Process(
            target=_child_main, args=(self._child_conn, *self._args), name="rampwatch-run", daemon=True
        )
        process.start()
        self._process = process
        self._child_conn.close()
        self._reader = threading.Thread(target=self._read_loop, name="rampwatch-run-reader", daemon=True)
        self._reader.start()
        return self

    def _read_loop(self) -> None:
        # Always draining the pipe, so the run process never blocks on a full pipe.
        if self._mirror is not None and self._mirror_priority != "normal":
            # Building the screen's snapshots here is the UI's work: it yields the CPU to
            # the run process as the drawing does (this thread began before the UI's
            # priority was lowered, so it did not inherit it).
            lower_ui_priority(self._mirror_priority)
        try:
            while True:
                try:
                    kind, payload = self._conn.recv()
                except (EOFError, OSError):
                    break
                if kind == "items":  # a mirror's: the snapshot is built here
                    try:
                        kind, payload = "snapshot", self._mirrored_snapshot(*payload)
                    except Exception:  # a bug here must not stop the pipe's draining
                        log.exception("the live screen's snapshot could not be built")
                        continue
                if kind in ("snapshot", "delta"):
                    with self._lock:
                        base = self._latest
                    try:
                        latest = payload if kind == "snapshot" else with_tail(base, *payload)
                    except ValueError:  # a tail without its base: wait for the next full one
                        continue
                    with self._lock:
                        self._latest = latest
                    self.snapshots_published += 1
                elif kind == "result":
                    self.result = payload
                elif kind == "error":
                    self.failure = payload
        finally:
            if self._process is not None:
                # a process with work after its result (``after``) is not waited for here
                self._process.join(0.0 if self._after is not None and self.result is not None else 5.0)
                if self.failure is None and self._process.exitcode not in (0, None):
                    self.failure = RuntimeError(f"the run process exited with code {self._process.exitcode}")
            self.done = True

    def _mirrored_snapshot(self, now: float, items: bytes) -> Snapshot:
        """The run at ``now`` from the mirror, fed ``items`` (all it got up to ``now``): a
        whole snapshot every FULL_SNAPSHOT_EVERY batches, else the last one with the
        newest bins rebuilt (a day's bins as lists take ~1 s to build)."""
        assert self._mirror is not None
        builder = self._mirror.builder
        feed_items(builder, items)
        if self._mirrored % FULL_SNAPSHOT_EVERY == 0:
            latest = builder.snapshot(now)
        else:
            with self._lock:
                base = self._latest
            try:
                latest = with_tail(base, *tail_of(builder.snapshot(now, last_bins=TAIL_BINS)))
            except ValueError:
                latest = builder.snapshot(now)
        self._mirrored += 1
        return latest

    def _send(self, name: str, args: tuple) -> None:
        if self.done:
            return
        with self._send_lock:
            try:
                self._conn.send((name, args))
            except (BrokenPipeError, OSError):
                pass

    def join(self, timeout: float | None = None) -> bool:
        if self._reader is not None:
            self._reader.join(timeout)
        return self.done

    def cancel(self) -> None:
        self._send("cancel", ())

    def process_alive(self) -> bool:
        """Whether the run's process is still there (after its result: its ``after``)."""
        return self._process is not None and self._process.is_alive()

    def wait_process(self, timeout: float | None, terminate: bool = True) -> bool:
        """Wait for the run's process to end (past ``timeout``: terminated, unless not
        ``terminate``); whether it ended by itself."""
        if self._process is None:
            return True
        self._process.join(timeout)
        if self._process.is_alive() and terminate:
            self._process.terminate()
            self._process.join(5.0)
        return not self._process.is_alive() and self._process.exitcode is not None

    def finish(self, drain_timeout: float = 30.0, escalation_timeout: float = 10.0) -> Any:
        """Stop gracefully; after ``drain_timeout`` cancel the requests still in flight
        (the run then ends normally: cancelled requests recorded, recording finished);
        only if that does not end it within ``escalation_timeout`` either, cancel the run
        itself, and after another ``escalation_timeout`` terminate the process."""
        if not self.done:
            self.control.stop()
            if not self.join(drain_timeout):
                self._send("cancel_in_flight", ())
                if not self.join(escalation_timeout):
                    self.cancel()
                    if not self.join(escalation_timeout) and self._process is not None:
                        self._process.terminate()
                        self.join(5.0)
        if self.failure is not None:
            raise self.failure
        return self.result


def lower_ui_priority(policy: str = "idle", niceness: int = 10) -> Callable[[], None]:
    """Make the calling thread (the UI's; threads it starts later inherit this) yield the
    CPU to the run process. Call it after the run process is forked, or the run inherits it.

    ``"idle"`` is Linux's SCHED_IDLE: the UI runs only on CPU time nobody else at normal
    priority wants, and a waking run preempts it at once, so drawing does not delay a
    send even on a busy machine (the screen may lag instead). ``"nice"`` only adds
    ``niceness``, which still lets a drawing UI delay a send by a scheduler slice.
    Falls back to nice where SCHED_IDLE is unavailable. Returns a function that puts the
    previous priority back (best effort: raising priority again may need privileges)."""
    restore: list[Callable[[], object]] = []
    if policy == "idle" and hasattr(os, "SCHED_IDLE"):
        try:
            before = os.sched_getscheduler(0), os.sched_getparam(0)
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            restore.append(lambda: os.sched_setscheduler(0, before[0], before[1]))
        except OSError:
            policy = "nice"
        else:
            policy = "done"
    if policy in ("nice", "idle") and niceness:
        try:
            before_nice = os.nice(0)
            os.nice(niceness)
            restore.append(lambda: os.nice(before_nice - os.nice(0)))
        except OSError:
            pass

    def put_back() -> None:
        for undo in reversed(restore):
            try:
                undo()
            except OSError:
                pass

    return put_back
