"""Images in the simulator: chat content parts read, charged and cached as vLLM does.

**Which model.** Image tokens follow Qwen2-VL (``Qwen/Qwen2-VL-7B-Instruct``, the
``qwen2-vl-7b`` model preset): the image is resized to multiples of 28 pixels (14-pixel
patches, merged 2 × 2) keeping its aspect ratio, within the HF processor's default
``min_pixels`` 56 × 56 and ``max_pixels`` 28 × 28 × 1280 (transformers'
``smart_resize``), and takes one token per 28 × 28 tile, plus its two framing tokens
``<|vision_start|>`` and ``<|vision_end|>``. Those placeholder tokens are part of the
prompt: they count against ``max_model_len``, in ``usage.prompt_tokens`` and in prefill
like text (vLLM expands the placeholder the same way). Their ids are drawn from the
image's hash, so the prefix cache shares them between equal images only (vLLM puts the
image's hash in the block's extra keys).

**What it costs.** Two things, as in vLLM. (1) The processor (decode, resize,
normalise, patchify) runs on the API server's CPU, one item at a time, before the
request reaches the engine: ``PROCESS_FIXED_S`` + ``PROCESS_S_PER_PIXEL`` × pixels per
image, queued (``Processor``). Its output is kept in the multimodal processor cache
(``--mm-processor-cache-gb``, LRU by the processed item's bytes: float32 patches, 4
per token, 3 × 2 × 14 × 14 values each), keyed by the image's hash; a hit skips the
processing. Queries and hits are counted in items per request and exported as vLLM's
``vllm:mm_cache_queries`` / ``vllm:mm_cache_hits`` (per engine: the one the request went
to). (2) The vision encoder (675 M parameters) runs on the GPU in the step that
schedules the image's first placeholder token: 2 FLOPs per parameter per 14 × 14 patch
(``SimRequest.mm_inputs``; ``Engine._execute`` adds it to the step's compute).

**Bounds.** Only the image's header is decoded (at most ``HEADER_BYTES``; PNG, JPEG,
GIF, WebP): a claimed size of any magnitude is resized by the formula, never allocated;
the request body is bounded by the HTTP server (64 MiB); at most ``--limit-mm-per-prompt``
images a prompt (vLLM's message past it). URLs that are not ``data:`` URLs are refused
(the simulator fetches nothing).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import struct
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rampwatch.core.errors import UserError
from rampwatch.core.tokenizer import (
    CHAT_GENERATION_PROMPT_TOKENS,
    CHAT_ROLE_IDS,
    CHAT_START_ID,
    VOCAB_SIZE,
    SimTokenizer,
    apply_chat_template,
)

# What an image costs the Qwen2-VL preset (see the module docstring).
PATCH = 14
MERGE = 2
FACTOR = PATCH * MERGE
MIN_PIXELS = 56 * 56
MAX_PIXELS = 28 * 28 * 1280
MAX_ASPECT_RATIO = 200
FRAMING_TOKENS = 2
ENCODER_PARAMS = 675e6
# Processed bytes per placeholder token: MERGE² patches of 3·2·14·14 float32 values
# (Qwen2-VL's pixel_values, temporal patch 2).
CACHE_BYTES_PER_TOKEN = MERGE * MERGE * 3 * 2 * PATCH * PATCH * 4
# The API server's processing of one image (decode, resize, normalise): not calibrated
# against a measurement; of the order of the HF processor on one CPU core.
PROCESS_FIXED_S = 1e-3
PROCESS_S_PER_PIXEL = 10e-9
# vLLM's default --limit-mm-per-prompt for a modality not named, and --mm-processor-cache-gb.
DEFAULT_IMAGE_LIMIT = 999
DEFAULT_CACHE_GB = 4.0
# The most of an image's bytes decoded to find its size (a JPEG's frame header may sit
# behind its metadata segments).
HEADER_BYTES = 64 * 1024
# The most pixels an image may claim: vLLM's VLLM_MAX_IMAGE_PIXELS default (PIL's
# decompression-bomb limit, twice Image.MAX_IMAGE_PIXELS), checked before any processing.
# Without it a header claiming 4e9 x 4e9 costs ~1e11 simulated seconds of the processor's
# queue (processing_s grows with the pixels), and every later image request waits behind it.
MAX_IMAGE_PIXELS = 178_956_970
VISION_START_ID, VISION_END_ID = 9, 10
# The model presets that take images (sim.config.MODEL_PRESETS).
IMAGE_MODELS = ("qwen2-vl-7b",)


class ImageError(ValueError):
    """An image part the simulator refuses; ``param`` names the field, as vLLM does."""

    def __init__(self, message: str, param: str = "image") -> None:
        super().__init__(message)
        self.param = param


def smart_resize(height: int, width: int) -> tuple[int, int]:
    """Qwen2-VL's resize (transformers' ``smart_resize`` with the processor's defaults):
    both sides multiples of 28, the area within [min_pixels, max_pixels]."""
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise ImageError(
            f"absolute aspect ratio must be smaller than {MAX_ASPECT_RATIO}, got {max(height, width) / min(height, width)}"
        )
    h_bar = round(height / FACTOR) * FACTOR
    w_bar = round(width / FACTOR) * FACTOR
    if h_bar * w_bar > MAX_PIXELS:
        beta = math.sqrt((height * width) / MAX_PIXELS)
        h_bar = max(FACTOR, math.floor(height / beta / FACTOR) * FACTOR)
        w_bar = max(FACTOR, math.floor(width / beta / FACTOR) * FACTOR)
    elif h_bar * w_bar < MIN_PIXELS:
        beta = math.sqrt(MIN_PIXELS / (height * width))
        h_bar = math.ceil(height * beta / FACTOR) * FACTOR
        w_bar = math.ceil(width * beta / FACTOR) * FACTOR
    return h_bar, w_bar


def image_tokens(width: int, height: int) -> int:
    """The image's tokens without its two framing tokens: one per 28 × 28 tile."""
    h_bar, w_bar = smart_resize(height, width)
    return (h_bar // FACTOR) * (w_bar // FACTOR)


def prompt_tokens_of(width: int, height: int) -> int:
    """What one image adds to ``usage.prompt_tokens``: its tokens and the framing."""
    return image_tokens(width, height) + FRAMING_TOKENS


@dataclass(frozen=True, slots=True)
class SimImage:
    """One image of a request, as the simulator charges it."""

    width: int
    height: int
    digest: bytes  # of the image's bytes: the processor cache's key
    tokens: int  # placeholder tokens, framing included

    @property
    def encoder_flops(self) -> float:
        return 2.0 * ENCODER_PARAMS * (self.tokens - FRAMING_TOKENS) * MERGE * MERGE

    @property
    def cache_bytes(self) -> int:
        return (self.tokens - FRAMING_TOKENS) * CACHE_BYTES_PER_TOKEN

    @property
    def processing_s(self) -> float:
        return PROCESS_FIXED_S + PROCESS_S_PER_PIXEL * self.width * self.height

    def placeholder_ids(self) -> list[int]:
        """``<|vision_start|>``, the image's tokens (ids drawn from its hash), ``<|vision_end|>``."""
        rng = np.random.default_rng(int.from_bytes(self.digest[:8], "big"))
        pads = rng.integers(11, VOCAB_SIZE, self.tokens - FRAMING_TOKENS).tolist()
        return [VISION_START_ID, *pads, VISION_END_ID]


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the first bytes of a PNG, JPEG, GIF or WebP file."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        kind = data[12:16]
        if kind == b"VP8X":
            return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
        if kind == b"VP8 ":
            w, h = struct.unpack("<HH", data[26:30])
            return w & 0x3FFF, h & 0x3FFF
        if kind == b"VP8L":
            bits = int.from_bytes(data[21:25], "little")
            return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    raise ImageError("cannot identify image file: the simulator reads PNG, JPEG, GIF and WebP")


def _jpeg_size(data: bytes) -> tuple[int, int]:
    i = 2
    while i + 9 <= len(data):
        if data[i] != 0xFF:
            break
        marker = data[i + 1]
        if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return w, h
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    raise ImageError(f"cannot identify image file: no JPEG frame header in its first {HEADER_BYTES} bytes")


def read_image(url: Any) -> SimImage:
    """An ``image_url`` part's URL read: a base64 data URL, its header decoded."""
    if not isinstance(url, str) or not url.startswith("data:"):
        raise ImageError("the simulator takes images as base64 data URLs only (data:image/…;base64,…)")
    head, sep, payload = url.partition(",")
    if not sep or not head.endswith(";base64"):
        raise ImageError("expected a base64 data URL (data:image/…;base64,…)")
    # Whole 4-character groups of the first HEADER_BYTES: the size header, never the pixels.
    prefix = payload[: (HEADER_BYTES // 3) * 4]
    try:
        data = base64.b64decode(prefix[: len(prefix) - len(prefix) % 4], validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("the image's data URL is not valid base64") from None
    width, height = image_size(data)
    if width < 1 or height < 1:
        raise ImageError(f"the image's size is {width} x {height}: empty")
    if width * height > MAX_IMAGE_PIXELS:
        raise ImageError(
            f"Image size ({width * height} pixels) exceeds limit of {MAX_IMAGE_PIXELS} pixels, "
            "could be decompression bomb DOS attack."
        )
    digest = hashlib.blake2b(payload.encode("ascii", "replace"), digest_size=16).digest()
    return SimImage(width, height, digest, prompt_tokens_of(width, height))


def _image_parts(content: Any) -> list[Any]:
    if not isinstance(content, list):
        return []
    urls = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "image_url":
            image_url = part.get("image_url")
            urls.append(image_url.get("url") if isinstance(image_url, dict) else image_url)
    return urls


def has_images(messages: list[Any]) -> bool:
    return any(isinstance(m, dict) and _image_parts(m.get("content")) for m in messages)


def chat_prompt(
    tokenizer: SimTokenizer, messages: list[Any], model_takes_images: bool, limit: int
) -> tuple[list[int], list[SimImage], list[tuple[int, float]]]:
    """A chat prompt's ids with each message's images' placeholders after its text, the
    images, and each one's (first placeholder position, encoder FLOPs). Raises
    ``ImageError`` (vLLM's message past the limit) or ``ValueError`` (a bad message)."""
    if not has_images(messages):
        return apply_chat_template(tokenizer, messages), [], []
    if not model_takes_images:
        raise ImageError(
            "the model takes no images: the simulator's image model is "
            + ", ".join(IMAGE_MODELS)
            + " (rampwatch sim --model qwen2-vl-7b, or --sim-model)"
        )
    ids: list[int] = []
    images: list[SimImage] = []
    inputs: list[tuple[int, float]] = []
    for message in messages:
        framed = apply_chat_template(tokenizer, [message])[:-CHAT_GENERATION_PROMPT_TOKENS]
        ids.extend(framed[:-1])  # the end token after the images
        for url in _image_parts(message.get("content")):
            if len(images) + 1 > limit:
                raise ImageError(f"At most {limit} image(s) may be provided in one prompt.")
            image = read_image(url)
            images.append(image)
            inputs.append((len(ids), image.encoder_flops))
            ids.extend(image.placeholder_ids())
        ids.append(framed[-1])
    ids += [CHAT_START_ID, CHAT_ROLE_IDS["assistant"]]
    return ids, images, inputs


def encoder_flops_in(inputs: list[tuple[int, float]], start: int, end: int) -> float:
    """The encoder FLOPs of the images whose first placeholder token is scheduled in
    ``[start, end)``: each image is encoded once, in the step that reaches it."""
    return sum(flops for position, flops in inputs if start <= position < end)


@dataclass(slots=True)
class ProcessorCache:
    """vLLM's multimodal processor cache (``--mm-processor-cache-gb``): processed items by
    the image's hash, least recently used evicted first; an item larger than the whole
    cache is processed and not kept (as vLLM serves it uncached)."""

    capacity_bytes: int
    used_bytes: int = 0
    items: OrderedDict[bytes, int] = field(default_factory=OrderedDict)

    def lookup(self, image: SimImage) -> bool:
        """True on a hit (the item becomes the most recent); a miss inserts it."""
        if image.digest in self.items:
            self.items.move_to_end(image.digest)
            return True
        size = image.cache_bytes
        if size > self.capacity_bytes:
            return False
        self.items[image.digest] = size
        self.used_bytes += size
        while self.used_bytes > self.capacity_bytes:
            _, evicted = self.items.popitem(last=False)
            self.used_bytes -= evicted
        return False


class Processor:
    """The API server's multimodal processing: one image at a time on its CPU, in arrival
    order; a processor-cache hit costs nothing."""

    def __init__(self, cache_gb: float) -> None:
        # 0 GB: no cache at all (vLLM then counts no queries either).
        self.cache = ProcessorCache(int(cache_gb * 1024**3)) if cache_gb > 0 else None
        self.busy_until = 0.0

    def process(self, images: list[SimImage], now: float) -> tuple[float, int, int]:
        """The simulated seconds until the request's images are processed, and the
        processor cache's queries and hits for them."""
        hits = 0
        work = 0.0
        for image in images:
            if self.cache is not None and self.cache.lookup(image):
                hits += 1
            else:
                work += image.processing_s
        queries = len(images) if self.cache is not None else 0
        if not work:
            return 0.0, queries, hits
        self.busy_until = max(self.busy_until, now) + work
        return self.busy_until - now, queries, hits


def image_limit_of(text: str) -> int:
    """The image limit of ``--limit-mm-per-prompt`` (vLLM's JSON: ``{"image": 2}`` or
    ``{"image": {"count": 2, …}}``; other modalities are accepted and unused); 999, vLLM's
    default, when it names no image limit."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise UserError(f"--limit-mm-per-prompt {text!r}: expected a JSON object such as '{{\"image\": 2}}'")
    limit = value.get("image", DEFAULT_IMAGE_LIMIT)
    if isinstance(limit, dict):
        limit = limit.get("count", DEFAULT_IMAGE_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise UserError(f"--limit-mm-per-prompt {text!r}: the image limit must be an integer >= 0")
    return limit
