"""Errors that mean "the user's input is wrong": the CLI prints them as one line, exit 2."""

import signal


class UserError(Exception):
    """Bad input (file, key, URL, flag). The message must name what is at fault."""

    exit_code = 2


def unreadable_file(flag: str, path: str, exc: OSError | UnicodeDecodeError) -> UserError:
    """Why a file given with ``flag`` could not be read, as the one line that names it."""
    if isinstance(exc, FileNotFoundError):
        why = "no such file"
    elif isinstance(exc, IsADirectoryError):
        why = "is a directory"
    elif isinstance(exc, PermissionError):
        why = "not readable (permission denied)"
    elif isinstance(exc, UnicodeDecodeError):
        why = "not UTF-8 text"
    else:
        why = f"cannot read it ({exc.strerror or exc})"
    return UserError(f"{flag} {path}: {why}")


class TargetUnreachable(UserError):
    """The server could not be reached at all."""

    exit_code = 3


class ModelNotServed(UserError):
    """The server lists its models and ``--model`` is not among them: nothing is sent."""

    exit_code = 4


class ServerExited(UserError):
    """A server rampwatch started (``--serve``) exited on its own. ``server_exit_code`` is
    the server's (128+N for signal N); ``tail`` its last log lines; ``exit_code`` the run's,
    as for every user error."""

    exit_code = 5

    def __init__(self, exit_code: int | None, tail: list[str], when: str = "during startup") -> None:
        last = next((line for line in reversed(tail) if line.strip()), "no output")
        code = "an unknown code" if exit_code is None else f"code {exit_code}"
        if exit_code is not None and exit_code > 128:
            try:
                code += f" ({signal.Signals(exit_code - 128).name})"
            except ValueError:
                pass
        super().__init__(f"server exited with {code} {when}: {last}")
        self.server_exit_code = exit_code
        self.tail = list(tail)
