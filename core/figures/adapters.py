"""Figures per LoRA adapter (``workload.adapters``, ``loadgen.workload.adapters``).

A run that sends to adapters gets, beside its summary, one summary per adapter: the ONE
run summary (``SummaryBuilder``) over the requests sent to that adapter
(``RequestRecord.adapter``), judged by the scenario's SLO, over the run's window so that
the adapters' rates add up to the run's (``AdapterSummaries``, the grouping of
``core.figures.classes`` by another field). ``adapter_table`` lays them side by side for
``rampwatch report``, the HTML report and the end of a run; ``adapter_results`` is their
part of the result JSON (``rampwatch_per_adapter``).

The server's side: each scrape's running and waiting adapters and ``max_lora``
(``ServerSample.lora_*``) give the summary's ``server.lora`` figures (``lora_figures``),
the live view's state (``lora_state``) and, per second, the values the knee's rules read
(``LoraSeconds``: ``lora_running``, ``lora_waiting``, ``max_lora``). A run without
adapters and a server without LoRA show none of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rampwatch.core.figures.classes import MIX_KEY, ClassSummaries, class_table
from rampwatch.core.figures.segments import SegmentTable
from rampwatch.core.figures.summary import Summary, first_token_send
from rampwatch.core.timeline import RequestRecord, RunHeader

ADAPTERS_KEY = "adapters"  # the workload key (loadgen.workload.adapters reads it)
MAX_ADAPTERS = 1000  # a scenario names at most this many

ADAPTER_NOTE = (
    "one column per LoRA adapter (the requests' model); each one's figures are the run summary "
    "of its requests over the run's window, good-put under the scenario's slo"
)


def scenario_adapters(scenario: dict[str, Any] | None) -> list[str]:
    """The adapters a resolved scenario (a run header's ``scenario``) sends to, in its
    order (a mixture's classes' in theirs); empty without (and for anything malformed)."""
    workload = scenario.get("workload") if isinstance(scenario, dict) else None
    if not isinstance(workload, dict):
        return []
    mix = workload.get(MIX_KEY)
    specs: list[Any] = mix if isinstance(mix, list) else [workload]
    names: dict[str, None] = {}
    for spec in specs:
        adapters = spec.get(ADAPTERS_KEY) if isinstance(spec, dict) else None
        for adapter in adapters if isinstance(adapters, list) else []:
            name = adapter.get("name") if isinstance(adapter, dict) else adapter
            if isinstance(name, str):
                names[name] = None
    return list(names)


class AdapterSummaries(ClassSummaries):
    """One ``SummaryBuilder`` per adapter (``ClassSummaries`` grouped by
    ``RequestRecord.adapter``): the scenario's adapters first, in its order, each judged
    by the scenario's SLO."""

    group_key = "adapter"

    @staticmethod
    def group_slos(scenario: dict[str, Any] | None) -> dict[str, dict[str, float] | None]:
        top = scenario.get("slo") if isinstance(scenario, dict) else None
        return dict.fromkeys(scenario_adapters(scenario), top if isinstance(top, dict) and top else None)


def adapter_summaries(
    header: RunHeader | None, records: Sequence[RequestRecord], idle_duration_s: float = 0.0, **builder_options: Any
) -> dict[str, Summary]:
    """Each adapter's ``Summary`` from requests held in memory (a run's end, tests);
    empty when no request went to an adapter."""
    if not any(r.adapter is not None for r in records) and not scenario_adapters(header.scenario if header else None):
        return {}
    builder_options.setdefault("token_bins_from", first_token_send(records))
    accumulator = AdapterSummaries(header, **builder_options)
    accumulator.add_records(records)
    return accumulator.build(header, idle_duration_s)


def adapter_table(summaries: Mapping[str, Summary]) -> SegmentTable | None:
    """The adapters side by side (one column each); None without adapters."""
    return class_table({name: s.to_dict() for name, s in summaries.items()}) if summaries else None


# The result JSON's figures of each adapter (``rampwatch_per_adapter``): vLLM's summary keys.
ADAPTER_RESULT_KEYS = (
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
)


def adapter_results(summaries: Mapping[str, Summary]) -> dict[str, dict[str, Any]]:
    """Each adapter's figures for the result JSON: counts, rates and the latency
    figures (``mean_ttft_ms``, ``p99_itl_ms``, …) under vLLM's names."""
    out: dict[str, dict[str, Any]] = {}
    for name, summary in summaries.items():
        figures = summary.to_dict()
        one = {key: figures.get(key) for key in ADAPTER_RESULT_KEYS}
        one["cancelled"] = figures.get("cancelled", 0)
        for key, value in figures.items():
            parts = key.split("_")
            if len(parts) == 3 and parts[1] in ("ttft", "tpot", "itl", "e2el") and parts[2] == "ms":
                one[key] = value
        out[name] = one
    return out
