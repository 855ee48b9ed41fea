"""Running the load: the run (its options, state, steering, load loop and result), its load
processes and Ray actors, the event loop and its health, the drain."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rampwatch.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from rampwatch.loadgen.run.drain import DrainPolicy, drain_policy_of, parse_drain
    from rampwatch.loadgen.run.loop_health import check_gc_policy
    from rampwatch.loadgen.run.options import RunOptions
    from rampwatch.loadgen.run.ray_workers import RayPool, check_reachable, import_ray
    from rampwatch.loadgen.run.result import RunResult
    from rampwatch.loadgen.run.runner import Run, host_info
    from rampwatch.loadgen.run.worker_pool import LocalWorkers
    from rampwatch.loadgen.run.workers import SenderFactory

# module -> the public names it defines, loaded on first use
_MODULES: dict[str, tuple[str, ...]] = {
    "drain": (
        "DrainPolicy",
        "drain_policy_of",
        "parse_drain",
    ),
    "loop_health": ("check_gc_policy",),
    "options": ("RunOptions",),
    "ray_workers": (
        "RayPool",
        "check_reachable",
        "import_ray",
    ),
    "result": ("RunResult",),
    "runner": (
        "Run",
        "host_info",
    ),
    "worker_pool": ("LocalWorkers",),
    "workers": ("SenderFactory",),
}
__all__ = [
    "DrainPolicy",
    "LocalWorkers",
    "RayPool",
    "Run",
    "RunOptions",
    "RunResult",
    "SenderFactory",
    "check_gc_policy",
    "check_reachable",
    "drain_policy_of",
    "host_info",
    "import_ray",
    "parse_drain",
]
__getattr__ = lazy_attributes(__name__, _MODULES)
