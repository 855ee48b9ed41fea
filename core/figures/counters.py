"""Reset-safe deltas of monotonic server counters.

A Prometheus counter only grows while its process lives. When a server restarts, its
counters start again from zero: the value falls, and (for prometheus_client exporters
such as vLLM) the ``<name>_created`` timestamp changes. Across a restart the increase is
the new value itself (everything counted since the restart), which is what
``counter_delta`` returns.
"""

from __future__ import annotations

from rampwatch.core.timeline import ServerSample

COUNTER_FIELDS = (
    "prompt_tokens_total",
    "prompt_tokens_computed_total",
    "generation_tokens_total",
    "prefix_queries_total",
    "prefix_hits_total",
    "preemptions_total",
    "spec_drafts_total",
    "spec_draft_tokens_total",
    "spec_accepted_tokens_total",
    "mm_cache_queries_total",
    "mm_cache_hits_total",
)


def counter_delta(
    prev: float | None,
    cur: float | None,
    prev_created: float | None = None,
    cur_created: float | None = None,
) -> float | None:
    """Increase of a counter between two reads; ``None`` when either read is missing.

    A fall, or a change of the ``_created`` identity, means a reset: the increase is
    then ``cur`` (counted from zero since the restart).
    """
    if prev is None or cur is None:
        return None
    if prev_created is not None and cur_created is not None and prev_created != cur_created:
        return cur
    if cur < prev:
        return cur
    return cur - prev


def sample_deltas(prev: ServerSample, cur: ServerSample) -> dict[str, float | None]:
    """Counter increases between two successful scrapes of the same URL.

    When both scrapes list the same data-parallel engines, the increase is summed per
    engine, so one engine restarting does not hide behind the others' growth.
    """
    out: dict[str, float | None] = {}
    same_engines = bool(prev.per_engine) and prev.per_engine.keys() == cur.per_engine.keys()
    for name in COUNTER_FIELDS:
        if same_engines:
            total: float | None = None
            for engine, values in cur.per_engine.items():
                d = counter_delta(prev.per_engine[engine].get(name), values.get(name))
                if d is not None:
                    total = d if total is None else total + d
            if (
                total is not None
                and prev.created is not None
                and cur.created is not None
                and prev.created != cur.created
            ):
                total = getattr(cur, name)
            out[name] = total
        else:
            out[name] = counter_delta(getattr(prev, name), getattr(cur, name), prev.created, cur.created)
    return out


class CounterTracker:
    """Remembers the last good sample per URL and yields its deltas to the next one."""

    def __init__(self) -> None:
        self._last: dict[str, ServerSample] = {}

    def update(self, sample: ServerSample) -> tuple[float, dict[str, float | None]] | None:
        """``(dt, deltas)`` since the previous good sample of the same URL, else ``None``."""
        if not sample.ok:
            return None
        prev = self._last.get(sample.url)
        self._last[sample.url] = sample
        if prev is None or sample.t <= prev.t:
            return None
        return sample.t - prev.t, sample_deltas(prev, sample)

    def last(self, url: str) -> ServerSample | None:
        return self._last.get(url)

    def latest(self) -> list[ServerSample]:
        return list(self._last.values())
