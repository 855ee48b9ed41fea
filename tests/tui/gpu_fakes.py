"""GPU telemetry added to a fake run (``fakes.fake_snapshot``): two H100s whose
utilisation follows the batch and whose power follows utilisation."""

from __future__ import annotations

import dataclasses
import math

from rampwatch.core.figures.gpu import gpu_aggregates
from rampwatch.core.timeline import Snapshot

IDLE_W, TDP_W = 70.0, 700.0


def gpus_at(t: float, running: float, count: int) -> dict[str, dict[str, float]]:
    out = {}
    for i in range(count):
        util = min(100.0, 3.2 * (running if not math.isnan(running) else 0.0) * (1.0 - 0.1 * i))
        out[str(i)] = {
            "util_pct": round(util),
            "power_w": IDLE_W + util / 100.0 * (TDP_W - IDLE_W) * 0.8,
            "mem_used_mib": 72_000.0 + 10.0 * i,
            "mem_free_mib": 9_920.0,
            "sm_clock_mhz": 1980.0 if util > 0 else 345.0,
        }
    return out


def with_gpus(snapshot: Snapshot, count: int = 2, stale_at: float | None = None) -> Snapshot:
    """The snapshot with GPU series, each GPU's latest gauges and the energy figures; from
    ``stale_at`` on the GPU source stops answering."""
    series = dict(snapshot.series)
    columns: dict[str, list[float]] = {
        name: [] for name in ("gpu_util_pct", "gpu_power_w", "gpu_mem_used_gib", "gpu_sm_clock_mhz")
    }
    latest: dict[str, dict[str, float]] = {}
    last_t = None
    for t, running in zip(snapshot.times, series["running"]):
        if stale_at is not None and t >= stale_at:
            for values in columns.values():
                values.append(math.nan)
            continue
        latest = gpus_at(t, running, count)
        last_t = t + 0.6
        for name, value in gpu_aggregates(latest).items():
            columns[name].append(value)
    series.update(columns)
    energy_j = sum(v for v in columns["gpu_power_w"] if not math.isnan(v))  # one second per bin
    summary = dict(snapshot.summary)
    output_tokens = summary.get("output_throughput", 0.0) * snapshot.t
    summary.update(energy_wh=energy_j / 3600.0, tokens_per_joule=output_tokens / energy_j if energy_j else None)
    return dataclasses.replace(snapshot, series=series, summary=summary, gpus=latest, last_good_gpu_t=last_t)
