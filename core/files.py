"""Files that may hold prompts, answers or server text (recordings, result JSONs, server
and run logs, exports): created 0600 whatever the umask, and — for a run's outputs —
never replaced without ``--force`` and written by one run at a time.

A run claims its outputs before anything starts (``claim_outputs``): each is created
exclusively (``O_EXCL``), or with ``--force`` opened as it is, and held under an
exclusive ``flock`` until the run has written it. A second run naming the same path is
refused with one line, whether it came a moment later or with ``--force``. An empty file
that no run holds (a run killed before it wrote) has nothing to lose and is taken. A claim that
ends with its file still empty (the run stopped before writing it) removes the file it
created, so a refused or failed start leaves nothing behind.

Standard output, the file every command writes: ``stdout_reader_gone`` tells a closed
pipe (`| head` has left) from any other broken pipe, ``silence_stdout`` sends the rest
to /dev/null (``app.cli``: exit 141; a headless run goes on)."""

from __future__ import annotations

import atexit
import fcntl
import os
import select
import stat
import sys
from pathlib import Path
from typing import IO, Any

from rampwatch.core.errors import UserError

PRIVATE_MODE = 0o600


def make_private(fd: int) -> None:
    """A regular file of ours, open on ``fd``, gets mode 0600 (a device such as
    ``/dev/null`` or a pipe is left as it is)."""
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != PRIVATE_MODE:
        os.fchmod(fd, PRIVATE_MODE)


def open_private(path: str | Path, flags: int = os.O_WRONLY | os.O_TRUNC) -> int:
    """``os.open`` of ``path`` with ``O_CREAT`` and mode 0600, also when the file was
    there before (umask or an older mode cannot leave it readable by others)."""
    fd = os.open(path, flags | os.O_CREAT, PRIVATE_MODE)
    try:
        make_private(fd)
    except OSError:
        os.close(fd)
        raise
    return fd


def private_file(path: str | Path, mode: str = "w", **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` for writing ("w", "wb", "a"), the file made 0600."""
    flags = os.O_WRONLY | (os.O_APPEND if mode.startswith("a") else os.O_TRUNC)
    return os.fdopen(open_private(path, flags), mode, **kwargs)


def is_special(path: Path) -> bool:
    """A device or a pipe (``--record /dev/full``): written as it is, never claimed."""
    try:
        return not stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def held_by_another(path: Path) -> bool:
    """Whether a run holds ``path`` (its claim's ``flock``) now."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _exists(flag: str, path: Path) -> UserError:
    return UserError(f"{flag} {path}: exists; pass --force to replace it, or give another path")


def _held(flag: str, path: Path) -> UserError:
    return UserError(f"{flag} {path}: another rampwatch run is writing it; give this run another path")


def check_replaceable(flag: str, path: Path, force: bool) -> None:
    """Before a run: ``path`` may be written — new or empty, or ``--force`` over a file no
    run holds."""
    if is_special(path) or not path.exists():
        return
    if held_by_another(path):
        raise _held(flag, path)
    if not force and path.stat().st_size > 0:
        raise _exists(flag, path)


class _Held:
    def __init__(self, path: Path, fd: int, created: bool) -> None:
        self.path, self.fd, self.created = path, fd, created


class OutputClaim:
    """A run's outputs, held (``claim_outputs``) until ``release``: in the process that
    claimed them only (a forked run process shares the lock, never releases it)."""

    def __init__(self) -> None:
        self._held: list[_Held] = []
        self._pid = os.getpid()

    def _take(self, flag: str, path: Path, force: bool) -> None:
        if is_special(path):
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        created = True
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, PRIVATE_MODE)
        except FileExistsError:
            created = False
            fd = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _held(flag, path) from None
        if not created:
            empty = os.fstat(fd).st_size == 0
            if not empty and not force:
                os.close(fd)
                raise _exists(flag, path)
            # An empty file (a claim of a run killed before it wrote) holds nothing to
            # lose: taken as if created, and removed again if this run writes nothing.
            created = empty
        self._held.append(_Held(path, fd, created))

    def release(self) -> None:
        """Let the outputs go; a file the claim created that is still empty is removed."""
        if os.getpid() != self._pid:
            return
        held, self._held = self._held, []
        for item in held:
            try:
                if item.created and os.path.samestat(os.fstat(item.fd), item.path.stat()):
                    if item.path.stat().st_size == 0:
                        item.path.unlink()
            except OSError:
                pass  # replaced or removed meanwhile: not the claim's file any more
            finally:
                os.close(item.fd)
        _CLAIMS.discard(self)


_CLAIMS: set[OutputClaim] = set()


def claim_outputs(named: list[tuple[str, Path]], force: bool) -> OutputClaim:
    """Claim each ``(flag, path)`` (see the module's docstring); one line naming the flag
    and path when one cannot be claimed, and then none is held."""
    claim = OutputClaim()
    try:
        for flag, path in named:
            try:
                claim._take(flag, path, force)
            except UserError:
                raise
            except OSError as exc:
                raise UserError(f"{flag} {path}: {exc.strerror or exc}") from None
    except BaseException:
        claim.release()
        raise
    _CLAIMS.add(claim)
    return claim


@atexit.register
def release_all() -> None:
    """Every claim this process still holds (its run ended some other way)."""
    for claim in list(_CLAIMS):
        claim.release()


# ---- standard output: a reader that leaves early (`| head`)


def stdout_reader_gone() -> bool:
    """Whether standard output is a pipe (or socket) whose reader has gone: it polls as
    an error. A broken pipe elsewhere (a server's socket, a child's pipe) is not this."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def silence_stdout() -> None:
    """Standard output to /dev/null: what is still buffered, and the flush at exit, go
    nowhere instead of raising again (Python's own "Exception ignored" line)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
