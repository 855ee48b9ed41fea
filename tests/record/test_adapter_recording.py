"""A recording of a run that sent to LoRA adapters: each adapter's figures from the file
are the in-memory ones; the report (text and --json), the HTML export and the result JSON
have them; the server's LoRA state reaches the summary; the replay groups the live figures
by adapter (the class panel's Adapters)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from rampwatch.core.figures.adapters import adapter_summaries
from rampwatch.core.figures.summary_text import format_summary
from rampwatch.record.analysis import adapter_figures, class_figures, final_snapshot, summarise
from rampwatch.record.reader import open_recording
from rampwatch.record.writer import RecordingWriter
from tests.record.helpers import CaptureSink
from tests.record.test_commands import rampwatch
from tests.synthetic import SyntheticRun, play_synthetic

ADAPTERS = [{"name": "sql", "weight": 3.0}, {"name": "chat", "weight": 1.0}]


class Adapted:
    """Passes a synthetic run on as one that sent to adapters: ``workload.adapters`` in the
    header, an adapter on every request (seeded, 3:1), LoRA state on every scrape."""

    def __init__(self, *sinks) -> None:
        self.sinks = sinks
        self.rng = np.random.default_rng(9)

    def on_start(self, header):
        scenario = {**header.scenario, "workload": {**header.scenario.get("workload", {}), "adapters": ADAPTERS}}
        for s in self.sinks:
            s.on_start(replace(header, scenario=scenario))

    def on_request(self, record):
        record.adapter = "sql" if self.rng.random() < 0.75 else "chat"
        for s in self.sinks:
            s.on_request(record)

    def on_scrape(self, sample):
        if sample.ok and not sample.is_gpu:
            waiting = ["chat"] if sample.t > 20 else []
            sample = replace(sample, lora_running=["sql"], lora_waiting=waiting, max_lora=1.0)
        for s in self.sinks:
            s.on_scrape(sample)

    def __getattr__(self, name):
        def each(item):
            for s in self.sinks:
                getattr(s, name)(item)

        return each


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("adapters") / "adapters.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=5.0)
    capture = CaptureSink()
    play_synthetic(SyntheticRun(duration_s=30.0, start_rps=2, end_rps=16, seed=4), Adapted(writer, capture))
    writer.close()
    return path, capture


def test_the_recordings_adapter_summaries_are_the_in_memory_ones(recorded):
    path, capture = recorded
    with open_recording(path) as recording:
        from_file = adapter_figures(recording)
        assert class_figures(recording) == {}  # adapters are not a mixture's classes
        summary = summarise(recording)
    in_memory = adapter_summaries(capture.header, capture.requests)
    assert list(from_file) == ["sql", "chat"]
    for name, figures in from_file.items():
        want = in_memory[name]
        assert figures.completed == want.completed > 0 and figures.failed == want.failed
        assert figures.ttft.percentiles["p99"] == pytest.approx(want.ttft.percentiles["p99"], rel=1e-3)
    assert sum(f.completed for f in from_file.values()) == summary.completed
    lora = summary.server["lora"]
    assert lora["max_lora"] == 1.0 and lora["max_waiting_adapters"] == 1 and lora["adapters_waited"] == ["chat"]
    assert 0 < lora["waiting_scrapes_pct"] < 100
    text = format_summary(summary)
    assert "LoRA max_lora (--max-loras):" in text and "Adapters that waited for a slot:" in text


def test_the_replay_groups_its_live_figures_by_adapter(recorded):
    path, _ = recorded
    with open_recording(path) as recording:
        snapshot = final_snapshot(recording)
    assert [c.name for c in snapshot.classes] == ["sql", "chat"]
    assert snapshot.lora is not None and snapshot.lora["waiting"] == ["chat"]


@pytest.mark.slow
def test_report_export_and_result_json_have_each_adapter(recorded, tmp_path):
    path, _ = recorded
    out = rampwatch("report", str(path))
    assert out.returncode == 0, out.stderr
    section = out.stdout[out.stdout.index("\nAdapters (") :].splitlines()
    assert section[2].split() == ["sql", "chat"]
    as_json = json.loads(rampwatch("report", str(path), "--json").stdout)
    assert list(as_json["per_adapter"]) == ["sql", "chat"]
    assert sum(a["completed"] for a in as_json["per_adapter"].values()) == as_json["completed"]
    out = rampwatch("export", str(path), "--format", "json", "-o", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    per_adapter = result["rampwatch_per_adapter"]
    assert list(per_adapter) == ["sql", "chat"]
    assert sum(a["completed"] for a in per_adapter.values()) == result["completed"]
    assert set(per_adapter["sql"]) >= {"completed", "output_throughput", "p99_ttft_ms", "mean_itl_ms"}
    assert result["rampwatch_server"]["lora"]["adapters_waited"] == ["chat"]
    out = rampwatch("export", str(path), "--format", "html", "-o", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "r.html").read_text()
    section = page[page.index('<h2 id="adapters">') :]
    assert "<tr><th></th><th>sql</th><th>chat</th></tr>" in section
