"""Figures per class of a mixture (``workload.mix``, ``loadgen.workload.mixture``).

A class's figures are the ONE run summary (``core.figures.summary.SummaryBuilder``) over the
requests of that class (``RequestRecord.request_class``), judged by the class's SLO: the
scenario's ``slo`` with the class's own keys replacing the same keys of it
(``class_slos``), so the scenario's objectives apply to every class unless a class says
otherwise. The scenario's summary stays the one over every request, judged by the
scenario's ``slo``. Server figures (``/metrics``) and the knee belong to the whole server
and are not split by class.

The live series per class come from ``SeriesBuilder`` (one builder per class, see
``Snapshot.classes``); ``ClassSummaries`` builds the final summaries from records in any
grouping (a run's end, a recording block by block); ``class_table`` lays them side by
side — the table ``rampwatch report``, the HTML report and the screen print.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rampwatch.core.figures.segments import SegmentTable, number_cell
from rampwatch.core.figures.summary import RequestBlock, Summary, SummaryBuilder, first_token_send
from rampwatch.core.timeline import RequestRecord, RunHeader

MIX_KEY = "mix"  # the workload key of a traffic mixture (loadgen.workload.mixture reads it)

CLASS_NOTE = (
    "one column per class of the mixture; each one's figures are the run summary of its "
    "requests over the run's window, good-put under its SLO (the scenario's slo with the class's own keys)"
)


def class_slos(scenario: dict[str, Any] | None) -> dict[str, dict[str, float] | None]:
    """Each class's SLO by name, in the mixture's order, from a resolved scenario (a run
    header's ``scenario``). Empty outside a mixture (and for anything malformed: an old
    or foreign recording)."""
    if not isinstance(scenario, dict):
        return {}
    workload = scenario.get("workload")
    if not isinstance(workload, dict) or not isinstance(workload.get(MIX_KEY), list):
        return {}
    top = _mapping(scenario.get("slo"))
    out: dict[str, dict[str, float] | None] = {}
    for spec in workload[MIX_KEY]:
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            out[spec["name"]] = {**top, **_mapping(spec.get("slo"))} or None
    return out


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class ClassSummaries:
    """One ``SummaryBuilder`` per class, fed requests in any grouping: each request goes
    to its class's builder (requests without a class to none). The header's classes come
    first, in the mixture's order; a class it does not name is judged by the scenario's SLO.
    A subclass groups by another field of the record (``group_key``, e.g. the adapter)."""

    group_key = "request_class"

    def __init__(self, header: RunHeader | None, **builder_options: Any) -> None:
        scenario = header.scenario if header is not None else None
        self._top_slo = _mapping(scenario).get("slo") or None
        self._slos = self.group_slos(scenario)
        self._options = {k: v for k, v in builder_options.items() if k != "slo"}
        self.builders: dict[str, SummaryBuilder] = {}
        for name in self._slos:
            self._builder(name)

    @staticmethod
    def group_slos(scenario: dict[str, Any] | None) -> dict[str, dict[str, float] | None]:
        return class_slos(scenario)

    def _builder(self, name: str) -> SummaryBuilder:
        builder = self.builders.get(name)
        if builder is None:
            slo = self._slos.get(name, self._top_slo)
            builder = self.builders[name] = SummaryBuilder(slo, **self._options)
        return builder

    def add_records(self, records: Iterable[RequestRecord]) -> None:
        groups: dict[str, list[RequestRecord]] = {}
        key = self.group_key
        for record in records:
            name = getattr(record, key)
            if name is not None:
                groups.setdefault(name, []).append(record)
        for name, group in groups.items():
            self._builder(name).add_block(RequestBlock.from_records(group))

    def build(self, header: RunHeader | None, idle_duration_s: float = 0.0) -> dict[str, Summary]:
        """Each class's summary, in the mixture's order (empty outside a mixture). Every
        class's rates are over the run's window (first send to last completion of any
        request, as the run summary's), so that the classes' rates add up to the run's."""
        used = [b for b in self.builders.values() if b.requests]
        if used:
            duration = max(b.last_end_at for b in used) - min(b.first_send_at for b in used)
        else:
            duration = idle_duration_s
        return {name: b.build(header, duration_s=duration) for name, b in self.builders.items()}


def class_summaries(
    header: RunHeader | None, records: Sequence[RequestRecord], idle_duration_s: float = 0.0, **builder_options: Any
) -> dict[str, Summary]:
    """Each class's ``Summary`` from requests held in memory (a run's end, tests); the
    peak token rate's bins start where the run's do (``first_token_send``)."""
    builder_options.setdefault("token_bins_from", first_token_send(records))
    accumulator = ClassSummaries(header, **builder_options)
    accumulator.add_records(records)
    return accumulator.build(header, idle_duration_s)


# -- the side-by-side table ---------------------------------------------------------------


def sent(summary: Mapping[str, Any]) -> int:
    return int(summary.get("completed", 0)) + int(summary.get("failed", 0)) + int(summary.get("cancelled", 0))


def slo_attainment_pct(summary: Mapping[str, Any]) -> float | None:
    """The share of a class's finished requests (completed or failed; not those the run
    cancelled) that met its SLO, in %; None without an SLO or before any request."""
    goodput, duration = summary.get("request_goodput"), summary.get("duration")
    finished = int(summary.get("completed", 0)) + int(summary.get("failed", 0))
    if goodput is None or not finished or not duration:
        return None
    return 100.0 * goodput * max(duration, 1e-9) / finished


def slo_text(slo: Mapping[str, float] | None) -> str:
    """``ttft<500 tpot<50`` (ms): an SLO in a table cell."""
    if not slo:
        return "-"
    return " ".join(f"{key.removesuffix('_ms')}<{value:g}" for key, value in slo.items())


def class_rows(summaries: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """Each class's figures, one row each, from its summary's ``Summary.to_dict()``."""
    values = list(summaries.values())
    total = sum(sent(s) for s in values)

    def row(label: str, cell) -> tuple[str, list[str]]:
        return label, [cell(s) for s in values]

    def ms(key: str):
        # A class none of whose requests completed has no latencies: its summary's 0
        # (vLLM's convention for an empty list) would read as a measured 0.00 ms.
        return lambda s: number_cell(s.get(key) if s.get("completed") else None)

    def reasoning(key: str, scale: float = 1.0, fmt: str = ".2f"):
        def cell(s: Mapping[str, Any]) -> str:
            value = (s.get("reasoning") or {}).get(key)
            return number_cell(None if value is None else value * scale, fmt)

        return cell

    # A reasoning run's rows (after ITL's), only when some class reasoned
    thinking = [
        row("TTFA p50 ms", reasoning("p50_ttfa_ms")),
        row("TTFA p99 ms", reasoning("p99_ttfa_ms")),
        row("reasoning share %", reasoning("reasoning_share", 100.0, ".1f")),
    ]
    if not any(s.get("reasoning") for s in values):
        thinking = []
    return [
        row("requests sent", lambda s: str(sent(s))),
        row("share %", lambda s: number_cell(100.0 * sent(s) / total if total else None, ".1f")),
        row("completed req/s", lambda s: number_cell(s.get("request_throughput"))),
        row("output tok/s", lambda s: number_cell(s.get("output_throughput"), ".1f")),
        row("TTFT p50 ms", ms("p50_ttft_ms")),
        row("TTFT p99 ms", ms("p99_ttft_ms")),
        row("ITL p50 ms", ms("p50_itl_ms")),
        row("ITL p99 ms", ms("p99_itl_ms")),
        *thinking,
        row("E2EL p99 ms", ms("p99_e2el_ms")),
        row("failed", lambda s: str(s.get("failed", 0))),
        row("SLO ms", lambda s: slo_text(s.get("slo_ms"))),
        row("good-put req/s", lambda s: number_cell(s.get("request_goodput"))),
        row("SLO met %", lambda s: number_cell(slo_attainment_pct(s), ".1f")),
    ]


def class_table(summaries: Mapping[str, Mapping[str, Any]]) -> SegmentTable:
    """The classes side by side, in the segments' table form (one column per class)."""
    return SegmentTable(
        columns=list(summaries),
        commands=["" for _ in summaries],
        rows=class_rows(summaries),
        argument_count=0,
    )
