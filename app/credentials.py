"""Where a run's API key and ``--header`` values come from, so that they need not be in
its command line: every user of the host reads that (``ps``, ``/proc/PID/cmdline``),
while a process's environment and a file of mode 0600 are its owner's alone.

The key: ``--api-key KEY``, ``--api-key-file PATH`` (``-``: stdin; its first line), else
``$OPENAI_API_KEY`` (as ``vllm bench serve`` reads it). Headers: ``--header NAME:VALUE``,
``--header-file PATH`` (``-``: stdin; one ``NAME: VALUE`` a line, ``#`` comments and blank
lines skipped) and ``$RAMPWATCH_HEADERS`` (the same lines); a later one of the same name
wins: the environment's, then the file's, then the flags'. A key or a secret-named header
given on the command line is used, with one warning line saying how to keep it out, and
is overwritten in the process table once rampwatch has started (``hide_in_process_table``).

A process rampwatch starts for the run (``--detach``'s, a sweep's) gets them through its
environment (``child_environment_of``), never its argument list (``without_secret_flags``).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shlex
import sys
from collections.abc import Sequence
from typing import TextIO

from rampwatch.core.errors import UserError, unreadable_file
from rampwatch.core.redact import is_secret_key, secret_values
from rampwatch.loadgen.transport.connection import HEADERS_ENV, parse_header

API_KEY_ENV = "OPENAI_API_KEY"
ARGV_NOTE = "the command line is visible to every user of this host (ps)"
# Flags whose value is a secret: a child process never gets them in its argument list.
SECRET_FLAGS = ("--api-key", "--api-key-file", "--header", "--header-file")


def header_pair(text: str) -> tuple[str, str]:
    """An argparse type for ``--header NAME:VALUE``; its errors never quote the value (a
    header is often a token)."""
    try:
        return parse_header(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_flags(parser: argparse.ArgumentParser, *, headers: bool, whose: str = "") -> None:
    """``--api-key``/``--api-key-file`` (one of them), and with ``headers`` the header flags."""
    key = parser.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"bearer token{whose} (default: ${API_KEY_ENV}); {ARGV_NOTE}: prefer ${API_KEY_ENV} or --api-key-file",
    )
    key.add_argument(
        "--api-key-file",
        metavar="PATH",
        help="read the bearer token from the first line of this file (- : standard input)",
    )
    if not headers:
        return
    parser.add_argument(
        "--header",
        action="append",
        type=header_pair,
        default=[],
        metavar="NAME:VALUE",
        help="extra HTTP header on every request and /metrics scrape, e.g. for a gateway (repeatable); "
        f"values are never shown or recorded, only names; {ARGV_NOTE}: put secret ones in --header-file "
        f"or ${HEADERS_ENV}",
    )
    parser.add_argument(
        "--header-file",
        metavar="PATH",
        help=f"more headers, one NAME: VALUE a line (- : standard input; ${HEADERS_ENV} holds the same lines)",
    )


def _read(flag: str, path: str, stdin: TextIO) -> str:
    if path == "-":
        return stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise unreadable_file(flag, path, exc) from None


def parse_header_lines(text: str, where: str) -> list[tuple[str, str]]:
    """``NAME: VALUE`` lines; a bad one is a ``UserError`` naming ``where`` and its line,
    never quoting the value."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            out.append(parse_header(line))
        except ValueError as exc:
            raise UserError(f"{where}:{number}: {exc}") from None
    return out


def resolve_secrets(
    api_key: str | None,
    api_key_file: str | None,
    headers: list[tuple[str, str]] | None,
    header_file: str | None,
    stdin: TextIO | None = None,
) -> tuple[str | None, list[tuple[str, str]] | None, list[str]]:
    """The key and the headers from every source (``headers`` None: the command has no
    header flags, and gets none), and the warnings to print (a secret given on the command
    line). One-line ``UserError`` on a file that cannot be read or holds a bad line."""
    stdin = stdin if stdin is not None else sys.stdin
    if api_key_file == "-" and header_file == "-":
        raise UserError("--api-key-file - and --header-file -: only one of them can read standard input")
    warnings = []
    if api_key:
        warnings.append(f"--api-key: {ARGV_NOTE}; pass ${API_KEY_ENV} or --api-key-file PATH (- : stdin) instead")
    if api_key_file:
        lines = _read("--api-key-file", api_key_file, stdin).splitlines()
        api_key = lines[0].strip() if lines else ""
        if not api_key:
            raise UserError(f"--api-key-file {api_key_file}: empty (the key is its first line)")
    if headers is not None:
        shown = [name for name, _ in headers if is_secret_key(name)]
        if shown:
            warnings.append(
                f"--header {', '.join(shown)}: {ARGV_NOTE}; pass it in --header-file PATH (- : stdin) "
                f"or ${HEADERS_ENV} instead"
            )
        from_env = parse_header_lines(os.environ.get(HEADERS_ENV, ""), f"${HEADERS_ENV}")
        from_file = (
            [] if not header_file else parse_header_lines(_read("--header-file", header_file, stdin), header_file)
        )
        headers = [*from_env, *from_file, *headers]
    return api_key, headers, warnings


def command_line_secrets(
    api_key: str | None, headers: list[tuple[str, str]], urls: list[str | None], serve: str | None
) -> list[str]:
    """What ``hide_in_process_table`` hides: the key, the values of secret-named headers,
    the passwords of the URLs given (``--target``, ``--metrics-url``,
    ``--gpu-metrics-url``) and the secrets of the ``--serve`` line (``HF_TOKEN=…``,
    ``--api-key …``). A value not on the command line is simply not found there."""
    found = [api_key, *(v for n, v in headers if is_secret_key(n))]
    found += sorted(secret_values([u for u in urls if u]))
    if serve:
        try:
            found += sorted(secret_values(shlex.split(serve)))
        except ValueError:  # unbalanced quotes: the run refuses the line itself
            pass
    return [v for v in found if v]


def without_secret_flags(argv: Sequence[str]) -> list[str]:
    """``argv`` without the flags whose values are secrets (``--api-key X``,
    ``--header=…`` …): what a child process may show in the process table."""
    out: list[str] = []
    skip = False
    for item in argv:
        if skip:
            skip = False
            continue
        if item in SECRET_FLAGS:
            skip = True
            continue
        if item.partition("=")[0] in SECRET_FLAGS:
            continue
        out.append(item)
    return out


def child_environment_of(
    api_key: str | None, headers: list[tuple[str, str]] | None, base: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of a process rampwatch starts for the run: its own, with the key
    and the headers (already resolved) that its command line no longer holds."""
    env = dict(os.environ if base is None else base)
    if api_key:
        env[API_KEY_ENV] = api_key
    if headers is not None:
        env[HEADERS_ENV] = "".join(f"{name}: {value}\n" for name, value in headers)
    return env


def hide_in_process_table(values: Sequence[str]) -> bool:
    """Overwrite ``values`` with ``*`` in this process's command line as the kernel shows
    it (``/proc/self/cmdline``, ``ps``), as setproctitle does: from now on other users see
    no secret there (they may have seen it while rampwatch started). ``sys.argv`` is
    Python's copy and keeps them. Linux only; returns whether anything was hidden."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        # fields 48 and 49 of stat (1-based; the list starts at field 3): the argument area
        start, end = int(fields[45]), int(fields[46])
        with open("/proc/self/cmdline", "rb") as f:
            shown = f.read()
    except (OSError, IndexError, ValueError):
        return False
    if not start or end <= start or ctypes.string_at(start, end - start) != shown:
        return False  # not the memory the kernel reads: leave it alone
    hidden = False
    for value in {v for v in values if v}:
        needle = value.encode()
        at = shown.find(needle)
        while at >= 0:
            ctypes.memset(start + at, ord("*"), len(needle))
            hidden = True
            at = shown.find(needle, at + len(needle))
    return hidden
