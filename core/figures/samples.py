"""Several replicas' samples from one poll as one."""

from __future__ import annotations

from collections.abc import Sequence

from rampwatch.core.figures.counters import COUNTER_FIELDS
from rampwatch.core.timeline import ServerSample


def _sum_optional(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def combine_samples(samples: Sequence[ServerSample]) -> ServerSample:
    """One sample for several replicas (one per URL) scraped in the same poll.

    Gauges and counters are summed, KV usage is averaged over the replicas that report
    it. ``per_engine`` keys become ``"<replica index>:<engine>"`` (``"<index>"`` for a
    replica without engine labels). ``raw`` is not merged (each URL's samples are kept
    separately in the recording). Counter deltas must be taken per URL *before*
    combining (``counters.CounterTracker``), so a single replica's restart is seen.
    """
    if not samples:
        raise ValueError("combine_samples needs at least one sample")
    if len(samples) == 1:
        return samples[0]
    good = [s for s in samples if s.ok]
    kinds = {s.backend for s in good}
    errors = [f"{s.url}: {s.error}" for s in samples if not s.ok]
    out = ServerSample(
        t=max(s.t for s in samples),
        url=",".join(s.url for s in samples),
        ok=bool(good),
        backend=kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "unknown"),
        error="; ".join(errors) if errors else None,
        scrape_s=max(s.scrape_s for s in samples),
    )
    for name in ("running", "waiting") + COUNTER_FIELDS:
        setattr(out, name, _sum_optional([getattr(s, name) for s in good]))
    for s in good:  # accepted drafts by position: summed like the counters
        for position, value in s.spec_accepted_by_position.items():
            out.spec_accepted_by_position[position] = out.spec_accepted_by_position.get(position, 0.0) + value
    kv = [s.kv_usage for s in good if s.kv_usage is not None]
    out.kv_usage = sum(kv) / len(kv) if kv else None
    for index, s in enumerate(samples):
        if not s.ok:
            continue
        if s.per_engine:
            for engine, values in s.per_engine.items():
                out.per_engine[f"{index}:{engine}"] = dict(values)
        else:
            out.per_engine[str(index)] = {
                k: v for k in ("running", "waiting", "kv_usage") + COUNTER_FIELDS if (v := getattr(s, k)) is not None
            }
    return out
