"""The content of the committed format-v1 file ``data/v1-tiny.rwrec``.

``python -m tests.record.v1_tiny`` rewrote it once; it must never be regenerated after a
format change: it stands for files written by earlier releases.
"""

from __future__ import annotations

from pathlib import Path

from rampwatch.core.timeline import Event, RequestRecord, RunHeader, ServerSample, Tick

PATH = Path(__file__).parent / "data" / "v1-tiny.rwrec"

HEADER = RunHeader(
    "0.1.0",
    1_795_000_000.0,
    "http://127.0.0.1:8000",
    "tiny",
    "v1-tiny",
    scenario={"name": "v1-tiny"},
    options={"rate": 2},
    planned_duration_s=3.0,
    server_info={"version": "0.32.0"},
    host_info={"cpus": 2},
    metrics_urls=["http://127.0.0.1:8000/metrics"],
)
REQUESTS = [
    RequestRecord(0, 0.1, 0.1002, 0.9, 0.3, [0.35, 0.4, 0.9], 12, 4, True, "length", 200, None, None, "a"),
    RequestRecord(1, 0.6, 0.6, 0.61, None, [], 0, 0, True, None, 500, "http_500", "HTTP 500", None),
    RequestRecord(2, 1.1, 1.1001, 2.5, 1.2, [1.25, 1.3], 30, 3, False, "stop", 200, None, None, "b"),
]
SAMPLES = [
    ServerSample(
        0.5,
        "http://127.0.0.1:8000/metrics",
        True,
        "vllm",
        running=1.0,
        waiting=0.0,
        kv_usage=0.01,
        raw={"vllm:num_requests_running": 1.0},
    )
]
TICKS = [Tick(0.0, 2.0, "ramping", 0, 0), Tick(1.0, 2.0, "ramping", 1, 0), Tick(2.0, 2.0, "holding", 1, 0)]
EVENTS = [Event(0.0, "start", "run started"), Event(1.5, "mark", "look here", {"note": "look here"})]
FINISH_T = 3.0


def write(path: Path = PATH) -> None:
    from rampwatch.record.writer import RecordingWriter

    w = RecordingWriter(path, flush_interval_s=None)
    w.on_start(HEADER)
    for t in TICKS[:2]:
        w.on_tick(t)
    w.on_event(EVENTS[0])
    w.on_scrape(SAMPLES[0])
    w.on_request(REQUESTS[0])
    w.on_request(REQUESTS[1])
    w.flush()
    w.on_tick(TICKS[2])
    w.on_event(EVENTS[1])
    w.on_request(REQUESTS[2])
    w.on_finish(FINISH_T)


if __name__ == "__main__":
    PATH.parent.mkdir(exist_ok=True)
    write()
