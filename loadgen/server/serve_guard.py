"""The guard between rampwatch and a server it starts (``--serve``): ``python -m
rampwatch.loadgen.server.serve_guard [--grace SECONDS] -- ARGV…``.

rampwatch never executes a server command itself. It starts this small process in a
session of its own (so a Ctrl-C at the terminal never reaches the server before
rampwatch has stopped the load), holds the write end of the guard's stdin, and reads the
guard's stdout for the server's log. The guard runs ARGV in a process group of its own
(stdin from /dev/null, output shared with the guard's) and:

- when its stdin reaches EOF — rampwatch stopped it, exited, crashed or was killed with
  SIGKILL: the kernel closes the pipe in every case, from whichever thread opened it —
  sends SIGTERM to the server's whole process group, and SIGKILL after the grace period
  (``--grace``, or the last number rampwatch wrote on the pipe before closing it);
- when the server exits on its own, kills what is left of its group (vLLM's engine-core
  children) and exits with the server's exit code (128+N for signal N);
- on SIGTERM, SIGHUP or SIGINT to itself, does as on EOF.

Linux's ``PR_SET_PDEATHSIG`` alone would not do: it follows the thread that spawned the
child, not the process, and never reaches grandchildren such as vLLM's engine cores. The
stdin pipe covers both. (A process rampwatch forks must not keep the pipe open:
``loadgen.server.managed`` closes its end in every forked child.)

Its first line of output is ``rampwatch serve_guard: server pid N``, so that rampwatch
knows the server's process group even if the guard itself were to die.

Standard library only: it starts in a few tens of milliseconds and outlives nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

PID_LINE_PREFIX = "rampwatch serve_guard: server pid "
DEFAULT_GRACE_S = 10.0
_POLL_S = 0.05
# What the children of a server that exited on its own get to finish before SIGKILL.
ORPHAN_GRACE_S = 2.0


def exit_code_of(returncode: int) -> int:
    """A ``Popen.returncode`` as a shell reports it: 128+N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the server's group; SIGKILL to what is left after ``grace_s``."""
    pgid = proc.pid
    signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader, or the group stays "alive" as a zombie
        if not group_alive(pgid):
            return
        time.sleep(_POLL_S)
    signal_group(pgid, signal.SIGKILL)
    proc.wait()


def parse_args(argv: list[str]) -> tuple[float, list[str]]:
    grace = DEFAULT_GRACE_S
    if "--" not in argv:
        raise SystemExit("serve_guard: usage: python -m rampwatch.loadgen.server.serve_guard [--grace S] -- ARGV...")
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    if options[:1] == ["--grace"] and len(options) == 2:
        grace = float(options[1])
    elif options:
        raise SystemExit(f"serve_guard: unknown options {options}")
    if not command:
        raise SystemExit("serve_guard: no command after --")
    return grace, command


def main(argv: list[str]) -> int:
    grace, command = parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, process_group=0)
    except OSError as exc:
        print(f"cannot start {command[0]}: {exc.strerror or exc}", flush=True)
        return 127
    print(f"{PID_LINE_PREFIX}{proc.pid}", flush=True)

    def watch_stdin() -> None:
        nonlocal grace
        # os.read, not sys.stdin: a thread parked in a buffered read holds its lock.
        pending = b""
        try:
            while chunk := os.read(0, 4096):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    try:
                        grace = max(0.0, float(line))
                    except ValueError:
                        pass
        except OSError:
            pass
        stop.set()

    threading.Thread(target=watch_stdin, name="stdin-eof", daemon=True).start()
    while not stop.is_set():
        if proc.poll() is not None:
            code = exit_code_of(proc.returncode)
            if group_alive(proc.pid):  # the server is gone: its children (engine cores) go too
                stop_group(proc, min(grace, ORPHAN_GRACE_S))
            return code
        stop.wait(_POLL_S)
    stop_group(proc, grace)
    return exit_code_of(proc.returncode if proc.returncode is not None else proc.wait())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
