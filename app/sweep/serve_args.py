"""A configuration's arguments put into the base serve command (each flag replaced, as
``vllm bench sweep`` does), and the words a sweep shows of it: its label, its file name,
the number of GPUs it uses, the command line with secrets masked."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

from rampwatch.core.redact import redact_value

# Serve flags whose product is the number of GPUs a configuration uses.
GPU_FLAGS = {
    "--tensor-parallel-size": ("-tp",),
    "--pipeline-parallel-size": ("-pp",),
    "--data-parallel-size": ("-dp", "--engines"),
}


def _flag_of(token: str) -> str:
    return token.split("=", 1)[0]


def _negation(flag: str) -> str:
    return "--" + flag[5:] if flag.startswith("--no-") else "--no-" + flag[2:]


def render_args(args: dict[str, Any]) -> list[str]:
    """A configuration's arguments as command-line words: ``True`` is the bare flag,
    ``False`` its ``--no-`` form, a mapping its JSON (``--speculative-config``), as ``vllm
    bench sweep`` writes them."""
    out: list[str] = []
    for flag, value in args.items():
        if value is True:
            out.append(flag)
        elif value is False:
            out.append(_negation(flag))
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return out


def apply_args(argv: Sequence[str], args: dict[str, Any]) -> list[str]:
    """``argv`` with each flag of ``args`` set: any occurrence of the flag (``--f v``,
    ``--f=v``, the bare ``--f`` or its ``--no-f``) removed, the configuration's appended."""
    replaced = set()
    for flag in args:
        replaced |= {flag, _negation(flag)}
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("-") and _flag_of(token) in replaced:
            takes_value = "=" not in token and i + 1 < len(argv) and not argv[i + 1].startswith("--")
            i += 2 if takes_value else 1
            continue
        out.append(token)
        i += 1
    return out + render_args(args)


def flag_values(argv: Sequence[str]) -> dict[str, str]:
    """``--flag value`` and ``--flag=value`` pairs of a command line (last one wins;
    a bare flag maps to "")."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("-") and len(token) > 1:
            if "=" in token:
                key, value = token.split("=", 1)
                out[key] = value
            elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                out[token] = argv[i + 1]
                i += 1
            else:
                out[token] = ""
        i += 1
    return out


def gpu_count(argv: Sequence[str]) -> int:
    """GPUs a serve command uses: tensor × pipeline × data parallel size (1 each when not
    given; the simulator's ``--engines`` is its data-parallel size)."""
    values = flag_values(argv)
    total = 1
    for flag, aliases in GPU_FLAGS.items():
        for name in (flag, *aliases):
            if name in values:
                try:
                    total *= max(1, int(values[name]))
                except ValueError:
                    pass
                break
    return total


def config_label(args: dict[str, Any]) -> str:
    """The differing arguments of a configuration, as the table's first column shows them."""
    return " ".join(render_args(args)) or "(base)"


def config_slug(index: int, args: dict[str, Any]) -> str:
    """A file name for a configuration's recording: its number and arguments."""
    words = "_".join(f"{flag.lstrip('-')}={value}" for flag, value in args.items()) or "base"
    safe = "".join(c if c.isalnum() or c in "-_=." else "-" for c in words)[:80]
    return f"{index + 1:02d}-{safe}"


def command_line(argv: Sequence[str]) -> str:
    """Words as one line a shell reads back to the same words."""
    return shlex.join(list(argv))


def shown_command(argv: Sequence[str]) -> str:
    """``command_line`` with secrets masked (``--api-key X``): what is printed and kept."""
    return command_line(redact_value(list(argv)))
