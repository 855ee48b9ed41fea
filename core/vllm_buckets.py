"""vLLM's histogram bucket edges (seconds) for request latencies, as its ``/metrics``
exports them (vLLM 0.32, ``vllm/v1/metrics/buckets.py``): the simulator serves the same
edges, and ``--prometheus-port`` keeps them (with finer ones below) so that a client-side
quantile lines up with the server's in one dashboard."""

from __future__ import annotations

# fmt: off
TTFT_S: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
# inter-token latency and time per output token
ITL_S: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)
# end-to-end, queue, inference, prefill and decode times
REQUEST_LATENCY_S: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
)
# fmt: on
