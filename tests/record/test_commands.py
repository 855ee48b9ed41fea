"""report / export / compare commands and the replay timeline on the committed fixture."""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rampwatch.core.timeline import SERIES_NAMES
from rampwatch.record.cli_compare import compare_rows
from rampwatch.record.reader import open_recording
from rampwatch.record.replay import ReplayTimeline
from tests.record.helpers import FedLog

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "data" / "small.rwrec"


def rampwatch(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def refuse_non_json(word: str) -> None:
    pytest.fail(f"not strict JSON: {word}")


def test_fixture_has_what_the_ui_tests_need():
    rec = open_recording(FIXTURE)
    assert rec.finished and rec.warnings == []
    assert 55 <= rec.duration_s <= 70
    kinds = {e.kind for e in rec.events}
    assert {"knee", "mark", "start"} <= kinds
    ticks = rec.ticks
    assert ticks[0].target_rps < ticks[len(ticks) // 2].target_rps  # a ramp
    assert len(rec.samples) >= 55 and all(s.ok for s in rec.samples)
    assert len(rec.requests) > 300


@pytest.mark.slow
def test_report_prints_the_summary():
    out = rampwatch("report", str(FIXTURE))
    assert out.returncode == 0, out.stderr
    assert "Successful requests:" in out.stdout
    assert "fixture-ramp" in out.stdout
    assert "Send lateness p99 (ms):" in out.stdout  # the Client block
    timeline = out.stdout.split(" Timeline ", 1)[1].split("\n\n", 1)[0].splitlines()[1:]  # the step table follows
    assert timeline == [
        "00:00.0  start        run started",
        "00:30.0  mark         steady before the knee",
        "00:48.0  knee         knee at 16.2 rps",
        "01:06.0  stop         run finished",
    ]


@pytest.mark.parametrize("width", [80, 60])
def test_report_on_a_narrow_terminal_folds_no_line(monkeypatch, capsys, width):
    """The terminal folds a line longer than itself mid-word; the report wraps its own
    lines at words and puts the step table's columns in groups instead."""
    import argparse

    from rampwatch.record import cli_report

    monkeypatch.setattr(cli_report, "terminal_width", lambda stream: width)
    cli_report.main(argparse.Namespace(recording=str(FIXTURE), json=False))
    out = capsys.readouterr().out
    assert "Steps (" in out and "Timeline" in out
    too_long = [line for line in out.splitlines() if len(line) > width]
    assert too_long == []


def test_timeline_lists_holds_and_rate_changes_on_one_line_each():
    from rampwatch.core.timeline import Event
    from rampwatch.record.analysis import format_timeline

    text = format_timeline(
        [
            Event(65.0, "set_rate", "hold at 9 req/s", {"before_rps": 7.25, "after_rps": 9.0}),
            Event(33.0, "scrape_error", "timeout"),
            Event(40.0, "hold", "hold at 7.25 req/s", {"before_rps": 7.25, "after_rps": 7.25}),
            Event(70.0, "mark", "two\nlines\x1b[31m"),
        ]
    )
    assert text.splitlines()[1:] == [
        "00:40.0  hold         hold at 7.25 req/s (7.25 → 7.25 req/s)",
        "01:05.0  rate change  hold at 9 req/s (7.25 → 9 req/s)",
        "01:10.0  mark         two\\x0alines\\x1b[31m",  # control characters escaped: one line
    ]
    assert format_timeline([Event(1.0, "info", "x")]) == ""


def test_timeline_shows_the_review_that_settled_the_knee_after_the_knee():
    from rampwatch.core.timeline import Event
    from rampwatch.record.analysis import format_timeline, timeline_marks

    knee = Event(76.0, "knee", "batch-size cap at ~11.4 req/s offered", {"offered_rps": 11.4})
    review = Event(
        106.0,
        "info",
        "knee revised with the 30 s after it: KV cache full",
        {"knee_review": True, "knee_t": 76.0, "explanation": {"limit": "kv_full"}, "revised": True},
    )
    other = Event(90.0, "info", "scrape slow")
    assert timeline_marks([review, other, knee]) == [knee, review]
    assert format_timeline([knee, other, review]).splitlines()[1:] == [
        "01:16.0  knee         batch-size cap at ~11.4 req/s offered",
        "01:46.0  knee review  knee revised with the 30 s after it: KV cache full",
    ]


@pytest.mark.slow
def test_report_prints_the_step_table_as_the_replay_shows_it():
    from rampwatch.core.figures.steps import step_table_text

    tl = ReplayTimeline(open_recording(FIXTURE), warm_up=False)
    tl.seek(tl.duration)
    rows = tl.snapshot().steps
    # the fixture is a 60 s ramp: ten tenths of it, then the drain
    assert [r.kind for r in rows] == ["ramp"] * 10 + ["drain"]
    out = rampwatch("report", str(FIXTURE))
    assert out.returncode == 0, out.stderr
    assert step_table_text(rows) in out.stdout
    as_json = json.loads(rampwatch("report", "--json", str(FIXTURE)).stdout)
    assert [r["start_s"] for r in as_json["steps"]] == [r.start_s for r in rows]
    assert as_json["steps"][-1]["ttft_p50"] is None  # NaN as null: nothing was sent in the drain


@pytest.mark.slow
@pytest.mark.parametrize("command", ["report", "export", "compare"])
@pytest.mark.parametrize("bad", ["missing.rwrec", "notrec.txt"])
def test_bad_input_is_one_line_exit_2(tmp_path, command, bad):
    (tmp_path / "notrec.txt").write_text("hello\n")
    path = str(tmp_path / bad)
    args = [command, path] + ([str(FIXTURE)] if command == "compare" else [])
    out = rampwatch(*args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and path in lines[0]


@pytest.mark.slow
def test_export_json_follows_the_vllm_schema(tmp_path):
    out = rampwatch("export", str(FIXTURE), "--format", "json", "-o", str(tmp_path / "r.json"), "--save-detailed")
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    rec = open_recording(FIXTURE)
    for key in ("duration", "completed", "request_throughput", "mean_ttft_ms", "p99_itl_ms", "ttfts", "itls"):
        assert key in result
    assert result["completed"] == sum(1 for r in rec.requests if r.ok)
    assert len(result["ttfts"]) == len(result["generated_texts"]) == len(rec.requests)
    assert set(result["generated_texts"]) == {""}  # recordings keep no texts
    # without --save-detailed, as `vllm bench serve` without it: no per-request lists but two
    plain = rampwatch("export", str(FIXTURE), "--format", "json", "-o", str(tmp_path / "p.json"))
    assert plain.returncode == 0, plain.stderr
    short = json.loads((tmp_path / "p.json").read_text())
    assert not {"ttfts", "itls", "input_lens", "output_lens", "start_times", "generated_texts", "errors"} & set(short)
    assert len(short["latencies"]) == len(short["queue_times"]) == len(rec.requests)
    assert {k: v for k, v in result.items() if k in short} == short


@pytest.mark.slow
def test_export_json_of_a_summary_with_a_nan_figure(tmp_path):
    """A run whose every request failed has no peak token rate (NaN): the export writes it
    as null, as the run's result JSON does, so strict JSON parsers read the file."""
    from rampwatch.record.writer import RecordingWriter
    from tests.synthetic import SyntheticRun, play_synthetic

    path = tmp_path / "failed.rwrec"
    writer = RecordingWriter(path)
    play_synthetic(SyntheticRun(duration_s=3, start_rps=5, end_rps=5, error_rate=1.0), writer)
    writer.close()
    out = rampwatch("export", str(path), "--format", "json", "-o", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "r.json").read_text(), parse_constant=refuse_non_json)
    assert result["max_output_tokens_per_s"] is None and result["completed"] == 0 and result["failed"] > 0


@pytest.mark.slow
def test_export_csv_writes_requests_and_series(tmp_path):
    out = rampwatch("export", str(FIXTURE), "--format", "csv", "-o", str(tmp_path / "run.csv"))
    assert out.returncode == 0, out.stderr
    rec = open_recording(FIXTURE)
    with open(tmp_path / "run-requests.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(rec.requests)
    first = rec.requests[0]
    assert int(rows[0]["id"]) == first.id and float(rows[0]["ttft_s"]) == pytest.approx(first.ttft)
    # differences of µs times, on the µs grid: never the float noise of a subtraction
    for row in rows:
        for column in ("ttft_s", "e2e_s", "tpot_s", "sent_at"):
            if row[column]:
                assert len(row[column].split(".")[1]) <= 6, (column, row[column])
    with open(tmp_path / "run-series.csv") as f:
        series = list(csv.DictReader(f))
    assert set(SERIES_NAMES) <= set(series[0])
    assert len(series) >= int(rec.duration_s)
    assert max(float(r["target_rps"]) for r in series if r["target_rps"]) == pytest.approx(
        max(t.target_rps for t in rec.ticks)
    )


@pytest.mark.slow
def test_export_html_is_self_contained(tmp_path):
    out = rampwatch("export", str(FIXTURE), "--format", "html", "-o", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "r.html").read_text()
    assert page.count("<svg") == 6 and "<polyline" in page
    assert "http://" not in page.replace("http://127.0.0.1:8000", "").replace("http://www.w3.org/2000/svg", "")
    assert "<script" not in page and "https://" not in page
    assert "knee" in page and "steady before the knee" in page
    steps = page[page.index("<h2>Steps</h2>") : page.index("<h2>Marks</h2>")]
    assert steps.count("<tr>") == 1 + 11 and "<th>TTFT p99</th>" in steps and "<td>drain</td>" in steps


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")), reason="chromium not installed")
def test_html_report_renders_in_chromium(tmp_path):
    html_path = tmp_path / "r.html"
    assert rampwatch("export", str(FIXTURE), "--format", "html", "-o", str(html_path)).returncode == 0
    png = tmp_path / "r.png"
    out = subprocess.run(
        [str(ROOT / "scripts" / "html_screenshot.sh"), str(html_path), str(png)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    assert png.stat().st_size > 20_000
    colours = _png_colours(png.read_bytes())
    # Background, grid, text, and the chart lines' palette: a blank page has one or two.
    assert len(colours) >= 8


def _png_colours(data: bytes) -> set[tuple[int, ...]]:
    """Distinct colours of a sample of pixels, decoding the PNG with zlib only."""
    import struct
    import zlib

    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, ctype = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, _depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    channels = {2: 3, 6: 4}[ctype]
    raw = zlib.decompress(idat)
    stride = width * channels
    colours = set()
    prev = bytearray(stride)
    for row in range(height):
        f = raw[row * (stride + 1)]
        line = bytearray(raw[row * (stride + 1) + 1 : (row + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        prev = line
        if row % 7 == 0:
            for x in range(0, width, 3):
                colours.add(tuple(line[x * channels : x * channels + 3]))
    return colours


def test_compare_rows_without_samples_show_the_change_but_no_verdict():
    a = {"request_throughput": 10.0, "mean_ttft_ms": 100.0, "p99_itl_ms": 20.0, "failed": 0, "completed": 100}
    b = {"request_throughput": 12.0, "mean_ttft_ms": 150.0, "p99_itl_ms": 20.0, "failed": 2, "completed": 98}
    rows = {r["key"]: r for r in compare_rows(a, b)}
    assert rows["request_throughput"]["change_pct"] == pytest.approx(20)
    assert rows["mean_ttft_ms"]["change_pct"] == pytest.approx(50) and rows["mean_ttft_ms"]["delta"] == 50.0
    assert rows["failed"]["change_pct"] is None
    assert rows["error_rate_pct"]["a"] == 0.0 and rows["error_rate_pct"]["b"] == pytest.approx(2.0)
    assert all(r["verdict"] == "-" and r["better"] is None for r in rows.values())


def _samples(mean: float, n: int, seed: int):
    from rampwatch.record.significance import Samples

    rng = np.random.default_rng(seed)
    values = {name: Samples.of(rng.normal(mean, mean / 10, n)) for name in ("ttft_ms", "tpot_ms", "e2el_ms", "itl_ms")}
    values["error_pct"] = Samples.of(np.zeros(n))
    for name in ("completed_per_s", "output_tokens_per_s", "total_tokens_per_s"):
        values[name] = Samples.of(rng.normal(10.0, 1.0, 60))
    return values


def test_compare_rows_say_better_only_outside_noise():
    a = {"mean_ttft_ms": 100.0, "p99_ttft_ms": 130.0, "request_throughput": 10.0, "knee_rps": 8.0}
    b = {"mean_ttft_ms": 80.0, "p99_ttft_ms": 104.0, "request_throughput": 10.1, "knee_rps": 9.0}
    rows = {r["key"]: r for r in compare_rows(a, b, _samples(100.0, 400, 1), _samples(80.0, 400, 2))}
    assert rows["mean_ttft_ms"]["verdict"] == "better" and rows["mean_ttft_ms"]["better"] == "B"
    assert rows["mean_ttft_ms"]["high"] < 0
    # same per-second throughput distribution: a 1% change is noise
    assert rows["request_throughput"]["verdict"] == "within noise" and rows["request_throughput"]["better"] is None
    assert rows["request_throughput"]["low"] < 0 < rows["request_throughput"]["high"]
    assert rows["knee_rps"]["verdict"] == "-" and rows["knee_rps"]["better"] is None  # nothing to resample


def test_load_warning_names_the_differences():
    from rampwatch.record.cli_compare import load_differences, load_warning

    a = {"seed": 1, "schedule": {"kind": "linear", "end_rps": 20}, "workload": {"output_tokens": {"max": 800}}}
    b = {"seed": 2, "schedule": {"kind": "linear", "end_rps": 30}, "workload": {"output_tokens": {"max": 800}}}
    assert load_differences(a, b) == ["schedule.end_rps: 20 vs 30"]  # a different seed is the same load
    assert load_warning(a, a) is None
    line = load_warning(a, b)
    assert line is not None and "\n" not in line and "schedule.end_rps: 20 vs 30" in line
    many = {"endpoint": "chat", "max_concurrency": 8, "schedule": {"kind": "constant", "rate": 3}, "workload": {}}
    assert load_warning(a, many).endswith("with the server's") and "…" in load_warning(a, many)


def _synthetic(path: Path, **run) -> Path:
    from rampwatch.record.writer import RecordingWriter
    from tests.synthetic import SyntheticRun, play_synthetic

    w = RecordingWriter(path, flush_interval_s=None)
    play_synthetic(SyntheticRun(**run), w, on_flush=lambda _t: w.flush())
    return path


@pytest.mark.slow
def test_compare_command(tmp_path):
    other = _synthetic(tmp_path / "other.rwrec", duration_s=30, end_rps=10, capacity_rps=30, mean_chunks=30, seed=2)
    out = rampwatch("compare", str(FIXTURE), str(other))
    assert out.returncode == 0, out.stderr
    assert "Mean TTFT (ms)" in out.stdout and "%" in out.stdout
    ttft_line = next(line for line in out.stdout.splitlines() if line.startswith("Mean TTFT (ms)"))
    assert "B better" in ttft_line  # the run without overload has the lower TTFT, far outside noise
    # the fixture ramps to 20 rps over 60 s, the other run to 10 over 30: one warning line
    warnings = [line for line in out.stdout.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "schedule.duration_s: 60.0 vs 30" in warnings[0]
    data = json.loads(rampwatch("compare", str(FIXTURE), str(other), "--json", "--resamples", "200").stdout)
    assert data["load_warning"] == warnings[0]
    rows = {r["key"]: r for r in data["rows"]}
    assert rows["mean_ttft_ms"]["verdict"] == "better" and rows["mean_ttft_ms"]["high"] < 0


@pytest.mark.slow
def test_compare_of_a_run_with_itself_is_within_noise(tmp_path):
    out = rampwatch("compare", str(FIXTURE), str(FIXTURE), "--json", "--resamples", "200")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["load_warning"] is None and data["same_recording"] is True
    tested = [r for r in data["rows"] if r["verdict"] != "-"]
    assert len(tested) >= 10 and all(r["verdict"] == "within noise" for r in tested)
    # the same file under another name: said in the text's first line
    link = tmp_path / "again.rwrec"
    link.symlink_to(FIXTURE)
    text = rampwatch("compare", str(FIXTURE), str(link), "--resamples", "50")
    assert text.stdout.splitlines()[0].startswith("note: A and B are the same recording")
    copy = tmp_path / "copy.rwrec"  # equal bytes, another file: two runs as far as compare can tell
    copy.write_bytes(FIXTURE.read_bytes())
    other = rampwatch("compare", str(FIXTURE), str(copy), "--json", "--resamples", "50")
    assert json.loads(other.stdout)["same_recording"] is False


@pytest.mark.slow
@pytest.mark.parametrize("bad", ["0", "-3", "many"])
def test_compare_bad_resamples_is_one_line(bad):
    out = rampwatch("compare", str(FIXTURE), str(FIXTURE), "--resamples", bad)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--resamples" in out.stderr.strip().splitlines()[-1]


# ---- replay timeline ----------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _expected_fed(rec, t):
    return [(i.kind, i.t) for i in rec.items_between(float("-inf"), t)]


def test_replay_transport_and_feeding():
    rec = open_recording(FIXTURE)
    clock = FakeClock()
    tl = ReplayTimeline(rec, clock=clock, builder_factory=FedLog, warm_up=False, checkpoint_every_s=10)
    assert tl.position == 0 and not tl.playing
    tl.play()
    clock.now += 2.5
    assert tl.position == pytest.approx(2.5)
    tl.speed = 4
    clock.now += 1.0
    assert tl.position == pytest.approx(6.5)
    tl.speed = 100
    assert tl.speed == 16
    tl.pause()
    clock.now += 10
    assert tl.position == pytest.approx(6.5)
    assert tl.snapshot().summary["fed"] == _expected_fed(rec, 6.5)
    tl.step(1.0)
    assert tl.position == pytest.approx(7.5)
    tl.seek(45.0)
    assert tl.snapshot().summary["fed"] == _expected_fed(rec, 45.0)
    assert tl.checkpoint_count == 4
    tl.seek(12.0)  # backwards: restored from the 10 s checkpoint
    assert tl.snapshot().summary["fed"] == _expected_fed(rec, 12.0)
    tl.seek_relative(-100)
    assert tl.position == 0
    tl.seek(rec.duration_s + 50)
    assert tl.position == rec.duration_s
    tl.play()
    clock.now += 5
    assert tl.position == rec.duration_s and not tl.playing  # stops at the end
    assert [e.kind for e in tl.marks()] == ["mark", "knee"]


def test_replay_snapshot_equals_a_straight_feed_with_the_series_builder():
    from rampwatch.core.figures.series import SeriesBuilder
    from rampwatch.record.replay import feed

    rec = open_recording(FIXTURE)
    clock = FakeClock()
    tl = ReplayTimeline(rec, clock=clock, checkpoint_every_s=10)
    assert tl.wait_warm(30)
    assert tl.warm_fraction == 1.0 and tl.checkpoint_count >= 5
    for t in (50.0, 23.5, 51.0, 5.0):
        tl.seek(t)
        got = tl.snapshot()
        straight = SeriesBuilder()
        straight.on_start(rec.header)
        feed(straight, rec.items_between(float("-inf"), t))
        want = straight.snapshot(now=t)
        assert got.times == want.times
        for name in SERIES_NAMES:
            assert got.series[name] == pytest.approx(want.series[name], nan_ok=True), name
        assert got.in_flight == want.in_flight and got.events == want.events
        assert got.summary.keys() == want.summary.keys()
        assert not any(isinstance(v, float) and math.isnan(v) for v in [got.t])


def test_report_uses_the_runs_own_slo_and_gpu_price(tmp_path):
    """A report of a recording matches the live summary: same SLOs (goodput), same price."""
    import dataclasses

    from rampwatch.core.figures.summary import summarise_requests
    from rampwatch.record.analysis import summarise
    from rampwatch.record.writer import RecordingWriter

    src = open_recording(FIXTURE)
    header = dataclasses.replace(
        src.header,
        scenario={**src.header.scenario, "slo": {"ttft_ms": 150, "tpot_ms": 60}},
        options={**src.header.options, "gpu_price_per_hour": 2.0},
    )
    path = tmp_path / "slo.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None)
    writer.on_start(header)
    sink_method = {
        "request": writer.on_request,
        "sample": writer.on_scrape,
        "tick": writer.on_tick,
        "event": writer.on_event,
    }
    for item in src.items_between(0.0, src.duration_s + 1):
        sink_method[item.kind](item.value)
    writer.on_finish(src.duration_s)
    writer.close()

    rec = open_recording(path)
    summary = summarise(rec)
    expected = summarise_requests(
        rec.header, rec.requests, rec.samples, rec.events, slo={"ttft": 150, "tpot": 60}, gpu_price_per_hour=2.0
    )
    assert 0 < summary.request_goodput < summary.request_throughput
    assert summary.request_goodput == pytest.approx(expected.request_goodput)
    assert summary.cost_per_1m_output_tokens == pytest.approx(expected.cost_per_1m_output_tokens)
    assert summarise(src).request_goodput is None
