"""sim.multimodal: images read from their headers, charged as Qwen2-VL's image tokens, the
processor cache and its queue; and through the HTTP server: usage, /metrics, the limit."""

from __future__ import annotations

import base64
import struct

import aiohttp
import pytest

from rampwatch.core.errors import UserError
from rampwatch.core.tokenizer import SimTokenizer
from rampwatch.sim.config import SimConfig
from rampwatch.sim.engine import Engine, SimRequest
from rampwatch.sim.multimodal import (
    FRAMING_TOKENS,
    ImageError,
    Processor,
    ProcessorCache,
    SimImage,
    chat_prompt,
    encoder_flops_in,
    image_limit_of,
    image_size,
    image_tokens,
    read_image,
)
from rampwatch.sim.server import serve

PNG_HEAD = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR"


def png_url(width: int, height: int, salt: bytes = b"") -> str:
    """A data URL whose bytes start as a PNG of that size (the simulator reads the header only)."""
    data = PNG_HEAD + struct.pack(">II", width, height) + b"\x08\x02\x00\x00\x00" + salt
    return "data:image/png;base64," + base64.b64encode(data).decode()


def jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + bytes(9)
    sof = b"\xff\xc0" + struct.pack(">HBHH", 17, 8, height, width) + bytes(10)
    return b"\xff\xd8" + app0 + sof


@pytest.mark.parametrize(
    ("width", "height", "tokens"),
    [
        (512, 512, 18 * 18),  # 504 x 504
        (1280, 720, 46 * 26),  # 1288 x 728
        (28, 28, 2 * 2),  # raised to min_pixels 56 x 56
        (4000, 3000, 41 * 30),  # over max_pixels: / sqrt(12e6 / 1003520), floored to 1148 x 840
        (256, 256, 9 * 9),  # 252 x 252
    ],
)
def test_image_tokens_follow_qwen2_vl_smart_resize(width, height, tokens):
    assert image_tokens(width, height) == tokens


def test_an_extreme_aspect_ratio_is_refused_as_qwen2_vl_does():
    with pytest.raises(ImageError, match="aspect ratio must be smaller than 200"):
        image_tokens(10000, 10)


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (PNG_HEAD + struct.pack(">II", 640, 480) + bytes(5), (640, 480)),
        (jpeg(300, 200), (300, 200)),
        (b"GIF89a" + struct.pack("<HH", 33, 44), (33, 44)),
        (
            b"RIFF" + bytes(4) + b"WEBPVP8X" + bytes(8) + (99).to_bytes(3, "little") + (49).to_bytes(3, "little"),
            (100, 50),
        ),
    ],
)
def test_sizes_read_from_the_header(data, size):
    assert image_size(data) == size


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("https://example.com/cat.png", "base64 data URLs only"),
        ("data:image/png,rawbytes", "expected a base64 data URL"),
        ("data:image/png;base64,@@@@", "not valid base64"),
        ("data:image/png;base64," + base64.b64encode(b"not an image at all").decode(), "cannot identify image"),
        (png_url(0, 10), "empty"),
        (12, "base64 data URLs only"),
    ],
)
def test_bad_images_are_refused_with_one_line(url, message):
    with pytest.raises(ImageError, match=message):
        read_image(url)


def test_a_huge_claimed_size_costs_the_clamped_tokens_and_no_memory():
    image = read_image(png_url(13_000, 13_000))
    assert image.tokens == image_tokens(13_000, 13_000) + FRAMING_TOKENS <= 1280 + FRAMING_TOKENS


@pytest.mark.parametrize("width, height", [(100_000, 100_000), (0xFFFFFFFF, 0xFFFFFFFF), (13_378, 13_378)])
def test_a_decompression_bomb_header_is_refused_as_vllm_does(width, height):
    # Past vLLM's VLLM_MAX_IMAGE_PIXELS (PIL's bomb limit): refused, never processed
    # (its processing time would hold the processor's queue for every later image).
    with pytest.raises(ImageError, match="exceeds limit of 178956970 pixels"):
        read_image(png_url(width, height))


async def test_a_bomb_does_not_stall_the_next_image_request():
    async with serve(SimConfig(model="qwen2-vl-7b")) as url, aiohttp.ClientSession() as s:
        for side, status in ((0xFFFFFFFF, 400), (64, 200)):
            part = {"type": "image_url", "image_url": {"url": png_url(side, side)}}
            body = {"max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, part]}]}
            async with s.post(url + "/v1/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=20)) as r:
                assert r.status == status


def test_only_the_header_is_decoded():
    # A megabyte of garbage past the first 64 KiB: never decoded (it is not base64 either).
    url = png_url(64, 64, salt=b"x") + "A" * 100_000 + "!" * 1_000_000
    assert read_image(url).tokens == image_tokens(64, 64) + FRAMING_TOKENS


def test_placeholders_follow_each_messages_text_and_equal_images_have_equal_ids():
    tok = SimTokenizer()
    url = png_url(56, 56)
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "a b c"}, {"type": "image_url", "image_url": {"url": url}}],
        },
    ]
    ids, images, inputs = chat_prompt(tok, messages, True, 5)
    # system: 3 + 2 words; user: 3 + 3 words + 6 image tokens (2 x 2 + framing); generation prompt 2
    assert len(ids) == 5 + 6 + 6 + 2
    assert [i.tokens for i in images] == [6]
    start = inputs[0][0]
    assert start == 5 + 2 + 3  # after the system message, the user's <start> <role> and its text
    pads = ids[start : start + 6]
    assert pads == images[0].placeholder_ids()
    other = read_image(png_url(56, 56, salt=b"x"))
    assert other.placeholder_ids()[1:-1] != pads[1:-1]  # another image: no shared prefix-cache block


def test_no_images_is_the_plain_template():
    tok = SimTokenizer()
    messages = [{"role": "user", "content": [{"type": "text", "text": "a b"}]}]
    assert chat_prompt(tok, messages, False, 0)[1:] == ([], [])


def test_past_the_limit_is_vllms_message():
    part = {"type": "image_url", "image_url": {"url": png_url(56, 56)}}
    with pytest.raises(ImageError, match=r"^At most 2 image\(s\) may be provided in one prompt\.$"):
        chat_prompt(SimTokenizer(), [{"role": "user", "content": [part] * 3}], True, 2)


def test_a_text_model_refuses_images_naming_the_image_model():
    part = {"type": "image_url", "image_url": {"url": png_url(56, 56)}}
    with pytest.raises(ImageError, match="qwen2-vl-7b"):
        chat_prompt(SimTokenizer(), [{"role": "user", "content": [part]}], False, 999)


def image(digest: bytes, tokens: int = 10 + FRAMING_TOKENS) -> SimImage:
    return SimImage(100, 100, digest, tokens)


def test_processor_cache_evicts_the_least_recently_used():
    size = image(b"a").cache_bytes
    cache = ProcessorCache(capacity_bytes=2 * size)
    assert [cache.lookup(image(d)) for d in (b"a", b"b", b"a", b"c", b"b", b"a")] == [
        False,
        False,
        True,
        False,  # evicts b (a was used after it)
        False,
        False,  # b evicted a
    ]
    assert cache.used_bytes == 2 * size


def test_an_item_larger_than_the_cache_is_not_kept():
    cache = ProcessorCache(capacity_bytes=10)
    assert not cache.lookup(image(b"a")) and not cache.lookup(image(b"a"))
    assert cache.used_bytes == 0


def test_processing_is_queued_and_hits_cost_nothing():
    processor = Processor(cache_gb=1.0)
    a, b = image(b"a"), image(b"b")
    delay, queries, hits = processor.process([a, b], now=0.0)
    assert (queries, hits) == (2, 0) and delay == pytest.approx(a.processing_s + b.processing_s)
    delay2, _, _ = processor.process([image(b"c")], now=0.0)  # behind the first request's images
    assert delay2 == pytest.approx(delay + a.processing_s)
    assert processor.process([a, b], now=10.0) == (0.0, 2, 2)


def test_without_a_cache_nothing_is_counted():
    assert Processor(cache_gb=0).process([image(b"a")], now=0.0)[1:] == (0, 0)


def test_encoder_runs_in_the_step_that_reaches_the_image():
    inputs = [(10, 1.0), (50, 2.0)]
    assert [encoder_flops_in(inputs, s, e) for s, e in ((0, 10), (0, 11), (11, 50), (40, 60), (0, 100))] == [
        0.0,
        1.0,
        0.0,
        2.0,
        3.0,
    ]


def test_the_encoder_lengthens_the_prefill_step():
    config = SimConfig(hardware="h100", model="qwen2-vl-7b").resolved()
    plain, vision = Engine(config), Engine(config)
    plain.add_request(SimRequest("a", list(range(100, 600)), 4), 0.0)
    vision.add_request(SimRequest("a", list(range(100, 600)), 4, mm_inputs=[(20, 1e13)]), 0.0)
    assert vision.step(0.0).duration > plain.step(0.0).duration + 1e13 / (989e12 * 0.42) * 0.99


@pytest.mark.parametrize(
    ("text", "limit"),
    [('{"image": 3}', 3), ('{"image": {"count": 0}}', 0), ('{"video": 1}', 999)],
)
def test_limit_mm_per_prompt_as_vllm_spells_it(text, limit):
    assert image_limit_of(text) == limit


@pytest.mark.parametrize("text", ["3", '{"image": -1}', '{"image": "two"}', "{"])
def test_a_bad_limit_is_one_line_naming_the_flag(text):
    with pytest.raises(UserError, match="--limit-mm-per-prompt"):
        image_limit_of(text)


async def test_usage_counts_the_image_tokens_and_metrics_count_the_cache():
    url_a = png_url(512, 512)
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "one two three"}, {"type": "image_url", "image_url": {"url": url_a}}],
        }
    ]
    config = SimConfig(hardware="instant", model="qwen2-vl-7b", limit_mm_images=1)
    async with serve(config) as url, aiohttp.ClientSession() as s:
        usages = []
        for _ in range(2):
            async with s.post(f"{url}/v1/chat/completions", json={"messages": messages, "max_tokens": 3}) as r:
                assert r.status == 200
                usages.append((await r.json())["usage"]["prompt_tokens"])
        assert usages == [3 + 3 + 2 + 18 * 18 + FRAMING_TOKENS] * 2
        two = [{"role": "user", "content": messages[0]["content"] + messages[0]["content"][1:]}]
        async with s.post(f"{url}/v1/chat/completions", json={"messages": two, "max_tokens": 3}) as r:
            assert r.status == 400
            error = (await r.json())["error"]
            assert error["message"] == "At most 1 image(s) may be provided in one prompt. (parameter=image)"
            assert error["param"] == "image"
        async with s.get(f"{url}/metrics") as r:
            page = await r.text()
    assert 'vllm:mm_cache_queries_total{engine="0",model_name="qwen2-vl-7b"} 2.0' in page
    assert 'vllm:mm_cache_hits_total{engine="0",model_name="qwen2-vl-7b"} 1.0' in page


async def test_a_plain_server_exports_the_counters_at_zero_as_vllm_does():
    async with serve(SimConfig(hardware="instant", model="tiny")) as url, aiohttp.ClientSession() as s:
        async with s.get(f"{url}/metrics") as r:
            page = await r.text()
    assert 'vllm:mm_cache_queries_total{engine="0",model_name="tiny"} 0.0' in page
