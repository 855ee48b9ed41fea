import asyncio
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from rampwatch.core.figures.samples import combine_samples
from rampwatch.core.timeline import ServerSample
from rampwatch.loadgen.server import backends
from rampwatch.loadgen.server.scrape import (
    MetricsPoller,
    cache_config_from_metrics,
    describe_scrape_failure,
    is_connection_failure,
    parse_metrics,
    sample_key,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "metrics"


def test_real_vllm_under_load(vllm_captures):
    text = (vllm_captures / "metrics-under-load.txt").read_text()
    s = parse_metrics(text, "http://x/metrics", 12.5)
    assert s.ok and s.backend == "vllm" and (s.t, s.url) == (12.5, "http://x/metrics")
    assert (s.running, s.waiting) == (128.0, 44.0)
    assert s.kv_usage == pytest.approx(0.12869352869352868)
    assert s.prompt_tokens_total == 178234.0 and s.generation_tokens_total == 31833.0
    assert (s.prefix_queries_total, s.prefix_hits_total, s.preemptions_total) == (178234.0, 45056.0, 0.0)
    assert s.created == pytest.approx(1.7953039773197365e09)
    assert s.per_engine["0"]["running"] == 128.0
    # raw keeps server samples (not other exporters', not _created, not static info)
    assert s.raw['vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="capacity"}'] == 44.0
    assert 'vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"}' in s.raw
    assert any(k.startswith("vllm:time_to_first_token_seconds_bucket") for k in s.raw)
    assert not any(k.startswith(("python_", "process_", "http_")) or "_created" in k for k in s.raw)
    assert not any(k.startswith("vllm:iteration_tokens_total_bucket") for k in s.raw)
    assert not any(k.startswith("vllm:cache_config_info") for k in s.raw)


def test_real_vllm_after_run(vllm_captures):
    s = parse_metrics((vllm_captures / "metrics.txt").read_text(), "u", 0.0)
    assert (s.running, s.waiting, s.kv_usage) == (0.0, 0.0, 0.0)
    assert s.prefix_hits_total > 0 and s.prefix_queries_total >= s.prefix_hits_total


def test_line_prefilter_changes_nothing_but_the_cost(vllm_captures):
    """parse_metrics drops most of the page before the Prometheus parser sees it (what keeps
    a scrape cheap; bench/bench_live_costs.py times it). Parsing the whole page and
    filtering the samples afterwards must give the same raw samples and identity."""
    text = (vllm_captures / "metrics-under-load.txt").read_text()
    keep_buckets = tuple(f + "_bucket" for f in backends.RAW_BUCKET_FAMILIES)
    expected_raw = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if (
                not s.name.startswith(backends.PREFIXES)
                or s.name.endswith("_created")
                or s.name == "vllm:cache_config_info"
                or (s.name.endswith("_bucket") and not s.name.startswith(keep_buckets))
            ):
                continue
            expected_raw[sample_key(s.name, s.labels)] = float(s.value)
    sample = parse_metrics(text, "u", 0.0)
    assert sample.raw == expected_raw
    assert len(expected_raw) < len(text.splitlines()) / 3  # most of the page is dropped
    assert sample.created == pytest.approx(1.7953039773197365e09)  # the one _created line kept


@pytest.mark.parametrize(
    "name, backend, expected",
    [
        (
            "sglang.txt",
            "sglang",
            dict(
                running=37,
                waiting=5,
                kv_usage=0.42,
                prompt_tokens_total=905312,
                generation_tokens_total=210448,
                prefix_queries_total=905312,
                prefix_hits_total=301000,
                preemptions_total=None,
            ),
        ),
        (
            "tgi.txt",
            "tgi",
            dict(
                running=24,
                waiting=12,
                kv_usage=0.25,
                prompt_tokens_total=402311,
                generation_tokens_total=128004,
                prefix_queries_total=None,
                prefix_hits_total=None,
            ),
        ),
        (
            "llamacpp.txt",
            "llamacpp",
            dict(
                running=4,
                waiting=2,
                kv_usage=None,
                prompt_tokens_total=1234570,
                generation_tokens_total=98765,
                prefix_hits_total=411523,
                prefix_queries_total=411523 + 1234570,
            ),
        ),
        (
            "vllm-legacy.txt",
            "vllm-legacy",
            dict(
                running=64,
                waiting=9,
                kv_usage=0.875,
                prompt_tokens_total=500000,
                generation_tokens_total=81234,
                prefix_queries_total=500000,
                prefix_hits_total=125000,
                preemptions_total=17,
            ),
        ),
    ],
)
def test_other_servers(name, backend, expected):
    s = parse_metrics((DATA / name).read_text(), "u", 0.0)
    assert s.ok and s.backend == backend
    for field, value in expected.items():
        assert getattr(s, field) == (pytest.approx(value) if value is not None else None), field


def two_engine_page(vllm_captures) -> str:
    text = (vllm_captures / "metrics-under-load.txt").read_text()
    extra = []
    for line in text.splitlines():
        if line.startswith("vllm:") and 'engine="0"' in line:
            name_labels, value = line.rsplit(" ", 1)
            half = float(value) / 2 if "kv_cache_usage" not in line else 0.5
            extra.append(f"{name_labels.replace(chr(34) + '0' + chr(34), chr(34) + '1' + chr(34), 1)} {half}")
    return text + "\n".join(extra) + "\n"


def test_engine_label_is_summed_and_kept(vllm_captures):
    s = parse_metrics(two_engine_page(vllm_captures), "u", 0.0)
    assert set(s.per_engine) == {"0", "1"}
    assert s.running == 128 + 64 and s.waiting == 44 + 22
    assert s.generation_tokens_total == pytest.approx(31833 * 1.5)
    assert s.kv_usage == pytest.approx((0.12869352869352868 + 0.5) / 2)  # a fraction: averaged
    assert s.per_engine["1"]["kv_usage"] == 0.5 and s.per_engine["1"]["running"] == 64


def test_garbage_and_empty_pages():
    bad = parse_metrics("vllm:num_requests_running{engine=0 oops\n", "u", 1.0)
    assert not bad.ok and "unparsable" in bad.error
    empty = parse_metrics("# nothing here\n", "u", 1.0)
    assert empty.ok and empty.backend == "unknown" and empty.running is None


def test_combine_replicas():
    a = ServerSample(
        t=1.0,
        url="a",
        ok=True,
        backend="vllm",
        running=3,
        waiting=1,
        kv_usage=0.2,
        generation_tokens_total=100,
        per_engine={"0": {"running": 3}},
    )
    b = ServerSample(
        t=1.1, url="b", ok=True, backend="vllm", running=5, waiting=0, kv_usage=0.6, generation_tokens_total=50
    )
    c = ServerSample(t=1.2, url="c", ok=False, error="timeout")
    out = combine_samples([a, b, c])
    assert out.ok and out.t == 1.2 and (out.running, out.waiting) == (8, 1)
    assert out.kv_usage == pytest.approx(0.4) and out.generation_tokens_total == 150
    assert out.prompt_tokens_total is None
    assert out.per_engine["0:0"] == {"running": 3} and out.per_engine["1"]["running"] == 5
    assert "c: timeout" in out.error


def test_cache_config(vllm_captures):
    cfg = cache_config_from_metrics((vllm_captures / "metrics.txt").read_text())
    assert cfg["block_size"] == "128" and cfg["num_gpu_blocks"] == "4096" and cfg["enable_prefix_caching"] == "True"
    assert cache_config_from_metrics("") == {}


@pytest.mark.slow
async def test_poller_samples_and_failures(vllm_captures):
    text = (vllm_captures / "metrics-under-load.txt").read_text()
    calls = {"n": 0}

    async def metrics(request):
        calls["n"] += 1
        if calls["n"] == 2:
            return web.Response(status=503)
        if calls["n"] == 3:
            await asyncio.sleep(1)  # beyond the poller's timeout
        return web.Response(text=text)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    got: list[ServerSample] = []
    poller = MetricsPoller(
        [f"http://127.0.0.1:{port}/metrics", "http://127.0.0.1:1/metrics"],
        interval_s=0.05,
        timeout_s=0.3,
        on_sample=got.append,
    )
    task = asyncio.create_task(poller.run())
    try:
        deadline = time.monotonic() + 30  # for a loaded machine: four scrapes take ~0.5 s
        while sum(1 for s in got if s.url.endswith(f"{port}/metrics")) < 4:
            assert time.monotonic() < deadline, got
            await asyncio.sleep(0.02)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await runner.cleanup()
    mine = [s for s in got if s.url.endswith(f"{port}/metrics")]
    assert mine[0].ok and mine[0].running == 128
    assert not mine[1].ok and mine[1].error == "HTTP 503"
    assert not mine[2].ok and "timeout" in mine[2].error
    assert mine[3].ok
    dead = [s for s in got if s.url == "http://127.0.0.1:1/metrics"]
    assert dead and not any(s.ok for s in dead) and all(s.error == "connection refused" for s in dead)
    assert [s.t for s in mine] == sorted(s.t for s in mine)


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (aiohttp.ServerDisconnectedError(), "server disconnected"),
        (aiohttp.ClientPayloadError("Response payload is not completed\n  <details>"), "response body broke off"),
        (ConnectionResetError(104, "Connection reset by peer"), "connection reset"),
        (aiohttp.ClientOSError(113, "No route to host"), "connection error (No route to host)"),
        (ValueError("first line\nsecond line\nthird line"), "ValueError: first line"),
        (RuntimeError(), "RuntimeError"),
    ],
)
def test_scrape_failures_are_described_in_a_few_words_on_one_line(exc, reason):
    assert describe_scrape_failure(exc) == reason


@pytest.mark.parametrize(
    ("reason", "unreachable"),
    [
        ("connection refused", True),
        ("cannot connect (Network is unreachable)", True),
        ("server disconnected", True),
        ("ClientConnectorError: Cannot connect to host 127.0.0.1:8000 ssl:default", True),  # older recordings
        ("timeout after 2 s", False),
        ("HTTP 503", False),
        ("unparsable /metrics: bad line", False),
    ],
)
def test_which_scrape_failures_mean_the_server_is_unreachable(reason, unreachable):
    assert is_connection_failure(reason) is unreachable


SPEC_PAGE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 50.0
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 300.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 150.0
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 120.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 60.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 70.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 35.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 15.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 35.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 17.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="2"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="x"} 999.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="99999"} 999.0
"""


def test_spec_decode_counters_and_the_per_position_one_are_summed_over_engines():
    s = parse_metrics(SPEC_PAGE, "u", 1.0)
    assert (s.spec_drafts_total, s.spec_draft_tokens_total, s.spec_accepted_tokens_total) == (150.0, 450.0, 180.0)
    # positions that are no draft position (not a number, or beyond any draft) are not kept
    assert s.spec_accepted_by_position == {"0": 105.0, "1": 52.0, "2": 23.0}
    assert s.per_engine["1"]["spec_accepted_tokens_total"] == 60.0


def test_a_server_without_speculation_has_no_spec_decode_figures(vllm_captures):
    s = parse_metrics((vllm_captures / "metrics-under-load.txt").read_text(), "u", 1.0)
    assert s.spec_drafts_total is None and s.spec_accepted_by_position == {}


def test_replicas_spec_decode_positions_are_summed():
    a = parse_metrics(SPEC_PAGE, "a", 1.0)
    b = parse_metrics(SPEC_PAGE, "b", 1.0)
    combined = combine_samples([a, b])
    assert combined.spec_accepted_by_position == {"0": 210.0, "1": 104.0, "2": 46.0}
    assert combined.spec_drafts_total == 300.0


@pytest.mark.parametrize(
    "page, part, whole",
    [
        (
            "vllm:prefix_cache_queries_total 100\nvllm:prefix_cache_hits_total 300\n",
            "prefix_hits_total",
            "prefix_queries_total",
        ),
        (
            "vllm:mm_cache_queries_total 10\nvllm:mm_cache_hits_total 100\n",
            "mm_cache_hits_total",
            "mm_cache_queries_total",
        ),
        (
            "vllm:spec_decode_num_drafts_total 10\nvllm:spec_decode_num_draft_tokens_total 30\n"
            "vllm:spec_decode_num_accepted_tokens_total 100\n"
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 9\n',
            "spec_accepted_tokens_total",
            "spec_draft_tokens_total",
        ),
    ],
)
def test_a_page_whose_hits_exceed_their_queries_has_both_dropped_and_says_so(page, part, whole):
    """A lying page (more hits than queries, more accepted than drafted tokens) gives no
    ratio over 100 %: both counters are unread and the sample names them."""
    s = parse_metrics("vllm:num_requests_running 1\n" + page, "u", 1.0)
    assert s.ok and getattr(s, part) is None and getattr(s, whole) is None
    assert part in s.rejected and "both dropped" in s.rejected[part]
    assert s.spec_accepted_by_position == {}
    coherent = parse_metrics(SPEC_PAGE, "u", 1.0)
    assert coherent.rejected == {} and coherent.spec_accepted_tokens_total == 180.0


def test_a_position_accepting_more_than_the_drafts_drops_the_positions_only():
    page = SPEC_PAGE.replace('position="0"} 70.0', 'position="0"} 7000.0')
    assert page != SPEC_PAGE
    s = parse_metrics(page, "u", 1.0)
    assert s.spec_accepted_by_position == {} and s.spec_accepted_tokens_total == 180.0
