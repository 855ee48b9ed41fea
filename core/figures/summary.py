"""End-of-run figures, one name to import them by: the typed ``Summary``
(``run_summary``), built by ``SummaryBuilder`` from blocks of finished requests
(``summary_builder``), its server and GPU figures (``summary_server``), its text form
(``summary_text``) and the ``vllm bench serve --save-result`` JSON (``bench_result``).
"""

from __future__ import annotations

from rampwatch.core.figures.bench_result import (
    DETAILED_KEYS,
    PER_REQUEST_KEYS,
    dump_list,
    dumps_bench_result,
    to_bench_result,
)
from rampwatch.core.figures.run_summary import (
    KNEE_REVIEW,
    METRIC_TITLES,
    METRICS,
    LatencyMs,
    SendLatenessMs,
    Summary,
    concurrency_cap,
    cost_per_million_tokens,
    knee_explanation,
    knee_review,
    knee_rps,
    tokens_per_joule,
)
from rampwatch.core.figures.summary_builder import (
    RequestBlock,
    SummaryBuilder,
    first_token_send,
    send_lateness_s,
    summarise_requests,
)
from rampwatch.core.figures.summary_server import (
    SIMULATED_GPU,
    GpuTotals,
    gpu_figures,
    gpu_source,
    server_figures,
)
from rampwatch.core.figures.summary_text import (
    ERROR_EXAMPLE_CHARS,
    LATE_SEND_P99_MS,
    client_lag_bound_ms,
    client_lag_cause,
    client_lag_warning,
    client_limit_warning,
    error_example_text,
    format_summary,
    gpu_heading,
    knee_why_lines,
    late_send_bound_ms,
    lateness_warning,
    provisional_text,
)

__all__ = [
    "DETAILED_KEYS",
    "ERROR_EXAMPLE_CHARS",
    "KNEE_REVIEW",
    "LATE_SEND_P99_MS",
    "METRICS",
    "METRIC_TITLES",
    "PER_REQUEST_KEYS",
    "SIMULATED_GPU",
    "GpuTotals",
    "LatencyMs",
    "RequestBlock",
    "SendLatenessMs",
    "Summary",
    "SummaryBuilder",
    "client_lag_bound_ms",
    "client_lag_cause",
    "client_lag_warning",
    "client_limit_warning",
    "concurrency_cap",
    "cost_per_million_tokens",
    "dump_list",
    "dumps_bench_result",
    "error_example_text",
    "first_token_send",
    "format_summary",
    "gpu_figures",
    "gpu_heading",
    "gpu_source",
    "knee_explanation",
    "knee_review",
    "knee_rps",
    "knee_why_lines",
    "late_send_bound_ms",
    "lateness_warning",
    "provisional_text",
    "send_lateness_s",
    "server_figures",
    "summarise_requests",
    "to_bench_result",
    "tokens_per_joule",
]
