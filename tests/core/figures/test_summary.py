import json

import numpy as np
import pytest

from rampwatch.core.figures.summary import (
    DETAILED_KEYS,
    SendLatenessMs,
    SummaryBuilder,
    format_summary,
    late_send_bound_ms,
    lateness_warning,
    server_figures,
    summarise_requests,
    to_bench_result,
)
from rampwatch.core.timeline import CANCELLED, Event, RequestRecord, RunHeader, ServerSample


def rec(i, sent, first, chunks, tokens, prompt, error=None, end=None):
    end = end if end is not None else (chunks[-1] if chunks else first)
    return RequestRecord(
        id=i,
        scheduled_at=sent,
        sent_at=sent,
        end_at=end,
        first_token_at=first,
        chunk_times=list(chunks),
        completion_tokens=tokens,
        prompt_tokens=prompt,
        error_class=error,
        error="boom" if error else None,
        status=500 if error else 200,
    )


RECORDS = [
    rec(0, 0.0, 0.1, [0.2, 0.4], 3, 10),  # ttft .1 e2e .4 itl .1,.2 tpot .15
    rec(1, 0.3, 0.6, [0.8], 2, 20),  # ttft .3 e2e .5 itl .2 tpot .2
    rec(2, 2.0, 2.2, [], 1, 5),  # ttft .2 e2e .2, no tpot
    rec(3, 3.0, None, [], 0, 7, error="http_500", end=3.1),
]
HEADER = RunHeader(
    rampwatch_version="0",
    started_at_unix=1.7e9,
    target="http://x",
    model="tiny",
    scenario_name="s",
    options={"max_concurrency": 8},
)


def samples():
    return [
        ServerSample(
            t=0.0,
            url="a",
            ok=True,
            backend="vllm",
            running=1,
            waiting=0,
            kv_usage=0.1,
            prompt_tokens_total=1000,
            generation_tokens_total=100,
            prefix_queries_total=100,
            prefix_hits_total=0,
            preemptions_total=0,
            created=1.0,
        ),
        ServerSample(
            t=2.0,
            url="a",
            ok=True,
            backend="vllm",
            running=4,
            waiting=7,
            kv_usage=0.5,
            prompt_tokens_total=1400,
            generation_tokens_total=300,
            prefix_queries_total=300,
            prefix_hits_total=50,
            preemptions_total=2,
            created=1.0,
        ),
        ServerSample(t=3.0, url="a", ok=False, error="timeout"),
        # restarted: counters start again, identity changed
        ServerSample(
            t=4.0,
            url="a",
            ok=True,
            backend="vllm",
            running=2,
            waiting=1,
            kv_usage=0.2,
            prompt_tokens_total=100,
            generation_tokens_total=50,
            prefix_queries_total=100,
            prefix_hits_total=50,
            preemptions_total=0,
            created=2.0,
        ),
    ]


def test_hand_computed_summary():
    s = summarise_requests(
        HEADER,
        RECORDS,
        samples(),
        [Event(t=3, kind="knee", data={"offered_rps": 12.5})],
        duration_s=4.0,
        slo={"ttft": 250, "tpot": 160},
        gpu_price_per_hour=2.0,
    ).to_dict()
    assert (s["completed"], s["failed"]) == (3, 1)
    assert (s["total_input_tokens"], s["total_output_tokens"]) == (35, 6)
    assert s["request_throughput"] == pytest.approx(0.75)
    assert s["output_throughput"] == pytest.approx(1.5)
    assert s["total_token_throughput"] == pytest.approx(41 / 4)
    assert s["request_goodput"] == pytest.approx(2 / 4)  # r0 and the 1-token r2
    assert s["mean_ttft_ms"] == pytest.approx(200) and s["p99_ttft_ms"] == pytest.approx(298)
    assert s["std_ttft_ms"] == pytest.approx(81.6496580927726)
    assert s["mean_tpot_ms"] == pytest.approx(175) and s["p99_tpot_ms"] == pytest.approx(199.5)
    assert s["mean_itl_ms"] == pytest.approx(500 / 3) and s["median_itl_ms"] == pytest.approx(200)
    assert s["mean_e2el_ms"] == pytest.approx(1100 / 3) and s["median_e2el_ms"] == pytest.approx(400)
    assert s["max_concurrent_requests"] == 2 and s["max_output_tokens_per_s"] == 5.0
    assert s["max_concurrency"] == 8
    assert s["errors_by_class"] == {"http_500": 1}
    assert s["knee_rps"] == 12.5
    assert s["cost_per_1m_output_tokens"] == pytest.approx(2.0 / 1.5 * 1e6 / 3600)
    assert s["cost_per_1m_total_tokens"] == pytest.approx(2.0 / 10.25 * 1e6 / 3600)


def test_server_figures_are_reset_safe():
    srv = server_figures(samples())
    assert srv["available"] and srv["backend"] == "vllm" and srv["scrapes_failed"] == 1
    assert srv["avg_generation_throughput"] == pytest.approx((200 + 50) / 4)
    assert srv["avg_prompt_throughput"] == pytest.approx((400 + 100) / 4)
    assert srv["prefix_hit_pct"] == pytest.approx(100 * (50 + 50) / (200 + 100))
    assert srv["preemptions"] == 2 and srv["max_waiting"] == 7 and srv["max_kv_usage_pct"] == pytest.approx(50)
    assert server_figures([])["available"] is False


def test_no_successes_reports_zeros():
    s = summarise_requests(None, RECORDS[3:], [], [], duration_s=1.0).to_dict()
    assert s["completed"] == 0 and s["mean_ttft_ms"] == 0 and s["request_goodput"] is None
    assert s["cost_per_1m_output_tokens"] is None and s["server"]["available"] is False


def test_format_summary_layout():
    s = summarise_requests(HEADER, RECORDS, samples(), [], duration_s=4.0, slo={"ttft": 250})
    text = format_summary(s)
    lines = text.splitlines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    assert lines[-1] == "=" * 50
    assert "Successful requests:                     3         " in lines
    assert "Failed requests:                         1         " in lines
    assert "Maximum request concurrency:             8         " in lines
    assert "Benchmark duration (s):                  4.00      " in lines
    assert "Request goodput (req/s):                 0.50      " in lines
    assert "---------------Time to First Token----------------" in lines
    assert "Mean TTFT (ms):                          200.00    " in lines
    assert "P99 TTFT (ms):                           298.00    " in lines
    assert "-----Time per Output Token (excl. 1st token)------" in lines
    assert "----------------End-to-end Latency----------------" in lines
    assert lines.index("---------------Time to First Token----------------") < lines.index(
        "----------------Server (/metrics)-----------------"
    )
    assert "Max waiting requests:                    7         " in lines
    assert "http_500:                                1         " in lines


def test_bench_result_fields_and_units():
    s = summarise_requests(HEADER, RECORDS, samples(), [], duration_s=4.0)
    r = to_bench_result(s, HEADER, RECORDS, detailed=True)
    json.dumps(r)  # serialisable
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
        "input_lens",
        "output_lens",
        "ttfts",
        "itls",
        "latencies",
        "start_times",
        "generated_texts",
        "errors",
        "max_output_tokens_per_s",
        "max_concurrent_requests",
        "mean_ttft_ms",
        "median_ttft_ms",
        "std_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "p99_itl_ms",
        "mean_e2el_ms",
        "model_id",
        "rampwatch_server",
    ):
        assert key in r, key
    assert r["output_lens"] == [3, 2, 1, 0] and r["input_lens"] == [10, 20, 5, 7]
    assert r["ttfts"] == pytest.approx([0.1, 0.3, 0.2, 0.0])  # seconds in the lists
    assert r["itls"][0] == pytest.approx([0.1, 0.2]) and r["itls"][3] == []
    assert r["latencies"] == pytest.approx([0.4, 0.5, 0.2, 0.0])
    assert r["errors"][:3] == ["", "", ""] and r["errors"][3].startswith("http_500")
    assert r["generated_texts"] == ["", "", "", ""]
    assert r["mean_ttft_ms"] == pytest.approx(200)  # ms in the aggregates
    assert "mean_client_queue_ms" not in r


def test_bench_result_per_request_lists_only_when_detailed_and_texts_when_kept():
    from dataclasses import replace

    s = summarise_requests(HEADER, RECORDS, samples(), [], duration_s=4.0)
    short = to_bench_result(s, HEADER, RECORDS)
    assert not set(DETAILED_KEYS) & set(short)
    assert len(short["latencies"]) == len(short["queue_times"]) == len(RECORDS)  # vLLM always writes these
    detailed = to_bench_result(s, HEADER, RECORDS, detailed=True)
    assert set(DETAILED_KEYS) <= set(detailed)
    assert {k: v for k, v in detailed.items() if k not in DETAILED_KEYS} == short
    with_texts = [replace(r, generated_text=f"answer {r.id}") if r.ok else r for r in RECORDS]
    texts = to_bench_result(s, HEADER, with_texts, detailed=True)["generated_texts"]
    assert texts == [f"answer {r.id}" if r.ok else "" for r in RECORDS]


def test_running_summary_agrees_with_exact():
    rng = np.random.default_rng(3)
    records = []
    for i in range(400):
        sent = i * 0.05
        first = sent + rng.lognormal(-2, 0.5)
        chunks = list(first + np.cumsum(rng.lognormal(-4, 0.3, int(rng.integers(1, 30)))))
        records.append(rec(i, sent, first, chunks, len(chunks) + 1, int(rng.integers(10, 100))))
    records.append(rec(400, 1.0, None, [], 0, 5, error="timeout", end=2.0))
    running = SummaryBuilder(slo={"ttft": 150}, bounded=True)
    for r in records:
        running.add(r)
    live = running.build(duration_s=25.0).to_dict()
    exact = summarise_requests(None, records, [], [], duration_s=25.0, slo={"ttft": 150}).to_dict()
    for key in (
        "completed",
        "failed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "request_goodput",
        "output_throughput",
    ):
        assert live[key] == pytest.approx(exact[key]), key
    for metric in ("ttft", "tpot", "itl", "e2el"):
        assert live[f"mean_{metric}_ms"] == pytest.approx(exact[f"mean_{metric}_ms"])
        assert live[f"std_{metric}_ms"] == pytest.approx(exact[f"std_{metric}_ms"], rel=1e-6)
        for p in ("median", "p50", "p90", "p99"):
            assert live[f"{p}_{metric}_ms"] == pytest.approx(exact[f"{p}_{metric}_ms"], rel=0.03), (metric, p)
    assert live["errors_by_class"] == {"timeout": 1}
    assert set(exact) == set(live)


def test_bench_result_has_every_key_of_a_real_vllm_bench_result():
    """tests/data/vllm-bench-0.32.0-result.json was saved by `vllm bench serve
    --save-result` (vLLM 0.32.0, random dataset) against the simulator."""
    from pathlib import Path

    real = json.loads((Path(__file__).resolve().parents[2] / "data" / "vllm-bench-0.32.0-result.json").read_text())
    ours = to_bench_result(summarise_requests(HEADER, RECORDS, samples(), [], duration_s=4.0), HEADER, RECORDS)
    missing = sorted(set(real) - set(ours))
    assert missing == []
    # saved without --save-detailed: neither file has the detailed lists
    assert not set(DETAILED_KEYS) & set(real) and not set(DETAILED_KEYS) & set(ours)
    for key, value in real.items():
        if value is None or ours[key] is None or ours[key] == "inf":  # vLLM writes "inf" for an unbounded rate
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            assert isinstance(ours[key], (int, float)), key
        else:
            assert type(ours[key]) is type(value), key


def test_result_json_bytes_read_back_as_json_dumps_writes_them():
    import json
    import math

    import numpy as np

    from rampwatch.core.figures.summary import dumps_bench_result

    result = {
        "duration": 1.5,
        "max_output_tokens_per_s": math.nan,  # vLLM's own file writes NaN; strict JSON has null
        "itls": [[0.1, 1 / 3, 2e-05], [], np.array([0.25, 1e-7]).tolist()],
        "ttfts": [0.012345678901234567, 0.5],
        "errors": ["", "http_500: \ud800 lone surrogate"],
        "rampwatch_server": {"max_kv": None},
    }
    text = dumps_bench_result(result)
    back = json.loads(text, parse_constant=lambda word: pytest.fail(f"not strict JSON: {word}"))
    expected = json.loads(json.dumps(result))
    assert back.pop("max_output_tokens_per_s") is None and math.isnan(expected.pop("max_output_tokens_per_s"))
    assert back == expected
    assert list(json.loads(text)) == list(result)  # key order kept


def queued(i, scheduled, sent):
    r = rec(i, sent, sent + 0.1, [sent + 0.2], 2, 10)
    r.scheduled_at = scheduled
    return r


QUEUED = [queued(0, 0.0, 0.0), queued(1, 0.0, 0.5), queued(2, 0.1, 1.1), queued(3, 0.2, 0.2)]


def test_client_queue_figures_under_a_concurrency_cap():
    summary = summarise_requests(HEADER, QUEUED, [], [], percentiles=(50, 99))
    figures = summary.to_dict()
    assert figures["mean_client_queue_time_ms"] == pytest.approx(375.0)  # (0 + 500 + 1000 + 0) / 4
    assert figures["median_client_queue_time_ms"] == pytest.approx(250.0)
    assert figures["p99_client_queue_time_ms"] == pytest.approx(np.percentile([0, 500, 1000, 0], 99))
    text = format_summary(summary, percentiles=(50, 99))
    block = text.split("Client-side Queueing")[1].splitlines()[1:4]
    assert [line.split(":")[0] for line in block] == [
        "Mean Client Queue Time (ms)",
        "Median Client Queue Time (ms)",
        "P50 Client Queue Time (ms)",
    ]


@pytest.mark.parametrize(
    ("options", "scenario", "cap"),
    [({"max_concurrency": 8}, {}, 8), ({}, {"max_concurrency": 4}, 4), ({"max_concurrency": None}, {}, None)],
)
def test_the_cap_comes_from_the_flag_or_the_scenario(options, scenario, cap):
    header = RunHeader("0", 1.7e9, "http://x", "tiny", "s", scenario=scenario, options=options)
    summary = summarise_requests(header, QUEUED, [], [])
    assert summary.max_concurrency == cap
    assert ("mean_client_queue_time_ms" in summary.to_dict()) is (cap is not None)
    assert ("Client-side Queueing" in format_summary(summary)) is (cap is not None)


def late(i, scheduled, sent, end, error=None):
    """A request due at ``scheduled`` and sent at ``sent``; ``error`` ended it unanswered."""
    r = rec(i, sent, None if error else end, [], 0 if error else 1, 5, error=error, end=end)
    r.scheduled_at = scheduled
    return r


@pytest.mark.parametrize(
    "lateness_s",
    [[0.0], [0.004, 0.001], [0.0, 0.0, 0.3], list(np.random.default_rng(3).exponential(0.002, 501))],
)
def test_send_lateness_figures_are_numpys_percentiles(lateness_s):
    figures = SendLatenessMs.of(np.array(lateness_s))
    ms = np.array(lateness_s) * 1000
    assert figures is not None
    assert figures.p50 == pytest.approx(np.percentile(ms, 50), rel=1e-12, abs=1e-12)
    assert figures.p99 == pytest.approx(np.percentile(ms, 99), rel=1e-12, abs=1e-12)
    assert figures.max == pytest.approx(ms.max(), rel=1e-12)
    assert SendLatenessMs.of(np.empty(0)) is None


def test_send_lateness_leaves_out_the_requests_never_sent():
    records = [
        late(0, 1.0, 1.002, 1.5),  # answered, 2 ms late
        late(1, 2.0, 2.010, 2.5, error="http_500"),  # failed after a send 10 ms late: counted
        late(2, 3.0, 3.004, 3.2, error=CANCELLED),  # cancelled in flight, sent 4 ms late: counted
        late(3, 4.0, 9.0, 9.0, error=CANCELLED),  # cancelled while it waited for a slot: no send
        late(4, 5.0, 8.0, 8.0, error="worker_lost"),  # its load worker was already lost: no send
    ]
    summary = summarise_requests(None, records, [], [])
    want = np.array([2.0, 10.0, 4.0])
    assert summary.send_lateness == SendLatenessMs(
        pytest.approx(np.percentile(want, 50)), pytest.approx(np.percentile(want, 99)), pytest.approx(10.0)
    )
    assert summary.to_dict()["send_lateness_ms"] == {
        "p50": summary.send_lateness.p50,
        "p99": summary.send_lateness.p99,
        "max": summary.send_lateness.max,
    }


def test_the_result_json_has_the_send_lateness_or_null_when_nothing_was_sent():
    sent = summarise_requests(None, [late(0, 1.0, 1.003, 1.5)], [], [])
    assert to_bench_result(sent, None, [])["rampwatch_send_lateness_ms"] == {
        "p50": pytest.approx(3.0),
        "p99": pytest.approx(3.0),
        "max": pytest.approx(3.0),
    }
    never = summarise_requests(None, [late(0, 1.0, 2.0, 2.0, error=CANCELLED)], [], [])
    assert never.send_lateness is None
    assert to_bench_result(never, None, [])["rampwatch_send_lateness_ms"] is None
    assert "Send lateness p99 (ms):                  n/a" in format_summary(never)


def test_the_live_figures_leave_the_send_lateness_out():
    builder = SummaryBuilder(bounded=True)
    builder.add(late(0, 1.0, 1.003, 1.5))
    assert builder.build().send_lateness is None


def test_the_client_block_shows_the_send_lateness():
    summary = summarise_requests(HEADER, [late(0, 1.0, 1.002, 1.5), late(1, 2.0, 2.004, 2.5)], [], [])
    lines = format_summary(summary).splitlines()
    at = lines.index("{s:{c}^{n}}".format(s="Client", n=50, c="-"))
    assert lines[at + 1 : at + 4] == [
        "Send lateness p50 (ms):                  3.00      ",
        "Send lateness p99 (ms):                  3.98      ",
        "Send lateness max (ms):                  4.00      ",
    ]
    assert lines[at + 4].startswith("-") and "Server (/metrics)" in lines[at + 4]
    assert lines[-1] == "=" * 50  # on time: no warning


def schedule_kept_by(lateness_ms, cap, gap_s=0.005):
    """Requests due ``gap_s`` apart (200 req/s by default), each 5 ms long."""
    header = RunHeader("0", 1.7e9, "http://x", "tiny", "s", options={"max_concurrency": cap})
    records = [
        late(i, i * gap_s, i * gap_s + ms / 1000, i * gap_s + ms / 1000 + 0.005) for i, ms in enumerate(lateness_ms)
    ]
    return summarise_requests(header, records, [], [])


@pytest.mark.parametrize(
    ("gap_s", "late_ms", "warns"),
    [
        (0.005, 40.0, True),  # 200 req/s: later than 10 ms
        (0.005, 8.0, False),
        (0.125, 20.0, False),  # 8 req/s: 20 ms late jitters sends 125 ms apart
        (0.125, 300.0, True),  # later than the gap between sends: they bunch
    ],
)
def test_the_lateness_bound_is_10_ms_or_the_gap_between_sends_when_longer(gap_s, late_ms, warns):
    summary = schedule_kept_by([late_ms] * 100, None, gap_s)
    assert late_send_bound_ms(summary) == pytest.approx(max(10.0, 1000 * summary.duration_s / 100))
    assert (lateness_warning(summary) is not None) is warns


@pytest.mark.parametrize(
    ("lateness_ms", "cap", "says"),
    [
        ([1.0] * 99 + [300.0], None, None),  # one late send: p99 4 ms, within the threshold
        ([1.0] * 97 + [40.0, 60.0, 300.0], None, "warning: the client sent late (p99 62 ms, max 300 ms)"),
        (
            [1.0] * 97 + [40.0, 60.0, 300.0],
            4,
            "warning: requests were sent late (p99 62 ms, max 300 ms) as they waited for one of the 4 ",
        ),
    ],
)
def test_one_warning_line_when_the_schedule_was_not_kept(lateness_ms, cap, says):
    summary = schedule_kept_by(lateness_ms, cap)
    warning = lateness_warning(summary)
    text = format_summary(summary).splitlines()
    if says is None:
        assert warning is None and text[-1] == "=" * 50
        return
    assert warning is not None and warning.startswith(says) and "\n" not in warning
    assert text[-2:] == ["=" * 50, warning]  # printed after the summary
    # under a cap the wait for a slot is part of the lateness: the line does not blame the client
    assert ("client sent late" in warning) is (cap is None)
    assert ("docs/scale.md" in warning) is (cap is None)


GPU_FIGURES = {"gpus": 1, "samples": 3, "mean_util_pct": 50.0, "max_mem_used_gib": 10.0, "max_power_w": 300.0}


@pytest.mark.parametrize(
    "simulated, sources, source, heading",
    [
        (True, ["http://127.0.0.1:8000/dcgm/metrics"], "simulated", "GPU (simulated, not measured)"),
        (False, ["nvml"], "NVML", "GPU (NVML)"),
        (False, ["http://gpu-1:9400/metrics"], "DCGM", "GPU (DCGM)"),
        (False, ["nvml", "http://gpu-1:9400/metrics", "http://gpu-2:9400/metrics"], "NVML + DCGM", "GPU (NVML + DCGM)"),
    ],
)
def test_the_gpu_heading_names_where_the_figures_came_from(simulated, sources, source, heading):
    header = RunHeader("0", 0.0, "http://t", "m", "s", gpu_sources=sources, gpu_simulated=simulated)
    summary = SummaryBuilder().build(header, gpu=GPU_FIGURES)
    lines = [line.strip("-") for line in format_summary(summary).splitlines() if line.startswith("-")]
    assert heading in lines and "GPU (NVML / DCGM)" not in lines
    assert summary.to_dict()["gpu"]["source"] == source


def test_each_failure_class_shows_its_first_error_text_under_its_count():
    """`http_307: 26` alone does not say which redirect was refused, nor `stream_aborted`
    what came instead: the summary gives each class's first text, printable and short."""
    import dataclasses

    redirect = "HTTP 307: redirect to another origin not followed: http://evil.example:9/v1/completions"
    html = "HTTP 200 with text/html, not an event stream: '<html>\x1b]0;T\x07" + "x" * 400 + "'"
    records = [
        *RECORDS[:3],
        dataclasses.replace(rec(3, 3.0, None, [], 0, 5, error="http_307", end=3.1), error=redirect),
        dataclasses.replace(rec(4, 3.5, None, [], 0, 5, error="http_307", end=3.6), error="a later one"),
        dataclasses.replace(rec(5, 3.7, None, [], 0, 5, error="stream_aborted", end=3.8), error=html),
        dataclasses.replace(rec(6, 3.9, None, [], 0, 5, error=CANCELLED, end=4.0), error="cancelled: drain"),
    ]
    summary = summarise_requests(None, records, [], [], duration_s=5.0)
    assert summary.error_examples == {"http_307": redirect, "stream_aborted": html}
    lines = format_summary(summary).splitlines()
    at = lines.index(next(line for line in lines if line.startswith("http_307:")))
    assert lines[at + 1] == f"  e.g. {redirect}"
    example = next(line for line in lines if line.startswith("  e.g. HTTP 200"))
    assert "\x1b" not in example and "\\x1b]0;T\\x07" in example and len(example) <= 7 + 160
    assert json.loads(json.dumps(summary.to_dict()))["error_examples"]["http_307"] == redirect
