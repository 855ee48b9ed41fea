"""core.figures.images: images per request, their size and the multimodal cache hit rate,
in the summary, its text, the result JSON and the live series; none of it in a run
without images."""

from __future__ import annotations

import dataclasses

import pytest

from rampwatch.core.figures.images import ImageCounts, image_figures, image_sizes
from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.figures.summary import (
    SummaryBuilder,
    format_summary,
    summarise_requests,
    to_bench_result,
)
from rampwatch.core.timeline import RequestRecord, RunHeader, ServerSample
from rampwatch.record import format as fmt
from rampwatch.record.analysis import request_block


def header(workload: dict) -> RunHeader:
    return RunHeader(
        rampwatch_version="0",
        started_at_unix=0,
        target="t",
        model="m",
        scenario_name="s",
        scenario={"workload": workload},
    )


IMAGES = {"sizes": [{"width": 512, "height": 512, "weight": 1.0}]}
HEADER = header({"input_tokens": {"dist": "fixed", "value": 8}, "images": IMAGES})


def rec(i: int, images: int | None, error: str | None = None) -> RequestRecord:
    return RequestRecord(
        id=i,
        scheduled_at=i,
        sent_at=i,
        end_at=i + 0.5,
        first_token_at=i + 0.1,
        chunk_times=[i + 0.5],
        completion_tokens=2,
        prompt_tokens=10,
        error_class=error,
        images=images,
    )


def scrape(t: float, queries: float | None, hits: float | None) -> ServerSample:
    return ServerSample(
        t=t, url="a", ok=True, backend="vllm", mm_cache_queries_total=queries, mm_cache_hits_total=hits, running=0.0
    )


def test_counts_over_completed_requests_of_an_image_workload():
    counts = ImageCounts()
    counts.add([2, 0, None, 4, 3], [True, True, True, True, False])
    assert (counts.requests, counts.images, counts.max_images) == (3, 6, 4)


@pytest.mark.parametrize(
    ("workload", "sizes"),
    [
        ({"images": IMAGES}, ["512x512"]),
        (
            {
                "images": {
                    "sizes": [{"width": 8, "height": 4, "weight": 0.25}, {"width": 4, "height": 4, "weight": 0.75}]
                }
            },
            ["8x4 (25%)", "4x4 (75%)"],
        ),
        ({"mix": [{"name": "a"}, {"name": "b", "images": IMAGES}, {"name": "c", "images": IMAGES}]}, ["512x512"]),
        ({"input_tokens": 3}, []),
        ({"images": {"sizes": [{"width": "x"}]}}, []),  # a header of the wrong shape: nothing, no traceback
    ],
)
def test_sizes_from_the_resolved_scenario(workload, sizes):
    assert image_sizes(header(workload)) == sizes


def test_none_of_it_in_a_run_without_images():
    records = [rec(i, None) for i in range(3)]
    plain = [scrape(0.0, 0.0, 0.0), scrape(1.0, 0.0, 0.0)]  # vLLM exports the counters at 0
    summary = summarise_requests(header({}), records, plain, [])
    assert summary.images is None and "images" not in summary.to_dict()
    assert "mm_cache_hit_pct" not in summary.server
    assert "Images" not in format_summary(summary)
    assert "rampwatch_images" not in to_bench_result(summary, header({}), records)
    assert image_figures(ImageCounts(), None, {}) is None


def test_a_run_with_images_shows_them_everywhere():
    records = [rec(0, 2), rec(1, 3), rec(2, 1, error="http_500")]
    samples = [scrape(0.0, 0.0, 0.0), scrape(1.0, 4.0, 1.0), scrape(2.0, 10.0, 4.0)]
    summary = summarise_requests(HEADER, records, samples, [])
    assert summary.server["mm_cache_hit_pct"] == pytest.approx(40.0)
    assert summary.to_dict()["images"] == {
        "requests": 2,
        "images": 5,
        "mean_images_per_request": 2.5,
        "max_images_per_request": 3,
        "sizes": ["512x512"],
        "mm_cache_hit_pct": pytest.approx(40.0),
    }
    text = format_summary(summary)
    assert "Images per request (mean):               2.50" in text
    assert "Image size:                              512x512" in text
    assert "MM cache hit rate (%):                   40.0" in text
    assert to_bench_result(summary, HEADER, records)["rampwatch_images"]["images"] == 5


def test_the_cache_alone_when_the_server_saw_images_the_client_did_not_send():
    samples = [scrape(0.0, 0.0, 0.0), scrape(1.0, 4.0, 4.0)]
    images = summarise_requests(header({}), [rec(0, None)], samples, []).to_dict()["images"]
    assert images == {"mm_cache_hit_pct": 100.0}


def test_a_recordings_image_column_gives_the_same_figures():
    records = [rec(0, 2), rec(1, 0), rec(2, None)]
    block = request_block(fmt.decode_request_columns(fmt.encode_requests(records)))
    builder = SummaryBuilder()
    builder.add_block(block)
    assert builder.images.state() == [2, 2, 2]
    old = [dataclasses.replace(r, images=None) for r in records]  # an older recording: no column
    assert request_block(fmt.decode_request_columns(fmt.encode_requests(old))).images == ()


def test_the_live_builders_checkpoint_keeps_the_counts_only_when_there_are_some():
    builder = SummaryBuilder(bounded=True)
    builder.add(rec(0, None))
    assert "images" not in builder.export_state({})
    builder.add(rec(1, 3))
    arrays: dict = {}
    restored = SummaryBuilder.restore_state(builder.export_state(arrays), arrays)
    assert restored.images.state() == [1, 3, 3]


def test_the_live_series_only_once_the_server_counted_a_query():
    b = SeriesBuilder(window_s=2)
    b.on_scrape(scrape(0.0, 0.0, 0.0))
    b.on_scrape(scrape(1.0, 0.0, 0.0))
    b.on_scrape(scrape(2.0, 0.0, 0.0))
    assert "mm_cache_hit_pct" not in b.snapshot(now=2.0).series
    assert "mm_cache_hit_pct" not in b.snapshot(now=2.0).summary["server"]
    b.on_scrape(scrape(3.0, 10.0, 5.0))
    b.on_scrape(scrape(4.0, 20.0, 15.0))
    b.on_finish(4.0)
    snapshot = b.snapshot()
    assert snapshot.series["mm_cache_hit_pct"][-2:] == [50.0, pytest.approx(100 * 15 / 20)]
    assert snapshot.summary["server"]["mm_cache_hit_pct"] == pytest.approx(75.0)
