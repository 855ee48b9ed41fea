"""A long run's memory is bounded by what is in flight, not by the run's length.

The run process's sinks — the run's collector, the series builder and the recording
writer (its buffers and seek checkpoints) — are driven with 6 simulated minutes of a
100 req/s run, ~250 chunks a request (``tests/synthetic.py``), as fast as they go; the
process's RSS is read once per simulated minute. Keeping the records (the old way, and
``RunOptions.keep_records``) grows by ~15 MB a simulated minute (8 bytes a chunk time);
the bound after the first two minutes' warm-up is a small fraction of that.

What it does not check: the HTTP client, the scraper and the UI process (the soak
benchmark, ``bench/bench_soak_rss.py``, measures a real run's RSS), nor runs of hours.
"""

from __future__ import annotations

import numpy as np
import pytest

from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.timeline import FanoutSink
from rampwatch.loadgen.run.result import RunCollector
from rampwatch.record.analysis import summarise
from rampwatch.record.reader import open_recording
from rampwatch.record.writer import RecordingWriter
from tests.synthetic import SyntheticRun, play_synthetic

pytestmark = pytest.mark.slow  # a second or more each

MINUTES = 6
RPS = 100.0
CHUNKS = 250
WARM_UP_MINUTES = 2
# Growth allowed over the 4 minutes after warm-up: what keeping the records takes in
# well under one simulated minute (~15 MB).
GROWTH_BOUND_MB = 8.0


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def drive(path, keep_records: bool = False) -> tuple[list[float], RunCollector]:
    """The run-process sinks fed ``MINUTES`` of synthetic load; RSS at each simulated minute."""
    run = SyntheticRun(
        duration_s=MINUTES * 60, start_rps=RPS, end_rps=RPS, capacity_rps=RPS * 1.5, mean_chunks=CHUNKS, seed=3
    )
    collector = RunCollector(keep_records=keep_records)
    series = SeriesBuilder()
    writer = RecordingWriter(path, flush_interval_s=None)
    curve: list[float] = []

    def on_flush(t: float) -> None:
        writer.flush()
        if t % 60 == 0:
            series.snapshot(t)  # the UI's read, as often as the minute: it must not pile up either
            curve.append(rss_mb())

    play_synthetic(run, FanoutSink(series, collector, writer), on_flush=on_flush)
    writer.close()
    assert writer.error is None
    return curve, collector


def test_run_sinks_memory_stops_growing_after_warm_up(tmp_path):
    curve, collector = drive(tmp_path / "soak.rwrec")
    assert collector.counts.ended > MINUTES * 60 * RPS * 0.9  # the whole load went through, counted
    assert collector.requests == [] and collector.samples == []
    growth = curve[-1] - curve[WARM_UP_MINUTES - 1]  # curve[i]: RSS at the end of minute i + 1
    per_minute = np.round(np.diff(curve), 1).tolist()
    assert growth < GROWTH_BOUND_MB, f"RSS grew {growth:.1f} MB after warm-up; per simulated minute {per_minute}"


# The live figures' stated accuracy (docs/recording-format.md, "Live and final figures"):
# a live percentile is within 1 % of the exact one (1 % log buckets); the recording keeps
# chunk times to 10 µs (docs/recording-format.md, "Precision"), which the absolute slack covers.
LIVE_RELATIVE_ERROR = 0.01
RECORDED_GRID_MS = 0.01


@pytest.mark.parametrize("metric", ["ttft", "itl"])
@pytest.mark.parametrize("p", ["p50", "p90", "p99"])
def test_live_percentiles_are_within_the_stated_error_of_the_final_exact_ones(recorded_ramp, metric, p):
    live, exact = recorded_ramp
    key = f"{p}_{metric}_ms"
    assert exact[key] > 0
    assert live[key] == pytest.approx(exact[key], rel=LIVE_RELATIVE_ERROR, abs=RECORDED_GRID_MS)


@pytest.fixture(scope="module")
def recorded_ramp(tmp_path_factory) -> tuple[dict, dict]:
    """A ramp past the synthetic server's capacity (TTFTs from ~60 ms to seconds, ITLs of
    ~20-30 ms with prefill spikes): the live run-so-far summary a run's series builder
    keeps, and the exact one read back from its recording as the run's end reads it."""
    path = tmp_path_factory.mktemp("ramp") / "ramp.rwrec"
    run = SyntheticRun(duration_s=90, start_rps=10, end_rps=60, capacity_rps=30, mean_chunks=40, seed=5)
    series = SeriesBuilder()
    writer = RecordingWriter(path)
    n = play_synthetic(run, FanoutSink(series, writer))
    writer.close()
    assert n > 3000 and writer.error is None
    return series.snapshot().summary, summarise(open_recording(path)).to_dict()
