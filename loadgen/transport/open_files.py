"""The client's own limit on open files (``RLIMIT_NOFILE``, ``ulimit -n``).

Every request in flight holds a socket. Past the soft limit a connection cannot be opened
(``EMFILE``, "Too many open files"; ``ENFILE`` when the whole system is out): that is the
client's failure, recorded as ``client_limit``, never the server's ``connect``. At the
start of a run the soft limit is raised to what the run may need (the hard limit allows
it without privileges); where the hard limit is lower, one warning says so with numbers.
"""

from __future__ import annotations

import errno
import resource

# Descriptors a run holds besides its requests' sockets: the interpreter's, the recording,
# pipes to the UI and the workers, the /metrics scrapes, the parse process.
OPEN_FILES_MARGIN = 64
# Without a concurrency cap the requests in flight are unbounded: the soft limit is raised
# to the hard one, up to this (an "unlimited" hard limit is not a number to ask for).
UNCAPPED_OPEN_FILES = 1 << 20


def open_files_needed(max_concurrency: int | None) -> int | None:
    """Descriptors a run with this cap may hold at once; None without a cap (unknowable)."""
    return None if not max_concurrency else max_concurrency + OPEN_FILES_MARGIN


def raise_open_files_limit(max_concurrency: int | None) -> str | None:
    """Raise this process's soft ``RLIMIT_NOFILE`` to what the run may need (its load
    workers, started after, inherit it); one warning line when the hard limit is below
    that, else None."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = open_files_needed(max_concurrency)
    ceiling = UNCAPPED_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, UNCAPPED_OPEN_FILES)
    wanted = min(ceiling, needed if needed is not None else ceiling)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):  # a sandbox that refuses: the limit stays as it is
            pass
    if needed is None or soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    return (
        f"--max-concurrency {max_concurrency} may hold about {needed:,} open files, and this process may open "
        f"{soft:,} (ulimit -n; hard limit {hard:,}): requests past that fail in the client as client_limit, "
        f"not at the server; raise the limit (ulimit -n {needed}) or lower --max-concurrency"
    )


def out_of_files(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what it wraps or was raised from) is the client running out of
    file descriptors: ``EMFILE`` (this process) or ``ENFILE`` (the system)."""
    for _ in range(5):  # aiohttp wraps the OSError once or twice
        if exc is None:
            return False
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE):
            return True
        exc = getattr(exc, "os_error", None) or exc.__cause__ or exc.__context__
    return False
