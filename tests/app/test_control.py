"""The control channel (``app.control``): a run served on its socket, viewers that get its
snapshots and steer it, and the checks that keep other users out."""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import threading
from pathlib import Path

import pytest

from rampwatch.app import control, runs
from rampwatch.app.bridge import TAIL_BINS
from rampwatch.app.control import CALLS, RemoteRun, RunChannel, connect, decode_command, encode_command
from rampwatch.core.errors import UserError
from tests.tui.fakes import FakeControl, fake_snapshot


@pytest.fixture
def directory():
    # short: a Unix socket's path has at most 107 bytes
    with tempfile.TemporaryDirectory(prefix="rw-", dir="/tmp") as path:
        yield runs.checked_dir(Path(path) / "runs")


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b'{"call": "set_rate", "args": [4.5]}', ("set_rate", [4.5])),
        (b'{"call": "stop"}', ("stop", [])),
        (b'{"call": "__class__", "args": []}', None),
        (b'{"call": "server_exited", "args": ["x", 1, []]}', None),  # the owner's, not a viewer's
        (b'{"call": "mark", "args": "note"}', None),
        (b'{"call": "set_rate", "args": [NaN]}', None),
        (b'{"call": "step_rate", "args": [Infinity]}', None),
        (b"[1, 2]", None),
        (b"\x80not json", None),
    ],
)
def test_a_viewer_may_call_only_the_run_controls(payload, expected):
    assert decode_command(payload) == expected


def test_a_command_frame_is_its_length_then_json():
    data = encode_command("mark", "knee?")
    assert int.from_bytes(data[:4], "big") == len(data) - 4
    assert decode_command(data[4:]) == ("mark", ["knee?"])


class Published:
    """A run one second older at every call (past ``TAIL_BINS``: its deltas are tails),
    until ``end`` is set."""

    def __init__(self) -> None:
        self.t = 125.0
        self.snapshot = fake_snapshot(self.t)
        self.end = asyncio.Event()

    def __call__(self):
        self.t += 1
        self.snapshot = fake_snapshot(self.t)
        return self.snapshot


class CountedControl(FakeControl):
    """A FakeControl whose ``reached(n)`` is awaited until it has had ``n`` calls."""

    def __getattribute__(self, name):
        attr = super().__getattribute__(name)
        if name in CALLS:
            changed = super().__getattribute__("changed")

            def call(*args):
                attr(*args)
                changed.set()

            return call
        return attr

    def __init__(self) -> None:
        super().__init__()
        self.changed = asyncio.Event()

    async def reached(self, count: int) -> None:
        while len(self.calls) < count:
            self.changed.clear()
            await self.changed.wait()


@pytest.mark.slow
async def test_viewers_get_the_run_steer_it_and_see_its_end(directory):
    published, calls = Published(), CountedControl()
    channel = RunChannel("abcd0000", published, calls, hello={"recording": "r.rwrec"}, directory=directory,
                         publish_interval=0.02)  # fmt: skip
    runs.write_state(runs.RunState("abcd0000", os.getpid(), "chat", "t"), directory)
    served = asyncio.ensure_future(channel.serve(published.end.wait()))
    await channel.listening.wait()
    assert channel.path.stat().st_mode & 0o777 == 0o600
    viewers = [RemoteRun(await asyncio.to_thread(connect, channel.path)).start() for _ in range(2)]
    for viewer in viewers:
        assert await asyncio.to_thread(viewer.first.wait, 5)
        assert viewer.hello == {"id": "abcd0000", "recording": "r.rwrec"}
    first_t = viewers[0].snapshot().t
    # deltas (tails) arrived and were applied
    assert await asyncio.to_thread(viewers[0].wait_for, lambda snap: snap.t >= first_t + 3, 5)
    seen = viewers[0].snapshot()
    assert repr(seen.series) == repr(fake_snapshot(seen.t).series)  # NaN gaps too
    assert len(seen.times) > TAIL_BINS
    viewers[0].set_rate(4.5)
    viewers[1].mark("here")
    viewers[1].stop()
    await asyncio.wait_for(calls.reached(3), 5)
    assert calls.calls == [("set_rate", 4.5), ("mark", "here"), ("stop", None)]
    stored = runs.read_state(runs.state_path("abcd0000", directory))
    assert stored is not None and stored.state == runs.RUNNING and stored.run_pid == os.getpid()
    # the run's figures, once a second
    assert stored.elapsed_s > 125 and stored.run_state == fake_snapshot(stored.elapsed_s).state
    published.end.set()
    await served
    for viewer in viewers:
        assert await asyncio.to_thread(viewer.done.wait, 5)
        assert not viewer.lost
        assert viewer.snapshot().times == published.snapshot.times  # the final snapshot, whole
        assert viewer.summary is not None and viewer.summary.startswith("run ")
        viewer.close()
    assert not channel.path.exists()
    viewers[0].stop()  # after the end: dropped, not an error
    assert calls.calls[-1] == ("stop", None) and len(calls.calls) == 3


async def test_a_peer_of_another_uid_is_refused(directory, monkeypatch):
    published = Published()
    channel = RunChannel("abcd0000", published, FakeControl(), directory=directory, publish_interval=0.02)
    served = asyncio.ensure_future(channel.serve(published.end.wait()))
    await channel.listening.wait()
    monkeypatch.setattr(control, "peer_uid", lambda sock: os.getuid() + 1)
    with pytest.raises(UserError, match="served by another user's process; refusing it"):
        await asyncio.to_thread(connect, channel.path)
    raw = socket.socket(socket.AF_UNIX)
    await asyncio.to_thread(raw.connect, str(channel.path))
    assert await asyncio.to_thread(raw.recv, 1) == b""  # closed at once, nothing sent
    raw.close()
    assert channel.refused == 2
    published.end.set()
    await served


def test_a_socket_others_may_open_is_refused(directory):
    path = directory / "abcd0000.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    os.chmod(path, 0o666)
    try:
        with pytest.raises(UserError, match=r"control socket .*abcd0000.sock: mode 0666 lets other users in"):
            connect(path)
    finally:
        server.close()


def test_a_dead_socket_is_one_line(directory):
    path = directory / "abcd0000.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    os.chmod(path, 0o600)
    server.close()  # the file stays, nobody listens: a killed run's
    with pytest.raises(UserError, match=r"control socket .*: Connection refused \(the run's process is gone\)"):
        connect(path)
    with pytest.raises(UserError, match="no such socket"):
        connect(directory / "other.sock")


def test_the_controls_a_viewer_forwards_are_the_run_controls():
    from rampwatch.core.controls import RunControl

    protocol = {name for name in vars(RunControl) if not name.startswith("_")}
    assert protocol == CALLS


async def test_a_refused_runs_directory_turns_attach_off_and_the_run_goes_on(tmp_path, capsys):
    loose = tmp_path / "runs"
    loose.mkdir()
    loose.chmod(0o755)
    channel = RunChannel("abcd0000", Published(), FakeControl(), directory=loose, publish_interval=0.02)

    async def run() -> str:
        return "the result"

    assert await channel.serve(run()) == "the result"
    assert capsys.readouterr().out == (
        f"rampwatch run: runs directory {loose}: mode 0755 lets other users in (want 0700); "
        f"fix it with chmod 700 {loose}; attach is off\n"
    )
    assert not channel.path.exists()


def test_a_snapshot_serves_both_publishers_for_a_tenth_of_a_second(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(control.time, "monotonic", lambda: clock[0])
    built = []

    def build():
        built.append(clock[0])
        return fake_snapshot(clock[0] - 90)

    shared = control.shared_snapshots(build, max_age_s=0.1)
    first = shared()
    clock[0] += 0.05
    assert shared() is first and built == [100.0]
    clock[0] += 0.1
    assert shared() is not first and len(built) == 2


async def test_the_state_file_is_updated_off_the_runs_loop_and_ends_with_the_final_state(directory, monkeypatch):
    loop_thread = threading.get_ident()
    writers: list[tuple[int, dict]] = []
    written = asyncio.Event()
    update = runs.update_state
    loop = asyncio.get_running_loop()

    def recorded(run_id, directory=None, **changes):
        writers.append((threading.get_ident(), changes))
        loop.call_soon_threadsafe(written.set)
        return update(run_id, directory, **changes)

    monkeypatch.setattr(runs, "update_state", recorded)
    published = Published()
    channel = RunChannel("abcd0000", published, FakeControl(), directory=directory, publish_interval=0.01,
                         progress=lambda: ("ramping", 7.0, 3.0))  # fmt: skip
    runs.write_state(runs.RunState("abcd0000", os.getpid(), "chat", "t"), directory)
    served = asyncio.ensure_future(channel.serve(published.end.wait()))
    while not any("run_state" in changes for _, changes in writers):  # a second's update
        written.clear()
        await written.wait()
    published.end.set()
    await served
    periodic = [thread for thread, changes in writers[1:-1]]
    assert periodic and loop_thread not in periodic
    stored = runs.read_state(runs.state_path("abcd0000", directory))
    assert stored is not None and stored.run_state == published.snapshot.state  # the final one stands
    assert stored.elapsed_s == published.snapshot.t
