"""A hostile server's text (terminal escapes, markup, HTML, spreadsheet formulas in its
model id, error messages, finish reasons, /metrics labels and version) through every
output rampwatch has: the headless run's lines, `report`, the JSON, CSV and HTML
exports, the replay and live screens. None of it may reach an output raw."""

from __future__ import annotations

import asyncio
import csv
import json
import sys
from pathlib import Path

import pytest
from aiohttp import web
from textual.widgets._toast import Toast

from rampwatch.core.text import printable
from rampwatch.core.timeline import Event, RequestRecord, RunHeader, ServerSample
from rampwatch.loadgen.server.scrape import parse_dcgm, parse_metrics
from rampwatch.record.reader import open_recording
from rampwatch.record.replay import ReplayTimeline
from rampwatch.record.writer import RecordingWriter
from rampwatch.tui.app import make_live_app, make_replay_app
from tests.faults.hostile_server import HOSTILE, RAW_MARKERS, hostile_app
from tests.tui.fakes import FakeControl, FrozenSource, fake_snapshot

REPO = Path(__file__).resolve().parents[2]
# What a safe output shows instead: the escapes written out, the markup as text.
SHOWN_ESCAPED = "\\x1b]0;pwned\\x07"
SHOWN_MARKUP = "[bold red]mark[/]"


async def rampwatch(*args: str, cwd: Path) -> tuple[int, str, str]:
    """`rampwatch ARGS`, run while this test's loop keeps serving the hostile server."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rampwatch.app.cli",
        *args,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def assert_safe(where: str, text: str) -> None:
    for marker in RAW_MARKERS:
        assert marker not in text, f"{where} holds {marker!r} raw"
    assert "Traceback" not in text, where


async def screen_text(app) -> str:
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        return app.export_screenshot()


@pytest.mark.slow
async def test_hostile_strings_reach_no_output_raw(tmp_path):
    runner = web.AppRunner(hostile_app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    rec = tmp_path / "hostile.rwrec"
    try:
        code, out, err = await rampwatch(
            "run", "chat", "--target", url, "--headless", "--duration", "2", "--start-rps", "4", "--end-rps", "4",
            "--scrape-interval", "0.2", "--progress-interval", "0.5", "--record", str(rec), "--set", "drain=cap:5",
            cwd=tmp_path,
        )  # fmt: skip
    finally:
        await runner.cleanup()
    assert code == 1, err  # half the requests fail: over --max-error-rate, the run's own verdict
    assert_safe("the headless run's output", out + err)
    assert SHOWN_ESCAPED in out  # the model id, shown with its escapes written out

    code, report, err = await rampwatch("report", str(rec), cwd=tmp_path)
    assert code == 0, err
    assert_safe("report", report + err)
    assert SHOWN_ESCAPED in report and SHOWN_MARKUP in report

    exports = tmp_path / "exports"
    exports.mkdir()
    for fmt in ("json", "csv", "html"):
        code, out, err = await rampwatch(
            "export", str(rec), "--format", fmt, "-o", str(exports / f"x.{fmt}"), cwd=tmp_path
        )
        assert code == 0, err
        assert_safe(f"export --format {fmt}", out + err)
    exported = {path.name: path.read_text() for path in exports.iterdir()}
    exported["result.json"] = (tmp_path / "hostile.json").read_text()  # the run's result JSON
    assert set(exported) == {"x.json", "x-requests.csv", "x-series.csv", "x.html", "result.json"}
    for name, text in exported.items():
        assert_safe(name, text)
    json.loads(exported["x.json"])  # strict JSON: the escapes are the encoder's
    assert "<script>" not in exported["x.html"] and "&lt;script&gt;" in exported["x.html"]
    rows = list(csv.DictReader(exported["x-requests.csv"].splitlines()))
    errors = [row["error"] for row in rows if row["error"]]
    assert errors and all(e.startswith("'=HYPERLINK(") or e.startswith("'-\\x1b") for e in errors), errors
    assert all(row["finish_reason"].startswith("stop\\x1b") for row in rows if row["status"] == "200")

    recording = open_recording(rec)
    replay = ReplayTimeline(recording, warm_up=False)
    replay.seek(replay.duration)
    replayed = await screen_text(make_replay_app(replay, recording=str(rec)))
    assert_safe("the replay screen", replayed)
    live = await screen_text(make_live_app(FrozenSource(replay.snapshot()), FakeControl(), recording=str(rec)))
    assert_safe("the live screen", live)
    for screen in (replayed, live):  # the model id in the header, its markup shown as text, not applied
        assert "m\\x1b]0;pwned\\x07" in screen and "red]mark[/]" in screen


def test_a_recording_holding_a_servers_raw_text_reads_back_printable(tmp_path):
    # as rampwatch wrote them before a server's text was made safe as it came in
    path = tmp_path / "old.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None)
    header = RunHeader("0", 0.0, "http://x", "m" + HOSTILE, "chat", server_info={"version": HOSTILE})
    writer.on_start(header)
    writer.on_request(
        RequestRecord(
            id=1, scheduled_at=0.1, sent_at=0.1, end_at=0.2, status=400, error_class="http_400", error=HOSTILE
        )
    )
    writer.on_request(
        RequestRecord(
            id=2, scheduled_at=0.1, sent_at=0.1, first_token_at=0.15, end_at=0.2, status=200,
            chunk_times=[0.15], finish_reason="stop" + HOSTILE,
        )
    )  # fmt: skip
    writer.on_scrape(ServerSample(0.5, "http://x/metrics", False, error=HOSTILE, raw={f'x{{m="{HOSTILE}"}}': 1.0}))
    writer.on_event(Event(0.5, "error", HOSTILE, {"line": HOSTILE}))
    writer.on_finish(1.0)

    recording = open_recording(path)
    read = [
        recording.header.model,
        recording.header.server_info["version"],
        *(r.error or r.finish_reason for r in recording.requests),
        recording.samples[0].error,
        *recording.samples[0].raw,
        recording.events[0].message,
        recording.events[0].data["line"],
    ]
    assert read == [
        "m" + printable(HOSTILE),
        printable(HOSTILE),
        printable(HOSTILE),
        "stop" + printable(HOSTILE),
        printable(HOSTILE),
        f'x{{m="{printable(HOSTILE)}"}}',
        printable(HOSTILE),
        printable(HOSTILE),
    ]
    assert all("\x1b" not in text for text in read)


@pytest.mark.slow
async def test_a_toast_shows_a_servers_markup_as_text():
    # a restart's config event carries the new server's command and what it said
    snapshot = fake_snapshot(50.0)
    said = "serving [bold red]mark[/] [link=http://evil/]here[/link]"
    snapshot.events.append(Event(49.0, "config", said))
    app = make_live_app(FrozenSource(snapshot), FakeControl())
    async with app.run_test(size=(200, 50), notifications=True) as pilot:
        await pilot.pause()
        shown = [str(toast.render()) for toast in app.screen.query(Toast)]
    assert shown == [said]


@pytest.mark.parametrize(
    "parse, line",
    [
        (parse_metrics, 'vllm:num_requests_running{a="b",\x1b[2J} 1'),
        (parse_dcgm, 'DCGM_FI_DEV_GPU_UTIL{gpu="0",\x1b]0;pwned\x07} 1'),
    ],
)
def test_an_unparsable_metrics_line_is_quoted_printable(parse, line):
    # the parser's message quotes the page's line, the server's text
    sample = parse(line + "\n", "u", 0.0)
    assert not sample.ok and sample.error.startswith("unparsable")
    assert "\\x1b" in sample.error and not any(marker in sample.error for marker in RAW_MARKERS)
