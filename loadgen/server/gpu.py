"""GPU telemetry from NVML on this host (``nvidia-ml-py``, the ``rampwatch[gpu]`` extra).

A DCGM exporter's page is read by the ``/metrics`` poller (``scrape.parse_dcgm``); this is
the other source, for a server on the machine rampwatch runs on. Both give GPU samples:
``ServerSample``s with ``backend="nvml"`` or ``"dcgm"`` and each GPU's gauges in ``gpus``.

NVML calls block (a driver round trip each), so ``NvmlReader.read`` runs in a worker
thread (``poll_nvml``), never on the load's event loop. ``pynvml`` is imported only when a
run asks for NVML: an absent library or GPU is a reason to hide the GPU panel, not an error.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Callable
from typing import Any

from rampwatch.core.figures.gpu import NVML_URL
from rampwatch.core.timeline import GPU_FIELDS, ServerSample

log = logging.getLogger(__name__)


class NvmlUnavailable(Exception):
    """Why NVML cannot be read here, in a few words (shown as one info line)."""


class NvmlReader:
    """Every GPU of this host through NVML; ``open`` raises ``NvmlUnavailable``."""

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self._nvml = nvml
        self._handles = handles

    @property
    def gpu_count(self) -> int:
        return len(self._handles)

    @classmethod
    def open(cls) -> NvmlReader:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            raise NvmlUnavailable("nvidia-ml-py is not installed (pip install 'rampwatch[gpu]')") from None
        try:
            nvml.nvmlInit()
        except Exception as exc:  # pynvml.NVMLError: no driver, no device, insufficient permissions
            raise NvmlUnavailable(f"no NVIDIA GPU: NVML did not start ({_reason(exc)})") from None
        try:
            count = nvml.nvmlDeviceGetCount()
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:
            _shutdown(nvml)
            raise NvmlUnavailable(f"no NVIDIA GPU: NVML cannot list the GPUs ({_reason(exc)})") from None
        if not handles:
            _shutdown(nvml)
            raise NvmlUnavailable("no NVIDIA GPU: NVML sees none")
        return cls(nvml, handles)

    def read(self, t: float) -> ServerSample:
        """Blocking: each GPU's gauges now. A gauge the GPU does not support is left out;
        a GPU that answers none of them makes the sample fail (``ok=False``)."""
        nvml = self._nvml
        gpus: dict[str, dict[str, float]] = {}
        errors: list[str] = []
        for index, handle in enumerate(self._handles):
            values: dict[str, float] = {}
            for name in GPU_FIELDS:
                try:
                    values[name] = _nvml_gauge(nvml, handle, name)
                except Exception as exc:  # NVMLError_NotSupported and the like: that gauge only
                    errors.append(f"GPU {index} {name}: {_reason(exc)}")
            if values:
                gpus[str(index)] = values
        if not gpus:
            return ServerSample(t=t, url=NVML_URL, ok=False, backend="nvml", error=f"NVML: {errors[0]}"[:300])
        return ServerSample(t=t, url=NVML_URL, ok=True, backend="nvml", gpus=gpus)

    def close(self) -> None:
        _shutdown(self._nvml)


def _nvml_gauge(nvml: Any, handle: Any, name: str) -> float:
    """One of ``GPU_FIELDS`` through NVML, in its unit (NVML gives bytes and mW)."""
    if name == "util_pct":
        return float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    if name == "mem_used_mib":
        return nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
    if name == "mem_free_mib":
        return nvml.nvmlDeviceGetMemoryInfo(handle).free / 2**20
    if name == "power_w":
        return nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
    if name == "sm_clock_mhz":
        return float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
    raise ValueError(f"not a GPU gauge: {name}")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # already down, or never up: nothing to release
        log.debug("nvmlShutdown failed", exc_info=True)


async def poll_nvml(
    reader: NvmlReader,
    interval_s: float,
    clock: Callable[[], float],
    on_sample: Callable[[ServerSample], None],
) -> None:
    """Read every ``interval_s`` until cancelled, on the same slots as the ``/metrics``
    poller (``start + k * interval_s``, a late read skips slots). The reader stays open:
    whoever opened it closes it (the run, once this task is over)."""
    start = clock()
    slot = 0
    while True:
        sample = await asyncio.to_thread(reader.read, clock())
        try:
            on_sample(sample)
        except Exception:  # a sink's bug must not stop the polling
            log.exception("on_sample failed for an NVML sample")
        now = clock()
        slot = max(slot + 1, int((now - start) / interval_s) + 1)
        await asyncio.sleep(max(0.0, start + slot * interval_s - now))
