"""A server rampwatch starts and stops itself: ``rampwatch run SCENARIO --serve "vllm serve
MODEL …"``, and the embedded simulator (``--serve "rampwatch sim …"`` in all but name).

::

    command = ServeCommand.parse("vllm serve Qwen/Qwen2.5-0.5B --max-num-seqs 64")
    with ManagedServer(command, log_path=Path("run.server.log")) as server:
        server.start(timeout_s=600)        # blocking: /health 200 and a model in /v1/models
        run_load_against(command.base_url)
        if server.poll() is not None: ...  # it exited mid-run

The server never runs as rampwatch's own child: ``loadgen.server.serve_guard`` does, and stops
it when rampwatch goes away by any path (its module docstring says how). This module
holds the guard's pipes, keeps the last lines of the server's log (redacted), appends
them to a log file, and waits for readiness through ``loadgen.transport.server_probe.probe_models``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from rampwatch.core.errors import ServerExited, TargetUnreachable, UserError
from rampwatch.core.files import private_file
from rampwatch.core.interpreter import module_command
from rampwatch.core.redact import REDACTED, is_secret_key, redact_value, secret_values
from rampwatch.core.text import server_text
from rampwatch.loadgen.server.serve_guard import (
    DEFAULT_GRACE_S,
    PID_LINE_PREFIX,
    exit_code_of,
    group_alive,
    signal_group,
)
from rampwatch.loadgen.transport.connection import HEADERS_ENV, Connection

__all__ = ["ManagedServer", "ServeCommand", "ServerExited", "diff_engine_args", "server_log_path"]

DEFAULT_PORT = 8000  # vLLM's and `rampwatch sim`'s
DEFAULT_STARTUP_TIMEOUT_S = 600.0  # a real model loads slowly
# Phases ``ManagedServer.start`` reports through ``on_phase``.
PHASE_STARTING = "starting"  # spawned; /health does not answer 200 yet
PHASE_HEALTHY = "healthy"  # /health answers 200; /v1/models lists no model yet
PHASE_READY = "ready"
_PROBE_INTERVAL_S = 0.25
_PROBE_TIMEOUT_S = 5.0
# After ``stop``'s grace, how long the guard may take to report before rampwatch kills the
# server's group itself.
_GUARD_MARGIN_S = 5.0
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# vLLM's short spellings of its engine arguments.
_SHORT_FLAGS = {
    "tp": "tensor_parallel_size",
    "dp": "data_parallel_size",
    "pp": "pipeline_parallel_size",
    "q": "quantization",
    "O": "compilation_config",
}


def _flag_name(flag: str) -> str:
    bare = flag.lstrip("-")
    if not flag.startswith("--"):
        return _SHORT_FLAGS.get(bare, bare.replace("-", "_"))
    return bare.replace("-", "_")


def _is_value(token: str) -> bool:
    """Whether ``token`` is a flag's value rather than the next flag (``-1`` is a value)."""
    if not token.startswith("-") or token == "-":
        return True
    try:
        float(token)
    except ValueError:
        return False
    return True


def _entry_length(argv: list[str]) -> int:
    """How many leading words name the program rather than its arguments: ``vllm serve``,
    ``rampwatch sim`` (resolved: ``python -P -m rampwatch.app.cli sim``), ``python -m MODULE``."""
    m = 2 if len(argv) >= 3 and argv[1] in ("-P", "-I") and argv[2] == "-m" else 1
    if len(argv) >= m + 2 and argv[m] == "-m":
        if argv[m + 1] == "rampwatch.app.cli" and len(argv) >= m + 3 and not argv[m + 2].startswith("-"):
            return m + 3
        return m + 2
    if Path(argv[0]).name in ("vllm", "rampwatch") and len(argv) >= 2 and not argv[1].startswith("-"):
        return 2
    return 1


def _listen_address(args: dict[str, str | bool]) -> tuple[str, int]:
    host = args.get("host")
    port = args.get("port")
    host_text = host if isinstance(host, str) and host else "127.0.0.1"
    if host_text in ("0.0.0.0", "*"):
        host_text = "127.0.0.1"  # every interface: connect over loopback
    elif host_text == "::":
        host_text = "::1"
    if port is None:
        return host_text, DEFAULT_PORT
    try:
        number = int(str(port))
    except ValueError:
        raise UserError(f"--serve: --port {port!r} is not a port number") from None
    if not 0 < number < 65536:
        raise UserError(f"--serve: --port {number}: give a port from 1 to 65535 (rampwatch must know where to connect)")
    return host_text, number


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@dataclass(frozen=True)
class ServeCommand:
    """A server's command line as given to ``--serve``.

    ``text`` is what the user typed (restart edits it; show ``shown`` — secrets masked);
    ``argv`` is what the guard runs; ``base_url`` is where rampwatch connects."""

    text: str
    argv: tuple[str, ...]
    base_url: str
    env: tuple[tuple[str, str], ...] = ()  # leading NAME=VALUE words, as a shell reads them
    host: str = "127.0.0.1"  # where the server listens (the port check connects there)
    port: int = DEFAULT_PORT
    target: str | None = field(default=None, repr=False)  # --target, kept for with_text

    @classmethod
    def parse(cls, text: str, target: str | None = None) -> ServeCommand:
        """One-line ``UserError`` naming ``--serve`` on an empty command, unbalanced
        quotes, a program that cannot be found or a port that is not one."""
        if not text or not text.strip():
            raise UserError('--serve: empty command; give the server\'s command line, e.g. --serve "vllm serve MODEL"')
        try:
            words = shlex.split(text)
        except ValueError as exc:
            raise UserError(f"--serve {_shown(text)!r}: {exc}") from None
        env: list[tuple[str, str]] = []
        while words and _ENV_ASSIGNMENT.match(words[0]):
            name, _, value = words.pop(0).partition("=")
            env.append((name, value))
        if not words:
            raise UserError(f"--serve {_shown(text)!r}: no program to run, only environment variables")
        argv = _resolve_program(words)
        args = _parse_engine_args(argv)
        host, port = _listen_address(args)
        base_url = target.rstrip("/") if target else _url(host, port)
        return cls(text=text, argv=tuple(argv), base_url=base_url, env=tuple(env), host=host, port=port, target=target)

    @property
    def shown(self) -> str:
        """``text`` with secrets masked (``--api-key VALUE``, ``HF_TOKEN=…``, URL passwords):
        what screens, logs and recordings get."""
        return _shown(self.text)

    def engine_args(self) -> dict[str, str | bool]:
        """The server's arguments by name: ``--max-num-seqs 64`` → ``{"max_num_seqs": "64"}``,
        ``--enable-prefix-caching`` → True, ``--no-x`` → ``{"x": False}``, ``--k=v`` too,
        the first positional word (``vllm serve MODEL``) under ``"model"``. Secret values
        are masked: this is recorded."""
        return {
            name: REDACTED if is_secret_key(name) and isinstance(value, str) else value
            for name, value in _parse_engine_args(list(self.argv)).items()
        }

    def with_text(self, text: str) -> ServeCommand:
        """The same server with new arguments (restart): the same ``--target`` rule."""
        return ServeCommand.parse(text, target=self.target)

    def secrets(self) -> set[str]:
        """Secret values the server is given, to scrub from its log (vLLM prints its
        arguments; a server may print its environment): those in the command and the
        secret-named values of its environment (``HF_TOKEN``, ``OPENAI_API_KEY`` … from
        rampwatch's own or the command's ``NAME=VALUE`` words)."""
        return secret_values(list(self.argv)) | secret_values(self.environment())

    def environment(self) -> dict[str, str]:
        """The server's environment: rampwatch's (less the run's own ``--header`` values),
        unbuffered Python output (a Python server
        writing to a pipe would otherwise hold its log back in blocks), then the command's
        own NAME=VALUE words."""
        inherited = {name: value for name, value in os.environ.items() if name != HEADERS_ENV}
        return {"PYTHONUNBUFFERED": "1", **inherited, **dict(self.env)}


def _shown(text: str) -> str:
    quote: Callable[[str], str] = shlex.quote
    try:
        words = shlex.split(text)
    except ValueError:  # unbalanced quotes: mask word by word all the same
        words, quote = text.split(), str
    env: list[str] = []
    while words and _ENV_ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env.append(f"{name}={quote(REDACTED if is_secret_key(name) else value)}")
    return server_text(" ".join([*env, *(quote(word) for word in redact_value(words))]))


def _resolve_program(words: list[str]) -> list[str]:
    program, rest = words[0], words[1:]
    if program == "rampwatch":  # this rampwatch, whatever PATH says
        return module_command("rampwatch.app.cli", *rest)
    if "/" in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise UserError(f"--serve: {program}: no such executable file")
        return words
    if shutil.which(program) is None:
        raise UserError(f"--serve: program {program!r} not found on PATH")
    return words


def _parse_engine_args(argv: list[str]) -> dict[str, str | bool]:
    out: dict[str, str | bool] = {}
    words = argv[_entry_length(argv) :]
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if _is_value(word):
            out.setdefault("model", word)
            continue
        if word == "--":
            continue
        flag, eq, value = word.partition("=")
        name = _flag_name(flag)
        if eq:
            out[name] = value
        elif i < len(words) and _is_value(words[i]):
            out[name] = words[i]
            i += 1
        elif name.startswith("no_") and flag.startswith("--"):
            out[name[3:]] = False
        else:
            out[name] = True
    return out


def diff_engine_args(old: ServeCommand, new: ServeCommand) -> list[tuple[str, object, object]]:
    """``(name, old value or None, new value or None)`` for each argument that changed,
    sorted by name."""
    before, after = old.engine_args(), new.engine_args()
    return [
        (name, before.get(name), after.get(name))
        for name in sorted(set(before) | set(after))
        if before.get(name) != after.get(name)
    ]


def server_log_path(recording: Path) -> Path:
    """Where a run's server log goes by default: beside its recording."""
    return recording.with_name(recording.name + ".server.log")


def port_in_use(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether something already accepts connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


# Every server started here, so that a forked child (the live UI's run process) closes its
# copy of the guard's stdin: while any process holds that pipe the guard sees no EOF.
_LIVE: weakref.WeakSet[ManagedServer] = weakref.WeakSet()


def _close_pipes_in_child() -> None:
    for server in list(_LIVE):
        server._forget_pipes()


os.register_at_fork(after_in_child=_close_pipes_in_child)


class ManagedServer:
    """One server command run under ``loadgen.server.serve_guard``. ``start`` blocks until it
    serves; ``stop`` is idempotent and also runs on ``__exit__``."""

    def __init__(
        self,
        command: ServeCommand,
        *,
        log_path: Path | None = None,
        tail_lines: int = 200,
        on_log: Callable[[str], None] | None = None,
        connection: Connection | None = None,
        replace_log: bool = False,
    ) -> None:
        """``replace_log``: the log file's old content goes at the start (``--force``);
        else the server's lines are appended (a restart's server, after the first's)."""
        self.command = command
        self.log_path = log_path
        self.replace_log = replace_log
        self.on_log = on_log
        self.connection = connection or Connection()
        self.log_error: str | None = None  # why the log file stopped being written, if it did
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._secrets = command.secrets() | self.connection.secrets()
        self._process: subprocess.Popen[bytes] | None = None
        self._server_pid: int | None = None
        self._pid_known = threading.Event()
        self._reader: threading.Thread | None = None
        self._startup_s: float | None = None
        self._lock = threading.Lock()
        self._forked_copy = False  # this object was inherited by a forked child

    # -- what is known about it ---------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The server's pid (also its process group), once the guard has started it."""
        return self._server_pid

    @property
    def url(self) -> str:
        """Where rampwatch connects (``command.base_url``)."""
        return self.command.base_url

    @property
    def guard_pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def startup_s(self) -> float | None:
        """Seconds from spawn to ready, once ``start`` has returned."""
        return self._startup_s

    @property
    def tail(self) -> list[str]:
        """The last log lines (redacted), oldest first."""
        with self._lock:
            return list(self._tail)

    def poll(self) -> int | None:
        """The server's exit code once it has exited (128+N for signal N), else None."""
        if self._process is None or self._forked_copy:
            return None
        code = self._process.poll()
        if code is None:
            return None
        self._join_reader()
        return exit_code_of(code)

    # -- lifecycle ----------------------------------------------------------------------

    def start(
        self, timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S, on_phase: Callable[[str], None] | None = None
    ) -> float:
        """Start the server and wait until ``/health`` answers 200 and ``/v1/models`` lists
        a model; returns the startup duration in seconds. Raises ``ServerExited`` when it
        exits first, ``TargetUnreachable`` when it is not ready within ``timeout_s``,
        ``UserError`` when its port is taken or it wants an API key (it is stopped first). Blocking: call it from a worker thread when
        an event loop runs in this one."""
        if self._process is not None:
            raise RuntimeError("ManagedServer.start called twice")
        command = self.command
        if port_in_use(command.host, command.port):
            where = f"[{command.host}]:{command.port}" if ":" in command.host else f"{command.host}:{command.port}"
            raise UserError(f"--serve: {where} is already in use; stop that server or pass --port")
        if self.log_path is not None:
            try:
                self.log_path.parent.mkdir(parents=True, exist_ok=True)
                with private_file(self.log_path, "w" if self.replace_log else "a", encoding="utf-8") as log:
                    log.write(f"$ {command.shown}\n")
            except OSError as exc:
                raise UserError(f"--server-log {self.log_path}: {exc.strerror or exc}") from None
        started = time.monotonic()
        guard = module_command("rampwatch.loadgen.server.serve_guard", "--grace", repr(DEFAULT_GRACE_S), "--")
        self._process = subprocess.Popen(
            [*guard, *command.argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            bufsize=0,
            start_new_session=True,
            env=command.environment(),
        )
        _LIVE.add(self)
        self._reader = threading.Thread(target=self._read_log, name="server-log", daemon=True)
        self._reader.start()
        self._pid_known.wait(timeout_s)  # the guard's first line, or its exit
        if on_phase is not None:
            on_phase(PHASE_STARTING)
        # On a loop of its own in a worker thread: the caller may be inside an event loop.
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="server-ready")
        try:
            pool.submit(lambda: asyncio.run(self._wait_ready(started + timeout_s, timeout_s, on_phase))).result()
        except BaseException:  # a Ctrl-C too: the server goes first, then the wait sees it gone
            self.stop()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        self._startup_s = time.monotonic() - started
        if on_phase is not None:
            on_phase(PHASE_READY)
        return self._startup_s

    async def _wait_ready(self, deadline: float, timeout_s: float, on_phase: Callable[[str], None] | None) -> None:
        import aiohttp

        from rampwatch.loadgen.transport import redirects
        from rampwatch.loadgen.transport.server_probe import probe_models

        base = self.command.base_url
        healthy = False
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=_PROBE_TIMEOUT_S),
            connector=aiohttp.TCPConnector(ssl=self.connection.ssl()),
        ) as session:
            while True:
                code = self.poll()
                if code is not None:
                    raise ServerExited(code, self.tail, "during startup")
                if time.monotonic() >= deadline:
                    last = self.tail[-1] if self.tail else "no output"
                    raise TargetUnreachable(
                        f"--serve: the server was not ready within {timeout_s:g} s (--serve-timeout); "
                        f"stopped it; last log line: {last}"
                    )
                if not healthy:
                    try:
                        async with redirects.request(
                            session, "GET", base + "/health", headers=self.connection.request_headers()
                        ) as resp:
                            healthy = resp.status == 200
                    except (aiohttp.ClientError, TimeoutError):
                        healthy = False
                    if healthy and on_phase is not None:
                        on_phase(PHASE_HEALTHY)
                if healthy:
                    try:
                        answer = await probe_models(base, timeout_s=_PROBE_TIMEOUT_S, connection=self.connection)
                    except UserError:
                        answer = None
                    if answer is not None and answer.status in (401, 403):
                        raise UserError(
                            f"--serve: {answer.url} answered HTTP {answer.status}; "
                            "pass the server's --api-key to rampwatch as --api-key"
                        )
                    if answer is not None and answer.models:
                        return
                await asyncio.sleep(_PROBE_INTERVAL_S)

    def stop(self, grace_s: float = DEFAULT_GRACE_S) -> int | None:
        """Stop the server: SIGTERM to its whole process group, SIGKILL after ``grace_s``
        (the guard does it). Idempotent; returns its exit code (None if never started)."""
        process = self._process
        if process is None or self._forked_copy:
            return None
        if process.poll() is None:
            stdin = process.stdin
            try:
                if stdin is not None and not stdin.closed:
                    stdin.write(f"{grace_s!r}\n".encode())
                    stdin.close()  # EOF: the guard stops the server
            except OSError:  # the guard is gone already
                pass
            try:
                process.wait(grace_s + _GUARD_MARGIN_S)
            except subprocess.TimeoutExpired:  # the guard failed: do its work
                for pgid in (self._server_pid, process.pid):
                    if pgid is not None:
                        signal_group(pgid, signal.SIGKILL)
                process.wait()
        if self._server_pid is not None and group_alive(self._server_pid):
            # The guard itself was killed and left the server behind: stop it from here.
            self._stop_orphaned_group(self._server_pid, grace_s)
        _LIVE.discard(self)
        self._join_reader()
        for stream in (process.stdin, process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        return exit_code_of(process.returncode)

    @staticmethod
    def _stop_orphaned_group(pgid: int, grace_s: float) -> None:
        signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)  # not our child: nothing to wait on but the group's end
        signal_group(pgid, signal.SIGKILL)

    def __enter__(self) -> ManagedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the log --------------------------------------------------------------------------

    def clean_line(self, raw: str) -> str:
        """A log line as kept, shown and written: progress-bar redraws reduced to the last,
        colours dropped, tabs expanded, secrets masked, other control characters escaped."""
        line = raw.rstrip("\r\n").split("\r")
        text = next((part for part in reversed(line) if part.strip()), "")
        return server_text(_ANSI.sub("", text).expandtabs(4), self._secrets)

    def _read_log(self) -> None:
        process = self._process
        assert process is not None and process.stdout is not None
        fd = process.stdout.fileno()
        log: IO[str] | None = None
        if self.log_path is not None:
            try:
                log = private_file(self.log_path, "a", encoding="utf-8")
            except OSError as exc:
                self.log_error = str(exc.strerror or exc)
        pending = b""
        try:
            # os.read on the raw pipe, no buffered reader: a buffered one would hold its
            # lock here, and a process forked meanwhile could never close its copy.
            while chunk := os.read(fd, 65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    log = self._take_line(raw.decode("utf-8", errors="replace"), log)
            if pending:
                log = self._take_line(pending.decode("utf-8", errors="replace"), log)
        except (OSError, ValueError):  # the pipe was closed under us (stop)
            pass
        finally:
            self._pid_known.set()
            if log is not None:
                try:
                    log.close()
                except OSError:
                    pass

    def _take_line(self, text: str, log: IO[str] | None) -> IO[str] | None:
        """Keep, write and hand on one line; returns the log file, or None once it failed."""
        if self._server_pid is None and text.startswith(PID_LINE_PREFIX):
            try:
                self._server_pid = int(text[len(PID_LINE_PREFIX) :])
            except ValueError:
                pass
            self._pid_known.set()
            return log
        line = self.clean_line(text)
        with self._lock:
            self._tail.append(line)
        if log is not None:
            try:
                log.write(line + "\n")
                log.flush()
            except OSError as exc:  # e.g. the disk is full: the run goes on, unlogged
                self.log_error = str(exc.strerror or exc)
                log = None
        if self.on_log is not None:
            self.on_log(line)
        return log

    def _join_reader(self) -> None:
        reader = self._reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(2.0)

    def _forget_pipes(self) -> None:
        """In a forked child: let go of the guard's pipes; only the parent owns the server."""
        process = self._process
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()  # raw pipes (bufsize=0): no lock a vanished thread could hold
        self._forked_copy = True
