"""The run as a Prometheus target: its figures from records and ticks, the exposition
parsed with prometheus_client's own parser, a port in use, and a run against the
in-process simulator scraped while it runs and at its end."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rampwatch.core.errors import UserError
from rampwatch.core.timeline import RequestRecord, RunHeader, Tick
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.prometheus_target import (
    ITL_BUCKETS_S,
    MAX_CLASS_LABELS,
    OTHER_CLASS,
    TTFT_BUCKETS_S,
    Histogram,
    PrometheusTarget,
    RunMetrics,
    class_label_note,
    outcome_of,
    scenario_classes,
)
from rampwatch.loadgen.run.runner import Run
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import serve


def record(i: int, error_class: str | None = None, request_class: str | None = None, **kw) -> RequestRecord:
    base = dict(id=i, scheduled_at=1.0, sent_at=1.002, end_at=2.0, first_token_at=1.1, chunk_times=[1.15, 1.3])
    base.update(kw)
    return RequestRecord(
        error_class=error_class, request_class=request_class, prompt_tokens=10, completion_tokens=3, **base
    )


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by name and sorted labels (the parser's reading)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(target: PrometheusTarget) -> str:
    host, port = target.address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        return answer.read().decode()


@pytest.mark.parametrize(
    ("error_class", "outcome"),
    [(None, "ok"), ("cancelled", "cancelled"), ("http_500", "failed"), ("timeout", "failed")],
)
def test_outcome_of(error_class, outcome):
    assert outcome_of(record(0, error_class)) == outcome


@pytest.mark.parametrize(("value", "slot"), [(0.0005, 0), (0.001, 0), (0.0011, 1), (1e9, len(TTFT_BUCKETS_S))])
def test_histogram_puts_a_value_on_an_edge_in_that_edges_bucket(value, slot):
    h = Histogram(TTFT_BUCKETS_S)
    h.observe(value)
    assert h.counts[slot] == 1 and sum(h.counts) == 1 and h.total == value
    cumulative = h.cumulative()
    assert cumulative[-1] == ("+Inf", 1.0) and len(cumulative) == len(TTFT_BUCKETS_S) + 1


def test_records_and_ticks_become_the_families_a_scrape_reads():
    metrics = RunMetrics("run-1", "chat")
    for i, (error, cls) in enumerate([(None, "short"), (None, "short"), ("http_500", "short"), ("cancelled", None)]):
        metrics.add_request(record(i, error, cls))
    metrics.add_tick(Tick(t=0.0, target_rps=2.0, state="ramping", offered_total=0, sent_total=0))
    metrics.add_tick(
        Tick(t=2.0, target_rps=4.0, state="ramping", in_flight=3, client_queued=1, offered_total=8, sent_total=7,
             loop_lag=[[0, 10], [40, 2]], loop_lag_max_ms=0.5)
    )  # fmt: skip
    got = samples(_render(metrics))
    short = (("class", "short"), ("run_id", "run-1"), ("scenario", "chat"))
    none = (("class", ""), ("run_id", "run-1"), ("scenario", "chat"))
    run = (("run_id", "run-1"), ("scenario", "chat"))
    assert got[("rampwatch_requests_total", (*short[:1], ("outcome", "ok"), *short[1:]))] == 2
    assert got[("rampwatch_requests_total", (*short[:1], ("outcome", "failed"), *short[1:]))] == 1
    assert got[("rampwatch_requests_total", (*none[:1], ("outcome", "cancelled"), *none[1:]))] == 1
    assert got[("rampwatch_generation_tokens_total", short)] == 6  # ok requests' only
    assert got[("rampwatch_time_to_first_token_seconds_count", short)] == 2
    assert got[("rampwatch_time_to_first_token_seconds_sum", short)] == pytest.approx(2 * 0.098)
    assert got[("rampwatch_inter_token_latency_seconds_count", short)] == 4  # two gaps per request
    assert got[("rampwatch_send_lateness_seconds_count", short)] == 3  # every ended request was sent
    assert got[("rampwatch_send_lateness_seconds_count", none)] == 1

    assert got[("rampwatch_offered_requests_total", run)] == 8
    assert got[("rampwatch_offered_rate_rps", run)] == 4.0  # 8 offered over 2 s
    assert got[("rampwatch_achieved_rate_rps", run)] == 0.0  # the records came before the first tick
    assert got[("rampwatch_in_flight_requests", run)] == 3 and got[("rampwatch_client_queued_requests", run)] == 1
    assert got[("rampwatch_loop_lag_seconds_count", run)] == 12
    assert got[("rampwatch_loop_lag_max_seconds", run)] == 0.0005
    assert got[("rampwatch_run_done", run)] == 0


def test_a_request_cancelled_before_its_send_has_no_send_lateness():
    metrics = RunMetrics("r", "s")
    metrics.add_request(record(0, "cancelled", sent_at=5.0, end_at=5.0, first_token_at=None, chunk_times=[]))
    figures = metrics.classes[""]
    assert figures.outcomes["cancelled"] == 1 and sum(figures.lateness.counts) == 0


def _render(metrics: RunMetrics) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    from rampwatch.loadgen.run.prometheus_target import _Collector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(metrics))  # type: ignore[arg-type]
    return generate_latest(registry).decode()


@pytest.mark.parametrize(
    ("scenario", "classes"),
    [
        ({}, [""]),
        ({"workload": {"mix": [{"name": "short"}, {"name": "long"}]}}, ["short", "long"]),
        ({"workload": {"mix": "oops"}}, [""]),
        ({"workload": {"mix": [{"weight": 1}]}}, [""]),
    ],
)
def test_scenario_classes(scenario, classes):
    assert scenario_classes(scenario) == classes


def test_itl_edges_keep_vllms_and_add_finer_ones():
    vllm_itl = (
        0.01,
        0.025,
        0.05,
        0.075,
        0.1,
        0.15,
        0.2,
        0.3,
        0.4,
        0.5,
        0.75,
        1.0,
        2.5,
        5.0,
        7.5,
        10.0,
        20.0,
        40.0,
        80.0,
    )
    assert set(vllm_itl) <= set(ITL_BUCKETS_S) and min(ITL_BUCKETS_S) < min(vllm_itl)
    assert list(ITL_BUCKETS_S) == sorted(set(ITL_BUCKETS_S))


def test_a_sink_call_with_a_damaged_record_does_not_raise():
    target = PrometheusTarget(0)
    damaged = RequestRecord(id=1, scheduled_at=0.0, sent_at=0.0, end_at=1.0, first_token_at=0.5)
    damaged.chunk_times = None  # type: ignore[assignment]
    target.on_request(damaged)
    target.on_tick(Tick(t=1.0, target_rps=1.0, state="ramping", loop_lag=[["x", 1]]))  # type: ignore[list-item]


def test_a_port_in_use_is_one_line_naming_the_flag():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UserError, match=rf"^--prometheus-port {port}: cannot serve on 127\.0\.0\.1:{port} \("):
            PrometheusTarget(port).bind()


def test_serves_on_its_own_registry_and_frees_the_port():
    target = PrometheusTarget(0)
    target.on_start(RunHeader("0", 0.0, "http://x", "tiny\x1b[31m", "chat"))
    try:
        text = scrape(target)
    finally:
        target.close()
    assert "python_gc_objects_collected_total" not in text  # not the global registry
    got = samples(text)
    assert got[("rampwatch_run_info", (("model", "tiny\\x1b[31m"), ("run_id", ""), ("scenario", "chat")))] == 1


@pytest.mark.slow
async def test_a_run_scraped_while_it_runs_counts_what_the_run_counted():
    scn = load_scenario(
        "random",
        overrides=[("schedule", "{}"), ("schedule.kind", "constant"), ("schedule.rate", "20"),
                   ("schedule.duration_s", "1.5"), ("workload.input_tokens", "32"), ("workload.output_tokens", "8")],
    )  # fmt: skip
    target = PrometheusTarget(0, run_id="run-x")
    during: list[str] = []
    async with serve(SimConfig(hardware="instant", model="tiny")) as url:
        options = RunOptions(target=url, model="tiny", keep_records=True, scrape_interval_s=0.25, tick_interval_s=0.25)
        run = Run(scn, options, sinks=[target])

        async def scrape_during() -> None:
            while not target.metrics.ticks.done:
                if target.metrics.ok_total:
                    during.append(await asyncio.to_thread(scrape, target))
                    return
                await asyncio.sleep(0.05)

        try:
            result, _ = await asyncio.gather(run.execute(), scrape_during())
            final = samples(await asyncio.to_thread(scrape, target))
        finally:
            target.close()
    assert during and samples(during[0])  # parsed mid-run
    records = result.requests
    run_labels = (("run_id", "run-x"), ("scenario", scn.name))
    counted = {
        outcome: final.get(("rampwatch_requests_total", (("class", ""), ("outcome", outcome), *run_labels)), 0)
        for outcome in ("ok", "failed", "cancelled")
    }
    assert counted == {
        "ok": sum(r.ok for r in records),
        "failed": sum(not r.ok and r.error_class != "cancelled" for r in records),
        "cancelled": sum(r.error_class == "cancelled" for r in records),
    }
    assert counted["ok"] >= 20
    counts = result.counts  # the run's own final counts (its exit code's)
    assert counts is not None and sum(counted.values()) == counts.ended
    assert counted["failed"] == counts.failed and counted["cancelled"] == counts.ended - counts.judged
    assert final[("rampwatch_sent_requests_total", run_labels)] == len(records)
    assert final[("rampwatch_generation_tokens_total", (("class", ""), *run_labels))] == sum(
        r.completion_tokens for r in records if r.ok
    )
    assert final[("rampwatch_run_done", run_labels)] == 1


def ended_target() -> PrometheusTarget:
    """A target serving a run that has ended (its final tick and ``on_finish`` seen)."""
    target = PrometheusTarget(0, run_id="run-e")
    target.on_start(RunHeader("0", 0.0, "http://x", "tiny", "chat"))
    target.on_request(record(0))
    target.on_tick(Tick(t=1.0, target_rps=0.0, state="done"))
    target.on_finish(1.0)
    return target


def test_linger_ends_once_a_scrape_has_read_the_final_figures_and_closes_the_port():
    target = ended_target()
    assert target.awaits_final_read()
    answers: list[str] = []
    scraper = threading.Thread(target=lambda: answers.append(scrape(target)))
    scraper.start()
    started = time.monotonic()
    assert target.linger(30.0) is True
    assert time.monotonic() - started < 10  # the scrape ended it, not the bound
    scraper.join(10)
    final = samples(answers[0])  # the whole answer came through before the port closed
    assert final[("rampwatch_run_done", (("run_id", "run-e"), ("scenario", "chat")))] == 1
    assert not target.serving and not target.awaits_final_read()


def test_a_scrape_before_the_end_is_not_the_final_read():
    target = PrometheusTarget(0)
    target.on_start(RunHeader("0", 0.0, "http://x", "tiny", "chat"))
    try:
        scrape(target)
        assert not target.final_read.is_set()
        target.on_finish(2.0)
        assert target.awaits_final_read()
        scrape(target)
        assert target.final_read.is_set() and not target.awaits_final_read()
    finally:
        target.close()


def test_linger_without_a_scrape_closes_at_its_bound_after_the_run_end():
    target = ended_target()
    assert target.finished_at is not None
    target.finished_at -= 0.2  # the run ended 0.2 s ago: 0.1 s of bound is spent
    started = time.monotonic()
    assert target.linger(0.1) is False
    assert time.monotonic() - started < 1.0
    assert not target.serving


def test_a_target_that_never_served_does_not_linger():
    target = PrometheusTarget(0)
    target.on_finish(1.0)
    assert not target.awaits_final_read()
    assert target.linger(30.0) is False  # at once


def test_classes_past_the_bound_share_the_other_label():
    metrics = RunMetrics("run-1", "mix", max_classes=2)
    for i, cls in enumerate(["a", "b", "c", "a", "d", None]):
        metrics.add_request(record(i, None, cls))
    assert list(metrics.classes) == ["a", "b", OTHER_CLASS]
    assert metrics.classes["a"].outcomes["ok"] == 2
    assert metrics.classes[OTHER_CLASS].outcomes["ok"] == 3  # c, d and the unclassed one
    got = samples(_render(metrics))
    labelled = {dict(k[1]).get("class") for k in got if k[0] == "rampwatch_requests_total"}
    assert labelled == {"a", "b", OTHER_CLASS}


def test_a_scenario_with_many_classes_is_capped_from_the_start():
    target = PrometheusTarget(0)
    mix = [{"name": f"c{i}"} for i in range(MAX_CLASS_LABELS + 5)]
    target.on_start(RunHeader("0", 0.0, "http://x", "tiny", "mix", scenario={"workload": {"mix": mix}}))
    try:
        assert len(target.metrics.classes) == MAX_CLASS_LABELS + 1  # the named ones, then "(other)" at 0
        assert OTHER_CLASS in target.metrics.classes
        target.on_request(record(0, None, f"c{MAX_CLASS_LABELS + 3}"))
        assert target.metrics.classes[OTHER_CLASS].outcomes["ok"] == 1
    finally:
        target.close()


@pytest.mark.parametrize(("count", "said"), [(MAX_CLASS_LABELS, False), (MAX_CLASS_LABELS + 1, True)])
def test_the_class_bound_is_said_in_one_line_only_past_it(count, said):
    note = class_label_note([f"c{i}" for i in range(count)])
    assert (note is not None) == said
    if said:
        assert note == (
            f"--prometheus-port: the scenario has {count} classes; the first {MAX_CLASS_LABELS} are labelled by "
            f'name, the other 1 share class="{OTHER_CLASS}" (each label is ~100 series)'
        )
