"""``--prometheus-port``'s address checked when the run is planned: one in use (or a host
that is not this machine's) is one line naming the flag before any server starts or the
recording is created, not minutes later after ``--serve``'s model has loaded. The real
bind stays where the run is built (``build.prometheus_sinks``): a port taken between the
two fails there just as cleanly.
"""

from __future__ import annotations

from typing import Any

from rampwatch.app.run_config import RunConfig

# The Prometheus target of this process's last run on each address (``PrometheusTarget``):
# it serves until the process exits or the next run on the address (a sweep's next
# configuration, a repeat) replaces it; ``build.prometheus_sinks`` keeps it.
SERVING: dict[tuple[str, int], Any] = {}


def check_prometheus_port(config: RunConfig) -> None:
    """Bind ``--prometheus-host``:``--prometheus-port`` and let it go at once (a
    ``UserError`` naming the flag where it cannot be). An address this process serves
    already (a sweep's previous configuration) is not tried: the run replaces it."""
    if config.prometheus_port is None:
        return
    if (config.prometheus_host, config.prometheus_port) in SERVING:
        return
    # prometheus_client is imported only by a run that serves it
    from rampwatch.loadgen.run.prometheus_target import PrometheusTarget

    PrometheusTarget(config.prometheus_port, config.prometheus_host).check_port()
