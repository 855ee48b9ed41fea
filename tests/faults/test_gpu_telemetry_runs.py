"""GPU telemetry in whole runs, as a user runs them: `rampwatch run` in a subprocess against
a simulator that serves DCGM gauges (`--gpu-telemetry`), a GPU URL that fails, and a host
without a GPU (a fake pynvml on the path whose NVML does not start)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rampwatch.app.session import serving_sim
from rampwatch.sim.config import SimConfig
from rampwatch.sim.gpu_telemetry import DCGM_PATH

REPO = Path(__file__).resolve().parents[2]
RUN = ("chat", "--headless", "--duration", "4", "--start-rps", "2", "--end-rps", "4", "--seed", "3")
RUN += ("--set", "workload.input_tokens=64", "--set", "workload.output_tokens=32", "--progress-interval", "1")


def rampwatch(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.fixture(scope="module")
def gpu_sim():
    # a real model preset, so steps take simulated time and the GPU is busy part of it
    with serving_sim(SimConfig(hardware="l4", model="llama-3.1-8b-fp8", gpu_telemetry=True)) as sim:
        yield sim.url


def trapezoid_energy_j(samples) -> float:
    """∫ power dt, computed here on its own: each source's good samples, power summed over its GPUs."""
    energy = 0.0
    for url in {s.url for s in samples}:
        points = sorted((s.t, sum(g["power_w"] for g in s.gpus.values())) for s in samples if s.url == url and s.ok)
        energy += sum((p0 + p1) / 2 * (t1 - t0) for (t0, p0), (t1, p1) in zip(points, points[1:]))
    return energy


@pytest.mark.slow
def test_a_run_reads_records_and_replays_the_gpu_series_and_reports_tokens_per_joule(gpu_sim, tmp_path):
    from rampwatch.record.reader import open_recording
    from rampwatch.record.replay import ReplayTimeline

    recording, result_json = tmp_path / "gpu.rwrec", tmp_path / "gpu.json"
    gpu_url = gpu_sim + DCGM_PATH
    proc = rampwatch(
        "run",
        *RUN,
        "--target",
        gpu_sim,
        "--gpu",
        "off",
        "--gpu-metrics-url",
        gpu_url,
        "--record",
        str(recording),
        "--result-json",
        str(result_json),
    )
    assert proc.returncode == 0, proc.stderr
    assert f"GPU telemetry from {gpu_url}" in proc.stdout
    assert any(" | GPU " in line and " W" in line for line in proc.stdout.splitlines() if line.startswith("["))

    with open_recording(recording) as rec:
        header, samples = rec.header, rec.samples
        gpu_samples = [s for s in samples if s.is_gpu]
        replay = ReplayTimeline(rec, warm_up=False)
        replay.seek(rec.duration_s)
        snap = replay.snapshot()
        output_tokens = sum(r.completion_tokens for r in rec.requests if r.ok)
    assert header.gpu_sources == [gpu_url]
    assert len(gpu_samples) >= 4 and all(s.ok and s.backend == "dcgm" and list(s.gpus) == ["0"] for s in gpu_samples)
    # the server's own samples are still vLLM's
    assert all(s.backend == "vllm" for s in samples if not s.is_gpu)
    # the replay rebuilds the GPU series from the recorded samples
    power = [v for v in snap.series["gpu_power_w"] if not math.isnan(v)]
    util = [v for v in snap.series["gpu_util_pct"] if not math.isnan(v)]
    assert len(power) >= 3 and all(16.0 <= p <= 72.0 for p in power)  # the l4 preset: idle 16 W, TDP 72 W
    assert max(util) > 0 and snap.last_good_gpu_t is not None and "0" in snap.gpus

    result = json.loads(result_json.read_text())
    energy = trapezoid_energy_j(gpu_samples)
    assert energy > 0 and result["total_output_tokens"] == output_tokens > 0
    assert result["rampwatch_tokens_per_joule"] == pytest.approx(output_tokens / energy, rel=1e-6)
    assert result["rampwatch_energy_wh"] == pytest.approx(energy / 3600, rel=1e-6)
    assert "Output tokens per joule:" in proc.stdout and "GPU energy (Wh):" in proc.stdout
    assert "GPU (DCGM)" in proc.stdout  # a page at a URL of the user's: the run cannot tell it is simulated

    report = rampwatch("report", str(recording))
    assert report.returncode == 0, report.stderr
    line = next(line for line in report.stdout.splitlines() if line.startswith("Output tokens per joule:"))
    assert float(line.split(":")[1]) == pytest.approx(output_tokens / energy, abs=0.0005)


@pytest.mark.slow
def test_a_failing_gpu_url_is_an_event_and_the_run_goes_on(gpu_sim, tmp_path):
    from rampwatch.record.reader import open_recording

    recording = tmp_path / "down.rwrec"
    dead = gpu_sim + "/no-such-exporter"
    proc = rampwatch("run", *RUN, "--target", gpu_sim, "--gpu-metrics-url", dead, "--record", str(recording))
    assert proc.returncode == 0, proc.stderr  # as with a failing --metrics-url
    assert "Traceback" not in proc.stderr and "Successful requests:" in proc.stdout
    assert "Output tokens per joule:" not in proc.stdout and "Mean GPU utilization (%)" not in proc.stdout
    with open_recording(recording) as rec:
        errors = [e for e in rec.events if e.kind == "scrape_error"]
        failed = [s for s in rec.samples if s.is_gpu]
        server_ok = [s for s in rec.samples if not s.is_gpu and s.ok]
    assert [e.message for e in errors] == [f"{dead}: HTTP 404"]  # once, not once per scrape
    assert len(failed) >= 3 and not any(s.ok for s in failed)
    assert server_ok  # the server's /metrics unaffected


@pytest.mark.slow
def test_no_gpu_on_this_host_hides_the_panel_with_one_info_line(gpu_sim, tmp_path):
    """--gpu auto against a local target reads NVML; this host's NVML does not start."""
    from rampwatch.record.reader import open_recording

    fake = tmp_path / "fake_nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(
        "class NVMLError(Exception):\n    pass\n\ndef nvmlInit():\n    raise NVMLError('Driver Not Loaded')\n"
    )
    recording = tmp_path / "nogpu.rwrec"
    env = {**__import__("os").environ, "PYTHONPATH": str(fake)}
    proc = rampwatch("run", *RUN, "--target", gpu_sim, "--record", str(recording), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "Mean GPU utilization (%)" not in proc.stdout
    assert "GPU telemetry from" not in proc.stdout  # the banner claims no source it lacks
    with open_recording(recording) as rec:
        infos = [e.message for e in rec.events if e.kind == "info"]
        assert not any(s.is_gpu for s in rec.samples) and rec.header.gpu_sources == []
    assert "no NVIDIA GPU: NVML did not start (Driver Not Loaded): GPU panel hidden" in infos


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8000", True),
        ("http://localhost:8000", True),
        ("http://[::1]:8000", True),
        ("http://127.0.1.1", True),
        ("http://10.0.0.7:8000", False),
        ("https://gpu-box.example.com", False),
    ],
)
def test_is_local_host(url, local):
    from rampwatch.app.session import is_local_host

    assert is_local_host(url) is local


def test_this_hosts_own_name_is_local():
    import socket

    from rampwatch.app.session import is_local_host

    assert is_local_host(f"http://{socket.gethostname()}:8000")


@pytest.mark.parametrize(
    ("mode", "urls", "target", "nvml", "dcgm", "note"),
    [
        ("auto", [], "http://127.0.0.1:8000", True, [], None),
        # a named exporter is the source: NVML of the same GPUs would count their power twice
        (
            "auto",
            ["http://127.0.0.1:9400/metrics"],
            "http://127.0.0.1:8000",
            False,
            ["http://127.0.0.1:9400/metrics"],
            None,
        ),
        ("nvml", ["http://h:9400/metrics"], "http://127.0.0.1:8000", True, ["http://h:9400/metrics"], None),
        ("auto", [], "http://10.0.0.7:8000", False, [], "the target is not on this host"),
        (
            "auto",
            ["http://10.0.0.7:9400/metrics"],
            "http://10.0.0.7:8000",
            False,
            ["http://10.0.0.7:9400/metrics"],
            None,
        ),
        ("auto", [], None, False, [], "the embedded simulator has none (--gpu sim simulates one)"),
        ("nvml", [], "http://10.0.0.7:8000", True, [], None),
        ("nvml", [], None, True, [], None),
        ("off", [], "http://127.0.0.1:8000", False, [], None),
        ("off", ["http://h:9400/metrics"], "http://127.0.0.1:8000", False, ["http://h:9400/metrics"], None),
        ("sim", [], None, False, [], None),  # the embedded simulator's page is added once it has a URL
    ],
)
def test_where_gpu_telemetry_comes_from(mode, urls, target, nvml, dcgm, note):
    from rampwatch.app.session import gpu_telemetry

    plan = gpu_telemetry(mode, urls, target, nvml_check=lambda: None)  # a host where NVML opens
    assert plan.nvml is nvml and plan.dcgm_urls == dcgm and plan.simulated is (mode == "sim")
    if note is None:
        assert plan.note is None
    else:
        assert note in plan.note and plan.note.endswith("GPU panel hidden")


@pytest.mark.parametrize(("mode", "nvml"), [("auto", False), ("nvml", True)])
def test_auto_reads_nvml_only_where_it_opens_and_says_why_not(mode, nvml):
    from rampwatch.app.session import gpu_telemetry

    plan = gpu_telemetry(mode, [], "http://127.0.0.1:8000", nvml_check=lambda: "no NVIDIA GPU: NVML sees none")
    assert plan.nvml is nvml  # --gpu nvml asked for it: the run says why it got none
    if mode == "auto":
        assert plan.note == "no NVIDIA GPU: NVML sees none: GPU panel hidden"


@pytest.mark.slow
def test_bad_gpu_flags_are_one_line(gpu_sim):
    proc = rampwatch("run", *RUN, "--target", gpu_sim, "--gpu", "sim", "--no-record")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "--gpu sim: only with the embedded simulator (no --target); a `rampwatch sim --gpu-telemetry` "
            "elsewhere is read with --gpu-metrics-url URL/dcgm/metrics"
        )
    )
    proc = rampwatch("run", *RUN, "--target", gpu_sim, "--gpu-metrics-url", "gpu-node:9400/metrics", "--no-record")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--gpu-metrics-url 'gpu-node:9400/metrics': expected an http:// or https:// URL" in proc.stderr


@pytest.mark.slow
def test_the_embedded_simulators_gpu_figures_are_headed_simulated(tmp_path):
    from rampwatch.record.reader import open_recording

    recording = tmp_path / "simgpu.rwrec"
    proc = rampwatch("run", *RUN, "--gpu", "sim", "--record", str(recording))
    assert proc.returncode == 0, proc.stderr
    headings = [line.strip("-") for line in proc.stdout.splitlines() if line.startswith("---")]
    assert "GPU (simulated, not measured)" in headings and not any("NVML" in h or "DCGM" in h for h in headings)
    with open_recording(recording) as rec:
        assert rec.header.gpu_simulated
    report = rampwatch("report", str(recording))
    assert "GPU (simulated, not measured)" in report.stdout
