"""`rampwatch sim --api-server-count N` (N processes on one port) and `--chunk-gaps-out`
(the gaps between the token chunks the server wrote), as processes."""

import errno
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from array import array
from pathlib import Path

import numpy as np
import pytest

from rampwatch.app.cli import main as rampwatch_main
from rampwatch.core.tokenizer import SimTokenizer
from rampwatch.sim.chunk_gaps import ChunkGaps, text_key
from rampwatch.sim.config import SimConfig
from rampwatch.sim.engine import Engine, SimRequest
from rampwatch.sim.server import SimServer

ROOT = Path(__file__).resolve().parents[2]
INSTANT = ("--hardware", "instant", "--model", "tiny")
# How long a condition may take to come true before the test fails (not a speed bound:
# every wait below ends as soon as its condition holds).
DEADLINE_S = 30.0
REAL_FORK = os.fork  # before a test replaces it


def start_sim(*args: str) -> tuple[subprocess.Popen, str, str]:
    """The process, its URL and its ready line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rampwatch.app.cli", "sim", "--port", "0", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line.startswith("rampwatch sim: serving "), (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, line.split(" on ")[1].split(" ")[0], line


def stop_sim(proc: subprocess.Popen) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    return out, err


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def running(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's zombie waits for whoever
    reaps orphans here; it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"still not true after {DEADLINE_S:g} s: {what}"
        time.sleep(0.02)


def complete(url: str, max_tokens: int, chat: bool = False, prompt: str = "hello there") -> bytes:
    """One streamed request on a new connection (urllib opens one per request)."""
    if chat:
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}
        body["max_completion_tokens"] = max_tokens
    else:
        path, body = "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens}
    body.update(stream=True, ignore_eos=True, stream_options={"include_usage": True})
    request = urllib.request.Request(url + path, data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=DEADLINE_S) as answer:
        data = answer.read()
    assert data.endswith(b"data: [DONE]\n\n")
    return data


def answer_text(data: bytes) -> str:
    """The text a streamed answer carried (completion `text` or chat `delta.content`)."""
    pieces = []
    for event in data.split(b"\n\n"):
        if event.startswith(b"data: {"):
            for choice in json.loads(event[6:])["choices"]:
                pieces.append(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
    return "".join(pieces)


def completed_by_engine(url: str, engines: int) -> dict[str, int]:
    """Each engine's completed requests, from scrapes on new connections until every
    engine's process has answered one."""
    seen: dict[str, int] = {}
    for _ in range(200):
        with urllib.request.urlopen(url + "/metrics", timeout=DEADLINE_S) as answer:
            page = answer.read().decode()
        for engine, value in re.findall(
            r'^vllm:request_success_total\{engine="(\d+)",finished_reason="length",[^}]*\} (\S+)$', page, re.M
        ):
            seen[engine] = int(float(value))
        if len(seen) == engines:
            break
    return seen


@pytest.mark.slow
def test_two_processes_serve_one_port_and_stop_with_the_parent():
    proc, url, _ = start_sim(*INSTANT, "--data-parallel-size", "2", "--api-server-count", "2")
    try:
        workers = children_of(proc.pid)
        assert len(workers) == 2
        for _ in range(20):
            complete(url, 4)
        # Each process runs one of the two engines: the scrapes that reached each show its
        # own engine, and together they count every request.
        by_engine = completed_by_engine(url, 2)
        assert sorted(by_engine) == ["0", "1"]
        assert sum(by_engine.values()) == 20
        assert all(count > 0 for count in by_engine.values()), by_engine
        out, _ = stop_sim(proc)
        assert out.count("rampwatch sim: serving") == 0  # read above: printed once only
        assert not [pid for pid in workers if running(pid)]
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_the_ready_line_names_the_processes_and_comes_once():
    proc, url, line = start_sim(*INSTANT, "-dp", "2", "--api-server-count", "2")
    try:
        assert line.endswith(", 2 API server processes)\n")
        complete(url, 2)
        out, _ = stop_sim(proc)
        assert "serving" not in out
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_the_processes_exit_when_the_parent_is_killed():
    proc, url, _ = start_sim(*INSTANT, "-dp", "2", "--api-server-count", "2")
    workers = children_of(proc.pid)
    try:
        assert len(workers) == 2 and all(running(pid) for pid in workers)
        complete(url, 2)
        proc.kill()  # SIGKILL: no handler runs; the processes see their pipe's end
        proc.wait(timeout=DEADLINE_S)
        wait_until(lambda: not any(running(pid) for pid in workers), "the processes exited")
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in workers:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def nothing_starts(monkeypatch):
    """Refused input must neither fork nor serve: either fails the test at once rather
    than forking pytest or serving in it until the test's timeout."""
    from rampwatch.sim import server

    def started(*_args, **_kwargs):
        raise AssertionError("a server started: the input was not refused")

    monkeypatch.setattr(os, "fork", started)
    monkeypatch.setattr(server, "serve_until", started)
    yield
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})  # as serve_processes leaves it


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--api-server-count", "0"], "--api-server-count 0: must be at least 1"),
        (["-dp", "3", "--api-server-count", "2"], "--api-server-count 2: each process runs its share"),
        (
            ["-dp", "2", "--api-server-count", "3"],
            "set --data-parallel-size to a multiple of 3, or --api-server-count to a divisor of 2",
        ),
        (["-dp", "1000", "--api-server-count", "1000"], "--api-server-count 1000: at most 64 processes"),
        (["--chunk-gaps-out", "/nonexistent-dir/gaps.npy"], "--chunk-gaps-out /nonexistent-dir/gaps.npy: "),
        (["--chunk-gaps-out", "/proc/x"], "--chunk-gaps-out /proc/x: cannot be written: cannot create a file in /proc"),
        (
            ["-dp", "2", "--api-server-count", "2", "--chunk-gaps-out", "/proc/x"],
            "--chunk-gaps-out /proc/x: cannot be written",
        ),
    ],
)
def test_bad_values_are_one_line_and_exit_2(capsys, nothing_starts, args, expected):
    assert rampwatch_main(["sim", *INSTANT, "--port", "0", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rampwatch sim: error: ") and expected in err and err.count("\n") == 1


def decode_step_s(config: SimConfig, max_tokens: int) -> float:
    """The simulated time between one request's successive tokens when it runs alone."""
    engine = Engine(config.resolved())
    engine.add_request(SimRequest("r", SimTokenizer().encode("hello there"), max_tokens, ignore_eos=True), 0.0)
    now, emitted_at = 0.0, []
    while engine.has_work():
        result = engine.step(now)
        now += result.duration
        if result.emitted:
            emitted_at.append(now)
    return statistics.median(np.diff(emitted_at))


@pytest.mark.slow
def test_chunk_gaps_are_the_written_token_chunks_gaps(tmp_path):
    """One process: two completions of 8 tokens (7 gaps each) and a chat answer of 5 (its
    role chunk is a token event to the client, written with the first token: 5 gaps, the
    first 0); each gap one engine step of the simulator apart."""
    out_file = tmp_path / "gaps.npy"
    step_ms = 20.0
    proc, url, _ = start_sim(
        "--hardware", "h100", "--model", "tiny", "--step-overhead-ms", str(step_ms), "--chunk-gaps-out", str(out_file)
    )
    try:
        answers = [complete(url, 8), complete(url, 8, prompt="hello again"), complete(url, 5, chat=True)]
        assert not out_file.exists()  # written at the stop, not before
        stop_sim(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    gaps = np.load(out_file)
    assert gaps.dtype == np.float64 and gaps.shape == (7 + 7 + 5,)
    streams = ChunkGaps.read(out_file)
    assert list(streams.counts) == [7, 7, 5]
    assert list(streams.keys) == [text_key(answer_text(data)) for data in answers]
    assert len(set(streams.keys)) == 3  # three prompts, three answers
    assert (gaps >= 0).all()
    assert gaps[14] == 0.0
    expected = decode_step_s(SimConfig(hardware="h100", model="tiny", step_overhead_s=step_ms / 1e3), 8)
    between_steps = np.delete(gaps, 14)
    assert expected >= step_ms / 1e3
    assert 0.7 * expected <= float(np.median(between_steps)) <= 1.5 * expected, (expected, between_steps)


@pytest.mark.slow
def test_chunk_gaps_of_several_processes_are_merged_into_one_file(tmp_path):
    out_file = tmp_path / "gaps.npy"
    proc, url, _ = start_sim(*INSTANT, "-dp", "2", "--api-server-count", "2", "--chunk-gaps-out", str(out_file))
    try:
        for _ in range(12):
            complete(url, 4)
        assert len(completed_by_engine(url, 2)) == 2  # both processes had streams
        stop_sim(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    gaps = np.load(out_file)
    assert gaps.shape == (12 * 3,) and (gaps >= 0).all()
    assert list(ChunkGaps.read(out_file).counts) == [3] * 12
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gaps.npy", "gaps.npy.streams.npy"]  # the parts are gone


@pytest.mark.slow
def test_a_gaps_file_that_cannot_be_written_at_the_stop_is_one_line(tmp_path):
    """One process: its gaps cannot be kept anywhere else, and the line says so."""
    out_file = tmp_path / "gaps.npy"
    proc, url, _ = start_sim(*INSTANT, "--chunk-gaps-out", str(out_file))
    try:
        complete(url, 4)
        out_file.mkdir()  # in the way by the time of the stop
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert err == (
        f"rampwatch sim: error: --chunk-gaps-out {out_file}: cannot write: Is a directory; "
        "the gaps of 1 stream are lost\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gaps.npy"]  # no temporary file left


@pytest.mark.slow
def test_the_parts_are_kept_when_the_merged_file_cannot_be_written(tmp_path):
    """The merge writes the file before removing the parts (it removed them first)."""
    out_file = tmp_path / "gaps.npy"
    proc, url, _ = start_sim(*INSTANT, "-dp", "2", "--api-server-count", "2", "--chunk-gaps-out", str(out_file))
    try:
        for _ in range(8):
            complete(url, 4)
        out_file.mkdir()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    parts = [tmp_path / "gaps.npy.part-0", tmp_path / "gaps.npy.part-1"]
    assert err == (
        f"rampwatch sim: error: --chunk-gaps-out {out_file}: cannot write: Is a directory; "
        f"the processes' gaps are kept in {parts[0]}, {parts[1]}\n"
    )
    counts = [c for part in parts for c in ChunkGaps.read(part).counts]
    assert counts == [3] * 8  # every stream's gaps, in the parts
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["gaps.npy", "gaps.npy.part-0", "gaps.npy.part-0.streams.npy", "gaps.npy.part-1", "gaps.npy.part-1.streams.npy"]
    )


def test_without_the_flag_no_gaps_are_kept():
    assert SimServer(SimConfig(hardware="instant", model="tiny")).chunk_gaps is None
    assert isinstance(
        SimServer(SimConfig(hardware="instant", model="tiny"), keep_chunk_gaps=True).chunk_gaps, ChunkGaps
    )


@pytest.mark.slow
def test_a_process_that_dies_stops_the_others_and_the_parent_fails():
    proc, _, _ = start_sim(*INSTANT, "-dp", "2", "--api-server-count", "2")
    workers = children_of(proc.pid)
    try:
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)
        _, err = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode == 1
        assert re.search(r"^rampwatch sim: process [01] exited with -9; stopped the others$", err, re.M), err
        assert not [pid for pid in workers if running(pid)]
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("processes", [[], ["-dp", "2", "--api-server-count", "2"]])
def test_a_directory_as_the_gaps_file_is_refused_before_serving(capsys, nothing_starts, tmp_path, processes):
    """Refused at the start, naming the flag, not found at the stop with the gaps lost
    (nor blamed on --host/--port)."""
    assert rampwatch_main(["sim", *INSTANT, "--port", "0", *processes, "--chunk-gaps-out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"rampwatch sim: error: --chunk-gaps-out {tmp_path}: cannot be written: {tmp_path} is a directory\n"
    (tmp_path / "gaps.npy.streams.npy").mkdir()
    assert rampwatch_main(["sim", *INSTANT, "--port", "0", "--chunk-gaps-out", str(tmp_path / "gaps.npy")]) == 2
    assert "gaps.npy.streams.npy is a directory" in capsys.readouterr().err


def test_parts_left_by_an_earlier_run_are_refused_not_merged(capsys, nothing_starts, tmp_path):
    out_file = tmp_path / "gaps.npy"
    stale = ChunkGaps()
    stale.add_stream(array("d", [0.5, 0.5]), 7)
    stale.write(tmp_path / "gaps.npy.part-3")  # from a run of 4 processes, killed before its merge
    args = ["sim", *INSTANT, "--port", "0", "-dp", "2", "--api-server-count", "2", "--chunk-gaps-out", str(out_file)]
    assert rampwatch_main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rampwatch sim: error: --chunk-gaps-out {out_file}: gaps.npy.part-3, ")
    assert "move or remove them" in err and err.count("\n") == 1
    assert list(ChunkGaps.read(tmp_path / "gaps.npy.part-3").counts) == [2]  # left as it was
    assert not out_file.exists()


@pytest.mark.slow
def test_a_refused_fork_is_not_blamed_on_the_address(capsys, nothing_starts, monkeypatch):
    """Only binding the port is the address's fault (it was: every OSError of the
    processes); and the process already forked does not stay behind."""
    forked: list[int] = []

    def fork_once():
        if forked:
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
        pid = REAL_FORK()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork_once)
    assert rampwatch_main(["sim", *INSTANT, "--port", "0", "-dp", "2", "--api-server-count", "2"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "rampwatch sim: error: --api-server-count 2: cannot start the processes: Resource temporarily unavailable\n"
    )
    assert len(forked) == 1 and not running(forked[0])
    assert not {signal.SIGINT, signal.SIGTERM} & signal.pthread_sigmask(signal.SIG_BLOCK, [])


@pytest.mark.slow
def test_a_port_already_served_is_refused_not_shared():
    """SO_REUSEPORT would let the second server join the first's port, and the kernel
    would spread connections over two different simulators."""
    proc, url, _ = start_sim(*INSTANT, "-dp", "2", "--api-server-count", "2")
    port = url.rsplit(":", 1)[1]
    second = subprocess.Popen(
        [sys.executable, "-m", "rampwatch.app.cli", "sim", *INSTANT, "--hardware", "h100", "--port", port]
        + ["-dp", "2", "--api-server-count", "2"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Without the check the second prints its ready line and serves: fail at once.
        assert second.stdout.readline() == ""
        _, err = second.communicate(timeout=DEADLINE_S)
        assert second.returncode == 2
        assert err == f"rampwatch sim: error: --host 127.0.0.1 --port {port}: cannot listen: Address already in use\n"
        complete(url, 2)  # the first still serves
        stop_sim(proc)
    finally:
        for p in (second, proc):
            if p.poll() is None:
                p.kill()
                p.wait()
