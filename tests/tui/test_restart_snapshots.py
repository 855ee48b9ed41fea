"""Snapshots of a server restart: the restart dialog with the diff as typed, the header
while RESTARTING, and a replay of a deterministic recording with two restarts (C2, C3
on every chart and the position bar) and its configurations table (`g`)."""

from __future__ import annotations

import dataclasses

import pytest

from rampwatch.record.reader import open_recording
from rampwatch.record.replay import ReplayTimeline
from rampwatch.record.writer import RecordingWriter
from rampwatch.tui.app import make_live_app, make_replay_app
from tests.synthetic import SyntheticRun, play_synthetic
from tests.tui.fakes import FakeControl, FakeServer, FrozenSource, fake_snapshot
from tests.tui.settle import charts_settled

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)

FIRST = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 8"
SECOND = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 64"
THIRD = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 64 --max-num-batched-tokens 4096"


def live_app(state: str = "ramping"):
    snapshot = dataclasses.replace(fake_snapshot(95.0), state=state)
    return make_live_app(FrozenSource(snapshot), FakeControl(), recording="runs/chat.rwrec", server=FakeServer(FIRST))


def test_restart_dialog_with_the_diff_as_typed_110x30(snap_compare):
    keys = ["R", "end", "backspace", *"64 --enforce-eager", "tab"]
    assert snap_compare(live_app(), terminal_size=(110, 30), press=keys, run_before=charts_settled)


def test_restart_dialog_refuses_unbalanced_quotes_80x24(snap_compare):
    assert snap_compare(
        live_app(), terminal_size=(80, 24), press=["R", "space", "quotation_mark"], run_before=charts_settled
    )


def test_restarting_header_80x24(snap_compare):
    assert snap_compare(live_app("restarting"), terminal_size=(80, 24), run_before=charts_settled)


@pytest.fixture(scope="module")
def restarted_recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("restarts") / "restarted.rwrec"
    run = SyntheticRun(
        duration_s=90.0,
        start_rps=2.0,
        end_rps=20.0,
        seed=5,
        serve=FIRST,
        configs=[
            (30.0, SECOND, [("max_num_seqs", "8", "64")]),
            (60.0, THIRD, [("max_num_batched_tokens", None, "4096")]),
        ],
        scenario_name="chat",
    )
    writer = RecordingWriter(path, flush_interval_s=None)
    play_synthetic(run, writer)
    writer.close()
    return path


@pytest.fixture
def replay(restarted_recording):
    recording = open_recording(restarted_recording)
    timeline = ReplayTimeline(recording, warm_up=False)
    timeline.seek(timeline.duration)
    yield timeline
    recording.close()


def test_replay_with_restarts_160x48(snap_compare, replay):
    app = make_replay_app(replay, recording="runs/restarted.rwrec")
    assert snap_compare(app, terminal_size=(160, 48), run_before=charts_settled)


def test_replay_configurations_table_160x48(snap_compare, replay):
    app = make_replay_app(replay, recording="runs/restarted.rwrec")
    assert snap_compare(app, terminal_size=(160, 48), press=["g"], run_before=charts_settled)
