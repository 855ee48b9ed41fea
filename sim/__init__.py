"""A vLLM-compatible simulated server: the embedded default and the fast test double."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rampwatch.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from rampwatch.sim.cli import config_to_argv
    from rampwatch.sim.config import SimConfig
    from rampwatch.sim.gpu_telemetry import DCGM_PATH
    from rampwatch.sim.server import SimServer, run_server, serve

# module -> the public names it defines, loaded on first use
_MODULES: dict[str, tuple[str, ...]] = {
    "cli": ("config_to_argv",),
    "config": ("SimConfig",),
    "gpu_telemetry": ("DCGM_PATH",),
    "server": ("SimServer", "run_server", "serve"),
}
__all__ = ["DCGM_PATH", "SimConfig", "SimServer", "config_to_argv", "run_server", "serve"]
__getattr__ = lazy_attributes(__name__, _MODULES)
