"""`rampwatch run --ray auto|ADDRESS`: the run's requests sent from Ray actors over a
cluster's nodes (``loadgen.run.ray_workers``). Ray is imported only by a run that asks for it
(``loadgen.run.ray_workers.import_ray``)."""

from __future__ import annotations

import argparse
from typing import Any

from rampwatch.loadgen.run.ray_workers import DEFAULT_MAX_CLOCK_OFFSET_MS, RayPool, check_reachable, import_ray


def add_ray_flags(parser: argparse.ArgumentParser, positive_float: Any) -> None:
    """``--ray`` and ``--max-clock-offset`` in the "load processes" group (its ``--workers``
    is the number of actors); the number type is `app.run`'s."""
    group = next((g for g in parser._action_groups if g.title == "load processes"), None)
    group = group or parser.add_argument_group("load processes")
    group.add_argument(
        "--ray",
        metavar="auto|ADDRESS",
        help="send the requests from Ray actors spread over a cluster's nodes: auto (the cluster this host "
        "belongs to), HOST:PORT (its head's GCS) or ray://HOST:PORT; needs pip install 'rampwatch[ray]' "
        "and the same rampwatch on every node",
    )
    group.add_argument(
        "--max-clock-offset",
        type=positive_float,
        default=DEFAULT_MAX_CLOCK_OFFSET_MS,
        metavar="MS",
        help=f"with --ray: refuse to start when a node's clock is further than this from this host's "
        f"(default {DEFAULT_MAX_CLOCK_OFFSET_MS:g})",
    )


def check_ray_flags(address: str | None) -> None:
    """Before anything starts (``--ray``): Ray installed, the address well formed and answering."""
    if address is None:
        return
    import_ray()
    check_reachable(address)


def ray_workers(address: str | None, workers: int | None, max_clock_offset_ms: float) -> Any:
    """The Ray actors a run sends through (``--ray``; a ``SenderFactory``), else None."""
    if address is None:
        return None

    def announce(line: str) -> None:  # the live screen's run process prints to its log
        print(line, flush=True)

    return RayPool(address, workers=workers, max_clock_offset_s=max_clock_offset_ms / 1000, announce=announce)
