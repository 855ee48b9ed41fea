"""The ``Summary`` as text: ``format_summary`` (vLLM's benchmark block plus rampwatch's
sections) and the warning lines that say when the client, not the server, set a figure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rampwatch.core.figures import stats
from rampwatch.core.figures.client_lag import CLIENT_LAG_FLOOR_MS, CLIENT_LAG_SHARE, CPU_STARVED_PCT, ClientFigures
from rampwatch.core.figures.images import image_lines
from rampwatch.core.figures.lora import lora_summary_lines
from rampwatch.core.figures.phases import phase_lines
from rampwatch.core.figures.run_summary import METRIC_TITLES, METRICS, Summary
from rampwatch.core.figures.speculation import SPEC_PEAK_NOTE, summary_rows
from rampwatch.core.figures.summary_server import SIMULATED_GPU
from rampwatch.core.text import printable
from rampwatch.core.timeline import CLIENT_LIMIT

# A p99 send lateness above this says the client did not keep the schedule. A client with
# CPU to spare sends at 200 req/s with a p99 of 1.4-4.5 ms on a shared 2-vCPU machine
# (docs/benchmarks.md, huge /metrics pages and the TUI drawing included), a starved one
# hundreds of ms late: 10 ms is twice the worst healthy p99 measured there. At low rates
# the bound is the mean gap between sends instead (``late_send_bound_ms``): a send 20 ms
# late at 8 req/s (125 ms apart) jitters the arrivals but offers the same load, while
# sends later than the gap between them bunch up.
LATE_SEND_P99_MS = 10.0


def late_send_bound_ms(figures: Summary) -> float:
    """The p99 send lateness above which the schedule was not kept: ``LATE_SEND_P99_MS``,
    or the mean gap between sends when that is longer (the run's window over its
    requests: an overestimate by the drain, so a low-rate run warns only when clearly
    late)."""
    sends = figures.completed + figures.failed + figures.cancelled
    gap_ms = 1000.0 * figures.duration_s / sends if sends and figures.duration_s > 0 else 0.0
    return max(LATE_SEND_P99_MS, gap_ms)


def lateness_warning(figures: Summary) -> str | None:
    """One line when the p99 send lateness passes ``late_send_bound_ms``, else None. Under
    a concurrency cap a request waits for a slot before it is sent, and the records do
    not say how much of its lateness was that wait: there the line says so, not that
    the client was short of CPU."""
    late = figures.send_lateness
    if late is None or late.p99 <= late_send_bound_ms(figures):
        return None
    shown = f"p99 {late.p99:.0f} ms, max {late.max:.0f} ms"
    # A client out of open files failed its requests itself: the slots were not the wait.
    if figures.max_concurrency is not None and not figures.errors_by_class.get(CLIENT_LIMIT):
        return (
            f"warning: requests were sent late ({shown}) as they waited for one of the "
            f"{figures.max_concurrency} --max-concurrency slots: the schedule's rate was not offered "
            f"in full; the wait is part of the lateness, so it does not show whether the client kept up"
        )
    return f"warning: the client sent late ({shown}): the offered rate was not fully met; see docs/scale.md"


def client_limit_warning(figures: Summary) -> str | None:
    """One line when requests failed because the client ran out of open files: its own
    limit, to raise before the figures say anything about the server."""
    failed = figures.errors_by_class.get(CLIENT_LIMIT, 0)
    if not failed:
        return None
    above = f" above --max-concurrency {figures.max_concurrency}" if figures.max_concurrency else ""
    return (
        f"warning: {failed:,} requests failed in the client, not at the server: it ran out of open files "
        f"({CLIENT_LIMIT}); raise its limit (ulimit -n){above} and run again"
    )


def client_lag_bound_ms(p99_ms: float) -> float:
    """The client's lag p99 above which it could have moved a p99 of ``p99_ms``:
    ``CLIENT_LAG_FLOOR_MS``, or ``CLIENT_LAG_SHARE`` of it when that is larger (1 ms is
    noise on a 2 s TTFT, not on a 5 ms ITL)."""
    return max(CLIENT_LAG_FLOOR_MS, CLIENT_LAG_SHARE * p99_ms)


def client_lag_cause(client: ClientFigures) -> str:
    """Why the loops ran late, from what the run measured: waiting for a CPU (the machine
    is short of cores), full collections, or the client's own work."""
    if client.cpu_wait_pct is not None and client.cpu_wait_pct >= CPU_STARVED_PCT:
        return f"it waited for a CPU {client.cpu_wait_pct:.0f} % of its busy time: this machine is short of cores"
    full = client.gc_collections[2]
    if full:
        return f"{full} full GC pass{'es' if full != 1 else ''} during the load"
    return "its own work held the loop"


def client_lag_warning(figures: Summary) -> str | None:
    """One line when the client's stream-reading loops ran late enough to move a TTFT or
    ITL p99 it reports (its lag p99 over ``client_lag_bound_ms`` of that p99), naming
    each figure it could have moved, by how much at most, and the likely cause; None
    otherwise, and when no request gave a TTFT or an ITL."""
    client = figures.client
    if client is None or client.lag_p99_ms is None:
        return None
    lag = client.lag_p99_ms
    moved = []
    for metric, label in (("ttft", "TTFT"), ("itl", "ITL")):
        p99 = figures.latency(metric).percentiles.get("p99")
        if figures.completed == 0 or p99 is None or math.isnan(p99) or p99 <= 0 or lag <= client_lag_bound_ms(p99):
            continue
        moved.append(f"{label} p99 {p99:.1f} ms" + (" (all of it, as far as this run can tell)" if lag >= p99 else ""))
    if not moved:
        return None
    return (
        f"warning: the client ran late (loop lag p99 {lag:.1f} ms, max {client.lag_max_ms or 0.0:.0f} ms; "
        f"{client_lag_cause(client)}): {' and '.join(moved)} may hold up to {lag:.1f} ms of the client's own "
        f"delay; see docs/scale.md"
    )


def knee_why_lines(why: dict[str, Any]) -> list[str]:
    """The lines under the summary's knee: ``  why: batch-size cap (…) → try
    --max-num-seqs 128``, then any conflict between limits, and the seconds judged (with
    what the knee said first when those after it changed the explanation)."""
    text = f"  why: {why.get('title', why.get('limit'))} ({why.get('evidence', '')})"
    if why.get("try"):
        text += f" → try {why['try']}"
        if why.get("try_is") == "rampwatch flag":
            text += " (a rampwatch flag)"
    lines = [text]
    if why.get("conflict"):
        lines.append(f"  {why['conflict']}")
    if why.get("note"):  # a reasoning run's: the first answer slowed more than the first token
        lines.append(f"  note: {why['note']}")
    judged = [f"judged on the {why['window']}"] if why.get("window") else []
    if isinstance(why.get("provisional"), dict):
        judged.append(f"revised: at the knee it read {provisional_text(why['provisional'])}")
    if judged:
        lines.append("  " + "; ".join(judged))
    return lines


def provisional_text(provisional: dict[str, Any]) -> str:
    """``batch-size cap → try --max-num-seqs 264``: what a knee's explanation said first."""
    text = str(provisional.get("title") or provisional.get("limit") or "")
    return text + (f" → try {provisional['try']}" if provisional.get("try") else "")


def _row(label: str, value: Any, fmt: str = ".2f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        text = "n/a"
    elif isinstance(value, int) or fmt == "":
        text = str(value)
    else:
        text = format(value, fmt)
    return f"{label:<40} {text:<10}"


def format_summary(figures: Summary, percentiles: Sequence[float] = stats.PERCENTILES) -> str:
    """The summary as ``vllm bench serve`` prints it (50-column banner, 40-column
    labels), then a server-side section and the errors."""
    summary = figures.to_dict()  # the rows follow vLLM's keys
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    lines.append(_row("Successful requests:", summary["completed"]))
    lines.append(_row("Failed requests:", summary["failed"]))
    if summary.get("cancelled"):
        lines.append(_row("Cancelled requests:", summary["cancelled"]))
    if summary.get("max_concurrency") is not None:
        lines.append(_row("Maximum request concurrency:", summary["max_concurrency"]))
    lines.append(_row("Benchmark duration (s):", float(summary["duration"])))
    lines.append(_row("Total input tokens:", summary["total_input_tokens"]))
    lines.append(_row("Total generated tokens:", summary["total_output_tokens"]))
    lines.append(_row("Request throughput (req/s):", summary["request_throughput"]))
    if summary.get("request_goodput") is not None:
        lines.append(_row("Request goodput (req/s):", summary["request_goodput"]))
    lines.append(_row("Output token throughput (tok/s):", summary["output_throughput"]))
    lines.append(_row("Peak output token throughput (tok/s):", summary["max_output_tokens_per_s"]))
    lines.append(_row("Peak concurrent requests:", float(summary["max_concurrent_requests"])))
    lines.append(_row("Total token throughput (tok/s):", summary["total_token_throughput"]))
    for metric in METRICS:
        short, title = METRIC_TITLES[metric]
        lines.append("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        lines.append(_row(f"Mean {short} (ms):", summary[f"mean_{metric}_ms"]))
        lines.append(_row(f"Median {short} (ms):", summary[f"median_{metric}_ms"]))
        for p in percentiles:
            word = stats.percentile_word(p)
            lines.append(_row(f"P{word} {short} (ms):", summary[f"p{word}_{metric}_ms"]))
    if summary.get("reasoning"):
        lines.extend(reasoning_lines(summary["reasoning"], percentiles))
    if summary.get("ttft_phases"):
        lines.extend(phase_lines(summary["ttft_phases"]))
    if figures.client_queue is not None:
        lines.append("{s:{c}^{n}}".format(s="Client-side Queueing", n=50, c="-"))
        lines.append(_row("Mean Client Queue Time (ms):", summary["mean_client_queue_time_ms"]))
        lines.append(_row("Median Client Queue Time (ms):", summary["median_client_queue_time_ms"]))
        for p in percentiles:
            word = stats.percentile_word(p)
            lines.append(_row(f"P{word} Client Queue Time (ms):", summary[f"p{word}_client_queue_time_ms"]))
    lateness = summary.get("send_lateness_ms") or {}
    lines.append("{s:{c}^{n}}".format(s="Client", n=50, c="-"))
    lines.append(_row("Send lateness p50 (ms):", lateness.get("p50")))
    lines.append(_row("Send lateness p99 (ms):", lateness.get("p99")))
    lines.append(_row("Send lateness max (ms):", lateness.get("max")))
    client = summary.get("client")
    if client is not None:
        lines.append(_row("Client loop lag p50 (ms):", client["loop_lag_p50_ms"]))
        lines.append(_row("Client loop lag p99 (ms):", client["loop_lag_p99_ms"]))
        lines.append(_row("Client loop lag max (ms):", client["loop_lag_max_ms"]))
        young, middle, full = client["gc_collections"]
        lines.append(_row("GC passes young/middle/full:", f"{young}/{middle}/{full}", ""))
        lines.append(_row("Longest GC pause, wall (ms):", client["gc_max_pause_ms"]))
        lines.append(_row("Client waited for a CPU (% busy):", client.get("cpu_wait_pct"), ".1f"))
    server = summary.get("server") or {}
    lines.append("{s:{c}^{n}}".format(s="Server (/metrics)", n=50, c="-"))
    if server.get("available"):
        lines.append(_row("Server kind:", server.get("backend"), ""))
        # vLLM's label for the tokens it computed, then every prompt token (cache hits too)
        lines.append(_row("Avg prompt throughput (tok/s):", server.get("avg_prompt_throughput")))
        lines.append(_row("Prompt incl. cache hits (tok/s):", server.get("avg_prompt_throughput_all")))
        lines.append(_row("Avg generation throughput (tok/s):", server.get("avg_generation_throughput")))
        lines.append(_row("Max running requests:", server.get("max_running"), ".0f"))
        lines.append(_row("Max waiting requests:", server.get("max_waiting"), ".0f"))
        lines.append(_row("Max KV-cache usage (%):", server.get("max_kv_usage_pct"), ".1f"))
        lines.append(_row("Prefix cache hit rate (%):", server.get("prefix_hit_pct"), ".1f"))
        lines.append(_row("Preemptions:", server.get("preemptions"), ".0f"))
        lines.extend(lora_summary_lines(server.get("lora")))
        if server.get("speculation"):  # only a server that speculates: vLLM's definitions
            lines.append("{s:{c}^{n}}".format(s="Speculative decoding", n=50, c="-"))
            lines.extend(_row(label, value, "") for label, value in summary_rows(server["speculation"]))
            lines.extend(SPEC_PEAK_NOTE)
    else:
        lines.append("no server metrics")
    lines.extend(image_lines(summary.get("images"), _row))
    if summary.get("knee_rps") is not None:
        lines.append(_row("Knee at offered rate (req/s):", summary["knee_rps"]))
        why = summary.get("knee_explanation")
        if why:
            lines.extend(knee_why_lines(why))
    if summary.get("cost_per_1m_output_tokens") is not None:
        lines.append(_row("Cost per 1M output tokens:", summary["cost_per_1m_output_tokens"]))
        lines.append(_row("Cost per 1M total tokens:", summary["cost_per_1m_total_tokens"]))
    lines.extend(_gpu_lines(summary))
    errors = summary.get("errors_by_class") or {}
    if errors:
        lines.append("{s:{c}^{n}}".format(s="Errors", n=50, c="-"))
        examples = summary.get("error_examples") or {}
        for name, count in errors.items():
            lines.append(_row(f"{name} (the client's own):" if name == CLIENT_LIMIT else f"{name}:", count))
            if examples.get(name):
                lines.append(f"  e.g. {error_example_text(examples[name])}")
    lines.append("=" * 50)
    for warning in (client_limit_warning(figures), lateness_warning(figures), client_lag_warning(figures)):
        if warning is not None:
            lines.append(warning)
    return "\n".join(lines)


def reasoning_lines(reasoning: dict[str, Any], percentiles: Sequence[float] = stats.PERCENTILES) -> list[str]:
    """A reasoning run's section (``ReasoningFigures.to_dict``): TTFA as TTFT's rows, the
    tokens of each phase and where the count came from, and each phase's ITL."""
    lines = ["{s:{c}^{n}}".format(s="Time to First Answer (reasoning)", n=50, c="-")]
    lines.append(_row("Mean TTFA (ms):", reasoning["mean_ttfa_ms"]))
    lines.append(_row("Median TTFA (ms):", reasoning["median_ttfa_ms"]))
    for p in percentiles:
        word = stats.percentile_word(p)
        lines.append(_row(f"P{word} TTFA (ms):", reasoning[f"p{word}_ttfa_ms"]))
    lines.append(_row("Requests that reasoned:", reasoning["reasoning_requests"]))
    lines.append(_row("Cut short while thinking:", reasoning["no_answer_requests"]))
    lines.append(_row("Reasoning tokens:", reasoning["reasoning_tokens"]))
    lines.append(_row("Answer tokens:", reasoning["answer_tokens"]))
    share = reasoning.get("reasoning_share")
    lines.append(_row("Reasoning share of output (%):", None if share is None else share * 100, ".1f"))
    lines.append(_row("Reasoning tokens from:", reasoning.get("reasoning_tokens_source") or "n/a", ""))
    for phase, label in (("reasoning_itl", "thinking"), ("answer_itl", "answer")):
        lines.append(_row(f"Mean ITL, {label} (ms):", reasoning[f"mean_{phase}_ms"]))
        worst = stats.percentile_word(max(percentiles)) if percentiles else None
        if worst is not None:
            lines.append(_row(f"P{worst} ITL, {label} (ms):", reasoning[f"p{worst}_{phase}_ms"]))
    return lines


# An error's text under its class in the summary: enough to name the URL or what came.
ERROR_EXAMPLE_CHARS = 160


def error_example_text(message: str) -> str:
    """A failure's text as the summary shows it: printable, on one line, cut short."""
    text = printable(str(message), one_line=True)
    return text if len(text) <= ERROR_EXAMPLE_CHARS else text[: ERROR_EXAMPLE_CHARS - 1] + "…"


def gpu_heading(source: str | None) -> str:
    """The GPU section's heading: it names where the figures came from."""
    if source == SIMULATED_GPU:
        return "GPU (simulated, not measured)"
    return f"GPU ({source})" if source else "GPU"


def _gpu_lines(summary: dict[str, Any]) -> list[str]:
    """The GPU section: none without GPU telemetry, no energy lines without power."""
    gpu = summary.get("gpu") or {}
    if not gpu:
        return []
    lines = ["{s:{c}^{n}}".format(s=gpu_heading(gpu.get("source")), n=50, c="-")]
    lines.append(_row("GPUs:", gpu.get("gpus")))
    lines.append(_row("Mean GPU utilization (%):", gpu.get("mean_util_pct"), ".1f"))
    lines.append(_row("Max GPU memory used (GiB):", gpu.get("max_mem_used_gib"), ".1f"))
    lines.append(_row("Max GPU power, all GPUs (W):", gpu.get("max_power_w"), ".0f"))
    if summary.get("tokens_per_joule") is not None:
        lines.append(_row("Mean GPU power, all GPUs (W):", gpu.get("mean_power_w"), ".0f"))
        lines.append(_row("GPU energy (Wh):", summary.get("energy_wh"), ".3f"))
        lines.append(_row("Output tokens per joule:", summary["tokens_per_joule"], ".3f"))
    return lines
