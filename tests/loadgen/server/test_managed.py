"""The managed server (``--serve``): parsing the command, the guard that stops it on every
path, readiness, exit codes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rampwatch.core.errors import ServerExited, UserError
from rampwatch.loadgen.server.managed import (
    PHASE_HEALTHY,
    PHASE_READY,
    PHASE_STARTING,
    ManagedServer,
    ServeCommand,
    diff_engine_args,
    server_log_path,
)
from rampwatch.loadgen.server.serve_guard import exit_code_of
from tests.processes import free_port, group_members, wait_group_gone

PY = sys.executable

# A stand-in server: answers /health and /v1/models (unless told not to), starts a
# grandchild in its own process group (as vLLM starts its engine cores), prints a few log
# lines, then serves until stopped. Flags: --port P, --exit-after S (exit with code 3),
# --never-ready (no HTTP at all), --ignore-term (only SIGKILL ends it), --auth (/v1/models
# answers 401, as vLLM started with --api-key does without the key).
FAKE_SERVER = textwrap.dedent(
    """
    import http.server, json, os, signal, subprocess, sys, threading, time
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    if "--ignore-term" in args:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"fake server: grandchild {child.pid}", flush=True)
    print("Loading weights \\x1b[32mdone\\x1b[0m token=abcdef123456", flush=True)
    if "--exit-after" in args:
        time.sleep(float(args[args.index("--exit-after") + 1]))
        print("fatal: out of memory", flush=True)
        sys.exit(3)
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": "fake"}]}).encode() if self.path == "/v1/models" else b"ok"
            self.send_response(401 if "--auth" in args and self.path == "/v1/models" else 200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    if "--never-ready" not in args:
        threading.Thread(
            target=http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever, daemon=True
        ).start()
    while True:
        time.sleep(1)
    """
)


@pytest.fixture
def fake_server(tmp_path: Path) -> Path:
    path = tmp_path / "fake_server.py"
    path.write_text(FAKE_SERVER)
    return path


def kill_group(pgid: int | None) -> None:
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


# -- ServeCommand ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, target, base_url, host, port",
    [
        (f"{PY} -m http.server", None, "http://127.0.0.1:8000", "127.0.0.1", 8000),
        (f"{PY} -m x --port 9001", None, "http://127.0.0.1:9001", "127.0.0.1", 9001),
        (f"{PY} -m x --port=9002 --host 0.0.0.0", None, "http://127.0.0.1:9002", "127.0.0.1", 9002),
        (f"{PY} -m x --host :: --port 9003", None, "http://[::1]:9003", "::1", 9003),
        (f"{PY} -m x --host 10.0.0.5", None, "http://10.0.0.5:8000", "10.0.0.5", 8000),
        (f"{PY} -m x --port 9004", "http://proxy:80/", "http://proxy:80", "127.0.0.1", 9004),
        ("rampwatch sim --port 8123", None, "http://127.0.0.1:8123", "127.0.0.1", 8123),
    ],
)
def test_where_the_server_listens_and_where_rampwatch_connects(text, target, base_url, host, port):
    command = ServeCommand.parse(text, target=target)
    assert (command.base_url, command.host, command.port) == (base_url, host, port)


def test_rampwatch_resolves_to_this_interpreter_and_env_words_become_environment():
    command = ServeCommand.parse("CUDA_VISIBLE_DEVICES=1 HF_TOKEN=hf_secret_value rampwatch sim --model tiny")
    # -P: the server's interpreter does not import from the current directory
    assert command.argv == (PY, "-P", "-m", "rampwatch.app.cli", "sim", "--model", "tiny")
    assert command.env == (("CUDA_VISIBLE_DEVICES", "1"), ("HF_TOKEN", "hf_secret_value"))
    assert command.environment()["CUDA_VISIBLE_DEVICES"] == "1"
    assert (
        "hf_secret_value" not in command.shown
        and command.shown == "CUDA_VISIBLE_DEVICES=1 HF_TOKEN='<redacted>' rampwatch sim --model tiny"
    )
    assert "hf_secret_value" in command.secrets()


def test_the_servers_python_output_is_unbuffered_unless_the_command_says_otherwise(monkeypatch):
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    assert ServeCommand.parse("rampwatch sim").environment()["PYTHONUNBUFFERED"] == "1"
    assert ServeCommand.parse("PYTHONUNBUFFERED= rampwatch sim").environment()["PYTHONUNBUFFERED"] == ""


@pytest.mark.parametrize(
    "raw, line",
    [
        ("plain\n", "plain"),
        ("\x1b[32mINFO\x1b[0m ready\n", "INFO ready"),  # colours dropped
        ("Loading  10%\rLoading  50%\rLoading 100%\r\n", "Loading 100%"),  # a progress bar's last redraw
        ("\tlocal_rank=0\n", "    local_rank=0"),  # tabs expanded
        ("bell\x07 and \x1b]0;title\x07\n", "bell\\x07 and \\x1b]0;title\\x07"),  # other controls escaped
        ("Authorization: Bearer abc.def\n", "Authorization: Bearer <redacted>"),
        ("args: {'api_key': 'sk-in-the-command'}\n", "args: {'api_key': '<redacted>'}"),
    ],
)
def test_log_lines_are_cleaned_before_they_are_kept_shown_or_written(raw, line):
    server = ManagedServer(ServeCommand.parse(f"{PY} -m x --api-key sk-in-the-command"))
    assert server.clean_line(raw) == line


def test_vllm_is_looked_up_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match=r"^--serve: program 'vllm' not found on PATH$"):
        ServeCommand.parse("vllm serve Qwen/Qwen2.5-0.5B")
    fake = tmp_path / "vllm"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert ServeCommand.parse("vllm serve Qwen/Qwen2.5-0.5B").argv == ("vllm", "serve", "Qwen/Qwen2.5-0.5B")


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "--serve: empty command"),
        ("   ", "--serve: empty command"),
        ("vllm serve 'unbalanced", '--serve "vllm serve \'unbalanced": No closing quotation'),
        ("FOO=1", "no program to run, only environment variables"),
        ("no-such-program-xyz --port 1", "--serve: program 'no-such-program-xyz' not found on PATH"),
        ("/no/such/binary", "--serve: /no/such/binary: no such executable file"),
        (f"{PY} -m x --port 0", "--serve: --port 0: give a port from 1 to 65535"),
        (f"{PY} -m x --port eighty", "--serve: --port 'eighty' is not a port number"),
    ],
)
def test_bad_commands_are_one_line_naming_serve(text, message):
    with pytest.raises(UserError) as err:
        ServeCommand.parse(text)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_unbalanced_quotes_never_show_a_secret():
    with pytest.raises(UserError) as err:
        ServeCommand.parse("vllm serve m --api-key sk-verysecret 'oops")
    assert "sk-verysecret" not in str(err.value)


@pytest.mark.parametrize(
    "args, expected",
    [
        ("--max-num-seqs 64", {"max_num_seqs": "64"}),
        ("--max-num-seqs=64", {"max_num_seqs": "64"}),
        ("--enable-prefix-caching", {"enable_prefix_caching": True}),
        ("--no-enable-prefix-caching", {"enable_prefix_caching": False}),
        ("-tp 2 -dp 4", {"tensor_parallel_size": "2", "data_parallel_size": "4"}),
        ("--seed -1", {"seed": "-1"}),
        ("--max-num-seqs 8 --max-num-seqs 16", {"max_num_seqs": "16"}),
        ("--api-key sk-abcdef", {"api_key": "<redacted>"}),
        ("--api-key=sk-abcdef", {"api_key": "<redacted>"}),
    ],
)
def test_engine_args_spellings(args, expected, tmp_path, monkeypatch):
    (tmp_path / "vllm").write_text("#!/bin/sh\n")
    (tmp_path / "vllm").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ServeCommand.parse(f"vllm serve org/model {args}").engine_args() == {"model": "org/model", **expected}


def test_engine_args_of_python_module_and_rampwatch_sim_commands():
    module = ServeCommand.parse(f"{PY} -m vllm.entrypoints.openai.api_server --model /m --dtype float32")
    assert module.engine_args() == {"model": "/m", "dtype": "float32"}
    safe = ServeCommand.parse(f"{PY} -P -m vllm.entrypoints.openai.api_server --model /m --dtype float32")
    assert safe.engine_args() == {"model": "/m", "dtype": "float32"}
    sim = ServeCommand.parse("rampwatch sim --hardware l4 --max-num-seqs 32")
    assert sim.engine_args() == {"hardware": "l4", "max_num_seqs": "32"}


def test_diff_engine_args_and_with_text():
    old = ServeCommand.parse("rampwatch sim --max-num-seqs 8 --port 8100 --enable-chunked-prefill", target="http://h:1")
    new = old.with_text("rampwatch sim --max-num-seqs 64 --port 8100 --gpu-memory-utilization 0.8")
    assert new.base_url == "http://h:1"  # the --target rule carries over
    assert diff_engine_args(old, new) == [
        ("enable_chunked_prefill", True, None),
        ("gpu_memory_utilization", None, "0.8"),
        ("max_num_seqs", "8", "64"),
    ]
    assert diff_engine_args(old, old) == []


def test_server_log_sits_beside_the_recording():
    assert server_log_path(Path("runs/a.rwrec")) == Path("runs/a.rwrec.server.log")


@pytest.mark.parametrize("returncode, code", [(0, 0), (3, 3), (-9, 137), (-15, 143)])
def test_exit_codes_as_a_shell_reports_them(returncode, code):
    assert exit_code_of(returncode) == code


# -- ManagedServer -------------------------------------------------------------------------


@pytest.mark.slow
def test_start_waits_for_readiness_keeps_the_redacted_log_and_stop_ends_the_whole_group(fake_server, tmp_path):
    port = free_port()
    command = ServeCommand.parse(f"{PY} {fake_server} --port {port} --api-key abcdef123456")
    log_path = tmp_path / "logs" / "server.log"
    phases: list[str] = []
    seen: list[str] = []
    server = ManagedServer(command, log_path=log_path, on_log=seen.append)
    try:
        startup = server.start(timeout_s=30, on_phase=phases.append)
        assert startup > 0 and server.startup_s == startup
        assert phases == [PHASE_STARTING, PHASE_HEALTHY, PHASE_READY]
        assert server.poll() is None
        pgid = server.pid
        assert pgid is not None and len(group_members(pgid)) == 2  # the server and its grandchild
        assert "Loading weights done token=<redacted>" in server.tail  # colours dropped, secret masked
        assert seen[: len(server.tail)] == server.tail
    finally:
        code = server.stop(grace_s=5)
    assert code == exit_code_of(-signal.SIGTERM)
    assert wait_group_gone(pgid)
    assert server.stop() == code and server.poll() == code  # idempotent
    text = log_path.read_text()
    assert text.startswith(f"$ {PY} {fake_server} --port {port} --api-key '<redacted>'\n")
    assert "abcdef123456" not in text and "fatal" not in text


@pytest.mark.slow
def test_stop_kills_a_server_that_ignores_sigterm_after_the_grace(fake_server):
    server = ManagedServer(ServeCommand.parse(f"{PY} {fake_server} --port {free_port()} --ignore-term"))
    try:
        server.start(timeout_s=30)
        pgid = server.pid
        began = time.monotonic()
        assert server.stop(grace_s=0.5) == 128 + signal.SIGKILL
        assert time.monotonic() - began < 5
        assert wait_group_gone(pgid)
    finally:
        kill_group(server.pid)


@pytest.mark.slow
def test_a_server_that_exits_during_startup_raises_with_its_code_and_tail(fake_server):
    server = ManagedServer(ServeCommand.parse(f"{PY} {fake_server} --port {free_port()} --exit-after 0.2"))
    with pytest.raises(ServerExited) as err:
        server.start(timeout_s=30)
    assert err.value.server_exit_code == 3
    assert err.value.tail[-1] == "fatal: out of memory"
    assert str(err.value) == "server exited with code 3 during startup: fatal: out of memory"
    assert err.value.exit_code == 5
    assert wait_group_gone(server.pid)  # the grandchild went with it


@pytest.mark.slow
def test_a_program_that_cannot_be_executed_is_server_exited_127(tmp_path):
    not_a_program = tmp_path / "server"
    not_a_program.write_bytes(b"\x00\x01 not an executable format")
    not_a_program.chmod(0o755)
    with pytest.raises(ServerExited) as err:
        ManagedServer(ServeCommand.parse(f"{not_a_program} --port {free_port()}")).start(timeout_s=30)
    assert err.value.server_exit_code == 127
    assert str(err.value).startswith(f"server exited with code 127 during startup: cannot start {not_a_program}: ")


@pytest.mark.slow
def test_not_ready_in_time_stops_the_server_and_says_so(fake_server):
    server = ManagedServer(ServeCommand.parse(f"{PY} {fake_server} --port {free_port()} --never-ready"))
    with pytest.raises(UserError) as err:
        server.start(timeout_s=1.5)
    message = str(err.value)
    assert message.startswith("--serve: the server was not ready within 1.5 s (--serve-timeout); stopped it")
    assert err.value.exit_code == 3  # as a target that does not answer
    assert server.poll() is not None and wait_group_gone(server.pid)


@pytest.mark.slow
def test_a_server_that_wants_an_api_key_is_one_line_saying_so(fake_server):
    port = free_port()
    server = ManagedServer(ServeCommand.parse(f"{PY} {fake_server} --port {port} --auth"))
    with pytest.raises(UserError) as err:
        server.start(timeout_s=30)
    assert str(err.value) == (
        f"--serve: http://127.0.0.1:{port}/v1/models answered HTTP 401; "
        "pass the server's --api-key to rampwatch as --api-key"
    )
    assert wait_group_gone(server.pid)


def test_a_port_in_use_fails_before_anything_starts(fake_server):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = ManagedServer(ServeCommand.parse(f"{PY} {fake_server} --port {port}"))
        with pytest.raises(
            UserError, match=rf"^--serve: 127.0.0.1:{port} is already in use; stop that server or pass --port$"
        ):
            server.start(timeout_s=5)
        assert server.guard_pid is None


@pytest.mark.slow
def test_stop_still_ends_the_server_when_its_guard_was_killed(fake_server):
    server = ManagedServer(ServeCommand.parse(f"{PY} {fake_server} --port {free_port()}"))
    try:
        server.start(timeout_s=30)
        pgid = server.pid
        guard = server.guard_pid
        os.kill(guard, signal.SIGKILL)
        assert group_members(pgid)  # the server outlives its guard here
        server.stop(grace_s=5)
        assert wait_group_gone(pgid)
    finally:
        kill_group(server.pid)


@pytest.mark.slow
def test_a_server_that_exits_mid_run_is_seen_by_poll(fake_server):
    server = ManagedServer(ServeCommand.parse(f"{PY} {fake_server} --port {free_port()}"))
    try:
        server.start(timeout_s=30)
        pgid = server.pid
        os.killpg(pgid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.poll() == 128 + signal.SIGKILL
    finally:
        server.stop()


PARENT = textwrap.dedent(
    """
    import os, sys, time
    from rampwatch.loadgen.server.managed import ManagedServer, ServeCommand
    server = ManagedServer(ServeCommand.parse(sys.argv[1]))
    server.start(timeout_s=30)
    holder = 0
    if "--fork" in sys.argv:  # as the live UI forks its run process after the server is up
        holder = os.fork()
        if holder == 0:
            time.sleep(600)
            os._exit(0)
    print(server.pid, holder, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("fork", [False, True], ids=["alone", "with-a-forked-child"])
def test_the_server_dies_when_rampwatch_is_killed_with_sigkill(fake_server, fork):
    """No cleanup runs in a SIGKILLed rampwatch: the guard sees its stdin pipe close and
    stops the server's whole group, grandchildren too, even while a process rampwatch
    forked is still alive."""
    port = free_port()
    argv = [PY, "-c", PARENT, f"{PY} {fake_server} --port {port}"] + (["--fork"] if fork else [])
    parent = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    server_pid, holder = map(int, parent.stdout.readline().split())
    try:
        assert len(group_members(server_pid)) == 2
        parent.kill()
        parent.wait()
        assert wait_group_gone(server_pid), "the server outlived a SIGKILLed rampwatch"
        if holder:
            os.kill(holder, 0)  # still alive: its copy of the pipe was closed at fork
    finally:
        kill_group(server_pid)
        if holder:
            with contextlib.suppress(ProcessLookupError):
                os.kill(holder, signal.SIGKILL)
