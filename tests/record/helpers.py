"""Shared helpers for recording tests: a sink that captures the stream, a fake builder."""

from __future__ import annotations

from rampwatch.core.timeline import Event, RequestRecord, RunHeader, ServerSample, Snapshot, Tick


class CaptureSink:
    def __init__(self) -> None:
        self.header: RunHeader | None = None
        self.requests: list[RequestRecord] = []
        self.samples: list[ServerSample] = []
        self.ticks: list[Tick] = []
        self.events: list[Event] = []
        self.finish_t: float | None = None

    def on_start(self, header):
        self.header = header

    def on_request(self, record):
        self.requests.append(record)

    def on_scrape(self, sample):
        self.samples.append(sample)

    def on_tick(self, tick):
        self.ticks.append(tick)

    def on_event(self, event):
        self.events.append(event)

    def on_finish(self, t):
        self.finish_t = t


class FedLog:
    """A stand-in series builder that remembers what it was fed (picklable)."""

    def __init__(self) -> None:
        self.header = None
        self.fed: list[tuple[str, float]] = []

    def on_start(self, header):
        self.header = header

    def on_request(self, r):
        self.fed.append(("request", r.end_at))

    def on_scrape(self, s):
        self.fed.append(("sample", s.t))

    def on_tick(self, t):
        self.fed.append(("tick", t.t))

    def on_event(self, e):
        self.fed.append(("event", e.t))

    def on_finish(self, t):
        pass

    def snapshot(self, now=None):
        return Snapshot(
            t=now,
            header=self.header,
            state="replay",
            target_rps=0.0,
            times=[],
            series={},
            in_flight=0,
            events=[],
            summary={"fed": list(self.fed)},
            server_metrics_available=True,
        )


def assert_request_close(a: RequestRecord, b: RequestRecord, *, time_tol=1e-6, chunk_tol=1e-5) -> None:
    """Request times are stored to 1 µs, chunk times to 10 µs (rounded: half a quantum)."""
    assert a.id == b.id
    for name in ("scheduled_at", "sent_at", "end_at"):
        assert abs(getattr(a, name) - getattr(b, name)) <= time_tol, name
    assert (a.first_token_at is None) == (b.first_token_at is None)
    if a.first_token_at is not None:
        assert abs(a.first_token_at - b.first_token_at) <= time_tol
    assert len(a.chunk_times) == len(b.chunk_times)
    for x, y in zip(a.chunk_times, b.chunk_times):
        assert abs(x - y) <= chunk_tol
    for name in (
        "prompt_tokens",
        "completion_tokens",
        "tokens_from_usage",
        "finish_reason",
        "status",
        "error_class",
        "error",
        "scenario_tag",
        "request_class",
        "session",
        "turn",
        "cached_tokens",
    ):
        assert getattr(a, name) == getattr(b, name), name
