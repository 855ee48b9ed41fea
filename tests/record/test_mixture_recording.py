"""A mixture's recording: each class's figures in the report (text and --json), the HTML
export and the replay, rebuilt from the classes the records carry."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from rampwatch.core.figures.classes import class_summaries
from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.timeline import CLASS_SERIES_NAMES
from rampwatch.record.analysis import class_figures, final_snapshot
from rampwatch.record.reader import open_recording
from rampwatch.record.replay import ReplayTimeline, feed
from rampwatch.record.writer import RecordingWriter
from tests.record.helpers import CaptureSink
from tests.record.test_commands import rampwatch
from tests.synthetic import SyntheticRun, play_synthetic

CLASSES = (("chat", 3.0, {"ttft_ms": 400.0}), ("batch", 1.0, None))
SCENARIO_SLO = {"ttft_ms": 2000.0}


class Mixed:
    """Passes a synthetic run on as a mixture's: a header whose scenario has
    ``workload.mix`` and a class on every request (seeded, by weight)."""

    def __init__(self, *sinks) -> None:
        self.sinks = sinks
        self.rng = np.random.default_rng(5)

    def on_start(self, header):
        mix = [
            {"name": n, "weight": w, "slo": slo, "input_tokens": {"dist": "fixed", "value": 8}} for n, w, slo in CLASSES
        ]
        scenario = {**header.scenario, "workload": {"mix": mix}, "slo": SCENARIO_SLO}
        for s in self.sinks:
            s.on_start(replace(header, scenario=scenario))

    def on_request(self, record):
        record.request_class = "chat" if self.rng.random() < 0.75 else "batch"
        for s in self.sinks:
            s.on_request(record)

    def __getattr__(self, name):
        def each(item):
            for s in self.sinks:
                getattr(s, name)(item)

        return each


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("classes") / "mixed.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=5.0)
    capture = CaptureSink()
    play_synthetic(SyntheticRun(duration_s=30.0, start_rps=2, end_rps=16, seed=4), Mixed(writer, capture))
    writer.close()
    return path, capture


def test_the_recordings_class_summaries_are_the_in_memory_ones(recorded):
    path, capture = recorded
    with open_recording(path) as recording:
        from_file = class_figures(recording)
    in_memory = class_summaries(capture.header, capture.requests, slo=SCENARIO_SLO)
    assert list(from_file) == ["chat", "batch"]
    for name, summary in from_file.items():
        want = in_memory[name]
        assert summary.completed == want.completed > 0 and summary.failed == want.failed
        assert summary.good_requests == want.good_requests
        assert summary.slo_ms == ({"ttft_ms": 400.0} if name == "chat" else SCENARIO_SLO)
        assert summary.request_throughput == pytest.approx(want.request_throughput)
        assert summary.ttft.percentiles["p99"] == pytest.approx(want.ttft.percentiles["p99"], rel=1e-3)


@pytest.mark.slow
def test_report_prints_the_classes_side_by_side_and_json_has_per_class(recorded):
    path, _ = recorded
    out = rampwatch("report", str(path))
    assert out.returncode == 0, out.stderr
    section = out.stdout[out.stdout.index("\nClasses (") :].splitlines()
    assert section[2].split() == ["chat", "batch"]
    assert next(line for line in section if line.startswith("SLO ms")).split() == ["SLO", "ms", "ttft<400", "ttft<2000"]
    as_json = json.loads(rampwatch("report", str(path), "--json").stdout)
    assert list(as_json["per_class"]) == ["chat", "batch"]
    top_keys = [k for k in as_json if k not in ("cache", "steps", "per_class")]
    for figures in as_json["per_class"].values():
        assert [k for k in figures if k != "slo_ms"] == [k for k in top_keys if k != "slo_ms"]
    assert sum(c["completed"] for c in as_json["per_class"].values()) == as_json["completed"]


@pytest.mark.slow
def test_html_report_has_a_classes_section_with_a_line_per_class(recorded, tmp_path):
    path, _ = recorded
    out = rampwatch("export", str(path), "--format", "html", "-o", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "r.html").read_text()
    section = page[page.index('<h2 id="classes">') : page.index("<h2>Steps</h2>")]
    assert "<tr><th></th><th>chat</th><th>batch</th></tr>" in section
    assert "<tr><th>SLO ms</th><td>ttft&lt;400</td><td>ttft&lt;2000</td></tr>" in section
    assert section.count("<svg") == 4 and section.count(">chat</text>") == 4


@pytest.mark.slow
def test_json_export_has_each_class_in_the_top_level_schema_with_its_own_requests(recorded, tmp_path):
    path, capture = recorded
    out = rampwatch("export", str(path), "--format", "json", "--save-detailed", "-o", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    per_class = result.pop("per_class")
    assert list(per_class) == ["chat", "batch"]
    for name, figures in per_class.items():
        assert list(figures) == list(result)
        mine = [r for r in capture.requests if r.request_class == name]
        assert figures["num_prompts"] == len(mine) == len(figures["ttfts"]) == len(figures["start_times"])
        assert figures["start_times"] == pytest.approx([r.sent_at for r in mine], abs=1e-6)
        assert len(figures["itls"]) == len(mine)
    assert sum(c["completed"] for c in per_class.values()) == result["completed"]
    assert sorted(t for c in per_class.values() for t in c["start_times"]) == sorted(result["start_times"])


def test_the_replay_rebuilds_the_live_class_figures(recorded):
    path, capture = recorded
    live = SeriesBuilder(slo=SCENARIO_SLO)
    live.on_start(capture.header)
    with open_recording(path) as recording:
        replayed = final_snapshot(recording)
        feed(live, recording.items_between(float("-inf"), recording.duration_s))
        live.on_finish(recording.duration_s)
        want = live.snapshot(now=recording.duration_s)
        timeline = ReplayTimeline(recording, clock=lambda: 0.0)
        assert timeline.uses_stored_checkpoints
        timeline.seek(17.3)
        sought = timeline.snapshot()
        straight = SeriesBuilder()
        straight.on_start(recording.header)
        feed(straight, recording.items_between(float("-inf"), 17.3))
        at = straight.snapshot(now=17.3)
    for got, expected in ((replayed, want), (sought, at)):
        assert [c.name for c in got.classes] == ["chat", "batch"]
        for a, b in zip(got.classes, expected.classes, strict=True):
            assert a.summary.keys() == b.summary.keys()
            for key, value in b.summary.items():
                if isinstance(value, float) and math.isnan(value):
                    assert math.isnan(a.summary[key]), key
                else:
                    assert a.summary[key] == value, key
            for name in CLASS_SERIES_NAMES:
                np.testing.assert_array_equal(a.series[name], b.series[name], err_msg=name)


@pytest.mark.slow
def test_a_recording_without_classes_shows_none(tmp_path):
    path = tmp_path / "plain.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None)
    play_synthetic(SyntheticRun(duration_s=10.0, seed=2), writer)
    writer.close()
    with open_recording(path) as recording:
        assert class_figures(recording) == {} and final_snapshot(recording).classes == []
    assert "Classes" not in rampwatch("report", str(path)).stdout
    assert "per_class" not in json.loads(rampwatch("report", str(path), "--json").stdout)
