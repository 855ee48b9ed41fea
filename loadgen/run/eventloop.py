"""The event loop the load runs on: uvloop where it is installed, else asyncio's own.

Why: at one SSE event per network read, the loop's own work (the selector's dispatch, the
transport's read callback) is a large share of the client's CPU per streamed token, and
uvloop does it in C (see docs/benchmarks.md). ``RAMPWATCH_EVENT_LOOP=asyncio`` forces the
standard loop, e.g. to compare the two or to rule uvloop out when chasing a problem.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
ENV = "RAMPWATCH_EVENT_LOOP"


def _uvloop() -> Any | None:
    if os.environ.get(ENV, "").strip().lower() == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


def loop_name() -> str:
    """``"uvloop"`` or ``"asyncio"``: what ``run`` will use."""
    return "uvloop" if _uvloop() is not None else "asyncio"


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the chosen loop."""
    uvloop = _uvloop()
    if uvloop is None:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
