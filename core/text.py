"""Text that came from a server (model ids, error messages) on its way to a terminal, a
log or a recording: control characters such as ANSI escapes must not reach a terminal."""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Iterable
from typing import Any, TextIO

from rampwatch.core.redact import redact_text, scrub

# C0 controls but tab and newline, DEL, and the C1 controls (U+0080-U+009F, 8-bit CSI among
# them); and the characters that reorder or break what a terminal shows without being
# controls: the bidirectional overrides, embeddings, isolates and marks ("Trojan Source")
# and the line and paragraph separators.
_UNICODE_TRICKS = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_UNICODE_TRICKS}]")
_ANY_CONTROL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_UNICODE_TRICKS}]")


def printable(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control character shown as ``\\xNN`` (so ESC cannot start an
    escape sequence), a bidirectional override or a line separator as ``\\uNNNN``;
    ``one_line`` shows newlines and tabs that way too."""
    pattern = _ANY_CONTROL if one_line else _CONTROL
    return pattern.sub(_shown, text)


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable_value(value: Any, *, one_line: bool = False) -> Any:
    """``value`` with ``printable`` applied to every string in it, dict keys too, through
    nested dicts, lists and tuples: a server's model list, labels or version, made safe
    as one piece. Strings without control characters are returned as they are."""
    if isinstance(value, str):
        return printable(value, one_line=one_line) if _ANY_CONTROL.search(value) else value
    if isinstance(value, dict):
        return {printable_value(k, one_line=one_line): printable_value(v, one_line=one_line) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(printable_value(v, one_line=one_line) for v in value)
    return value


def server_text(text: str, api_key: str | Iterable[str] | None = None) -> str:
    """Text from a server or about one (an error message, an exception) made safe to show
    and record: the API key, or every secret given (e.g. the values of ``--header``;
    servers may echo headers), and URL credentials masked, control characters shown as
    escapes, on one line."""
    secrets = {api_key} if isinstance(api_key, str) else {s for s in api_key or () if s}
    return printable(redact_text(scrub(text, {s for s in secrets if s})), one_line=True)


def terminal_width(stream: TextIO) -> int | None:
    """How many columns the terminal ``stream`` writes to has; None for a file or a pipe
    (whose lines are not wrapped by anyone)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else None
    except (OSError, ValueError, AttributeError):  # no file descriptor (a StringIO), closed
        return None


def fill_to(text: str, width: int | None) -> str:
    """``text`` wrapped at word boundaries to ``width`` columns (None: as it is), so that a
    terminal never breaks a word."""
    return text if width is None else textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False)


def fit_lines(text: str, width: int | None) -> str:
    """Each line of ``text`` longer than ``width`` wrapped at word boundaries, its
    continuation lines indented two more than the line itself (None: as it is): a summary's
    long lines (the knee's evidence, a timeline note) read whole on a narrow terminal."""
    if width is None:
        return text
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" ")) + 2)
        out.extend(
            textwrap.wrap(line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
            or [line]
        )
    return "\n".join(out)


def column_groups(widths: list[int], room: float) -> list[list[int]]:
    """The columns' indices in runs that each fit ``room`` (two spaces between columns);
    a column wider than the room alone is a run of its own."""
    groups: list[list[int]] = [[]]
    used = 0
    for i, w in enumerate(widths):
        if groups[-1] and used + 2 + w > room:
            groups.append([])
            used = 0
        used += w if not groups[-1] else 2 + w
        groups[-1].append(i)
    return groups
