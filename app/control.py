"""A run's control channel: the Unix socket ``ID.sock`` (``app.runs``) through which
`rampwatch attach` watches and steers a run from any terminal and `rampwatch stop` stops
it.

The process that executes the run serves it on the run's own event loop (the forked run
process of a live run, the headless process otherwise), beside the run's state file,
which it keeps current once a second.

Protocol: frames of a 4-byte big-endian length and a payload.

- run → viewer: pickled tuples, as the live UI's pipe carries them (``app.bridge``):
  ``("hello", {...})`` (the run's id, recording, rate step), ``("snapshot", Snapshot)``
  at once, then every 250 ms ``("delta", (start, tail))`` with a whole snapshot every 20th;
  at the end the final ``("snapshot", …)`` and ``("done", {"summary": line})``. Pickle is
  safe here: both ends are processes of the same user (checked: the socket is 0600 in a
  0700 directory, and each end checks the other's uid with ``SO_PEERCRED``) and of the
  same rampwatch.
- viewer → run: JSON ``{"call": NAME, "args": [...]}``, NAME one of ``CALLS`` (the
  ``RunControl`` calls); anything else is ignored.

Every viewer may steer (there is no single controller): only the run's owner can connect
at all, and a person watching from two terminals expects both to work. ``attach
--read-only`` is a view that sends nothing.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import pickle
import socket
import stat
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rampwatch.app import runs
from rampwatch.app.bridge import FULL_SNAPSHOT_EVERY, PUBLISH_INTERVAL_S, ForwardingControl, delta_of, with_tail
from rampwatch.core.controls import RunControl
from rampwatch.core.errors import UserError
from rampwatch.core.timeline import Snapshot

CALLS = frozenset({"hold", "resume", "set_rate", "step_rate", "mark", "stop", "cancel_in_flight"})
_LENGTH = struct.Struct(">I")
MAX_COMMAND_BYTES = 64 * 1024
# A viewer this far behind (bytes queued to it) skips publishes until it catches up: a
# stalled viewer never holds the run's loop or its memory.
MAX_QUEUED_BYTES = 4 * 1024 * 1024
STATE_EVERY_S = 1.0


def frame(payload: bytes) -> bytes:
    return _LENGTH.pack(len(payload)) + payload


def encode_command(name: str, *args: Any) -> bytes:
    return frame(json.dumps({"call": name, "args": list(args)}).encode())


def decode_command(payload: bytes) -> tuple[str, list] | None:
    """A viewer's call, or None for anything that is not one of ``CALLS`` with a list of
    JSON arguments."""
    try:
        message = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(message, dict):
        return None
    name, args = message.get("call"), message.get("args", [])
    if name not in CALLS or not isinstance(args, list):
        return None
    if any(isinstance(a, float) and not math.isfinite(a) for a in args):
        return None  # JSON's NaN and Infinity: no rate is that
    return name, args


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix socket (Linux SO_PEERCRED)."""
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (AttributeError, OSError):
        return None
    return struct.unpack("3i", creds)[1]


def summary_line(snapshot: Snapshot) -> str:
    """The run's result in one line, from its final snapshot's run-so-far figures."""
    s = snapshot.summary or {}
    completed, failed, cancelled = s.get("completed", 0), s.get("failed", 0), s.get("cancelled", 0)
    line = f"run {snapshot.state} after {snapshot.t:.0f} s: {completed:,} completed, {failed:,} failed"
    if cancelled:
        line += f", {cancelled:,} cancelled"
    ttft = (s.get("ttft") or {}).get("p50_ms") if isinstance(s.get("ttft"), dict) else None
    if ttft is not None:
        line += f"; TTFT p50 {ttft:.0f} ms"
    return line


class RunChannel:
    """The run's side: serves ``ID.sock`` while ``serve(coro)`` awaits the run."""

    def __init__(
        self,
        run_id: str,
        snapshot_fn: Callable[[], Snapshot],
        control: RunControl,
        *,
        hello: dict[str, Any] | None = None,
        directory: Path | None = None,
        publish_interval: float = PUBLISH_INTERVAL_S,
        progress: Callable[[], tuple[str, float, float]] | None = None,
    ) -> None:
        """``progress()``: the run's (state, seconds, target rate) for its state file, cheaper
        than a whole snapshot when no viewer is attached (default: from ``snapshot_fn``)."""
        self.run_id = run_id
        self.snapshot_fn = snapshot_fn
        self.control = control
        self.hello = {"id": run_id, **(hello or {})}
        self.directory = directory or runs.runtime_dir()
        self.path = runs.socket_path(run_id, self.directory)
        self.publish_interval = publish_interval
        self.progress = progress or (lambda: progress_of(self.snapshot_fn()))
        self.viewers: set[asyncio.StreamWriter] = set()
        self.refused = 0  # connections from another uid
        self._handlers: set[asyncio.Task] = set()
        self.listening = asyncio.Event()  # set once the socket accepts viewers
        self._state_write: asyncio.Future | None = None  # the state file's update under way

    async def serve(self, run: Awaitable[Any]) -> Any:
        """Await ``run`` with the socket served; the viewers get the final snapshot and
        the summary line before it closes. A socket that cannot be made costs the run
        nothing but attaching (one line on stderr)."""
        server = None
        try:
            server = await self._listen()
            self.listening.set()
        except OSError as exc:
            print(f"rampwatch run: control socket {self.path}: {exc.strerror or exc}; attach is off", flush=True)
        except UserError as exc:  # the runs directory is refused: the run goes on without
            print(f"rampwatch run: {exc}; attach is off", flush=True)
        runs.update_state(self.run_id, self.directory, state=runs.RUNNING, run_pid=os.getpid())
        publisher = asyncio.ensure_future(self._publish())
        try:
            return await run
        finally:
            publisher.cancel()
            if self._state_write is not None:  # done before the final state, never after it
                await asyncio.gather(self._state_write, return_exceptions=True)
            final = fresh(self.snapshot_fn)()  # the run's end, not a snapshot shared before it
            self._update_state(progress_of(final))
            if server is not None:
                server.close()
                try:
                    self.path.unlink()
                except OSError:
                    pass
            await self._goodbye(final)
            if self._handlers:  # each sees its connection closed and returns
                await asyncio.wait(list(self._handlers), timeout=2.0)

    async def _listen(self) -> asyncio.AbstractServer:
        runs.checked_dir(self.directory)
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        old = os.umask(0o177)  # the socket is 0600 from its first moment
        try:
            server = await asyncio.start_unix_server(self._viewer, path=str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        return server

    async def _viewer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        sock = writer.get_extra_info("socket")
        if sock is None or peer_uid(sock) != os.getuid():
            self.refused += 1
            writer.close()
            return
        try:
            writer.write(frame(pickle.dumps(("hello", self.hello))))
            writer.write(frame(pickle.dumps(("snapshot", self.snapshot_fn()))))
            self.viewers.add(writer)
            while True:
                size = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))[0]
                if size > MAX_COMMAND_BYTES:
                    break
                command = decode_command(await reader.readexactly(size))
                if command is not None:
                    name, args = command
                    try:
                        getattr(self.control, name)(*args)
                    except Exception:  # noqa: BLE001 - a viewer's bad call is never the run's end
                        pass
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self.viewers.discard(writer)
            writer.close()

    async def _publish(self) -> None:
        count = 0
        last_state = 0.0
        delta = delta_of(self.snapshot_fn)
        while True:
            await asyncio.sleep(self.publish_interval)
            snapshot: Snapshot | None = None
            payload: Snapshot | tuple[int, Snapshot]
            if self.viewers:
                if count % FULL_SNAPSHOT_EVERY == 0:
                    kind, payload = "snapshot", (snapshot := self.snapshot_fn())
                else:
                    tail = delta()
                    kind, payload = "delta", tail
                    snapshot = tail[1]  # its state, elapsed time and rate are the run's
                data = frame(pickle.dumps((kind, payload)))
                for writer in list(self.viewers):
                    if writer.transport.get_write_buffer_size() > MAX_QUEUED_BYTES:
                        continue
                    writer.write(data)
                count += 1
            now = time.monotonic()
            if now - last_state >= STATE_EVERY_S:
                last_state = now
                progress = progress_of(snapshot) if snapshot is not None else self.progress()
                # In a thread: the registry's file lock (which the UI's process may hold),
                # read and write held the run's loop ~1-2 ms each second.
                self._state_write = asyncio.get_running_loop().run_in_executor(None, self._update_state, progress)
                await asyncio.shield(self._state_write)

    def _update_state(self, progress: tuple[str, float, float]) -> None:
        state, elapsed, rate = progress
        runs.update_state(self.run_id, self.directory, run_state=state, elapsed_s=elapsed, rate_rps=rate)

    async def _goodbye(self, final: Snapshot) -> None:
        data = frame(pickle.dumps(("snapshot", final))) + frame(
            pickle.dumps(("done", {"summary": summary_line(final)}))
        )
        for writer in list(self.viewers):
            try:
                writer.write(data)
                await asyncio.wait_for(writer.drain(), 2.0)
            except (TimeoutError, OSError, ConnectionError):
                pass
            writer.close()
        self.viewers.clear()


def shared_snapshots(snapshot_fn: Callable[..., Snapshot], max_age_s: float = 0.1) -> Callable[..., Snapshot]:
    """``snapshot_fn`` whose snapshot is reused for ``max_age_s``: the live screen's pipe
    and the attached viewers publish every 250 ms each, on the run's loop; one snapshot
    built serves both (one whole, one of the newest ``last_bins``, as ``Run.snapshot``
    takes them). Its ``fresh`` is ``snapshot_fn`` itself: the run's final snapshot must
    not be one shared just before the run ended (it would still say RAMPING)."""
    built: dict[int | None, tuple[float, Snapshot]] = {}

    def snapshot(last_bins: int | None = None) -> Snapshot:
        now = time.monotonic()
        when, shared = built.get(last_bins, (-math.inf, None))
        if shared is None or now - when > max_age_s:
            shared = snapshot_fn() if last_bins is None else snapshot_fn(last_bins=last_bins)
            built[last_bins] = (now, shared)
        return shared

    snapshot.fresh = snapshot_fn  # type: ignore[attr-defined]
    return snapshot


def fresh(snapshot_fn: Callable[[], Snapshot]) -> Callable[[], Snapshot]:
    """The uncached snapshot function behind a ``shared_snapshots`` one (else itself)."""
    return getattr(snapshot_fn, "fresh", snapshot_fn)


def progress_of(snapshot: Snapshot) -> tuple[str, float, float]:
    return snapshot.state, snapshot.t, snapshot.target_rps


def serve_run(
    run_id: str | None,
    run_factory: Callable[[], Awaitable[Any]],
    snapshot_fn: Callable[[], Snapshot],
    control: RunControl,
    hello: dict[str, Any] | None = None,
    progress: Callable[[], tuple[str, float, float]] | None = None,
) -> Callable[[], Awaitable[Any]]:
    """``run_factory`` with the run's channel served around it (no id: as it is)."""
    if run_id is None:
        return run_factory
    return lambda: RunChannel(run_id, snapshot_fn, control, hello=hello, progress=progress).serve(run_factory())


def connect(path: Path) -> socket.socket:
    """A connection to a run's socket, after checking that the socket is ours and 0600 and
    that the process serving it is ours; one line otherwise."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise UserError(f"{path}: no such socket (the run has ended, or its process was killed)") from None
    runs.check_private(path, info, "control socket", 0o600, stat.S_ISSOCK)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError as exc:
        sock.close()
        raise UserError(f"control socket {path}: {exc.strerror or exc} (the run's process is gone)") from None
    if peer_uid(sock) != os.getuid():
        sock.close()
        raise UserError(f"control socket {path}: served by another user's process; refusing it")
    return sock


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> Any:
    size = _LENGTH.unpack(_recv_exact(sock, _LENGTH.size))[0]
    return pickle.loads(_recv_exact(sock, size))


class RemoteRun(ForwardingControl):
    """The viewer's side: a ``SnapshotSource`` of a run in another process, and (unless
    read-only) its ``RunControl``. A thread reads the frames; ``done`` once the run has
    ended (``summary`` then holds its line) or the connection is gone."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Condition()
        self._send_lock = threading.Lock()
        self._latest = Snapshot.empty()
        self.hello: dict[str, Any] = {}
        self.summary: str | None = None
        self.done = threading.Event()
        self.first = threading.Event()  # the first whole snapshot arrived
        self.lost = False  # the connection ended without the run's "done"
        self._reader = threading.Thread(target=self._read_loop, name="rampwatch-attach", daemon=True)

    def start(self) -> RemoteRun:
        self._reader.start()
        return self

    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._latest

    def _read_loop(self) -> None:
        try:
            while True:
                kind, payload = recv_frame(self._sock)
                if kind == "hello":
                    self.hello = payload
                elif kind in ("snapshot", "delta"):
                    with self._lock:
                        try:
                            self._latest = payload if kind == "snapshot" else with_tail(self._latest, *payload)
                        except ValueError:
                            continue
                        self._lock.notify_all()
                    self.first.set()
                elif kind == "done":
                    self.summary = payload.get("summary")
                    break
        except Exception:  # noqa: BLE001 - EOF, a reset, a frame this version cannot read: the link is gone
            self.lost = self.summary is None
        finally:
            self.first.set()
            self.done.set()

    def wait_for(self, predicate: Callable[[Snapshot], bool], timeout: float) -> bool:
        """Whether a snapshot that ``predicate`` accepts arrives within ``timeout``."""
        with self._lock:
            return self._lock.wait_for(lambda: predicate(self._latest), timeout)

    def _forward(self, name: str, *args: Any) -> None:
        if name not in CALLS or self.done.is_set():
            return
        with self._send_lock:
            try:
                self._sock.sendall(encode_command(name, *args))
            except OSError:
                pass

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
