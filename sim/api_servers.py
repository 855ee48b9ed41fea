"""``rampwatch sim --api-server-count N``: N processes serving one port.

vLLM's API server processes share every engine; processes here cannot share an engine
cheaply, so each runs its share of the data-parallel engines (``SimServer`` with its
``rank``): N must divide ``--data-parallel-size``, and the server as a whole has the
engines, KV blocks and capacity that the flags give it, as with one process. What
differs from vLLM: a connection stays with the process that accepted it, whose requests
go to its own engines only, and a ``/metrics`` scrape reaches one process and shows its
engines (the ``engine`` label) only.

The shape::

    parent (rampwatch sim)                      process k of N (forked, before any event loop)
      binds N sockets to one port, SO_REUSEPORT   serves its own socket (the kernel spreads
      (port 0: the others join the first's port)    new connections over the N by hash)
      life pipe: holds its write end ─────────▶   reads EOF when the parent is gone → stops
      status pipe k ◀── "ready" byte ───────────  once serving; EOF when it exits
      prints the ready line once all N are ready
      SIGINT/SIGTERM → SIGTERM to each, waits      SIGINT/SIGTERM → stops cleanly
      merges their chunk-gap files into FILE       writes FILE.part-k (--chunk-gaps-out)

SO_REUSEPORT sockets rather than one inherited socket: with one socket every process is
woken for each connection and the first to run takes it (and asyncio accepts up to its
backlog per wake-up), so a burst of connections can all land on one process; with one
socket each, the kernel spreads them evenly.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from rampwatch.sim.chunk_gaps import ChunkGaps, remove_files
from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import SimServer, serve_until

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# How long the parent waits for its processes to stop after SIGTERM before SIGKILL.
STOP_GRACE_S = 30.0
_READY = b"r"


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` listening sockets on one ``host``:``port`` (port 0: a free one).

    Raises ``OSError`` (a bind error only) when the address cannot be had, and
    ``errno.EADDRINUSE`` when anything listens there already: SO_REUSEPORT alone would
    let a second ``rampwatch sim`` (or any process of this user) join the port, and the
    kernel would spread the connections over two different servers. So the port is first
    bound by a plain socket (SO_REUSEADDR only, as the one-process server binds: a port
    with connections in TIME_WAIT is free, one with a listener is not), which is closed
    before the group binds. A process that binds the port in between still joins it; the
    probe makes that a race of microseconds rather than the rule."""
    addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = addresses[0]
    if port != 0:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    # Port 0: the kernel gives the first socket a port that no socket holds, SO_REUSEPORT
    # or not, and the others join it.
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
            address = sock.getsockname()  # the next ones join the port this one got
            sock.listen(1024)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def part_path(path: Path, rank: int) -> Path:
    """Where process ``rank`` writes its chunk gaps before the parent merges them."""
    return path.with_name(f"{path.name}.part-{rank}")


def stale_parts(path: Path) -> list[Path]:
    """Part files (and their streams files) beside ``path`` that a run killed before its
    merge left behind: merged with this run's, they would pass for this run's gaps."""
    prefix = f"{path.name}.part-"
    try:
        return sorted(entry for entry in path.parent.iterdir() if entry.name.startswith(prefix))
    except OSError:
        return []


def serve_processes(
    config: SimConfig,
    host: str,
    sockets: list[socket.socket],
    on_ready: Callable[[str], None],
    chunk_gaps_out: Path | None,
) -> int:
    """Serve from one forked process per socket (``listening_sockets``) until
    SIGINT/SIGTERM; the exit code. The sockets are closed here."""
    count = len(sockets)
    real_port = sockets[0].getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    url = f"http://{url_host}:{real_port}"
    life_read, life_write = os.pipe()
    # Blocked until each process's loop has its handlers: a signal that arrives before
    # then waits instead of killing a half-started process or the parent mid-fork.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    sys.stdout.flush()
    sys.stderr.flush()
    children: list[tuple[int, int]] = []  # (pid, read end of its status pipe)
    try:
        for rank in range(count):
            status_read, status_write = os.pipe()
            try:
                pid = os.fork()
            except OSError:
                os.close(status_read)
                os.close(status_write)
                raise
            if pid == 0:
                code = 1
                try:
                    os.close(life_write)  # only the parent's copy may keep the pipe open
                    os.close(status_read)
                    for _, earlier in children:
                        os.close(earlier)
                    for i, sock in enumerate(sockets):
                        if i != rank:
                            sock.close()  # a socket nobody accepts on would swallow connections
                    code = asyncio.run(
                        _serve_one(config, host, rank, count, sockets[rank], life_read, status_write, chunk_gaps_out)
                    )
                except BaseException as exc:  # noqa: BLE001 - a forked process must never return into the parent's code
                    print(f"rampwatch sim: process {rank}: {exc!r}", file=sys.stderr, flush=True)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            os.close(status_write)
            children.append((pid, status_read))
    except OSError:
        # A fork or a pipe refused (process or descriptor limits): none may stay behind.
        for pid, status_read in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(status_read)
        os.close(life_read)
        os.close(life_write)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        raise
    finally:
        for sock in sockets:
            sock.close()
    os.close(life_read)
    try:
        stopped_by_signal = asyncio.run(_supervise(children, url, on_ready))
    finally:
        os.close(life_write)
    # Every process has exited (its status pipe reached end-of-file) or been killed.
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid, _ in children]
    merged = chunk_gaps_out is None or _merge_chunk_gaps(chunk_gaps_out, len(children))
    if not stopped_by_signal:
        failed = [f"process {rank} exited with {code}" for rank, code in enumerate(codes) if code != 0]
        print(f"rampwatch sim: {', '.join(failed) or 'a process exited'}; stopped the others", file=sys.stderr)
        return 1
    return 0 if merged and all(code == 0 for code in codes) else 1


async def _serve_one(
    config: SimConfig,
    host: str,
    rank: int,
    count: int,
    sock: socket.socket,
    life_read: int,
    status_write: int,
    chunk_gaps_out: Path | None,
) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    # The parent never writes: the pipe becomes readable (EOF) only when the parent is
    # gone, however it went (SIGKILL too), and then this process stops.
    loop.add_reader(life_read, stop.set)
    server = SimServer(config, rank=rank, api_server_count=count, keep_chunk_gaps=chunk_gaps_out is not None)
    await serve_until(server, host, 0, stop, on_ready=lambda _url: os.write(status_write, _READY), sock=sock)
    if chunk_gaps_out is not None and server.chunk_gaps is not None:
        part = part_path(chunk_gaps_out, rank)
        try:
            server.chunk_gaps.write(part)
        except OSError as exc:
            print(f"rampwatch sim: process {rank}: cannot write {part}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    return 0


async def _supervise(children: list[tuple[int, int]], url: str, on_ready: Callable[[str], None]) -> bool:
    """Print the ready line once all are serving; on a stop signal, or when one process
    exits on its own, stop them all and wait for them. True when a signal stopped them."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    ready: set[int] = set()
    exited: dict[int, asyncio.Event] = {rank: asyncio.Event() for rank in range(len(children))}
    one_exited = asyncio.Event()

    def on_status(rank: int, fd: int) -> None:
        data = os.read(fd, 64)
        if data:
            ready.add(rank)
            if len(ready) == len(children):
                on_ready(url)
            return
        loop.remove_reader(fd)
        os.close(fd)
        exited[rank].set()
        one_exited.set()

    for rank, (_, fd) in enumerate(children):
        loop.add_reader(fd, on_status, rank, fd)
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(one_exited.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for wait in waits:
        wait.cancel()
    stopped_by_signal = stop.is_set()
    for rank, (pid, _) in enumerate(children):
        if not exited[rank].is_set():
            os.kill(pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in exited.values())), STOP_GRACE_S)
    except TimeoutError:
        for rank, (pid, _) in enumerate(children):
            if not exited[rank].is_set():
                print(f"rampwatch sim: process {rank} did not stop in {STOP_GRACE_S:g} s: killed", file=sys.stderr)
                os.kill(pid, signal.SIGKILL)
    return stopped_by_signal


def _merge_chunk_gaps(path: Path, count: int) -> bool:
    """The processes' gap files joined into ``path`` (process 0's first); the parts are
    removed once ``path`` is written, and kept (and named) when it cannot be. At most one
    line says what is missing; False when some gaps are not in ``path``."""
    merged = ChunkGaps()
    read: list[Path] = []
    missing: list[str] = []
    for rank in range(count):
        part = part_path(path, rank)
        if not part.exists():
            missing.append(f"process {rank} left no part file")
            continue
        try:
            merged.extend(ChunkGaps.read(part))
        except (OSError, ValueError) as exc:
            missing.append(f"{part} cannot be read, kept ({exc})")
            continue
        read.append(part)
    try:
        merged.write(path)
    except OSError as exc:
        kept = ", ".join(str(part) for part in read)
        print(
            f"rampwatch sim: error: --chunk-gaps-out {path}: cannot write: {exc.strerror or exc}"
            + (f"; the processes' gaps are kept in {kept}" if kept else "")
            + "".join(f"; {problem}" for problem in missing),
            file=sys.stderr,
        )
        return False
    for part in read:
        remove_files(part)
    if missing:
        print(f"rampwatch sim: --chunk-gaps-out {path}: lacks some gaps: {'; '.join(missing)}", file=sys.stderr)
    return not missing
