"""Figures by turn of a recorded session workload in `rampwatch report` (text and
--json), the JSON and HTML exports and the replay; absent for a run without sessions."""

from __future__ import annotations

import argparse
import json

import pytest

from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.figures.turns import turn_table
from rampwatch.core.timeline import RunHeader
from rampwatch.record import cli_export, cli_report
from rampwatch.record.analysis import final_snapshot, recording_turns
from rampwatch.record.reader import open_recording
from rampwatch.record.replay import ReplayTimeline
from rampwatch.record.writer import RecordingWriter
from tests.core.figures.session_records import session_records, session_stream
from tests.record.test_commands import FIXTURE

RECORDS = session_records(sessions=8, turns=4, fail={5: 3})


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("turns") / "multi-turn.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=2.0)
    writer.on_start(RunHeader("0", 0.0, "http://x", "m", "multi-turn-chat"))
    stream = session_stream(RECORDS)
    for kind, item in stream:
        getattr(writer, f"on_{kind}")(item)
    writer.on_finish(stream[-1][1].t if stream[-1][0] == "tick" else stream[-1][1].end_at)
    writer.close()
    return path


def report(path, capsys, *, as_json):
    assert cli_report.main(argparse.Namespace(recording=str(path), json=as_json)) == 0
    return capsys.readouterr().out


def test_the_recording_gives_the_figures_of_its_records(recorded):
    recorded_table = recording_turns(open_recording(recorded))
    exact = turn_table(RECORDS)
    assert [r.requests for r in recorded_table.rows] == [8, 8, 8, 7]
    assert recorded_table.sessions == exact.sessions
    assert (recorded_table.sessions.sessions, recorded_table.sessions.ended_by_error) == (8, 1)
    for a, b in zip(recorded_table.rows, exact.rows, strict=True):
        assert a.hit_rate_pct == b.hit_rate_pct
        assert a.ttft_ms["p50"] == pytest.approx(b.ttft_ms["p50"], abs=0.001)  # times kept to the µs


def test_report_text_has_the_turns_table(recorded, capsys):
    out = report(recorded, capsys, as_json=False)
    turns = out[out.index("\nTurns (") :].splitlines()
    assert turns[2].split()[:3] == ["turn", "requests", "errors"]
    rows = {line.split()[0]: line.split() for line in turns[3:7]}
    assert rows["1"][1:3] == ["8", "0"] and rows["3"][1:3] == ["8", "1"]
    assert rows["1"][-1] == "0.0" and rows["2"][-1] == "50.0" and rows["4"][-1] == "75.0"
    assert float(rows["1"][3]) > 3 * float(rows["2"][3])  # TTFT p50 falls from turn 2
    assert turns[7].startswith("sessions 8 · ended by an error 1 · no error 7")


def test_report_json_has_per_turn_and_sessions(recorded, capsys):
    out = json.loads(report(recorded, capsys, as_json=True))
    assert [row["turn"] for row in out["per_turn"]] == ["1", "2", "3", "4"]
    assert [row["hit_rate_pct"] for row in out["per_turn"]] == pytest.approx([0.0, 50.0, 200 / 3, 75.0])
    assert out["per_turn"][2]["errors"] == 1
    assert out["sessions"] == {
        "sessions": 8,
        "without_error": 7,
        "ended_by_error": 1,
        "cancelled": 0,
        "mean_turns": pytest.approx(31 / 8),
        "finished": None,  # the recorded ticks carry no count of their own
    }


def export(path, tmp_path, fmt):
    out = tmp_path / f"out.{fmt}"
    args = argparse.Namespace(recording=str(path), format=fmt, output=str(out), force=False, save_detailed=False)
    assert cli_export.main(args) == 0
    return out.read_text()


def test_json_export_has_per_turn_and_sessions(recorded, tmp_path):
    result = json.loads(export(recorded, tmp_path, "json"))
    assert result["num_prompts"] == len(RECORDS)
    assert [row["requests"] for row in result["per_turn"]] == [8, 8, 8, 7]
    assert result["sessions"]["ended_by_error"] == 1


def test_html_export_has_the_turns_section_with_its_chart(recorded, tmp_path):
    page = export(recorded, tmp_path, "html")
    section = page[page.index('<h2 id="turns">') :]
    assert 'aria-label="TTFT p50 and prefix-cache hit rate by turn"' in section
    assert section.count("<polyline") == 2  # TTFT p50 and hit rate
    assert "<td>50.0</td>" in section and "sessions 8 · ended by an error 1 · no error 7" in section


def test_replay_shows_the_turns_at_the_end_and_mid_run(recorded):
    recording = open_recording(recorded)
    assert recording.checkpoint_frames  # the middle is restored from a stored checkpoint
    replay = ReplayTimeline(recording, warm_up=False)
    replay.seek(recording.duration_s)
    assert replay.snapshot().turns == final_snapshot(recording).turns
    middle = 6.0
    fed = SeriesBuilder()
    fed.on_start(recording.header)
    for kind, item in session_stream(RECORDS):
        if (item.t if kind == "tick" else item.end_at) <= middle:
            getattr(fed, f"on_{kind}")(item)
    replay.seek(middle)
    at_middle = replay.snapshot().turns
    assert at_middle is not None
    assert [r.requests for r in at_middle.rows] == [r.requests for r in fed.snapshot(now=middle).turns.rows]
    assert sum(r.requests for r in at_middle.rows) < len(RECORDS)


@pytest.mark.slow
def test_a_run_without_sessions_has_no_turns_anywhere(tmp_path, capsys):
    assert recording_turns(open_recording(FIXTURE)) is None
    assert "per_turn" not in json.loads(report(FIXTURE, capsys, as_json=True))
    assert "\nTurns (" not in report(FIXTURE, capsys, as_json=False)
    result = json.loads(export(FIXTURE, tmp_path, "json"))
    assert "per_turn" not in result and "sessions" not in result
    assert 'id="turns"' not in export(FIXTURE, tmp_path, "html")


@pytest.mark.parametrize("with_sessions", [True, False])
def test_the_end_of_a_run_prints_the_turns_and_writes_them_to_the_result_json(tmp_path, with_sessions):
    import io
    from types import SimpleNamespace

    from rampwatch.app.run_config import RunConfig
    from rampwatch.app.session import PreparedRun, finish_run
    from rampwatch.loadgen.run.result import RequestCounts, RunResult

    records = session_records(sessions=4, turns=3)
    if not with_sessions:
        for r in records:
            r.session = r.turn = r.cached_tokens = None
    header = RunHeader("0", 0.0, "http://127.0.0.1:1", "m", "multi-turn-chat")
    # the end's figures are read back from the run's recording (its one source)
    recording = tmp_path / "run.rwrec"
    writer = RecordingWriter(recording, flush_interval_s=None)
    writer.on_start(header)
    stream = session_stream(records)
    for kind, item in stream:
        getattr(writer, f"on_{kind}")(item)
    writer.close(10.0)
    result = RunResult(
        duration_s=10.0, requests=[], samples=[], events=[], header=header, counts=RequestCounts.of(records)
    )
    path = tmp_path / "result.json"
    prepared = PreparedRun(
        run=SimpleNamespace(scenario=SimpleNamespace(slo=None)),
        config=RunConfig("multi-turn-chat"),
        recording_path=recording,
        result_json_path=path,
    )
    out = io.StringIO()
    assert finish_run(prepared, result, out=out) == 0
    written = json.loads(path.read_text())
    if with_sessions:
        assert [row["requests"] for row in written["per_turn"]] == [4, 4, 4]
        assert [row["hit_rate_pct"] for row in written["per_turn"]] == pytest.approx([0.0, 50.0, 200 / 3])
        assert written["sessions"]["sessions"] == 4 and written["sessions"]["mean_turns"] == 3
        assert "\nTurns (" in out.getvalue() and "sessions 4 · ended by an error 0 · no error 4" in out.getvalue()
    else:
        assert "per_turn" not in written and "sessions" not in written
        assert "Turns" not in out.getvalue()
