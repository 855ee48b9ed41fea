"""`--prometheus-linger SECONDS`: after the run, its `--prometheus-port` keeps serving until
one scrape has read the final figures (``rampwatch_run_done`` 1, the final counts), at
most SECONDS after the run's end; Ctrl-C (or SIGTERM) skips the wait.

Prometheus scrapes every 15 s by default: a port that closed with the run would lose its
last interval and the final counts. Who waits: a headless (or detached) run's own
process, where the target serves; under the live screen the run's forked process, which
the screen's process then waits for (``note_run_process``). Either way the wait comes
after the run is marked finished (``rampwatch ps``, ``rampwatch stop``) and its summary
printed, and is said in one line on stderr."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TextIO

# Past its own bound, a run process that has not ended is waited for this much longer.
PROCESS_MARGIN_S = 5.0
# A run process whose scrape just came is letting its port go: not said as waiting.
PROCESS_CLOSING_S = 1.0


class _Target(Protocol):
    host: str
    finished_at: float | None

    @property
    def address(self) -> tuple[str, int]: ...

    def awaits_final_read(self) -> bool: ...

    def linger(self, bound_s: float) -> bool: ...

    def close(self) -> None: ...


class _RunProcess(Protocol):
    def process_alive(self) -> bool: ...

    def wait_process(self, timeout: float | None, terminate: bool = True) -> bool: ...


# Live runs' forked processes that serve a port after the run (this process waits for them).
_RUN_PROCESSES: list[tuple[_RunProcess, str]] = []


def note_run_process(process: _RunProcess, address: str) -> None:
    """A live run's process, serving ``address`` after its run: ``linger`` waits for it."""
    _RUN_PROCESSES.append((process, address))


def waiting_line(address: str, bound_s: float) -> str:
    """The one line said while the port is kept open."""
    return (
        f"rampwatch run: --prometheus-port: serving the final figures on {address} until a scrape reads them "
        f"(at most {bound_s:g} s after the run's end, --prometheus-linger; Ctrl-C skips)"
    )


@contextmanager
def skipped_by_signals() -> Iterator[None]:
    """SIGTERM ends the wait as Ctrl-C does (``KeyboardInterrupt``), in the main thread."""

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: Ctrl-C alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def linger_targets(targets: list[_Target], bound_s: float, err: TextIO | None = sys.stderr) -> None:
    """Serve each ended run's final figures until a scrape reads them (``bound_s`` after the
    run's end at most), then close; the wait said on ``err`` (None: silent, a run process
    whose screen says it). Ctrl-C or SIGTERM closes at once."""
    try:
        with skipped_by_signals():
            for target in targets:
                if target.awaits_final_read() and target.finished_at is not None and err is not None:
                    if target.finished_at + bound_s > time.monotonic():
                        host, port = target.address
                        print(waiting_line(f"{host}:{port}", bound_s), file=err, flush=True)
                target.linger(bound_s)
    except KeyboardInterrupt:
        pass
    finally:
        for target in targets:
            target.close()


def wait_run_processes(bound_s: float, err: TextIO = sys.stderr) -> None:
    """Wait for the live runs' processes that still serve their final figures (each ends
    once scraped, or at its bound); Ctrl-C or SIGTERM skips (the processes are daemons:
    multiprocessing ends them with this one)."""
    waiting = [(p, a) for p, a in _RUN_PROCESSES if p.process_alive()]
    _RUN_PROCESSES.clear()
    if not waiting or bound_s <= 0:
        return
    try:
        with skipped_by_signals():
            for process, address in waiting:
                if process.wait_process(PROCESS_CLOSING_S, terminate=False):
                    continue
                print(waiting_line(address, bound_s), file=err, flush=True)
                process.wait_process(bound_s + PROCESS_MARGIN_S)
    except KeyboardInterrupt:
        pass


def linger(bound_s: float, served: Callable[[], list[Any]], err: TextIO = sys.stderr) -> None:
    """The end of `rampwatch run`: this process's targets (``served()``), then the live
    runs' processes."""
    linger_targets(served(), bound_s, err)
    wait_run_processes(bound_s, err)
