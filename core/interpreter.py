"""How rampwatch starts another interpreter of its own code (load workers, the request
builder, the server guard, the embedded simulator, a detached run, a sweep's runs)."""

from __future__ import annotations

import sys


def module_command(module: str, *args: str) -> list[str]:
    """The command that runs rampwatch's ``module`` in a fresh interpreter: ``-P`` keeps
    the working directory off its import path, so a ``rampwatch.py`` or ``aiohttp.py``
    lying there is never imported."""
    return [sys.executable, "-P", "-m", module, *args]
