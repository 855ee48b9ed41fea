"""A run through a real (local) Ray cluster: `ray start --head` from this venv, a short
ramp with --ray HOST:PORT --workers 2 against the embedded instant simulator, then
`ray stop` whatever happened."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rampwatch.loadgen.run.workers import worker_of
from tests.processes import free_port

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timing, pytest.mark.timeout(120)]

BIN = Path(sys.executable).parent
RAY_ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.fixture
def ray_head():
    """A one-node cluster with 2 CPUs, its workers on this venv's Python."""
    port = free_port()
    # Short: Ray's unix sockets live under it (a socket path has ~107 bytes at most).
    temp_dir = tempfile.mkdtemp(prefix="rw-ray-", dir="/tmp")
    command = [str(BIN / "ray"), "start", "--head", "--num-cpus", "2", "--port", str(port), "--temp-dir", temp_dir]
    command += ["--include-dashboard=false", "--disable-usage-stats"]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=60, env=RAY_ENV)
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([str(BIN / "ray"), "stop", "--force"], capture_output=True, timeout=60, env=RAY_ENV)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_a_ramp_through_two_ray_actors(ray_head, tmp_path):
    from rampwatch.record.reader import open_recording

    recording = tmp_path / "ray.rwrec"
    argv = ["run", "chat", "--ray", ray_head, "--workers", "2", "--headless", "--duration", "4"]
    argv += ["--sim-hardware", "instant", "--sim-model", "tiny", "--record", str(recording), "--progress-interval", "2"]
    proc = subprocess.run([str(BIN / "rampwatch"), *argv], capture_output=True, text=True, timeout=90, env=RAY_ENV)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]

    # the clock offsets, reported before the load
    offsets = re.search(r"^Ray: 2 workers on 1 node; clock offsets .+ ([+-]\d+\.\d+) ms \(±", proc.stdout, re.M)
    assert offsets is not None, proc.stdout
    assert abs(float(offsets.group(1))) < 10.0  # one host: one clock

    with open_recording(recording) as rec:
        header, requests, events = rec.header, rec.requests, rec.events
        assert rec.finished and not rec.warnings
        # Each actor's loop gives a lag sample per 5 ms: the ticks carry the two actors'.
        lag_samples = sum(c for t in rec.ticks for _, c in (t.loop_lag or []))
        assert lag_samples > 1.2 * rec.duration_s / 0.005
        assert rec.ticks[-1].client_counts is not None and rec.ticks[-1].client_counts["collections"][2] == 0
    ids = sorted(r.id for r in requests)
    assert len(ids) >= 10 and ids == list(range(len(ids)))  # none lost
    assert all(r.ok for r in requests), [r.error for r in requests if not r.ok][:3]
    workers = header.host_info["workers"]
    assert [w["worker"] for w in workers] == [0, 1] and all(w["transport"] == "ray" for w in workers)
    assert all(abs(w["clock_offset_ms"]) < 10.0 and w["ip"] for w in workers)
    info = [e for e in events if e.kind == "info" and "ray_workers" in e.data]
    assert len(info) == 1 and "clock offsets from this host" in info[0].message

    # each actor sent its share, by its own count
    sent = re.search(r"^Ray workers sent: worker 0 on .+?: (\d+), worker 1 on .+?: (\d+)$", proc.stdout, re.M)
    assert sent is not None, proc.stdout
    share = [sum(1 for i in ids if worker_of(i, 2) == w) for w in (0, 1)]
    assert [int(sent.group(1)), int(sent.group(2))] == share and min(share) > 0
