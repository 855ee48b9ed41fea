"""A reasoning model's figures: each request's two phases, and a set of requests' TTFA,
phase ITLs, reasoning share and requests cut short while thinking."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rampwatch.core.figures import stats
from rampwatch.core.figures.reasoning import (
    PHASE_TOLERANCE_S,
    SOURCE_MIXED,
    SOURCE_TOKENIZER,
    SOURCE_USAGE,
    ReasoningBlock,
    request_phases,
    tokens_source,
)
from rampwatch.core.figures.summary import SummaryBuilder, summarise_requests
from rampwatch.core.timeline import RequestRecord
from tests.core.figures.reasoning_records import reasoning_record


def plain(id: int, sent_at: float = 0.0, first: float = 0.2, chunks=(0.3, 0.4), tokens: int = 3) -> RequestRecord:
    return RequestRecord(
        id=id,
        scheduled_at=sent_at,
        sent_at=sent_at,
        end_at=chunks[-1] + 0.01,
        first_token_at=first,
        chunk_times=list(chunks),
        completion_tokens=tokens,
    )


def test_a_request_that_reasoned_has_a_thinking_phase_then_an_answer_phase():
    phases = request_phases(reasoning_record())
    assert phases.ttft == pytest.approx(0.5)
    assert phases.ttfa == pytest.approx(1.0)
    # 1.0 → 1.1 → 1.2 thinking; the 0.3 s gap to the first answer ends the TTFA; then 1.5 → 1.6 → 1.7
    assert phases.reasoning_itls.tolist() == pytest.approx([0.1, 0.1])
    assert phases.answer_itls.tolist() == pytest.approx([0.1, 0.1])
    assert (phases.reasoning_tokens, phases.answer_tokens, phases.source) == (3, 3, SOURCE_USAGE)


def test_a_request_cut_short_while_thinking_has_no_ttfa_and_only_thinking_gaps():
    phases = request_phases(reasoning_record(first_answer_at=None, reasoning_tokens=6, from_usage=False))
    assert phases.ttfa is None
    assert phases.reasoning_itls.tolist() == pytest.approx([0.1, 0.1, 0.3, 0.1, 0.1])
    assert phases.answer_itls.size == 0
    assert (phases.reasoning_tokens, phases.answer_tokens, phases.source) == (6, 0, SOURCE_TOKENIZER)


def test_a_request_that_did_not_reason_is_all_answer():
    phases = request_phases(plain(0))
    assert phases.ttfa == phases.ttft == pytest.approx(0.2)
    assert phases.answer_itls.tolist() == pytest.approx([0.1, 0.1])
    assert phases.reasoning_itls.size == 0 and phases.source is None


def test_an_answer_from_the_first_chunk_has_no_thinking_gaps():
    phases = request_phases(reasoning_record(first_answer_at=1.0, reasoning_tokens=0))
    assert phases.ttfa == phases.ttft
    assert phases.reasoning_itls.size == 0 and len(phases.answer_itls) == 5


@pytest.mark.parametrize("offset", [-PHASE_TOLERANCE_S / 2, PHASE_TOLERANCE_S / 2])
def test_the_first_answer_chunk_rounded_to_the_chunk_grid_is_still_the_answer(offset):
    # a recording keeps chunk times to 10 µs, first_answer_at to 1 µs
    phases = request_phases(reasoning_record(chunk_times=(1.1, 1.2, 1.5 + offset, 1.6, 1.7)))
    assert len(phases.reasoning_itls) == 2 and len(phases.answer_itls) == 2


@pytest.mark.parametrize(
    ("usage", "counted", "source"),
    [(2, 0, SOURCE_USAGE), (0, 2, SOURCE_TOKENIZER), (1, 1, SOURCE_MIXED), (0, 0, None)],
)
def test_the_source_of_the_counts(usage, counted, source):
    assert tokens_source(usage, counted) == source


def test_a_block_where_nothing_reasoned_has_no_reasoning_side():
    assert ReasoningBlock.from_records([plain(0), plain(1)]) is None


def test_a_plain_run_has_no_reasoning_figures():
    summary = summarise_requests(None, [plain(0), plain(1)], [], [])
    assert summary.reasoning is None and "reasoning" not in summary.to_dict()


def records_of_a_reasoning_run() -> list[RequestRecord]:
    return [
        plain(0, sent_at=0.0),  # did not reason: its TTFT is its TTFA
        reasoning_record(1, sent_at=0.5),
        reasoning_record(2, sent_at=0.6, first_answer_at=1.2, reasoning_tokens=2, from_usage=False),
        reasoning_record(3, sent_at=0.7, first_answer_at=None, reasoning_tokens=6),  # cut short
        reasoning_record(4, sent_at=0.8, error_class="http_500"),  # failed: not counted
    ]


def test_a_reasoning_runs_figures():
    records = records_of_a_reasoning_run()
    why = summarise_requests(None, records, [], [], percentiles=(50, 99)).reasoning
    assert why is not None
    ttfas = [0.2, 1.0, 0.6]  # the cut-short and the failed request have none
    want = stats.describe_ms(ttfas, (50, 99))
    assert why.ttfa.mean == pytest.approx(want["mean"]) and why.ttfa.percentiles["p99"] == pytest.approx(want["p99"])
    assert why.ttfa.median == pytest.approx(600.0)
    assert (why.reasoning_requests, why.no_answer_requests) == (3, 1)
    assert why.reasoning_tokens == 3 + 2 + 6
    assert why.output_tokens == 3 + 6 + 6 + 6 and why.answer_tokens == 21 - 11
    assert why.reasoning_share == pytest.approx(11 / 21)
    assert why.tokens_source == SOURCE_MIXED
    # thinking: 2 gaps (#1), 1 (#2: 1.0→1.1; 1.2 is its answer), 5 (#3 cut short)
    assert why.reasoning_itl.mean == pytest.approx(np.mean([0.1, 0.1, 0.1, 0.1, 0.1, 0.3, 0.1, 0.1]) * 1000)
    # answer: the plain request's 2, #1's 2, #2's 3 (1.2→1.5→1.6→1.7)
    assert why.answer_itl.mean == pytest.approx(np.mean([0.1, 0.1, 0.1, 0.1, 0.3, 0.1, 0.1]) * 1000)
    keys = why.to_dict()
    assert keys["mean_ttfa_ms"] == why.ttfa.mean and keys["p99_answer_itl_ms"] == why.answer_itl.percentiles["p99"]
    assert keys["reasoning_tokens_source"] == "mixed" and keys["no_answer_requests"] == 1


def test_requests_before_the_first_that_reasoned_count_with_their_ttft_as_ttfa():
    records = records_of_a_reasoning_run()
    builder = SummaryBuilder(percentiles=(50,))
    for record in records:  # one block each: the plain request comes before any reasoning
        builder.add(record)
    one_block = summarise_requests(None, records, [], [], percentiles=(50,)).reasoning
    assert builder.build().reasoning == one_block


def test_a_ttfa_slo_judges_the_answer_and_fails_a_request_cut_short():
    records = records_of_a_reasoning_run()
    # TTFTs 0.2, 0.5, 0.4, 0.3 all meet 800 ms; TTFAs 0.2, 1.0, 0.6 and none (cut short)
    assert summarise_requests(None, records, [], [], slo={"ttft_ms": 800}).good_requests == 4
    assert summarise_requests(None, records, [], [], slo={"ttfa_ms": 800}).good_requests == 2


def test_the_live_figures_come_back_from_a_checkpoint():
    builder = SummaryBuilder(bounded=True)
    for record in records_of_a_reasoning_run():
        builder.add(record)
    arrays: dict[str, np.ndarray] = {}
    restored = SummaryBuilder.restore_state(builder.export_state(arrays), arrays)
    assert restored.build().reasoning == builder.build().reasoning
    assert not math.isnan(restored.build().reasoning.ttfa.percentiles["p99"])


def test_the_summary_text_has_a_reasoning_section_only_when_a_request_reasoned():
    from rampwatch.core.figures.summary import format_summary

    text = format_summary(summarise_requests(None, records_of_a_reasoning_run(), [], []))
    section = text[text.index("Time to First Answer") :].splitlines()
    assert section[1].split()[:3] == ["Mean", "TTFA", "(ms):"]
    assert float(section[2].split()[-1]) == pytest.approx(600.0)  # the median
    rows = {line[:40].strip(): line[40:].strip() for line in section[1:16]}
    assert rows["Cut short while thinking:"] == "1"
    assert rows["Reasoning share of output (%):"] == f"{100 * 11 / 21:.1f}"
    assert rows["Reasoning tokens from:"] == "mixed"
    assert "Time to First Answer" not in format_summary(summarise_requests(None, [plain(0)], [], []))


def test_the_result_json_adds_the_figures_under_rampwatch_keys_only_when_a_request_reasoned():
    from rampwatch.core.figures.bench_result import result_fields

    records = records_of_a_reasoning_run()
    summary = summarise_requests(None, records, [], [])
    result = result_fields(summary, None, len(records))
    assert result["rampwatch_mean_ttfa_ms"] == summary.reasoning.ttfa.mean
    assert result["rampwatch_p99_reasoning_itl_ms"] == summary.reasoning.reasoning_itl.percentiles["p99"]
    assert result["rampwatch_reasoning_share"] == pytest.approx(11 / 21)
    assert result["mean_ttft_ms"] == summary.ttft.mean  # vLLM's keys as they were
    assert not [k for k in result if "ttfa" in k and not k.startswith("rampwatch_")]
    plain_result = result_fields(summarise_requests(None, [plain(0)], [], []), None, 1)
    assert not [k for k in plain_result if "ttfa" in k or "reasoning" in k]


def test_the_class_table_has_ttfa_rows_only_when_a_class_reasoned():
    from rampwatch.core.figures.classes import class_summaries, class_table

    records = records_of_a_reasoning_run()
    for record in records:
        record.request_class = "think" if record.reasoning_tokens else "plain"
    rows = dict(class_table({n: s.to_dict() for n, s in class_summaries(None, records).items()}).rows)
    # "plain" (the first request's class) reasoned in none of its requests: nothing shown
    assert rows["TTFA p50 ms"] == ["-", "800.00"]  # "think": 1.0 and 0.6 s
    assert rows["reasoning share %"] == ["-", f"{100 * 11 / 18:.1f}"]
    plain_rows = dict(class_table({n: s.to_dict() for n, s in class_summaries(None, [plain(0)]).items()}).rows)
    assert "TTFA p50 ms" not in plain_rows


def test_a_class_slo_on_the_first_answer_judges_that_class_good_put():
    from rampwatch.core.figures.classes import class_summaries
    from rampwatch.core.timeline import RunHeader

    records = records_of_a_reasoning_run()
    for record in records:
        record.request_class = "think"
    mix = [{"name": "think", "weight": 1, "slo": {"ttfa_ms": 800.0}}]
    header = RunHeader("0", 0.0, "http://h", "m", "s", {"workload": {"mix": mix}}, {})
    think = class_summaries(header, records)["think"]
    assert think.slo_ms == {"ttfa_ms": 800.0}
    assert think.good_requests == 2  # the plain 0.2 s and 0.6 s; 1.0 s and the cut-short one miss
