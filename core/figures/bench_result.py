"""The result JSON's schema: ``vllm bench serve --save-result``'s fields and units, plus
rampwatch's own figures under ``rampwatch_*`` keys (``to_bench_result``), and its
per-request lists (``PER_REQUEST_KEYS``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from rampwatch.core import strict_json
from rampwatch.core.figures import stats
from rampwatch.core.figures.run_summary import METRICS, Summary
from rampwatch.core.timeline import RequestRecord, RunHeader


def _bench_request_rate(schedule: dict[str, Any]) -> float | str:
    """vLLM writes the fixed rate, or "inf"; a ramp adds ``ramp_up_*`` keys instead."""
    rate = schedule.get("rate")
    if schedule.get("kind") in ("constant", "poisson", "gamma", "vllm-constant") and isinstance(rate, (int, float)):
        return float(rate)
    return "inf"


def _has_sessions(header: RunHeader | None) -> bool:
    workload = header.scenario.get("workload") if header is not None else None
    return isinstance(workload, dict) and bool(workload.get("sessions"))


# The per-request lists `vllm bench serve` writes only with --save-detailed (its list,
# vllm/benchmarks/serve.py); `latencies` and `queue_times` it always writes.
DETAILED_KEYS = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")


# The result JSON's per-request lists, in its key order.
PER_REQUEST_KEYS = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
)


def dump_list(values: Sequence[Any]) -> bytes:
    """A per-request list as JSON. orjson writes floats ~18x faster than ``json``, which
    matters for ``itls`` (every chunk gap of the run); the values read back identical."""
    try:
        return orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)  # NaN as null
    except TypeError:  # e.g. a lone surrogate in an error text
        return strict_json.dumps(values).encode()


def dumps_bench_result(result: dict[str, Any]) -> bytes:
    """``result`` as strict JSON (a NaN or infinite figure written as null, where vLLM's
    own file writes the bare word NaN that strict parsers reject), with the per-request
    lists encoded by ``dump_list``, those of each class of a mixture too."""

    def encode(key: str, value: Any) -> bytes:
        if key in PER_REQUEST_KEYS:
            return dump_list(value)
        if key == "per_class" and isinstance(value, dict):  # {class: a result of its own}
            return (
                b"{"
                + b", ".join(json.dumps(k).encode() + b": " + dumps_bench_result(v) for k, v in value.items())
                + b"}"
            )
        return strict_json.dumps(value).encode()

    parts = [json.dumps(key).encode() + b": " + encode(key, value) for key, value in result.items()]
    return b"{" + b", ".join(parts) + b"}"


def request_keys(detailed: bool) -> tuple[str, ...]:
    """The per-request lists a result holds, in its key order: as vLLM, the lists of
    ``DETAILED_KEYS`` only when ``detailed`` (``--save-detailed``)."""
    return tuple(key for key in PER_REQUEST_KEYS if detailed or key not in DETAILED_KEYS)


# Each per-request list of a block of records, in the records' order: failed requests with
# 0 / empty values, as vLLM fills them; times in seconds. ``generated_texts`` holds each
# record's ``generated_text``, an empty string where it was not kept.
REQUEST_LISTS: dict[str, Callable[[Sequence[RequestRecord]], list[Any]]] = {
    "input_lens": lambda records: [r.prompt_tokens for r in records],
    "output_lens": lambda records: [stats.output_len(r) if r.ok else 0 for r in records],
    "ttfts": lambda records: [(r.ttft or 0.0) if r.ok else 0.0 for r in records],
    "itls": lambda records: [stats.itl_array(r).tolist() if r.ok else [] for r in records],
    "latencies": lambda records: [r.e2e if r.ok else 0.0 for r in records],
    "start_times": lambda records: [r.sent_at for r in records],
    "queue_times": lambda records: [r.client_queue_s for r in records],
    "generated_texts": lambda records: [r.generated_text or "" for r in records],
    "errors": lambda records: ["" if r.ok else f"{r.error_class}: {r.error or ''}" for r in records],
}


def to_bench_result(
    figures: Summary, header: RunHeader | None, records: Sequence[RequestRecord], *, detailed: bool = False
) -> dict[str, Any]:
    """The result of ``records`` held in memory: ``result_fields`` with every
    per-request list filled in (``REQUEST_LISTS``)."""
    result = result_fields(figures, header, len(records), detailed=detailed)
    for key in request_keys(detailed):
        result[key] = REQUEST_LISTS[key](records)
    return result


def result_fields(
    figures: Summary, header: RunHeader | None, num_prompts: int, *, detailed: bool = False
) -> dict[str, Any]:
    """A result JSON with ``vllm bench serve --save-result``'s fields and units, its
    per-request lists (``request_keys``) in place but None: a writer fills them in.

    Times are seconds in the lists and ms in the aggregate fields. rampwatch's own
    figures go under ``rampwatch_*`` keys.
    """
    summary = figures.to_dict()
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
        "num_prompts": num_prompts,
        # A session workload's schedule is of sessions (or users), not requests.
        "request_rate": "inf" if _has_sessions(header) else _bench_request_rate(schedule),
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
    for key in request_keys(detailed):
        result[key] = None
    for key, value in summary.items():
        parts = key.split("_")
        if len(parts) == 3 and parts[1] in METRICS and parts[2] == "ms":
            result[key] = value
    result["rampwatch_server"] = summary.get("server")
    speculation = (summary.get("server") or {}).get("speculation")
    if speculation:  # only a server that speculates has the key
        result["rampwatch_spec_decode"] = speculation
    result["rampwatch_errors_by_class"] = summary.get("errors_by_class")
    result["rampwatch_cancelled"] = summary.get("cancelled", 0)
    result["rampwatch_send_lateness_ms"] = summary.get("send_lateness_ms")
    result["rampwatch_client"] = summary.get("client")
    result["rampwatch_knee_rps"] = summary.get("knee_rps")
    result["rampwatch_knee_explanation"] = summary.get("knee_explanation")
    result["rampwatch_cost"] = {
        "gpu_price_per_hour": summary.get("gpu_price_per_hour"),
        "per_1m_output_tokens": summary.get("cost_per_1m_output_tokens"),
        "per_1m_total_tokens": summary.get("cost_per_1m_total_tokens"),
    }
    result["rampwatch_gpu"] = summary.get("gpu") or None
    result["rampwatch_energy_wh"] = summary.get("energy_wh")
    result["rampwatch_tokens_per_joule"] = summary.get("tokens_per_joule")
    if summary.get("images"):  # a run with images only (core.figures.images)
        result["rampwatch_images"] = summary["images"]
    # A reasoning run's figures (ReasoningFigures.to_dict), each key prefixed; none otherwise
    for key, value in (summary.get("reasoning") or {}).items():
        result[f"rampwatch_{key}"] = value
    if summary.get("ttft_phases"):  # where TTFT went (core.figures.phases); absent without marks
        result["rampwatch_ttft_phases"] = summary["ttft_phases"]
    return result
