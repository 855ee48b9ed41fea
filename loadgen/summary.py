"""End-of-run figures (``compute_summary``), their text form (``format_summary``), the
``vllm bench serve --save-result`` JSON (``to_bench_result``) and the cheap run-so-far
variant the live view uses (``RunningSummary``).

Client figures follow ``loadgen.stats`` (vLLM's definitions). Keys are those of vLLM's
result JSON where vLLM has the figure (``completed``, ``request_throughput``,
``mean_ttft_ms``, ``p99_itl_ms``...), plus ``p50``/``p90`` for every latency metric,
``server`` (figures from ``/metrics``), ``errors_by_class``, ``knee_rps`` and, with a GPU
price, ``cost_per_1m_output_tokens`` / ``cost_per_1m_total_tokens``
(hourly price / measured tokens per second * 1e6 / 3600).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from rampwatch.core.timeline import Event, RequestRecord, RunHeader, ServerSample
from rampwatch.loadgen import stats
from rampwatch.loadgen.counters import CounterTracker
from rampwatch.loadgen.scrape import combine_samples

METRICS = ("ttft", "tpot", "itl", "e2el")
METRIC_TITLES = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
}


def _cost(price_per_hour: float | None, tokens_per_s: float) -> float | None:
    if price_per_hour is None or tokens_per_s <= 0:
        return None
    return price_per_hour / tokens_per_s * 1e6 / 3600


def server_figures(samples: Sequence[ServerSample]) -> dict[str, Any]:
    """Run-wide server figures from the scrapes (per URL counter deltas, reset-safe).

    Throughputs are summed counter increases over the time the scrapes covered; the
    prefix hit rate is Δhits/Δqueries over the whole run; maxima are over the combined
    (summed over URLs) gauges of each poll.
    """
    tracker = CounterTracker()
    totals: dict[str, float] = {}
    covered: dict[str, float] = {}
    backends: set[str] = set()
    latest: dict[str, ServerSample] = {}
    max_running = max_waiting = max_kv = None
    ok = 0
    for s in sorted(samples, key=lambda x: x.t):
        if not s.ok:
            continue
        ok += 1
        backends.add(s.backend)
        step = tracker.update(s)
        if step is not None:
            dt, deltas = step
            for name, d in deltas.items():
                if d is not None:
                    totals[name] = totals.get(name, 0.0) + d
                    covered.setdefault(s.url, 0.0)
            covered[s.url] = covered.get(s.url, 0.0) + dt
        latest[s.url] = s
        combined = combine_samples(list(latest.values()))
        if combined.running is not None:
            max_running = combined.running if max_running is None else max(max_running, combined.running)
        if combined.waiting is not None:
            max_waiting = combined.waiting if max_waiting is None else max(max_waiting, combined.waiting)
        if combined.kv_usage is not None:
            kv = combined.kv_usage * 100
            max_kv = kv if max_kv is None else max(max_kv, kv)
    span = max(covered.values()) if covered else 0.0  # replicas are scraped in parallel

    def rate(name: str) -> float | None:
        return totals[name] / span if name in totals and span > 0 else None

    queries = totals.get("prefix_queries_total")
    return {
        "available": ok > 0,
        "scrapes_ok": ok,
        "scrapes_failed": sum(1 for s in samples if not s.ok),
        "backend": ",".join(sorted(backends)) if backends else None,
        "avg_prompt_throughput": rate("prompt_tokens_total"),
        "avg_generation_throughput": rate("generation_tokens_total"),
        "max_running": max_running,
        "max_waiting": max_waiting,
        "max_kv_usage_pct": max_kv,
        "prefix_hit_pct": (totals.get("prefix_hits_total", 0.0) / queries * 100) if queries else None,
        "preemptions": totals.get("preemptions_total"),
    }


def knee_rps(events: Sequence[Event]) -> float | None:
    for e in events:
        if e.kind == "knee" and "offered_rps" in e.data:
            return float(e.data["offered_rps"])
    return None


def compute_summary(
    header: RunHeader | None,
    records: Sequence[RequestRecord],
    samples: Sequence[ServerSample],
    events: Sequence[Event],
    duration_s: float,
    slo: dict[str, float] | None = None,
    gpu_price_per_hour: float | None = None,
    percentiles: Sequence[float] = stats.PERCENTILES,
) -> dict[str, Any]:
    """Every figure of ``vllm bench serve``'s summary, plus server side, errors, cost.

    ``duration_s`` is the benchmark duration (vLLM: first send to last completion, wall
    clock). ``slo`` maps ``ttft``/``tpot``/``e2el`` to milliseconds, as ``--goodput``.
    """
    dur = max(duration_s, 1e-9)
    ok = [r for r in records if r.ok]
    failed = len(records) - len(ok)
    out_lens = [stats.output_len(r) for r in ok]
    total_input = sum(r.prompt_tokens for r in ok)
    total_output = sum(out_lens)
    ttfts = [r.ttft or 0.0 for r in ok]
    e2els = [r.e2e for r in ok]
    tpots = [r.tpot for r in ok if r.tpot is not None]
    itls = np.concatenate([stats.itl_array(r) for r in ok]) if ok else np.empty(0, dtype=np.float64)

    summary: dict[str, Any] = {
        "duration": duration_s,
        "completed": len(ok),
        "failed": failed,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(ok) / dur,
        "request_goodput": None,
        "output_throughput": total_output / dur,
        "total_token_throughput": (total_input + total_output) / dur,
        "max_output_tokens_per_s": stats.peak_chunks_per_second(ok),
        "max_concurrent_requests": stats.max_concurrent((r.sent_at, r.end_at) for r in ok),
        "max_concurrency": (header.options.get("max_concurrency") if header else None),
        "tokens_from_usage": all(r.tokens_from_usage for r in ok),
    }
    if slo:
        summary["request_goodput"] = sum(1 for r in ok if stats.is_good(r, slo)) / dur
        summary["slo_ms"] = dict(slo)
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        for key, value in stats.describe_ms(values, percentiles).items():
            summary[f"{key}_{name}_ms"] = value
    summary["mean_client_queue_ms"] = float(np.mean([r.client_queue_s for r in records] or [0])) * 1000
    summary["errors_by_class"] = dict(sorted(Counter(r.error_class for r in records if not r.ok).items()))
    summary["server"] = server_figures(samples)
    summary["knee_rps"] = knee_rps(events)
    summary["gpu_price_per_hour"] = gpu_price_per_hour
    summary["cost_per_1m_output_tokens"] = _cost(gpu_price_per_hour, summary["output_throughput"])
    summary["cost_per_1m_total_tokens"] = _cost(gpu_price_per_hour, summary["total_token_throughput"])
    return summary


def _row(label: str, value: Any, fmt: str = ".2f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        text = "n/a"
    elif isinstance(value, int) or fmt == "":
        text = str(value)
    else:
        text = format(value, fmt)
    return f"{label:<40} {text:<10}"


def format_summary(summary: dict[str, Any], percentiles: Sequence[float] = stats.PERCENTILES) -> str:
    """The summary as ``vllm bench serve`` prints it (50-column banner, 40-column
    labels), then a server-side section and the errors."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    lines.append(_row("Successful requests:", summary["completed"]))
    lines.append(_row("Failed requests:", summary["failed"]))
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
    server = summary.get("server") or {}
    lines.append("{s:{c}^{n}}".format(s="Server (/metrics)", n=50, c="-"))
    if server.get("available"):
        lines.append(_row("Server kind:", server.get("backend"), ""))
        lines.append(_row("Avg prompt throughput (tok/s):", server.get("avg_prompt_throughput")))
        lines.append(_row("Avg generation throughput (tok/s):", server.get("avg_generation_throughput")))
        lines.append(_row("Max running requests:", server.get("max_running"), ".0f"))
        lines.append(_row("Max waiting requests:", server.get("max_waiting"), ".0f"))
        lines.append(_row("Max KV-cache usage (%):", server.get("max_kv_usage_pct"), ".1f"))
        lines.append(_row("Prefix cache hit rate (%):", server.get("prefix_hit_pct"), ".1f"))
        lines.append(_row("Preemptions:", server.get("preemptions"), ".0f"))
    else:
        lines.append("no server metrics")
    if summary.get("knee_rps") is not None:
        lines.append(_row("Knee at offered rate (req/s):", summary["knee_rps"]))
    if summary.get("cost_per_1m_output_tokens") is not None:
        lines.append(_row("Cost per 1M output tokens:", summary["cost_per_1m_output_tokens"]))
        lines.append(_row("Cost per 1M total tokens:", summary["cost_per_1m_total_tokens"]))
    errors = summary.get("errors_by_class") or {}
    if errors:
        lines.append("{s:{c}^{n}}".format(s="Errors", n=50, c="-"))
        for name, count in errors.items():
            lines.append(_row(f"{name}:", count))
    lines.append("=" * 50)
    return "\n".join(lines)


def _bench_request_rate(schedule: dict[str, Any]) -> float | str:
    """vLLM writes the fixed rate, or "inf"; a ramp adds ``ramp_up_*`` keys instead."""
    rate = schedule.get("rate")
    if schedule.get("kind") in ("constant", "poisson", "gamma", "vllm-constant") and isinstance(rate, (int, float)):
        return float(rate)
    return "inf"


# The result JSON's per-request lists, in its key order.
PER_REQUEST_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
                    "generated_texts", "errors")


def dump_list(values: Sequence[Any]) -> bytes:
    """A per-request list as JSON. orjson writes floats ~18x faster than ``json``, which
    matters for ``itls`` (every chunk gap of the run); the values read back identical."""
    try:
        return orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)
    except TypeError:  # e.g. a lone surrogate in an error text
        return json.dumps(values).encode()


def dumps_bench_result(result: dict[str, Any]) -> bytes:
    """``json.dumps(result)`` (NaN written as vLLM's own file has it), with the
    per-request lists encoded by ``dump_list``."""
    parts = [
        json.dumps(key).encode() + b": " + (dump_list(value) if key in PER_REQUEST_KEYS else json.dumps(value).encode())
        for key, value in result.items()
    ]
    return b"{" + b", ".join(parts) + b"}"


def to_bench_result(summary: dict[str, Any], header: RunHeader | None, records: Sequence[RequestRecord]) -> dict[str, Any]:
    """A result JSON with ``vllm bench serve --save-result``'s fields and units.

    Per-request lists cover every request in ``records`` order (failed ones with
    0 / empty values, as vLLM fills them); times are seconds in the lists and ms in the
    aggregate fields. ``generated_texts`` are empty strings (texts are not kept).
    rampwatch's own figures go under ``rampwatch_*`` keys.
    """
    endpoint = (header.scenario.get("endpoint") if header else None) or "completions"
    schedule = (header.scenario.get("schedule") if header else None) or {}
    backend = "openai-chat" if endpoint == "chat" else "openai"
    result: dict[str, Any] = {
        "date": None,
        "endpoint_type": backend,
        "backend": backend,
        "label": None,
        "model_id": header.model if header else None,
        "tokenizer_id": (header.options.get("tokenizer") if header else None) or (header.model if header else None),
        "num_prompts": len(records),
        "request_rate": _bench_request_rate(schedule),
        "burstiness": 1.0,
        "max_concurrency": summary.get("max_concurrency"),
    }
    if header is not None:
        import datetime

        result["date"] = datetime.datetime.fromtimestamp(header.started_at_unix).strftime("%Y%m%d-%H%M%S")
    for key in (
        "duration",
        "completed",
        "failed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "request_goodput",
        "output_throughput",
        "total_token_throughput",
        "max_output_tokens_per_s",
        "max_concurrent_requests",
    ):
        result[key] = summary[key]
    result["rtfx"] = 0.0  # audio real-time factor; always 0 for text
    if schedule.get("kind") in ("linear", "exponential", "vllm-linear", "vllm-exponential"):
        result["ramp_up_strategy"] = schedule["kind"].removeprefix("vllm-")
        result["ramp_up_start_rps"] = schedule.get("start_rps")
        result["ramp_up_end_rps"] = schedule.get("end_rps")
    result["input_lens"] = [r.prompt_tokens for r in records]
    result["output_lens"] = [stats.output_len(r) if r.ok else 0 for r in records]
    result["ttfts"] = [(r.ttft or 0.0) if r.ok else 0.0 for r in records]
    result["itls"] = [stats.itl_array(r).tolist() if r.ok else [] for r in records]
    result["latencies"] = [r.e2e if r.ok else 0.0 for r in records]
    result["start_times"] = [r.sent_at for r in records]
    result["queue_times"] = [r.client_queue_s for r in records]
    result["generated_texts"] = ["" for _ in records]
    result["errors"] = ["" if r.ok else f"{r.error_class}: {r.error or ''}" for r in records]
    for key, value in summary.items():
        parts = key.split("_")
        if len(parts) == 3 and parts[1] in METRICS and parts[2] == "ms":
            result[key] = value
    result["rampwatch_server"] = summary.get("server")
    result["rampwatch_errors_by_class"] = summary.get("errors_by_class")
    result["rampwatch_knee_rps"] = summary.get("knee_rps")
    result["rampwatch_cost"] = {
        "gpu_price_per_hour": summary.get("gpu_price_per_hour"),
        "per_1m_output_tokens": summary.get("cost_per_1m_output_tokens"),
        "per_1m_total_tokens": summary.get("cost_per_1m_total_tokens"),
    }
    return result


class RunningSummary:
    """Run-so-far figures in bounded memory, updated per record (the live view).

    Same keys as ``compute_summary``. Means and std are exact (running sums);
    median and percentiles come from ``stats.LogHistogram`` (within a 1% bucket).
    ``max_output_tokens_per_s`` and ``max_concurrent_requests`` are not tracked here
    (the live view has in-flight counts from ticks); they report the peak in-flight
    count seen in ticks and NaN.
    """

    def __init__(self, slo: dict[str, float] | None = None, gpu_price_per_hour: float | None = None) -> None:
        self.slo = dict(slo) if slo else None
        self.gpu_price_per_hour = gpu_price_per_hour
        self.completed = 0
        self.failed = 0
        self.good = 0
        self.total_input = 0
        self.total_output = 0
        self.errors: Counter[str] = Counter()
        self.hists = {m: stats.LogHistogram() for m in METRICS}
        self.sums = {m: [0, 0.0, 0.0] for m in METRICS}  # n, sum, sum of squares
        self.queue_sum = 0.0
        self.records = 0
        self.peak_in_flight = 0

    def _add_one(self, metric: str, value: float) -> None:
        acc = self.sums[metric]
        acc[0] += 1
        acc[1] += value
        acc[2] += value * value
        self.hists[metric].add((value,))

    def _add(self, metric: str, values: Sequence[float] | np.ndarray) -> None:
        if isinstance(values, np.ndarray):
            if values.size == 0:
                return
            acc = self.sums[metric]
            acc[0] += int(values.size)
            acc[1] += float(values.sum())
            acc[2] += float(np.square(values).sum())
            self.hists[metric].add(values)
            return
        if not values:
            return
        acc = self.sums[metric]
        acc[0] += len(values)
        acc[1] += sum(values)
        acc[2] += sum(v * v for v in values)
        self.hists[metric].add(values)

    def add(self, rec: RequestRecord, itls: Sequence[float] | np.ndarray | None = None) -> None:
        """Count one finished request; ``itls`` may pass its ITLs if already computed
        (``stats.itl_array(rec)``, or ``rec.itls()``)."""
        self.records += 1
        self.queue_sum += rec.client_queue_s
        if not rec.ok:
            self.failed += 1
            self.errors[rec.error_class or "unknown"] += 1
            return
        self.completed += 1
        self.total_input += rec.prompt_tokens
        self.total_output += stats.output_len(rec)
        self._add_one("ttft", rec.ttft or 0.0)
        self._add_one("e2el", rec.e2e)
        tpot = rec.tpot
        if tpot is not None:
            self._add_one("tpot", tpot)
        self._add("itl", stats.itl_array(rec) if itls is None else itls)
        if self.slo and stats.is_good(rec, self.slo):
            self.good += 1

    def figures(self, duration_s: float, server: dict[str, Any] | None = None, knee: float | None = None) -> dict[str, Any]:
        dur = max(duration_s, 1e-9)
        out: dict[str, Any] = {
            "duration": duration_s,
            "completed": self.completed,
            "failed": self.failed,
            "total_input_tokens": self.total_input,
            "total_output_tokens": self.total_output,
            "request_throughput": self.completed / dur,
            "request_goodput": self.good / dur if self.slo else None,
            "output_throughput": self.total_output / dur,
            "total_token_throughput": (self.total_input + self.total_output) / dur,
            "max_output_tokens_per_s": math.nan,
            "max_concurrent_requests": self.peak_in_flight,
            "max_concurrency": None,
            "tokens_from_usage": None,
        }
        qs = [p / 100 for p in stats.PERCENTILES]
        for metric in METRICS:
            n, total, squares = self.sums[metric]
            mean = total / n if n else 0.0
            std = math.sqrt(max(0.0, squares / n - mean * mean)) if n else 0.0
            values = self.hists[metric].quantiles([0.5, *qs]) if n else [0.0] * (1 + len(qs))
            out[f"mean_{metric}_ms"] = mean * 1000
            out[f"median_{metric}_ms"] = values[0] * 1000
            out[f"std_{metric}_ms"] = std * 1000
            for p, v in zip(stats.PERCENTILES, values[1:]):
                out[f"p{stats.percentile_word(p)}_{metric}_ms"] = v * 1000
        out["mean_client_queue_ms"] = self.queue_sum / self.records * 1000 if self.records else 0.0
        out["errors_by_class"] = dict(sorted(self.errors.items()))
        out["server"] = server or {}
        out["knee_rps"] = knee
        out["gpu_price_per_hour"] = self.gpu_price_per_hour
        out["cost_per_1m_output_tokens"] = _cost(self.gpu_price_per_hour, out["output_throughput"])
        out["cost_per_1m_total_tokens"] = _cost(self.gpu_price_per_hour, out["total_token_throughput"])
        return out
