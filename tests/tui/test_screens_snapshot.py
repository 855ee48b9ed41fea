"""Screen snapshots (pytest-textual-snapshot). Regenerate after an intended change with
`pytest tests/tui/test_screens_snapshot.py --snapshot-update` and review the SVG diffs.

Every screen is fed a fixed snapshot (no clock anywhere on screen) at a fixed size.
"""

import pytest

from rampwatch.tui.app import make_live_app, make_replay_app
from tests.tui.fakes import FakeControl, FakeReplay, FrozenSource, fake_comparison, fake_snapshot
from tests.tui.settle import charts_settled, compared_and_settled

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)


def live(t: float, metrics: bool = True):
    return make_live_app(FrozenSource(fake_snapshot(t, metrics=metrics)), FakeControl(), recording="runs/chat.rwrec")


def test_live_80x24(snap_compare):
    assert snap_compare(live(95.0), terminal_size=(80, 24), run_before=charts_settled)


def test_live_80x24_stats_tab(snap_compare):
    assert snap_compare(live(95.0), terminal_size=(80, 24), press=["6"], run_before=charts_settled)


def test_live_160x48(snap_compare):
    assert snap_compare(live(95.0), terminal_size=(160, 48), run_before=charts_settled)


def test_live_160x48_without_metrics(snap_compare):
    assert snap_compare(live(60.0, metrics=False), terminal_size=(160, 48), run_before=charts_settled)


def test_replay_compare_160x48(snap_compare):
    app = make_replay_app(
        FakeReplay(position=70.0),
        compare=FrozenSource(fake_snapshot(120.0)),
        recording="runs/a.rwrec",
        compare_label="runs/b.rwrec",
    )
    assert snap_compare(app, terminal_size=(160, 48), run_before=charts_settled)


def compare_app(load_differs: bool = True):
    return make_replay_app(
        FakeReplay(position=70.0),
        compare=FrozenSource(fake_snapshot(120.0)),
        recording="runs/a.rwrec",
        compare_label="runs/b.rwrec",
        comparison=lambda: fake_comparison(load_differs),
    )


def test_replay_compare_deltas_160x56(snap_compare):
    """The B-vs-A panel beside the stats: B's lower TTFT is better, its throughput within noise.
    56 rows: the events below the panel fit whether the comparison arrives before or after
    they are first drawn (at 48 rows the event log's scroll position would depend on it)."""
    assert snap_compare(compare_app(load_differs=False), terminal_size=(160, 56), run_before=compared_and_settled)


def test_replay_compare_deltas_tab_80x24(snap_compare):
    """The B-vs-A tab on a small terminal, with the warning that the runs' loads differ."""
    assert snap_compare(compare_app(), terminal_size=(80, 24), press=["9"], run_before=compared_and_settled)


def test_help_80x24(snap_compare):
    assert snap_compare(live(30.0), terminal_size=(80, 24), press=["question_mark"], run_before=charts_settled)


def failing(t: float, **lost_at: float):
    snapshot = fake_snapshot(t, **lost_at)
    return make_live_app(FrozenSource(snapshot), FakeControl(), recording="runs/chat.rwrec")


# The server dies at 1:20 (every request refused, /metrics too); 15 s later the header says
# SERVER DOWN, the Rate chart draws the connection errors, the server series stop.
def test_server_down_mid_run_80x24(snap_compare):
    assert snap_compare(failing(95.0, down_at=80.0), terminal_size=(80, 24), run_before=charts_settled)


def test_server_down_mid_run_160x48(snap_compare):
    assert snap_compare(failing(95.0, down_at=80.0), terminal_size=(160, 48), run_before=charts_settled)


# Only /metrics stops answering at 1:20 (scrapes time out); requests go on. The header
# says METRICS STALE, the server series are gaps, the stats say how stale.
def test_metrics_stale_80x24(snap_compare):
    assert snap_compare(failing(100.0, stale_at=80.0), terminal_size=(80, 24), press=["6"], run_before=charts_settled)


def test_metrics_stale_160x48(snap_compare):
    assert snap_compare(failing(100.0, stale_at=80.0), terminal_size=(160, 48), run_before=charts_settled)


# The latency chart on its log axis (the default) is in every screen above; these show it
# alone on the narrow latency tab, and the linear axis after `l`.
def test_log_latency_axis_80x24(snap_compare):
    assert snap_compare(live(95.0), terminal_size=(80, 24), press=["5"], run_before=charts_settled)


def test_linear_latency_axis_80x24(snap_compare):
    assert snap_compare(live(95.0), terminal_size=(80, 24), press=["5", "l"], run_before=charts_settled)


def test_log_latency_axis_160x48(snap_compare):
    # `l` twice: back on the log axis it started with
    assert snap_compare(live(95.0), terminal_size=(160, 48), press=["l", "l"], run_before=charts_settled)


def test_step_table_80x24(snap_compare):
    assert snap_compare(live(95.0), terminal_size=(80, 24), press=["8"], run_before=charts_settled)


def test_step_table_160x48(snap_compare):
    assert snap_compare(live(95.0), terminal_size=(160, 48), press=["t"], run_before=charts_settled)


# GPU telemetry: the GPU panel beside the rate chart (util % and power W, memory and clock
# on its bottom line), power in the header, the GPUs in Stats; hidden in every run without.
def gpu_live(t: float, **kwargs):
    from tests.tui.gpu_fakes import with_gpus

    return make_live_app(
        FrozenSource(with_gpus(fake_snapshot(t), **kwargs)), FakeControl(), recording="runs/chat.rwrec"
    )


def test_gpu_panel_120x40(snap_compare):
    assert snap_compare(gpu_live(95.0), terminal_size=(120, 40), run_before=charts_settled)


def test_gpu_panel_stale_160x48(snap_compare):
    """The GPU exporter stopped answering at 1:20: the series stop, the panel and Stats say stale."""
    assert snap_compare(gpu_live(95.0, stale_at=80.0), terminal_size=(160, 48), run_before=charts_settled)


def test_gpu_tab_80x24(snap_compare):
    """On a small terminal the GPU chart is the last tab (9: after Rate … Steps)."""
    assert snap_compare(gpu_live(95.0, count=1), terminal_size=(80, 24), press=["9"], run_before=charts_settled)
