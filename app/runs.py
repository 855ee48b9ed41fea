"""The registry of this user's runs on this host: where each run's control socket and state
file live, how an id (or a prefix of one) names a run, and which runs `rampwatch ps` lists.

Every run has an id, a Unix socket ``ID.sock`` (``app.control``) and a state file
``ID.json`` in one directory of the user's: ``$XDG_RUNTIME_DIR/rampwatch/``, else
``/tmp/rampwatch-$UID/``. The directory is 0700 and the user's own, checked on every use
(a directory another user made, or one others can enter, is refused with one line): the
sockets in it are how a run is steered."""

from __future__ import annotations

import json
import os
import secrets
import stat
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rampwatch.core import strict_json
from rampwatch.core.errors import UserError
from rampwatch.core.redact import redact_text

# Finished runs stay listed for a day, at most this many of them.
KEEP_FINISHED_S = 24 * 3600.0
KEEP_FINISHED_COUNT = 20

# The states a run's state file passes through.
STARTING = "starting"  # the process is up, its server starting
RUNNING = "running"  # the load runs (the run's own state is in ``run_state``)
FINISHED = "finished"  # the run ended: ``exit_code`` and ``finished_at`` are set
STALE = "stale"  # listed as running, but its process is gone (killed): shown, never stored


def runtime_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and Path(base).is_dir():
        return Path(base) / "rampwatch"
    return Path(f"/tmp/rampwatch-{os.getuid()}")


def checked_dir(path: Path | None = None, create: bool = True) -> Path:
    """The runs directory, made 0700 if missing; one line when it is not ours or others
    may enter it."""
    path = path if path is not None else runtime_dir()
    if create:
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"runs directory {path}: {exc.strerror or exc}") from None
    try:
        info = path.lstat()
    except FileNotFoundError:
        return path
    check_private(path, info, "runs directory", 0o700, stat.S_ISDIR)
    return path


def check_private(path: Path, info: os.stat_result, what: str, mode: int, is_kind) -> None:
    """``path`` (its ``lstat``) is of the kind ``is_kind`` wants, this user's and no more
    open than ``mode``; else one line saying which."""
    if not is_kind(info.st_mode):
        raise UserError(f"{what} {path}: not a {'directory' if is_kind is stat.S_ISDIR else 'socket'}")
    if info.st_uid != os.getuid():
        raise UserError(f"{what} {path}: belongs to another user (uid {info.st_uid}); refusing to use it")
    loose = stat.S_IMODE(info.st_mode) & ~mode
    if loose:
        raise UserError(
            f"{what} {path}: mode {stat.S_IMODE(info.st_mode):04o} lets other users in "
            f"(want {mode:04o}); fix it with chmod {mode:o} {path}"
        )


def new_run_id() -> str:
    """Short, unique enough to type: 8 hex digits, checked against the directory."""
    return secrets.token_hex(4)


@dataclass
class RunState:
    """What ``ID.json`` says about a run (``rampwatch ps`` shows it). ``target`` is
    redacted by the writer; ``pid`` is the process that owns the run (and its server)."""

    id: str
    pid: int
    scenario: str
    target: str
    state: str = STARTING
    started: float = field(default_factory=time.time)
    run_state: str = ""  # the run's own state (ramping, holding, draining, done …)
    elapsed_s: float = 0.0
    rate_rps: float = 0.0
    recording: str | None = None
    log: str | None = None
    run_pid: int | None = None  # the process that executes the load (and serves the socket)
    finished_at: float | None = None
    exit_code: int | None = None
    detached: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def state_path(run_id: str, directory: Path | None = None) -> Path:
    return (directory or runtime_dir()) / f"{run_id}.json"


def socket_path(run_id: str, directory: Path | None = None) -> Path:
    return (directory or runtime_dir()) / f"{run_id}.sock"


def write_state(state: RunState, directory: Path | None = None) -> None:
    """Atomically (a reader never sees half a file); 0600."""
    path = state_path(state.id, directory)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(strict_json.dumps(asdict(state)))
    os.replace(tmp, path)


def update_state(run_id: str, directory: Path | None = None, **changes: Any) -> RunState | None:
    """The stored state with ``changes`` (None: no such run, or it cannot be written —
    the registry never fails a run). Two processes update a run's file (its owner and
    the one executing it): each update holds the runs directory's ``flock`` (a lock on
    the directory itself, so no lock file is left behind), so none is lost."""
    import fcntl

    try:
        fd = os.open(directory or runtime_dir(), os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        state = read_state(state_path(run_id, directory))
        if state is None:
            return None
        for key, value in changes.items():
            setattr(state, key, value)
        write_state(state, directory)
        return state
    except OSError:
        return None
    finally:
        os.close(fd)


def read_state(path: Path) -> RunState | None:
    try:
        return RunState.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process took the number
        return False
    try:  # a zombie (an exited child not reaped yet) is gone for our purposes
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False
        with open(f"/proc/{pid}/cmdline", "rb") as fh:  # the number reused by another program
            return b"rampwatch" in fh.read()
    except (OSError, IndexError):
        return True


def shown_state(state: RunState, directory: Path | None = None) -> str:
    """``state.state``, or STALE for a run that says it runs but whose process is gone."""
    if state.state != FINISHED and not pid_alive(state.pid):
        return STALE
    return state.state


def list_runs(directory: Path | None = None, now: float | None = None, clean: bool = True) -> list[RunState]:
    """The runs to show, oldest first: every live one, stale ones (their process was
    killed), and finished ones of the last ``KEEP_FINISHED_S`` (at most
    ``KEEP_FINISHED_COUNT``). With ``clean``, older finished and stale entries are removed
    (their files; never a recording)."""
    directory = directory or runtime_dir()
    now = time.time() if now is None else now
    if not directory.exists():
        return []
    states = [s for s in (read_state(p) for p in directory.glob("*.json")) if s is not None]
    states.sort(key=lambda s: (s.started, s.id))
    ended = [s for s in states if shown_state(s, directory) in (FINISHED, STALE)]
    ended.sort(key=lambda s: s.finished_at or s.started, reverse=True)
    drop = {
        s.id
        for i, s in enumerate(ended)
        if i >= KEEP_FINISHED_COUNT or now - (s.finished_at or s.started) > KEEP_FINISHED_S
    }
    if clean:
        for run_id in drop:
            forget(run_id, directory)
        live = {s.id for s in states if s.id not in drop and shown_state(s, directory) in (STARTING, RUNNING)}
        remove_old_lock_files(directory, live)
    return [s for s in states if s.id not in drop]


def remove_old_lock_files(directory: Path, live: set[str]) -> None:
    """``.ID.lock``: the per-run lock files that earlier versions left behind, one a run
    (updates now lock the directory). Those of runs not running now are removed."""
    for lock in directory.glob(".*.lock"):
        if lock.name[1 : -len(".lock")] not in live:
            lock.unlink(missing_ok=True)


def forget(run_id: str, directory: Path | None = None) -> None:
    for path in (state_path(run_id, directory), socket_path(run_id, directory)):
        try:
            path.unlink()
        except OSError:
            pass


def resolve(prefix: str, directory: Path | None = None) -> RunState:
    """The run an id or an unambiguous prefix of one names; one line otherwise."""
    directory = directory or checked_dir(create=False)
    if not prefix or "/" in prefix or prefix.startswith("."):
        raise UserError(f"run id {prefix!r}: not a run id (see rampwatch ps)")
    matches = [s for s in list_runs(directory, clean=False) if s.id.startswith(prefix)]
    if not matches:
        raise UserError(f"run id {prefix!r}: no such run of yours on this host (see rampwatch ps)")
    exact = [s for s in matches if s.id == prefix]
    if exact:
        return exact[0]
    if len(matches) > 1:
        ids = ", ".join(sorted(s.id for s in matches))
        raise UserError(f"run id {prefix!r}: names {len(matches)} runs ({ids}); give more of it")
    return matches[0]


def format_table(runs: list[RunState], now: float | None = None, directory: Path | None = None) -> str:
    """`rampwatch ps`: one row a run."""
    now = time.time() if now is None else now
    rows = [("ID", "SCENARIO", "TARGET", "STATE", "ELAPSED", "RATE", "RECORDING")]
    for s in runs:
        shown = shown_state(s, directory)
        rate = f"{s.rate_rps:.1f} rps" if shown == RUNNING else "-"
        state = shown
        if shown == FINISHED:
            state = f"exit {s.exit_code}" if s.exit_code is not None else "finished"
        elif shown == RUNNING and s.run_state:
            state = s.run_state
        if s.detached and shown in (STARTING, RUNNING):
            state += " (detached)"
        rows.append((s.id, s.scenario, s.target, state, _duration(s.elapsed_s), rate, recording_cell(s, shown)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1] for row in rows
    )


def recording_cell(s: RunState, shown: str) -> str:
    """The recording a run wrote, or is writing: a path only where there is a file (a run
    that ended before its load began — a server that never started — wrote none)."""
    if not s.recording:
        return "-"
    if Path(s.recording).exists():
        return s.recording
    return f"{s.recording} (not yet)" if shown in (STARTING, RUNNING) else "- (none written)"


def _duration(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    if seconds < 3600:
        return f"{seconds // 60}:{seconds % 60:02d}"
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def register(
    run_id: str, plan: Any, *, detached: bool = False, log: str | None = None, directory: Path | None = None
) -> RunState | None:
    """This process owns run ``run_id`` of ``plan`` (``app.session.RunPlan``): its state
    file, STARTING. None when the directory is refused or unwritable: the run goes on
    without attach (one line on stderr says why)."""
    try:
        directory = checked_dir(directory)
        state = RunState(
            id=run_id,
            pid=os.getpid(),
            scenario=plan.scenario.name,
            target=redact_text(plan.target),
            recording=None if plan.recording_path is None else str(Path(plan.recording_path).resolve()),
            log=log,
            detached=detached,
        )
        write_state(state, directory)
        list_runs(directory)  # what `ps` cleans, cleaned at each start too
        return state
    except (UserError, OSError) as exc:
        print(f"rampwatch run: no attach for this run: {exc}", file=sys.stderr, flush=True)
        return None


def finished(run_id: str, exit_code: int, directory: Path | None = None) -> None:
    """The run's owner is done: its exit code, for `rampwatch ps` and `rampwatch stop`."""
    update_state(run_id, directory, state=FINISHED, exit_code=exit_code, finished_at=time.time())
    try:
        socket_path(run_id, directory).unlink()
    except OSError:
        pass


def log_path_for(run_id: str, recording: Path | None, directory: Path | None = None) -> Path:
    """Where a run that left its terminal writes: ``X.log`` beside recording ``X.rwrec``,
    else ``ID.log`` in the runs directory."""
    if recording is not None:
        beside = Path(recording).with_suffix(".log")
        return beside if beside != Path(recording) else Path(str(recording) + ".log")
    return (directory or runtime_dir()) / f"{run_id}.log"
