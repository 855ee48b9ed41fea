"""Images in a chat request: ``workload.images``, as ``vllm bench serve --dataset-name
random-mm`` sends them.

Each request carries a number of synthetic images drawn around ``count`` (vLLM's
``--random-mm-base-items-per-request``): uniform over ``[floor(n·(1−r)), ceil(n·(1+r))]``
with ``r = count_range_ratio`` (``--random-mm-num-mm-items-range-ratio``), the top
clamped to ``limit_per_prompt`` (``--random-mm-limit-mm-per-prompt``'s image limit).
Each image's size is drawn from ``sizes`` (``--random-mm-bucket-config``'s image
buckets, weights normalised) or is the one ``width`` × ``height``. Pixels are seeded
noise (vLLM's too: the worst case for compression and transfer), encoded as PNG by the
few lines below — Pillow is not needed: vLLM sends JPEG, which would need it, and PNG of
noise is exact, lossless and its size header is the first 24 bytes. With ``repeat`` > 0
that share of the images is taken from a pool of ``repeat_pool`` images built once, so
the server's multimodal processor cache (``--mm-processor-cache-gb``) sees repeats.

The images follow the text in the user message (vLLM's default ``mm_position`` last),
each as ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,…"}}``.
Building them is costly (a 512 × 512 image is ~1 MB of base64): a factory with images
builds its requests in a process of its own (``requests_ahead``).
"""

from __future__ import annotations

import base64
import math
import struct
import zlib
from typing import Any

import numpy as np

from rampwatch.loadgen.workload.spec_checks import KeyPath, Problems, describe, number_check

IMAGE_KEYS = ("count", "count_range_ratio", "limit_per_prompt", "width", "height", "sizes", "repeat", "repeat_pool")
SIZE_KEYS = ("width", "height", "weight")
# The largest side accepted: a 8,192 × 8,192 image is 200 MB of noise, already absurd to send.
MAX_SIDE = 8192
DEFAULT_REPEAT_POOL = 8
# The most pixels one request's images may hold together (one 8,192 × 8,192 image, ~270
# MB of base64): the count is not bounded otherwise, and 3,000 images of 1,024 × 1,024 in
# one request (12 GB) were built until the process ran out of memory, with a traceback.
MAX_REQUEST_PIXELS = MAX_SIDE * MAX_SIDE
# The most pixels the repeat pool may keep (it is built lazily and kept for the run): the
# default pool of the largest image.
MAX_POOL_PIXELS = DEFAULT_REPEAT_POOL * MAX_REQUEST_PIXELS
# Streams of the scenario's seed: the image draws (counts, sizes, repeats, pixels), and
# the pool of repeated images (one stream per pool slot).
IMAGE_STREAM = 105
POOL_STREAM = 106
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_images(p: Problems, path: KeyPath, value: Any, endpoint: str) -> dict[str, Any] | None:
    """``workload.images``, checked and resolved: ``count``, ``count_range_ratio``,
    ``limit_per_prompt`` (None: no cap), ``sizes`` ([{width, height, weight}], weights
    summing to 1), ``repeat`` and ``repeat_pool``."""
    if endpoint != "chat":
        p.add(path, f"needs endpoint chat (images travel as chat content parts), got endpoint {endpoint}", True)
        return None
    if not p.mapping(path, value, "count, width, height, …"):
        return None
    p.keys(path, value, IMAGE_KEYS)
    ok = True

    def number(key: str, default: Any, check: Any) -> Any:
        nonlocal ok
        got = value.get(key, default)
        if got is None:
            return None
        if not p.check(path + (key,), got, check):
            ok = False
            return default
        return got

    count = number("count", 1, number_check(0, integer=True))
    ratio = number("count_range_ratio", 0.0, number_check(0))
    if ratio is not None and ratio > 1:
        p.add(path + ("count_range_ratio",), f"expected a number in [0, 1], got {describe(ratio)}")
        ok = False
    limit = number("limit_per_prompt", None, number_check(0, integer=True))
    repeat = number("repeat", 0.0, number_check(0))
    if repeat is not None and repeat > 1:
        p.add(path + ("repeat",), f"expected a share in [0, 1], got {describe(repeat)}")
        ok = False
    pool = number("repeat_pool", DEFAULT_REPEAT_POOL, number_check(1, integer=True))
    sizes = _check_sizes(p, path, value)
    if sizes is None or not ok:
        return None
    lo, hi = count_bounds(int(count), float(ratio), None if limit is None else int(limit))
    if lo > hi:
        p.add(path + ("limit_per_prompt",), f"expected a limit >= the fewest images a request takes ({lo}), got {hi}")
        return None
    largest = max(s["width"] * s["height"] for s in sizes)
    if hi * largest > MAX_REQUEST_PIXELS:
        p.add(
            path + ("count",),
            f"a request would carry up to {hi:,} images of up to {largest:,} pixels ({hi * largest:,} pixels, "
            f"~{hi * largest * 4 / 1e6:,.0f} MB of base64); at most {MAX_REQUEST_PIXELS:,} pixels a request "
            f"(one {MAX_SIDE} x {MAX_SIDE} image): fewer or smaller images, or limit_per_prompt",
        )
        return None
    if repeat and pool * largest > MAX_POOL_PIXELS:
        p.add(
            path + ("repeat_pool",),
            f"expected at most {MAX_POOL_PIXELS // largest:,} images of {largest:,} pixels in the pool "
            f"(it is kept for the run: at most {MAX_POOL_PIXELS:,} pixels), got {pool:,}",
        )
        return None
    return {
        "count": int(count),
        "count_range_ratio": float(ratio),
        "limit_per_prompt": None if limit is None else int(limit),
        "sizes": sizes,
        "repeat": float(repeat),
        "repeat_pool": int(pool),
    }


def _check_sizes(p: Problems, path: KeyPath, value: dict[str, Any]) -> list[dict[str, Any]] | None:
    side = number_check(1, integer=True)
    if "sizes" in value:
        for key in ("width", "height"):
            if key in value:
                p.add(path + (key,), "cannot be combined with sizes (each size has its own)", True)
        raw = value["sizes"]
        if not isinstance(raw, list) or not raw:
            got = "an empty list" if raw == [] else describe(raw)  # describe() says only "a list"
            p.add(path + ("sizes",), f"expected a list of {{width, height, weight}}, got {got}")
            return None
        sizes = []
        for i, item in enumerate(raw):
            at = path + ("sizes", i)
            if not p.mapping(at, item, "width, height, weight"):
                return None
            p.keys(at, item, SIZE_KEYS)
            size = _side_pair(p, at, item, side)
            weight = item.get("weight", 1.0)
            if size is None or not p.check(at + ("weight",), weight, number_check(0, strict=True)):
                return None
            sizes.append({**size, "weight": float(weight)})
        total = sum(s["weight"] for s in sizes)
        return [{**s, "weight": s["weight"] / total} for s in sizes]
    size = _side_pair(p, path, value, side)
    return None if size is None else [{**size, "weight": 1.0}]


def _side_pair(p: Problems, path: KeyPath, value: dict[str, Any], side: Any) -> dict[str, int] | None:
    out: dict[str, int] = {}
    for key in ("width", "height"):
        if key not in value:
            p.add(path + (key,), "required key is missing", True)
        elif p.check(path + (key,), value[key], side):
            if value[key] > MAX_SIDE:
                p.add(path + (key,), f"expected at most {MAX_SIDE} pixels, got {describe(value[key])}")
            else:
                out[key] = int(value[key])
    return out if len(out) == 2 else None


def count_bounds(count: int, ratio: float, limit: int | None) -> tuple[int, int]:
    """The fewest and most images a request takes (vLLM's ``get_mm_item_sampling_params``)."""
    hi = math.ceil(count * (1 + ratio))
    if limit is not None:
        hi = min(hi, limit)
    return max(0, math.floor(count * (1 - ratio))), hi


def png(width: int, height: int, pixels: bytes) -> bytes:
    """An 8-bit RGB PNG of ``pixels`` (``width × height × 3`` bytes, rows top down): each
    row behind filter byte 0, stored in one IDAT (noise does not compress: level 0)."""
    row = width * 3
    raw = np.empty((height, row + 1), dtype=np.uint8)
    raw[:, 0] = 0
    raw[:, 1:] = np.frombuffer(pixels, dtype=np.uint8).reshape(height, row)
    header = struct.pack("!IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw.tobytes(), 0))
        + _chunk(b"IEND", b"")
    )


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack("!I", len(data)) + kind + data + struct.pack("!I", zlib.crc32(kind + data))


def image_part(width: int, height: int, rng: np.random.Generator) -> dict[str, Any]:
    """One chat content part: a seeded noise image as a PNG data URL."""
    data = png(width, height, rng.bytes(width * height * 3))
    url = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return {"type": "image_url", "image_url": {"url": url}}


class ImageMaker:
    """A workload's images, request by request, from the scenario's seed alone (the text
    of the prompts is drawn apart: the same seed gives the same text with or without
    images)."""

    def __init__(self, spec: dict[str, Any], seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self._rng = np.random.default_rng([seed, IMAGE_STREAM])
        self._lo, self._hi = count_bounds(spec["count"], spec["count_range_ratio"], spec["limit_per_prompt"])
        self._weights = np.asarray([s["weight"] for s in spec["sizes"]], dtype=np.float64)
        self._pool: dict[int, dict[str, Any]] = {}

    def _size(self, rng: np.random.Generator) -> tuple[int, int]:
        sizes = self.spec["sizes"]
        size = sizes[0] if len(sizes) == 1 else sizes[int(rng.choice(len(sizes), p=self._weights))]
        return size["width"], size["height"]

    def _pooled(self, slot: int) -> dict[str, Any]:
        part = self._pool.get(slot)
        if part is None:
            rng = np.random.default_rng([self.seed, POOL_STREAM, slot])
            part = self._pool[slot] = image_part(*self._size(rng), rng)
        return part

    def next_parts(self) -> list[dict[str, Any]]:
        """The next request's image parts."""
        rng = self._rng
        n = int(rng.integers(self._lo, self._hi + 1))
        parts = []
        for _ in range(n):
            if self.spec["repeat"] and rng.random() < self.spec["repeat"]:
                parts.append(self._pooled(int(rng.integers(self.spec["repeat_pool"]))))
            else:
                parts.append(image_part(*self._size(rng), rng))
        return parts


def with_images(messages: list[dict[str, Any]], parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with the image parts after the last user message's text."""
    if not parts:
        return messages
    last = messages[-1]
    text = last["content"]
    content = text if isinstance(text, list) else [{"type": "text", "text": text}]
    return [*messages[:-1], {**last, "content": [*content, *parts]}]
