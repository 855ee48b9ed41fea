"""A run's image figures: how many images its requests carried (``RequestRecord.images``),
their sizes (the scenario's ``workload.images``, in the header) and the server's
multimodal processor cache hit rate (vLLM's ``vllm:mm_cache_queries`` / ``_hits``).

None of it shows where a run has none of it: ``image_figures`` is None for a run whose
requests carried no images and whose server counted no multimodal cache query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rampwatch.core.timeline import RunHeader


class ImageCounts:
    """Images per completed request, over the requests that carried the field."""

    def __init__(self) -> None:
        self.requests = 0  # completed requests of an image workload (0 images included)
        self.images = 0
        self.max_images = 0

    def add(self, images: Sequence[int | None], ok: Sequence[bool]) -> None:
        for count, succeeded in zip(images, ok, strict=False):
            if count is not None and succeeded:
                self.requests += 1
                self.images += int(count)
                self.max_images = max(self.max_images, int(count))

    def state(self) -> list[int]:
        return [self.requests, self.images, self.max_images]

    def restore(self, state: Sequence[int]) -> None:
        self.requests, self.images, self.max_images = (int(x) for x in state)


def image_sizes(header: RunHeader | None) -> list[str]:
    """The scenario's image sizes, ``WxH`` with their share when several (a mixture's
    classes' too, each size once)."""
    workload = (header.scenario or {}).get("workload") if header is not None else None
    if not isinstance(workload, dict):
        return []
    specs = [c.get("images") for c in workload.get("mix") or [] if isinstance(c, dict)] or [workload.get("images")]
    out: list[str] = []
    for spec in specs:
        sizes = spec.get("sizes") if isinstance(spec, dict) else None
        if not isinstance(sizes, list):
            continue
        for size in sizes:
            try:
                text = f"{int(size['width'])}x{int(size['height'])}"
                if len(sizes) > 1:
                    text += f" ({float(size['weight']) * 100:.0f}%)"
            except (KeyError, TypeError, ValueError):
                continue
            if text not in out:
                out.append(text)
    return out


def mm_cache_figures(totals: dict[str, float]) -> dict[str, Any]:
    """The server's multimodal cache over the run (counter deltas summed), only when it
    counted a query."""
    queries = totals.get("mm_cache_queries_total")
    if not queries:
        return {}
    hits = totals.get("mm_cache_hits_total", 0.0)
    return {"mm_cache_queries": queries, "mm_cache_hits": hits, "mm_cache_hit_pct": hits / queries * 100}


def image_figures(counts: ImageCounts, header: RunHeader | None, server: dict[str, Any]) -> dict[str, Any] | None:
    """The summary's ``images``: images per completed request, their sizes, and the
    multimodal cache hit rate when the server exported it; None when none of it."""
    hit_pct = server.get("mm_cache_hit_pct")
    if not counts.requests and hit_pct is None:
        return None
    out: dict[str, Any] = {}
    if counts.requests:
        out["requests"] = counts.requests
        out["images"] = counts.images
        out["mean_images_per_request"] = counts.images / counts.requests
        out["max_images_per_request"] = counts.max_images
        out["sizes"] = image_sizes(header)
    out["mm_cache_hit_pct"] = hit_pct
    return out


def image_lines(images: dict[str, Any] | None, row: Any) -> list[str]:
    """The summary text's image section (``row(label, value, format)`` is the text's row)."""
    if not images:
        return []
    lines = ["{s:{c}^{n}}".format(s=" Images ", n=50, c="-")]
    if "mean_images_per_request" in images:
        lines.append(row("Images per request (mean):", images["mean_images_per_request"], ".2f"))
        lines.append(row("Images per request (max):", images["max_images_per_request"], "d"))
        if images.get("sizes"):
            lines.append(row("Image size:", ", ".join(images["sizes"]), ""))
    if images.get("mm_cache_hit_pct") is not None:
        lines.append(row("MM cache hit rate (%):", images["mm_cache_hit_pct"], ".1f"))
    return lines
