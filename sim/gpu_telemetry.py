"""Simulated GPU telemetry: a DCGM exporter's page modelled from the engines.

vLLM serves no GPU gauges, so the simulator's ``/metrics`` stays vLLM's; with
``--gpu-telemetry`` it also serves ``DCGM_PATH`` in dcgm-exporter's format, one GPU per
data-parallel engine and tensor-parallel rank (label ``gpu`` = engine × TP + rank):

- ``DCGM_FI_DEV_GPU_UTIL`` (%): the share of the last ``WINDOW_S`` simulated seconds the
  engine's GPUs spent in the GPU part of its steps (what DCGM measures: time a kernel was
  running; the step's host part leaves them idle);
- ``DCGM_FI_DEV_POWER_USAGE`` (W): idle power plus utilisation × (TDP − idle), the
  hardware preset's figures (a linear model: a memory-bound decode step draws less than a
  compute-bound prefill, which this does not tell apart);
- ``DCGM_FI_DEV_SM_CLOCK`` (MHz): the preset's boost clock while busy, its idle clock
  otherwise;
- ``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_FB_FREE`` (MiB): weights, the runtime reserve
  and the whole KV pool, which vLLM allocates at start-up (constant through a run); each
  GPU of a tensor-parallel group holds its share of the weights and KV heads.
"""

from __future__ import annotations

from collections import deque

from rampwatch.sim.config import GIB, SimConfig

DCGM_PATH = "/dcgm/metrics"
WINDOW_S = 1.0  # dcgm-exporter's sampling period is about a second

_HELP = (
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
)


class GpuTelemetry:
    """Busy intervals of each engine's steps and the page they give."""

    def __init__(self, config: SimConfig, engines: int, first_engine: int = 0) -> None:
        self.config = config
        # GPUs are numbered across all engines: a process serving a share of them
        # (--api-server-count) numbers its GPUs as the whole server would.
        self.first_gpu = first_engine * config.tensor_parallel_size
        # A data-parallel engine drives a tensor-parallel group of GPUs in lockstep: each
        # GPU of the group is busy for the same GPU part of every step.
        self.gpus_per_engine = config.tensor_parallel_size
        # engine -> (start, end) of the GPU part of its recent steps, in simulated seconds
        self._steps: list[deque[tuple[float, float]]] = [deque() for _ in range(engines)]
        hw, model = config.hardware_preset, config.model_preset
        pool = (config.num_gpu_blocks or 0) * config.block_size * config.kv_bytes_per_token_per_gpu
        used = model.weight_bytes / config.tensor_parallel_size + model.runtime_reserve_gib * GIB + pool
        self.total_mib = hw.hbm_gib * 1024
        self.used_mib = min(self.total_mib, used / 2**20)

    def on_step(self, engine: int, start: float, gpu_busy_s: float) -> None:
        """One step of ``engine`` that kept its GPUs busy for ``gpu_busy_s`` (the step's
        host part — scheduling, sampling, output processing — leaves them idle)."""
        if gpu_busy_s > 0:
            steps = self._steps[engine]
            steps.append((start, start + gpu_busy_s))
            while steps and steps[0][1] < start - WINDOW_S:
                steps.popleft()

    def utilisation(self, engine: int, now: float) -> float:
        """Busy share of (now − WINDOW_S, now], 0..1."""
        lo = now - WINDOW_S
        busy = sum(max(0.0, min(end, now) - max(start, lo)) for start, end in self._steps[engine])
        return min(1.0, busy / WINDOW_S)

    def gauges(self, engine: int, now: float) -> dict[str, float]:
        hw = self.config.hardware_preset
        util = self.utilisation(engine, now)
        return {
            "DCGM_FI_DEV_SM_CLOCK": hw.max_sm_clock_mhz if util > 0 else hw.idle_sm_clock_mhz,
            "DCGM_FI_DEV_POWER_USAGE": hw.idle_w + util * (hw.tdp_w - hw.idle_w),
            "DCGM_FI_DEV_GPU_UTIL": round(100.0 * util),  # dcgm-exporter reports whole percent
            "DCGM_FI_DEV_FB_FREE": round(self.total_mib - self.used_mib),
            "DCGM_FI_DEV_FB_USED": round(self.used_mib),
        }

    def render(self, now: float) -> bytes:
        hw = self.config.hardware_preset
        per_gpu = [self.gauges(e, now) for e in range(len(self._steps)) for _ in range(self.gpus_per_engine)]
        lines = []
        for name, help_text in _HELP:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} gauge")
            for i, gauges in enumerate(per_gpu, start=self.first_gpu):
                labels = (
                    f'gpu="{i}",UUID="GPU-00000000-0000-0000-0000-{i:012d}",pci_bus_id="00000000:{0x18 + i:02X}:00.0",'
                    f'device="nvidia{i}",modelName="{hw.description} (simulated)",Hostname="rampwatch-sim"'
                )
                lines.append(f"{name}{{{labels}}} {gauges[name]:g}")
        return ("\n".join(lines) + "\n").encode()
