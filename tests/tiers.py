"""The fast tier's guard: a test that starts a process or a Textual app must be marked
`slow`, so that `pytest -m "not slow"` stays pure and in-process (and under a minute).

While a test not marked `slow` sets up or runs, the few calls every process start and
every Textual app run go through are watched; the test still runs as written, then fails
naming what it started. Processes started by session fixtures (before any test) are not
seen; those fixtures serve `slow` tests only (the real vLLM server)."""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
from collections.abc import Generator
from typing import Any

import pytest

# What the test being guarded started: None while no guarded test runs.
_started: list[str] | None = None


def _watch(owner: Any, name: str, what: str) -> None:
    original = getattr(owner, name)

    def watched(*args: Any, **kwargs: Any) -> Any:
        if _started is not None:
            _started.append(what)
        return original(*args, **kwargs)

    setattr(owner, name, watched)


def install() -> None:
    """Wraps the process starts (subprocess and asyncio reach `Popen._execute_child`,
    multiprocessing's spawn `_posixsubprocess.fork_exec`, a fork `os.fork`) and Textual's
    message loop, which `App.run`, `App.run_async`, `App.run_test` and snapshot tests all
    enter."""
    from textual.app import App

    _watch(subprocess.Popen, "_execute_child", "a process (subprocess or asyncio)")
    _watch(_posixsubprocess, "fork_exec", "a process (multiprocessing)")
    for name in ("fork", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            _watch(os, name, f"a process (os.{name})")
    _watch(App, "_process_messages", "a Textual app (run_test, run_async or a snapshot)")


def guard(item: pytest.Item) -> Generator[None, Any, Any]:
    """The body of a hook wrapper around `item`'s setup or call: fails the phase if a
    test not marked `slow` started a process or a Textual app during it."""
    global _started
    if item.get_closest_marker("slow") is not None:
        return (yield)
    _started = []
    try:
        result = yield
    finally:
        started, _started = _started, None
    if started:
        pytest.fail(
            f"not marked slow but starts {started[0]}: mark it @pytest.mark.slow "
            "(or the module's pytestmark) so the fast tier stays in-process",
            pytrace=False,
        )
    return result
