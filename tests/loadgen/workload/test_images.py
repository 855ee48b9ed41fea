"""workload.images: the checks, the PNG encoder, the seeded draws (vllm bench serve's
random-mm semantics) and the chat content the factory sends."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.images import ImageMaker, count_bounds, png, with_images
from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.scenario import validate_scenario


def scenario(images, endpoint="chat", **workload):
    data = {
        "endpoint": endpoint,
        "seed": 3,
        "schedule": {"kind": "constant", "rate": 1, "num_requests": 5},
        "workload": {"input_tokens": 20, "output_tokens": 8, "images": images, **workload},
    }
    return validate_scenario(data, "x.yaml")


def decode_png(data: bytes) -> tuple[int, int, bytes]:
    """(width, height, pixels) of an 8-bit RGB PNG, every chunk's CRC checked."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body)
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None and header[2:] == (8, 2, 0, 0, 0)
    width, height = header[0], header[1]
    raw = zlib.decompress(idat)
    rows = [raw[i * (width * 3 + 1) : (i + 1) * (width * 3 + 1)] for i in range(height)]
    assert all(row[0] == 0 for row in rows)
    return width, height, b"".join(row[1:] for row in rows)


def test_png_round_trips_its_pixels():
    pixels = bytes(range(256)) * 3 + bytes(range(96))  # 7 x 40 x 3 = 840
    assert decode_png(png(7, 40, pixels[: 7 * 40 * 3])) == (7, 40, pixels[: 7 * 40 * 3])


@pytest.mark.parametrize(
    ("count", "ratio", "limit", "bounds"),
    [
        (2, 0.0, None, (2, 2)),
        (2, 0.5, None, (1, 3)),
        (3, 1.0, None, (0, 6)),
        (3, 0.5, 2, (1, 2)),  # the top clamped to the limit, as vLLM's
        (1, 0.3, None, (0, 2)),  # floor(0.7), ceil(1.3)
    ],
)
def test_count_bounds_follow_vllm_random_mm(count, ratio, limit, bounds):
    assert count_bounds(count, ratio, limit) == bounds


def test_resolved_spec_with_defaults():
    scn = scenario({"count": 2, "width": 64, "height": 32})
    assert scn.workload["images"] == {
        "count": 2,
        "count_range_ratio": 0.0,
        "limit_per_prompt": None,
        "sizes": [{"width": 64, "height": 32, "weight": 1.0}],
        "repeat": 0.0,
        "repeat_pool": 8,
    }


def test_bucket_weights_are_normalised():
    scn = scenario({"sizes": [{"width": 8, "height": 8, "weight": 1}, {"width": 16, "height": 8, "weight": 3}]})
    assert [s["weight"] for s in scn.workload["images"]["sizes"]] == [0.25, 0.75]


@pytest.mark.parametrize(
    ("images", "endpoint", "message"),
    [
        ({"count": 1, "width": 8, "height": 8}, "completions", "workload.images: needs endpoint chat"),
        ({"count": 1, "width": 8}, "chat", "workload.images.height: required key is missing"),
        ({"width": 8, "height": 8, "count_range_ratio": 2}, "chat", "count_range_ratio: expected a number in [0, 1]"),
        ({"width": 8, "height": 8, "repeat": 1.5}, "chat", "workload.images.repeat: expected a share in [0, 1]"),
        ({"width": 9000, "height": 8}, "chat", "workload.images.width: expected at most 8192 pixels"),
        ({"count": 4, "width": 8, "height": 8, "limit_per_prompt": 2}, "chat", "limit_per_prompt: expected a limit"),
        ({"width": 8, "height": 8, "sizes": [{"width": 8, "height": 8}]}, "chat", "cannot be combined with sizes"),
        ({"width": 8, "height": 8, "colour": 1}, "chat", "workload.images.colour: unknown key"),
        ({"sizes": []}, "chat", "workload.images.sizes: expected a list of {width, height, weight}, got an empty list"),
        (
            {"sizes": {"width": 8}},
            "chat",
            "workload.images.sizes: expected a list of {width, height, weight}, got a map",
        ),
        # memory: 3,000 images of 1,024 x 1,024 a request (12 GB) ran out of memory with a traceback
        ({"count": 3000, "width": 1024, "height": 1024}, "chat", "workload.images.count: a request would carry up"),
        ({"count": 2, "width": 8192, "height": 8192}, "chat", "workload.images.count: a request would carry up"),
        ({"count": 64, "count_range_ratio": 1, "width": 1024, "height": 1024}, "chat", "workload.images.count: a"),
        (
            {
                "count": 1,
                "sizes": [{"width": 8, "height": 8}, {"width": 8192, "height": 4096}],
                "repeat": 1,
                "repeat_pool": 1_000_000,
            },
            "chat",
            "workload.images.repeat_pool: expected at most 16 images",
        ),
    ],
)
def test_bad_specs_are_one_line_naming_the_key(images, endpoint, message):
    with pytest.raises(UserError) as err:
        scenario(images, endpoint=endpoint)
    assert message in str(err.value).splitlines()[0]


def test_the_largest_request_and_pool_allowed():
    assert scenario({"count": 64, "width": 1024, "height": 1024}).workload["images"]["count"] == 64
    assert scenario({"count": 1000, "width": 8, "height": 8, "repeat": 0.5, "repeat_pool": 100_000})


def test_images_cannot_come_with_sessions():
    with pytest.raises(UserError, match="workload.images: cannot be combined with workload.sessions"):
        scenario({"width": 8, "height": 8}, sessions={"turns": 2})


def test_requests_carry_the_images_after_the_text():
    factory = RequestFactory(scenario({"count": 2, "width": 10, "height": 6}))
    assert factory.costly  # built in the builder process
    request = factory.next_request()
    content = request.payload["messages"][-1]["content"]
    assert [part["type"] for part in content] == ["text", "image_url", "image_url"]
    assert request.images == 2 and request.labels()["images"] == 2
    url = content[1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert decode_png(base64.b64decode(url.split(",", 1)[1]))[:2] == (10, 6)
    assert request.expected_prompt_tokens == 20  # the text's: image tokens are the server's


def test_the_text_is_the_same_with_or_without_images():
    plain = validate_scenario(
        {
            "endpoint": "chat",
            "seed": 3,
            "schedule": {"kind": "constant", "rate": 1},
            "workload": {"input_tokens": 20, "output_tokens": 8},
        },
        "x.yaml",
    )
    with_imgs = RequestFactory(scenario({"count": 1, "width": 4, "height": 4})).next_request()
    text = RequestFactory(plain).next_request().payload["messages"][-1]["content"]
    assert with_imgs.payload["messages"][-1]["content"][0] == {"type": "text", "text": text}
    assert not RequestFactory(plain).costly


def test_seeded_and_repeats_come_from_the_pool():
    spec = scenario({"count": 4, "width": 4, "height": 4, "repeat": 0.5, "repeat_pool": 2}).workload["images"]
    a, b = ImageMaker(spec, 7), ImageMaker(spec, 7)
    urls = [p["image_url"]["url"] for _ in range(50) for p in a.next_parts()]
    assert urls == [p["image_url"]["url"] for _ in range(50) for p in b.next_parts()]
    repeated = {u for u in urls if urls.count(u) > 1}
    assert len(repeated) == 2  # the pool's two images, nothing else twice
    share = sum(urls.count(u) for u in repeated) / len(urls)
    assert 0.35 < share < 0.65


def test_count_drawn_over_the_range_and_sizes_from_the_bucket():
    spec = scenario(
        {
            "count": 2,
            "count_range_ratio": 1.0,
            "sizes": [{"width": 4, "height": 4, "weight": 1}, {"width": 8, "height": 2, "weight": 1}],
        }
    ).workload["images"]
    maker = ImageMaker(spec, 1)
    counts, sizes = set(), set()
    for _ in range(200):
        parts = maker.next_parts()
        counts.add(len(parts))
        for p in parts:
            sizes.add(decode_png(base64.b64decode(p["image_url"]["url"].split(",", 1)[1]))[:2])
    assert counts == {0, 1, 2, 3, 4}
    assert sizes == {(4, 4), (8, 2)}


def test_a_mixture_class_carries_its_own_images():
    data = {
        "endpoint": "chat",
        "schedule": {"kind": "constant", "rate": 1},
        "workload": {
            "mix": [
                {"name": "text", "weight": 1, "input_tokens": 10, "output_tokens": 4},
                {
                    "name": "vision",
                    "weight": 1,
                    "input_tokens": 10,
                    "output_tokens": 4,
                    "images": {"width": 4, "height": 4},
                },
            ]
        },
    }
    factory = RequestFactory(validate_scenario(data, "x.yaml"))
    assert factory.costly
    requests = [factory.next_request() for _ in range(30)]
    assert {r.images for r in requests if r.request_class == "vision"} == {1}
    assert {r.images for r in requests if r.request_class == "text"} == {None}


def test_with_images_leaves_a_text_request_alone():
    messages = [{"role": "user", "content": "hi"}]
    assert with_images(messages, []) is messages
