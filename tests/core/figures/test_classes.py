"""Per-class figures of a mixture: each class's series and summary are the run's own code
over the class's requests, judged by the class's SLO."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rampwatch.core.figures.classes import class_summaries, class_table, slo_attainment_pct
from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.figures.summary import SummaryBuilder, first_token_send
from rampwatch.core.timeline import CLASS_SERIES_NAMES, RequestRecord, RunHeader, Tick
from rampwatch.record.checkpoint import read_checkpoint

TOP_SLO = {"ttft_ms": 300.0, "tpot_ms": 100.0}
CLASSES = {"chat": {"ttft_ms": 150.0}, "batch": None}


def mixed_header(top_slo=TOP_SLO, classes=CLASSES) -> RunHeader:
    mix = [
        {"name": name, "weight": 1.0, "slo": slo, "input_tokens": {"dist": "fixed", "value": 8}}
        for name, slo in classes.items()
    ]
    return RunHeader(
        rampwatch_version="0",
        started_at_unix=0.0,
        target="http://x",
        model="m",
        scenario_name="mixed",
        scenario={"schedule": {"kind": "constant", "rate": 5}, "workload": {"mix": mix}, "slo": top_slo},
        options={},
        planned_duration_s=20.0,
    )


def mixed_records(seconds=20, seed=1) -> list[RequestRecord]:
    """Chat requests fast, batch ones slower; a few failures; in end order."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(seconds * 6):
        name = "chat" if rng.random() < 0.7 else "batch"
        sent = float(rng.uniform(0, seconds))
        ttft = float(rng.uniform(0.05, 0.25) if name == "chat" else rng.uniform(0.2, 0.6))
        n = int(rng.integers(2, 12))
        chunks = [sent + ttft + 0.03 * k for k in range(1, n)]
        error = "http_500" if rng.random() < 0.05 else None
        records.append(
            RequestRecord(
                id=i,
                scheduled_at=sent,
                sent_at=sent,
                end_at=(chunks[-1] if chunks else sent + ttft) if error is None else sent + 0.1,
                first_token_at=sent + ttft if error is None else None,
                chunk_times=chunks if error is None else [],
                completion_tokens=n if error is None else 0,
                prompt_tokens=8,
                error_class=error,
                request_class=name,
            )
        )
    return sorted(records, key=lambda r: r.end_at)


def built(records, header, until=math.inf):
    b = SeriesBuilder(slo=TOP_SLO)
    b.on_start(header)
    for r in records:
        if r.end_at <= until:
            b.on_tick(Tick(t=r.end_at, target_rps=6.0, state="running", in_flight=1))
            b.on_request(r)
    return b


def test_each_class_summary_is_the_one_summary_over_its_records_under_its_slo():
    header, records = mixed_header(), mixed_records()
    summaries = class_summaries(header, records)
    assert list(summaries) == ["chat", "batch"]
    window = max(r.end_at for r in records) - min(r.sent_at for r in records)
    for name, slo in (("chat", {"ttft_ms": 150.0, "tpot_ms": 100.0}), ("batch", TOP_SLO)):
        mine = [r for r in records if r.request_class == name]
        builder = SummaryBuilder(slo, token_bins_from=first_token_send(records))  # the run's token bins
        for r in mine:
            builder.add(r)
        assert summaries[name] == builder.build(header, duration_s=window)
        assert summaries[name].slo_ms == slo
    # the classes' counts and rates add up to the run's
    everything = SummaryBuilder(TOP_SLO)
    for r in records:
        everything.add(r)
    whole = everything.build(header)
    assert sum(s.completed for s in summaries.values()) == whole.completed
    assert sum(s.request_throughput for s in summaries.values()) == pytest.approx(whole.request_throughput)


def test_per_class_results_have_the_top_level_schema():
    import io
    import json

    from rampwatch.core.figures.summary import summarise_requests
    from rampwatch.record.result_json import write_records_result

    header, records = mixed_header(), mixed_records()
    for r in records:  # the batch class's requests went out 30 ms late, the chat ones on time
        r.scheduled_at = r.sent_at - (0.03 if r.request_class == "batch" else 0.0)
    out = io.StringIO()
    summary = summarise_requests(header, records, [], [], slo=TOP_SLO)
    write_records_result(header, records, summary, out, classes=class_summaries(header, records))
    top = json.loads(out.getvalue())
    per_class = top.pop("per_class")
    assert list(per_class) == ["chat", "batch"]
    for name, result in per_class.items():
        assert list(result) == list(top)
        assert result["num_prompts"] == sum(r.request_class == name for r in records)
    assert per_class["chat"]["rampwatch_send_lateness_ms"] == {"p50": 0.0, "p99": 0.0, "max": 0.0}
    assert per_class["batch"]["rampwatch_send_lateness_ms"]["p50"] == pytest.approx(30.0)
    plain_header = mixed_header()
    plain_header.scenario = {"workload": {"input_tokens": {"dist": "fixed", "value": 8}}}
    for r in records:
        r.request_class = None
    assert class_summaries(plain_header, records) == {}  # not a mixture: no section


def test_class_series_add_up_to_the_run_and_good_put_to_the_class_summary():
    header, records = mixed_header(), mixed_records()
    b = built(records, header)
    b.on_finish(max(r.end_at for r in records) + 1)
    snap = b.snapshot()
    assert [c.name for c in snap.classes] == ["chat", "batch"]
    for c in snap.classes:
        assert set(c.series) == set(CLASS_SERIES_NAMES)
        assert all(len(v) == len(snap.times) for v in c.series.values())
    for name in ("completed_rps", "error_rps", "client_output_tps"):
        total = np.sum([c.series[name] for c in snap.classes], axis=0)
        np.testing.assert_allclose(total, snap.series[name], err_msg=name)
    for c in snap.classes:
        good = sum(c.series["good_rps"])
        assert good == pytest.approx(c.summary["request_goodput"] * c.summary["duration"])
        assert 0 < good <= c.summary["completed"]
    chat_fig = snap.classes[0]
    assert sum(chat_fig.series["good_rps"]) < chat_fig.summary["completed"]  # its 150 ms TTFT bound bites
    # the chat class's TTFT is drawn from a lower range than the batch class's
    chat, batch = snap.classes
    assert np.nanmax(chat.series["ttft_p50"]) < np.nanmin(batch.series["ttft_p50"][3:])


def test_a_class_without_an_slo_anywhere_has_no_good_put_series():
    header = mixed_header(top_slo=None, classes={"a": None, "b": {"ttft_ms": 200.0}})
    records = [r for r in mixed_records() if r.request_class == "chat"]
    for r in records[::2]:
        r.request_class = "a"
    for r in records[1::2]:
        r.request_class = "b"
    b = built(records, header)
    a_fig, b_fig = b.snapshot().classes
    assert all(math.isnan(v) for v in a_fig.series["good_rps"]) and a_fig.summary["request_goodput"] is None
    assert sum(b_fig.series["good_rps"]) > 0


def test_checkpoints_keep_the_classes_and_older_ones_have_none():
    header, records = mixed_header(), mixed_records()
    half = records[len(records) // 2].end_at
    live = built(records, header, until=half)
    meta, arrays = live.export_state()
    assert [name for name, _ in meta["classes"]] == ["chat", "batch"]
    restored = SeriesBuilder.from_state(header, meta, arrays)
    for b in (live, restored):
        for r in records:
            if r.end_at > half:
                b.on_request(r)
        b.on_finish(max(r.end_at for r in records) + 1)
    got, want = restored.snapshot(), live.snapshot()
    assert [c.name for c in got.classes] == [c.name for c in want.classes]
    for a, b in zip(got.classes, want.classes, strict=True):
        assert a.summary == b.summary
        for name in CLASS_SERIES_NAMES:
            np.testing.assert_array_equal(a.series[name], b.series[name], err_msg=name)
    plain = mixed_header()
    plain.scenario = {"workload": {"input_tokens": {"dist": "fixed", "value": 8}}}
    del meta["classes"]  # a checkpoint from before mixtures
    assert SeriesBuilder.from_state(plain, meta, arrays).snapshot().classes == []


@pytest.mark.parametrize(
    ("summary", "expected"),
    [
        ({"request_goodput": 2.0, "duration": 10.0, "completed": 20, "failed": 5}, 80.0),
        ({"request_goodput": 0.0, "duration": 10.0, "completed": 3, "failed": 0}, 0.0),
        ({"request_goodput": None, "duration": 10.0, "completed": 3, "failed": 0}, None),
        ({"request_goodput": 1.0, "duration": 10.0, "completed": 0, "failed": 0}, None),
    ],
)
def test_slo_attainment_is_the_share_of_finished_requests_within_the_slo(summary, expected):
    got = slo_attainment_pct(summary)
    assert got == (None if expected is None else pytest.approx(expected))


def test_class_table_has_a_column_per_class_in_order():
    header, records = mixed_header(), mixed_records()
    table = class_table({k: s.to_dict() for k, s in class_summaries(header, records).items()})
    assert table.columns == ["chat", "batch"]
    rows = dict(table.rows)
    assert rows["requests sent"] == [str(sum(r.request_class == n for r in records)) for n in ("chat", "batch")]
    assert rows["SLO ms"] == ["ttft<150 tpot<100", "ttft<300 tpot<100"]
    assert float(rows["share %"][0]) + float(rows["share %"][1]) == pytest.approx(100.0, abs=0.1)


def test_a_class_none_of_whose_requests_completed_has_no_latencies_in_the_table():
    """Its summary holds 0 for every latency (vLLM's value for an empty list): the table
    shows "-", not a measured 0.00 ms (a starved LoRA adapter, a class cut by the drain)."""
    header, records = mixed_header(), mixed_records()
    for r in records:
        if r.request_class == "batch":  # every batch request failed
            r.error_class, r.first_token_at, r.chunk_times, r.completion_tokens = "http_500", None, [], 0
    rows = dict(class_table({k: s.to_dict() for k, s in class_summaries(header, records).items()}).rows)
    for label in ("TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "E2EL p99 ms"):
        chat, batch = rows[label]
        assert batch == "-" and float(chat) > 0, label
    assert rows["completed req/s"][1] == "0.00"  # a rate of none is a measured 0


def test_class_e2e_percentiles_per_second_and_checkpoints_from_before_them():
    header, records = mixed_header(), mixed_records()
    b = built(records, header, until=12.0)
    chat, batch = b.snapshot().classes
    # batch answers start later (TTFT 0.2-0.6 s against 0.05-0.25 s) with the same lengths
    assert np.nanmean(chat.series["e2el_p50"]) < np.nanmean(batch.series["e2el_p50"])
    meta, arrays = b.export_state()
    # as a builder without E2E percentiles wrote it: two histograms a second, no e2el_* series
    for state, prefix in [(meta, "")] + [(sub, f"class{i}/") for i, (_, sub) in enumerate(meta["classes"])]:
        state["hist_totals"] = [totals[:2] for totals in state["hist_totals"]]
        state["final"] = [spec for spec in state["final"] if not spec[0].startswith("e2el")]
        if f"{prefix}hists" in arrays:
            arrays[f"{prefix}hists"] = arrays[f"{prefix}hists"][:, :2]
    restored = read_checkpoint(header, meta, arrays)  # the upgrade fills them in
    for r in records:
        if r.end_at > 12.0:
            restored.on_request(r)
    restored.on_finish(max(r.end_at for r in records) + 1)
    late = restored.snapshot().classes[1].series["e2el_p50"]
    assert math.isnan(late[0]) and not math.isnan(late[-3])


def test_only_the_class_builders_keep_e2e_histograms():
    """E2E percentiles are drawn per class: the run's own builder neither computes nor
    checkpoints them (a checkpoint that did still restores without them)."""
    header, records = mixed_header(), mixed_records()
    b = built(records, header, until=12.0)
    assert "e2el_p50" not in b.snapshot().series
    assert all("e2el_p99" in c.series for c in b.snapshot().classes)
    meta, arrays = b.export_state()
    assert {len(totals) for totals in meta["hist_totals"]} == {2}
    assert {len(totals) for totals in meta["classes"][0][1]["hist_totals"]} == {3}
    # a run's checkpoint that kept three histograms a second: the third is not the run's
    meta["hist_totals"] = [[*totals, 5] for totals in meta["hist_totals"]]
    arrays["hists"] = np.concatenate([arrays["hists"], arrays["hists"][:, :1]], axis=1)
    restored = read_checkpoint(header, meta, arrays)
    np.testing.assert_array_equal(restored.snapshot().series["ttft_p50"], b.snapshot().series["ttft_p50"])
