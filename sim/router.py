"""Data-parallel routing: which engine takes the next request (one definition for the HTTP
server and the virtual-clock driver)."""

from __future__ import annotations

from collections.abc import Sequence

from rampwatch.sim.engine import Engine


class Router:
    """``least-loaded``: fewest running + waiting, lowest index on ties; ``round-robin``: in turn."""

    def __init__(self, engines: Sequence[Engine], routing: str) -> None:
        self.engines = engines
        self.routing = routing
        self._next = 0

    def pick(self) -> int:
        engines = self.engines
        if len(engines) == 1:
            return 0
        if self.routing == "round-robin":
            i = self._next
            self._next = (i + 1) % len(engines)
            return i
        return min(range(len(engines)), key=lambda i: (engines[i].load(), i))
