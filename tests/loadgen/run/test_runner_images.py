"""Issue 28's acceptance for images, against the in-process simulator: an image workload's
prompt tokens include exactly the image tokens the simulator charged (Qwen2-VL's formula),
and the repeated-image option shows multimodal cache hits in the server's counters and
the run's figures."""

from __future__ import annotations

import re

import aiohttp
import pytest

from rampwatch.core.figures.summary import summarise_requests
from rampwatch.core.figures.summary_text import format_summary
from rampwatch.core.timeline import NullSink
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.runner import Run
from rampwatch.loadgen.workload.requests_ahead import PROBE_REQUESTS
from rampwatch.loadgen.workload.scenario import validate_scenario
from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import serve

VISION = SimConfig(hardware="instant", model="qwen2-vl-7b", served_model_name="tiny")
# The user's text (40 tokens) framed by the simulator's chat template (3 a message, 2 for
# the generation prompt); each 512 x 512 image: resized to 504 x 504, 18 x 18 tiles of
# 28 pixels, plus <|vision_start|> and <|vision_end|>.
TEXT_TOKENS = 40 + 3 + 2
TOKENS_PER_IMAGE = 18 * 18 + 2


class Records(NullSink):
    def __init__(self) -> None:
        self.records: list = []
        self.samples: list = []
        self.header = None

    def on_start(self, header):
        self.header = header

    def on_request(self, record):
        self.records.append(record)

    def on_scrape(self, sample):
        self.samples.append(sample)


def image_scenario(images: dict):
    data = {
        "endpoint": "chat",
        "seed": 11,
        "schedule": {"kind": "constant", "rate": 40, "num_requests": 30},
        "workload": {"input_tokens": 40, "output_tokens": 4, "images": images},
    }
    return validate_scenario(data, "images.yaml")


async def run_images(images: dict) -> tuple[Run, Records, dict[str, float]]:
    """The run, what it published, and the server's multimodal cache counters at its end."""
    sink = Records()
    async with serve(VISION) as url:
        run = Run(
            image_scenario(images),
            RunOptions(target=url, model="tiny", keep_records=True, scrape_interval_s=0.2, tick_interval_s=0.25),
            sinks=[sink],
        )
        await run.execute()
        async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
            page = await response.text()
    counters = {m[1]: float(m[2]) for m in re.finditer(r"^vllm:(mm_cache_\w+_total)\{[^}]*\} (\S+)$", page, re.M)}
    return run, sink, counters


@pytest.mark.slow
async def test_prompt_tokens_include_the_image_tokens_the_simulator_charged():
    run, sink, _ = await run_images({"count": 2, "count_range_ratio": 1.0, "width": 512, "height": 512})
    assert run.factory._count == PROBE_REQUESTS  # the rest were built in the builder process
    records = sink.records
    assert len(records) == 30 and all(r.ok and r.tokens_from_usage for r in records), [r.error for r in records]
    assert {r.images for r in records} >= {0, 4}  # 0..4 images a request, seeded
    for r in records:
        assert r.prompt_tokens == TEXT_TOKENS + r.images * TOKENS_PER_IMAGE


@pytest.mark.slow
async def test_repeated_images_show_cache_hits():
    run, sink, counters = await run_images({"count": 2, "width": 512, "height": 512, "repeat": 1.0, "repeat_pool": 2})
    assert all(r.ok for r in sink.records)
    assert counters["mm_cache_queries_total"] == 60  # 30 requests x 2 images
    assert counters["mm_cache_hits_total"] >= 60 - 2  # only the pool's two first sightings miss
    assert any(s.mm_cache_hits_total for s in sink.samples if s.ok)  # the run's scrapes read them
    summary = summarise_requests(sink.header, sink.records, sink.samples, [])
    images = summary.to_dict()["images"]
    assert images["mean_images_per_request"] == 2 and images["sizes"] == ["512x512"]
    assert images["mm_cache_hit_pct"] > 90
    assert sink.header.scenario["workload"]["images"]["sizes"] == [{"width": 512, "height": 512, "weight": 1.0}]
    assert "MM cache hit rate (%):" in format_summary(summary)
