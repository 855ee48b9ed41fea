"""GPU telemetry: a DCGM exporter's page, NVML through a fake pynvml, the GPU series, and
the energy behind tokens per joule."""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from rampwatch.core.figures.gpu import NVML_URL, combine_gpus, gpu_aggregates
from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.figures.summary import GpuTotals, format_summary, gpu_figures, summarise_requests, tokens_per_joule
from rampwatch.core.timeline import GPU_SERIES, RunHeader, ServerSample
from rampwatch.loadgen.server.gpu import NvmlReader, NvmlUnavailable
from rampwatch.loadgen.server.scrape import parse_dcgm
from rampwatch.record.checkpoint import read_checkpoint

DCGM_PAGE = Path(__file__).resolve().parents[2] / "data" / "dcgm_exporter_2xh100.txt"


# -- DCGM ---------------------------------------------------------------------------------


def test_a_dcgm_exporter_page_gives_each_gpu_its_gauges_in_their_units():
    sample = parse_dcgm(DCGM_PAGE.read_text(), "http://gpu-node-07:9400/metrics", 12.5)
    assert sample.ok and sample.is_gpu and sample.backend == "dcgm" and sample.t == 12.5
    # %, MiB, W and MHz as the exporter writes them; other counters (temperatures, energy,
    # PCIe, XID...) are not read
    assert sample.gpus == {
        "0": {
            "sm_clock_mhz": 1980.0,
            "power_w": 412.537,
            "util_pct": 87.0,
            "mem_free_mib": 1393.0,
            "mem_used_mib": 79258.0,
        },
        "1": {
            "sm_clock_mhz": 1755.0,
            "power_w": 389.102,
            "util_pct": 64.0,
            "mem_free_mib": 1401.0,
            "mem_used_mib": 79250.0,
        },
    }
    assert sample.raw == {} and sample.running is None  # nothing of a server's /metrics


@pytest.mark.parametrize(
    ("page", "error"),
    [
        ("vllm:num_requests_running 3\n", "no DCGM_FI_DEV_* GPU gauges on the page (not a DCGM exporter?)"),
        ("", "no DCGM_FI_DEV_* GPU gauges on the page (not a DCGM exporter?)"),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} lots\n', "unparsable DCGM page"),
    ],
)
def test_a_page_without_dcgm_gauges_is_a_failed_gpu_sample(page, error):
    sample = parse_dcgm(page, "http://h:9400/metrics", 1.0)
    assert not sample.ok and sample.is_gpu and sample.error.startswith(error)


def test_gpu_ids_sort_as_numbers_and_hostile_labels_are_made_safe():
    page = "".join(f'DCGM_FI_DEV_POWER_USAGE{{gpu="{i}"}} {100 + i}\n' for i in (10, 2, 0, 1))
    page += 'DCGM_FI_DEV_POWER_USAGE{gpu="\x1b[2Jevil"} 5\n'
    sample = parse_dcgm(page, "u", 0.0)
    assert list(sample.gpus)[:4] == ["0", "1", "2", "10"]
    assert all("\x1b" not in gpu for gpu in sample.gpus)


# -- aggregates -----------------------------------------------------------------------------


def test_gpu_aggregates_average_util_and_clock_and_sum_power_and_memory():
    gpus = {
        "0": {"util_pct": 80.0, "power_w": 400.0, "mem_used_mib": 2048.0, "sm_clock_mhz": 1980.0},
        "1": {"util_pct": 40.0, "power_w": 300.0, "mem_used_mib": 1024.0, "sm_clock_mhz": 1500.0},
        "2": {"util_pct": 0.0},  # a GPU that reports only its utilisation
    }
    assert gpu_aggregates(gpus) == {
        "gpu_util_pct": pytest.approx(40.0),
        "gpu_power_w": 700.0,
        "gpu_mem_used_gib": 3.0,
        "gpu_sm_clock_mhz": 1740.0,
    }
    assert gpu_aggregates({}) == {}


def test_gpus_of_several_sources_are_told_apart_by_source():
    a = ServerSample(t=0, url="a", ok=True, backend="dcgm", gpus={"0": {"power_w": 1.0}})
    b = ServerSample(t=0, url="b", ok=True, backend="dcgm", gpus={"0": {"power_w": 2.0}})
    assert combine_gpus([a]) == {"0": {"power_w": 1.0}}
    assert combine_gpus([a, b]) == {"0:0": {"power_w": 1.0}, "1:0": {"power_w": 2.0}}


# -- energy and tokens per joule --------------------------------------------------------------


def gpu_sample(t: float, *powers: float, url: str = "dcgm", ok: bool = True) -> ServerSample:
    gpus = {str(i): {"power_w": p, "util_pct": 50.0, "mem_used_mib": 1024.0} for i, p in enumerate(powers)}
    return ServerSample(t=t, url=url, ok=ok, backend="dcgm", gpus=gpus if ok else {}, error=None if ok else "down")


@pytest.mark.parametrize(
    ("samples", "energy_j"),
    [
        # constant 100 W over 10 s
        ([gpu_sample(0, 100), gpu_sample(10, 100)], 1000.0),
        # a ramp 0 -> 200 W: the trapezoid is exact for a straight line
        ([gpu_sample(t, 20.0 * t) for t in range(11)], 1000.0),
        # two GPUs of one source are summed at each sample
        ([gpu_sample(0, 100, 50), gpu_sample(2, 100, 50)], 300.0),
        # two sources are integrated each on its own samples, then added
        (
            [
                gpu_sample(0, 100, url="a"),
                gpu_sample(1, 10, url="b"),
                gpu_sample(4, 100, url="a"),
                gpu_sample(5, 10, url="b"),
            ],
            440.0,
        ),
        # a failed sample is bridged by the line between the good ones around it
        ([gpu_sample(0, 100), gpu_sample(1, 0, ok=False), gpu_sample(4, 300)], 800.0),
    ],
)
def test_energy_is_the_trapezoid_integral_of_power(samples, energy_j):
    totals = GpuTotals()
    for s in samples:
        totals.add(s)
    assert totals.figures()["energy_j"] == pytest.approx(energy_j)
    assert gpu_figures(list(reversed(samples)))["energy_j"] == pytest.approx(energy_j)  # sorted by time first


def test_without_power_there_is_no_energy_and_no_tokens_per_joule():
    no_power = ServerSample(t=0, url="nvml", ok=True, backend="nvml", gpus={"0": {"util_pct": 5.0}})
    figures = gpu_figures(
        [no_power, ServerSample(t=5, url="nvml", ok=True, backend="nvml", gpus={"0": {"util_pct": 7.0}})]
    )
    assert figures["energy_j"] is None and figures["mean_util_pct"] == 6.0
    assert gpu_figures([]) == {} and gpu_figures([ServerSample(t=0, url="x", ok=True)]) == {}
    assert tokens_per_joule(1000, None) is None and tokens_per_joule(1000, 0.0) is None
    assert tokens_per_joule(1000, 250.0) == 4.0


def test_the_summary_has_tokens_per_joule_and_energy_in_wh_only_with_power():
    from rampwatch.core.timeline import RequestRecord

    records = [
        RequestRecord(id=i, scheduled_at=i, sent_at=i, end_at=i + 1.0, first_token_at=i + 0.1, completion_tokens=100)
        for i in range(5)
    ]
    samples = [gpu_sample(t, 360.0) for t in range(0, 11)]  # 360 W for 10 s = 3600 J = 1 Wh
    with_power = summarise_requests(None, records, samples, [])
    d = with_power.to_dict()
    assert d["tokens_per_joule"] == pytest.approx(500 / 3600.0) and d["energy_wh"] == pytest.approx(1.0)
    assert d["gpu"]["gpus"] == 1 and d["gpu"]["mean_power_w"] == pytest.approx(360.0)
    text = format_summary(with_power)
    assert "Output tokens per joule:" in text and "GPU energy (Wh):" in text
    # the server's own figures are not fed GPU samples
    assert d["server"]["available"] is False and d["server"]["backend"] is None

    without = summarise_requests(None, records, [], []).to_dict()
    assert without["tokens_per_joule"] is None and without["energy_wh"] is None and without["gpu"] == {}
    assert "GPU" not in format_summary(summarise_requests(None, records, [], []))


# -- the series -------------------------------------------------------------------------------


def header() -> RunHeader:
    return RunHeader("0", 0.0, "http://t", "m", "s", options={"scrape_interval": 1.0})


def test_gpu_samples_make_the_gpu_series_and_not_the_servers():
    b = SeriesBuilder()
    b.on_start(header())
    b.on_scrape(ServerSample(t=0.5, url="http://t/metrics", ok=True, running=3.0))
    for t in range(1, 6):
        b.on_scrape(gpu_sample(t + 0.2, 100.0 * t, 50.0))
    b.on_finish(6.0)
    snap = b.snapshot()
    assert snap.series["gpu_power_w"][1:6] == [150.0, 250.0, 350.0, 450.0, 550.0]
    assert math.isnan(snap.series["gpu_power_w"][0])
    assert snap.series["gpu_util_pct"][3] == 50.0 and snap.series["gpu_mem_used_gib"][3] == 2.0
    assert snap.last_good_gpu_t == 5.2 and snap.gpus == {
        "0": {"power_w": 500.0, "util_pct": 50.0, "mem_used_mib": 1024.0},
        "1": {"power_w": 50.0, "util_pct": 50.0, "mem_used_mib": 1024.0},
    }
    # the server's staleness and gauges are its own
    assert snap.last_good_scrape_t == 0.5 and snap.series["running"][0] == 3.0
    assert snap.summary["gpu"]["energy_j"] == pytest.approx(
        sum((100 * t + 50 + 100 * (t + 1) + 50) / 2 for t in range(1, 5))
    )


def test_a_failing_gpu_source_is_a_gpu_scrape_error_line():
    b = SeriesBuilder()
    b.on_start(header())
    b.on_scrape(ServerSample(t=1.0, url="http://t/metrics", ok=True, running=1.0))
    b.on_scrape(
        ServerSample(t=1.0, url="http://gpu:9400/metrics", ok=False, backend="dcgm", error="connection refused")
    )
    snap = b.snapshot()
    [line] = snap.scrape_errors
    assert line.gpu and line.url == "http://gpu:9400/metrics"
    assert snap.last_good_gpu_t is None and snap.gpus == {}  # no GPU data: the panel stays hidden


def test_a_source_gone_stale_drops_out_of_the_sums():
    b = SeriesBuilder()
    b.on_start(header())
    b.on_scrape(gpu_sample(1.0, 100.0, url="a"))
    b.on_scrape(gpu_sample(1.1, 10.0, url="b"))
    b.on_scrape(gpu_sample(9.0, 100.0, url="a"))  # b last answered 7.9 s ago (stale after 3 s)
    b.on_finish(10.0)
    assert b.snapshot().series["gpu_power_w"][1] == 110.0
    assert b.snapshot().series["gpu_power_w"][9] == 100.0


def test_gpu_state_survives_a_checkpoint_and_old_checkpoints_have_none():
    b = SeriesBuilder()
    b.on_start(header())
    for t in range(1, 4):
        b.on_scrape(gpu_sample(float(t), 100.0))
    b.on_scrape(ServerSample(t=3.5, url="g", ok=False, backend="dcgm", error="timeout after 2 s"))
    meta, arrays = b.export_state()
    restored = SeriesBuilder.from_state(b.header, meta, arrays)
    for s in (b, restored):
        s.on_scrape(gpu_sample(4.0, 200.0))
        s.on_finish(5.0)
    one, two = b.snapshot(), restored.snapshot()
    for name in GPU_SERIES:
        np.testing.assert_array_equal(one.series[name], two.series[name])
    assert one.summary["gpu"] == two.summary["gpu"] and one.gpus == two.gpus
    assert two.scrape_errors[0].gpu and two.last_good_gpu_t == 4.0

    # a checkpoint written before GPU telemetry: no GPU keys, no GPU arrays
    meta, arrays = SeriesBuilder().export_state()
    for key in ("gpu_latest", "last_good_gpu_t", "gpu_totals"):
        del meta[key]
    meta["last"] = [spec for spec in meta["last"] if spec[0] not in GPU_SERIES]
    meta["scrape_errors"] = [["u", "m", 1, 0.0, 0.0]]
    old = read_checkpoint(None, meta, {k: v for k, v in arrays.items() if not k.startswith("last.gpu")})
    old.on_finish(2.0)
    snap = old.snapshot()
    assert snap.last_good_gpu_t is None and snap.gpus == {} and not snap.scrape_errors[0].gpu
    assert all(math.isnan(v) for v in snap.series["gpu_power_w"]) and snap.summary["tokens_per_joule"] is None


# -- NVML through a fake pynvml ------------------------------------------------------------


class FakeNVMLError(Exception):
    pass


def fake_pynvml(gpus: list[dict], init_error: str | None = None) -> types.ModuleType:
    """A module with pynvml's names and units: memory in bytes, power in mW."""
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = FakeNVMLError
    nvml.NVML_CLOCK_SM = 1
    nvml.calls = []

    def init():
        if init_error:
            raise FakeNVMLError(init_error)
        nvml.calls.append("init")

    def get(field):
        def read(handle, *args):
            value = gpus[handle][field]
            if isinstance(value, Exception):
                raise value
            return value

        return read

    nvml.nvmlInit = init
    nvml.nvmlShutdown = lambda: nvml.calls.append("shutdown")
    nvml.nvmlDeviceGetCount = lambda: len(gpus)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=get("util")(h), memory=0)
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=get("used")(h), free=get("free")(h), total=0)
    nvml.nvmlDeviceGetPowerUsage = get("power_mw")
    nvml.nvmlDeviceGetClockInfo = lambda h, clock: get("sm")(h) if clock == nvml.NVML_CLOCK_SM else 0
    return nvml


H100 = {"util": 93, "used": 75 * 2**30, "free": 5 * 2**30, "power_mw": 612_345, "sm": 1980}


def test_nvml_absent_library_is_a_reason_not_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    with pytest.raises(NvmlUnavailable, match=r"nvidia-ml-py is not installed \(pip install 'rampwatch\[gpu\]'\)"):
        NvmlReader.open()


def test_nvml_init_error_is_no_gpu(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], init_error="NVML Shared Library Not Found"))
    with pytest.raises(NvmlUnavailable, match=r"^no NVIDIA GPU: NVML did not start \(NVML Shared Library Not Found\)$"):
        NvmlReader.open()


def test_nvml_without_devices_is_no_gpu_and_shuts_nvml_down(monkeypatch):
    nvml = fake_pynvml([])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with pytest.raises(NvmlUnavailable, match="no NVIDIA GPU: NVML sees none"):
        NvmlReader.open()
    assert nvml.calls == ["init", "shutdown"]


def test_nvml_two_gpus_in_rampwatch_units(monkeypatch):
    second = {**H100, "util": 10, "power_mw": FakeNVMLError("Not Supported")}  # no power reading
    nvml = fake_pynvml([H100, second])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    reader = NvmlReader.open()
    assert reader.gpu_count == 2
    sample = reader.read(3.0)
    assert sample.ok and sample.is_gpu and sample.url == NVML_URL and sample.t == 3.0
    assert sample.gpus["0"] == {
        "util_pct": 93.0,
        "mem_used_mib": 75 * 1024.0,
        "mem_free_mib": 5 * 1024.0,
        "power_w": 612.345,
        "sm_clock_mhz": 1980.0,
    }
    assert "power_w" not in sample.gpus["1"] and sample.gpus["1"]["util_pct"] == 10.0
    reader.close()
    assert nvml.calls[-1] == "shutdown"


def test_nvml_gpu_answering_nothing_fails_the_sample(monkeypatch):
    lost = {k: FakeNVMLError("GPU is lost") for k in H100}
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([lost]))
    sample = NvmlReader.open().read(1.0)
    assert not sample.ok and sample.is_gpu and sample.error == "NVML: GPU 0 util_pct: GPU is lost"


async def test_nvml_is_polled_off_the_loop(monkeypatch):
    import asyncio
    import threading

    from rampwatch.loadgen.server.gpu import poll_nvml

    nvml = fake_pynvml([H100])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    reader = NvmlReader.open()
    loop_thread = threading.get_ident()
    read_threads = []
    original = reader.read

    def read(t):
        read_threads.append(threading.get_ident())
        return original(t)

    reader.read = read
    samples: list[ServerSample] = []
    got_three = asyncio.Event()

    def on_sample(sample):
        samples.append(sample)
        if len(samples) == 3:
            got_three.set()

    task = asyncio.create_task(poll_nvml(reader, 0.01, lambda: asyncio.get_running_loop().time(), on_sample))
    await asyncio.wait_for(got_three.wait(), 10)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert all(s.ok and s.gpus["0"]["power_w"] == 612.345 for s in samples)
    assert read_threads and loop_thread not in read_threads  # NVML blocks: never on the loop
    assert nvml.calls == ["init"]  # still open: the run closes it once the poll is over


async def test_a_gpu_url_is_scraped_by_the_metrics_poller_redacted_and_marked_as_gpu():
    import aiohttp

    from rampwatch.loadgen.server.scrape import MetricsPoller

    url = "http://admin:hunter2@127.0.0.1:1/metrics"  # nothing listens on port 1
    poller = MetricsPoller([], dcgm_urls=[url], timeout_s=2.0)
    async with aiohttp.ClientSession() as session:
        sample = await poller.scrape_once(session, url)
    assert not sample.ok and sample.is_gpu and sample.error == "connection refused"
    assert sample.url == "http://<redacted>@127.0.0.1:1/metrics" and "hunter2" not in repr(sample)


@pytest.mark.slow
async def test_a_run_reads_nvml_beside_the_load_and_shuts_it_down_after(monkeypatch):
    from rampwatch.sim.server import serve
    from tests.loadgen.run.test_runner import INSTANT, ListSink, make_run, scenario

    nvml = fake_pynvml([H100, {**H100, "power_mw": 100_000}])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    sink = ListSink()
    async with serve(INSTANT) as url:
        run = make_run(url, scenario({"kind": "constant", "rate": 4, "duration_s": 1.0}), sink, gpu_nvml=True)
        result = await run.execute()
    header = sink.of("start")[0]
    gpu = [s for s in sink.of("scrape") if s.is_gpu]
    assert header.gpu_sources == [NVML_URL]
    assert len(gpu) >= 3 and all(s.ok and s.url == NVML_URL and len(s.gpus) == 2 for s in gpu)
    assert gpu == [s for s in result.samples if s.is_gpu]  # recorded with the rest
    assert not [e for e in sink.of("event") if e.kind in ("info", "scrape_error")]
    assert nvml.calls == ["init", "shutdown"]  # closed once, when the run is over
    assert run.series.snapshot().series["gpu_power_w"][0] == pytest.approx(712.345)


@pytest.mark.slow
async def test_a_run_without_nvml_says_why_once_and_goes_on(monkeypatch):
    from rampwatch.sim.server import serve
    from tests.loadgen.run.test_runner import INSTANT, ListSink, make_run, scenario

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], init_error="Driver Not Loaded"))
    sink = ListSink()
    async with serve(INSTANT) as url:
        run = make_run(url, scenario({"kind": "constant", "rate": 4, "duration_s": 0.5}), sink, gpu_nvml=True)
        result = await run.execute()
    infos = [e.message for e in sink.of("event") if e.kind == "info"]
    assert infos == ["no NVIDIA GPU: NVML did not start (Driver Not Loaded): GPU panel hidden"]
    assert sink.of("start")[0].gpu_sources == [] and not any(s.is_gpu for s in result.samples)
    assert all(r.ok for r in result.requests) and result.requests


def test_compare_shows_tokens_per_joule_only_when_a_run_has_it():
    from rampwatch.record.cli_compare import compare_rows

    rows = compare_rows({"tokens_per_joule": 2.0}, {"tokens_per_joule": 2.5})
    [row] = [r for r in rows if r["key"] == "tokens_per_joule"]
    assert row["change_pct"] == pytest.approx(25.0) and row["higher_is_better"]
    assert not [r for r in compare_rows({"tokens_per_joule": None}, {}) if r["key"] == "tokens_per_joule"]
