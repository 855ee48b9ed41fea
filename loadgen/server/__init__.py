"""The server's side: /metrics and DCGM scrapes, backends' metric names, NVML, a server the run starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rampwatch.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from rampwatch.loadgen.server.gpu import NvmlReader, NvmlUnavailable, poll_nvml
    from rampwatch.loadgen.server.managed import (
        DEFAULT_STARTUP_TIMEOUT_S,
        PHASE_STARTING,
        ManagedServer,
        ServeCommand,
        diff_engine_args,
        server_log_path,
    )
    from rampwatch.loadgen.server.scrape import (
        DEFAULT_MAX_BODY_BYTES,
        MetricsPoller,
        cache_config_from_metrics,
        is_connection_failure,
    )

# module -> the public names it defines, loaded on first use
_MODULES: dict[str, tuple[str, ...]] = {
    "gpu": (
        "NvmlReader",
        "NvmlUnavailable",
        "poll_nvml",
    ),
    "managed": (
        "DEFAULT_STARTUP_TIMEOUT_S",
        "ManagedServer",
        "PHASE_STARTING",
        "ServeCommand",
        "diff_engine_args",
        "server_log_path",
    ),
    "scrape": (
        "DEFAULT_MAX_BODY_BYTES",
        "MetricsPoller",
        "cache_config_from_metrics",
        "is_connection_failure",
    ),
}
__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_STARTUP_TIMEOUT_S",
    "ManagedServer",
    "MetricsPoller",
    "NvmlReader",
    "NvmlUnavailable",
    "PHASE_STARTING",
    "ServeCommand",
    "cache_config_from_metrics",
    "diff_engine_args",
    "is_connection_failure",
    "poll_nvml",
    "server_log_path",
]
__getattr__ = lazy_attributes(__name__, _MODULES)
