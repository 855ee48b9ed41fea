"""Checks for the YAML specs (scenarios, schedules, mixtures, sweeps): each check returns
the message to show (``"expected a number >= 0, got 'fast'"``) or None, and a problem
names its key path so the caller can point at the file's line."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# Where a value sits in a spec: ``("workload", "mix", 1, "weight")``.
KeyPath = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class SpecProblem:
    """One thing wrong in a spec mapping: where (key path inside it) and what."""

    path: KeyPath
    message: str
    at_key: bool = False  # an unknown key: point at the key itself rather than its value


def dotted(path: KeyPath) -> str:
    """A key path as the user reads it: ``workload.mix[1].weight``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def describe(value: Any) -> str:
    """A value as the user wrote it, for 'got …' in error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


Check = Callable[[Any], "str | None"]


def number_check(minimum: float | None = None, *, strict: bool = False, integer: bool = False) -> Check:
    """A check returning ``"expected a number >= 0, got 'fast'"`` or None when fine."""
    what = "an integer" if integer else "a number"
    bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum:g}"

    def check(value: Any) -> str | None:
        ok = is_number(value) and (not integer or float(value).is_integer())
        if ok and minimum is not None:
            ok = value > minimum if strict else value >= minimum
        return None if ok else f"expected {what}{bound}, got {describe(value)}"

    return check


def choice_check(options: Sequence[str]) -> Check:
    def check(value: Any) -> str | None:
        if isinstance(value, str) and value in options:
            return None
        return f"expected one of {', '.join(options)}, got {describe(value)}"

    return check


def unknown_key_message(key: Any, allowed: Sequence[str]) -> str:
    import difflib

    close = difflib.get_close_matches(str(key), list(allowed), n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else f" (allowed: {', '.join(allowed)})"
    return f"unknown key{hint}"


class Problems:
    """The problems a spec's checks found, collected so that all of them are shown at once."""

    def __init__(self) -> None:
        self.items: list[SpecProblem] = []

    def add(self, path: KeyPath, message: str, at_key: bool = False) -> None:
        self.items.append(SpecProblem(path, message, at_key))

    def check(self, path: KeyPath, value: Any, check: Check) -> bool:
        message = check(value)
        if message:
            self.add(path, message)
        return message is None

    def keys(self, path: KeyPath, value: dict, allowed: tuple[str, ...]) -> None:
        for key in value:
            if key not in allowed:
                self.add(path + (key,), unknown_key_message(key, allowed), True)

    def mapping(self, path: KeyPath, value: Any, what: str) -> bool:
        if isinstance(value, dict):
            return True
        self.add(path, f"expected a mapping ({what}), got {describe(value)}")
        return False
