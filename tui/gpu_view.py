"""What the screen shows of GPU telemetry (NVML, a DCGM exporter), derived from a Snapshot
without Textual: whether there is any (the GPU panel is hidden without), whether it is
stale, and the current figures of the GPUs together and one by one."""

from __future__ import annotations

from rampwatch.core.timeline import Snapshot, metrics_stale_after_s
from rampwatch.tui.chart_data import current_value, is_present


def has_gpu(snapshot: Snapshot) -> bool:
    """The run has GPU telemetry (a good GPU sample so far): the GPU panel is shown."""
    return snapshot.last_good_gpu_t is not None


def gpu_stale_since(snapshot: Snapshot) -> float | None:
    """When the last good GPU sample was, if too long ago for its figures to be current
    (the same rule as the server's /metrics: ``metrics_stale_after_s``)."""
    last = snapshot.last_good_gpu_t
    if last is None or snapshot.t - last <= metrics_stale_after_s(snapshot.header):
        return None
    return last


def gpu_now(snapshot: Snapshot, name: str) -> float | None:
    """A GPU series' newest value (None when stale or absent)."""
    if not has_gpu(snapshot) or gpu_stale_since(snapshot) is not None:
        return None
    return current_value(snapshot, name, look_back=2)


def _fmt(value: float | None, unit: str, digits: int = 0) -> str:
    return f"{value:.{digits}f}{unit}" if is_present(value) else "-"


def per_gpu_lines(snapshot: Snapshot) -> list[tuple[str, str]]:
    """("GPU 0", "93% 312 W") for each GPU's latest sample: short, so that the Stats
    panel's labels keep their width (memory and clock are on the GPU chart)."""
    return [
        (f"GPU {gpu}", f"{_fmt(g.get('util_pct'), '%')} {_fmt(g.get('power_w'), ' W')}")
        for gpu, g in snapshot.gpus.items()
    ]


def gpu_legend_note(snapshot: Snapshot) -> str:
    """The GPU panel's bottom line: memory used (all GPUs) and SM clock (their mean) now,
    or how stale the figures are. Short: it fits a 40-column chart."""
    stale = gpu_stale_since(snapshot)
    if stale is not None:
        return f"GPU telemetry stale {snapshot.t - stale:.0f} s"
    mem, clock = gpu_now(snapshot, "gpu_mem_used_gib"), gpu_now(snapshot, "gpu_sm_clock_mhz")
    return f"mem {_fmt(mem, ' GiB', 1)} · SM {_fmt(clock, ' MHz')}"


def power_text(snapshot: Snapshot) -> str | None:
    """The header's power figure now ("312 W"); None without GPU telemetry."""
    if not has_gpu(snapshot):
        return None
    stale = gpu_stale_since(snapshot)
    if stale is not None:
        return "stale"
    return _fmt(gpu_now(snapshot, "gpu_power_w"), " W")
