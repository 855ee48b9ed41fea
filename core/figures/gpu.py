"""GPU samples combined: several sources' GPUs under one key each, and the GPU series'
values for one moment."""

from __future__ import annotations

from collections.abc import Sequence

from rampwatch.core.timeline import ServerSample

NVML_URL = "nvml"  # what a sample from NVML names as its URL (header, events, recording)


def combine_gpus(samples: Sequence[ServerSample]) -> dict[str, dict[str, float]]:
    """Every GPU of the latest sample of each source, under one key: its own id with one
    source, ``"<source index>:<id>"`` with several (two hosts both have a GPU 0)."""
    if len(samples) == 1:
        return {gpu: dict(values) for gpu, values in samples[0].gpus.items()}
    return {f"{i}:{gpu}": dict(values) for i, s in enumerate(samples) for gpu, values in s.gpus.items()}


def gpu_aggregates(gpus: dict[str, dict[str, float]]) -> dict[str, float]:
    """The GPU series' values for one moment (``core.timeline.GPU_SERIES``): utilisation and
    SM clock averaged over the GPUs that report them, power and memory summed (what the
    server as a whole draws and holds). A gauge no GPU reports is absent."""
    out: dict[str, float] = {}
    for series, gauge, mean, scale in (
        ("gpu_util_pct", "util_pct", True, 1.0),
        ("gpu_power_w", "power_w", False, 1.0),
        ("gpu_mem_used_gib", "mem_used_mib", False, 1 / 1024),
        ("gpu_sm_clock_mhz", "sm_clock_mhz", True, 1.0),
    ):
        values = [g[gauge] for g in gpus.values() if gauge in g]
        if values:
            total = sum(values) * scale
            out[series] = total / len(values) if mean else total
    return out
