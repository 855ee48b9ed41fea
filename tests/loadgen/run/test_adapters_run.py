"""Acceptance (issue 28, LoRA): a run that sends to weighted adapters against the simulator
serving them. Each request's model is its adapter; the per-adapter counts are the seed's
picks exactly and follow the weights within a binomial bound; the per-adapter figures add
up to the run's; the server's LoRA state is read; an adapter the server lacks stops the
run before anything is sent, in one line naming it."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from rampwatch.core.errors import ModelNotServed
from rampwatch.core.figures.adapters import adapter_summaries
from rampwatch.core.timeline import NullSink
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.runner import Run
from rampwatch.loadgen.transport.connection import Connection
from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.sim.config import SimConfig
from rampwatch.sim.lora import LoraConfig, LoraModule
from rampwatch.sim.server import serve

SCENARIO = """\
name: adapters
seed: 42
schedule: {kind: constant, rate: 100, duration_s: 2}
workload:
  input_tokens: 16
  output_tokens: 4
  adapters:
    - {name: sql, weight: 3}
    - {name: chat, weight: 1}
"""
SERVED = LoraConfig(enable_lora=True, modules=(LoraModule("sql", "/a"), LoraModule("chat", "/b")), max_loras=2)


class Samples(NullSink):
    def __init__(self) -> None:
        self.samples = []

    def on_scrape(self, sample):
        self.samples.append(sample)


def scenario(tmp_path, text=SCENARIO):
    path = tmp_path / "adapters.yaml"
    path.write_text(textwrap.dedent(text))
    return load_scenario(str(path))


@pytest.mark.slow
async def test_per_adapter_counts_follow_the_weights_seeded(tmp_path):
    scn = scenario(tmp_path)
    sink = Samples()
    async with serve(SimConfig(hardware="instant", model="tiny", lora=SERVED)) as url:
        options = RunOptions(target=url, model="tiny", keep_records=True, scrape_interval_s=0.25, tick_interval_s=0.25)
        result = await Run(scn, options, sinks=[sink]).execute()
    records = sorted(result.requests, key=lambda r: r.id)
    assert len(records) >= 150 and all(r.ok for r in records), [r.error for r in records if not r.ok][:3]
    # exact: the seed's own sequence of picks, request by request
    factory = RequestFactory(scenario(tmp_path))
    assert [r.adapter for r in records] == [factory.next_request().adapter for _ in records]
    counts = {name: sum(r.adapter == name for r in records) for name in ("sql", "chat")}
    n, p = len(records), 0.75
    assert abs(counts["sql"] - n * p) <= 4 * np.sqrt(n * p * (1 - p)), counts
    # the per-adapter figures: every adapter, adding up to the run's
    figures = adapter_summaries(result.header, records)
    assert list(figures) == ["sql", "chat"]
    assert {name: f.completed for name, f in figures.items()} == counts
    assert sum(f.total_output_tokens for f in figures.values()) == 4 * n
    # the server's side: vllm:lora_requests_info read from every good scrape
    lora = [s for s in sink.samples if s.ok and s.max_lora is not None]
    assert lora and all(s.max_lora == 2.0 for s in lora)


@pytest.mark.slow
async def test_an_adapter_the_server_does_not_serve_stops_the_run_in_one_line(tmp_path):
    scn = scenario(tmp_path, SCENARIO.replace("name: chat", "name: code"))
    async with serve(SimConfig(hardware="instant", model="tiny", lora=SERVED)) as url:
        options = RunOptions(target=url, model="tiny", keep_records=True)
        with pytest.raises(ModelNotServed) as exc:
            await Run(scn, options, sinks=[NullSink()]).execute()
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith("workload.adapters: adapter 'code' is not served by http://127.0.0.1:")
    assert "it serves 'tiny', 'sql', 'chat'" in message and "--lora-modules code=PATH" in message


@pytest.mark.slow
async def test_a_server_listing_the_api_key_as_a_model_never_shows_it_in_the_not_served_line(tmp_path):
    # A hostile server echoes the key it was sent as a served model's id: the line that
    # names what it serves masks it, as the recording's header does.
    key = "sk-secret-key-28"
    scn = scenario(tmp_path, SCENARIO.replace("name: chat", "name: code"))
    served = LoraConfig(enable_lora=True, modules=(LoraModule("sql", "/a"), LoraModule(key, "/b")), max_loras=2)
    async with serve(SimConfig(hardware="instant", model="tiny", lora=served)) as url:
        options = RunOptions(target=url, model="tiny", keep_records=True, connection=Connection(api_key=key))
        with pytest.raises(ModelNotServed) as exc:
            await Run(scn, options, sinks=[NullSink()]).execute()
        message = str(exc.value)
        assert key not in message and "'sql', '<redacted>'" in message
        options = RunOptions(target=url, model="nope", keep_records=True, connection=Connection(api_key=key))
        with pytest.raises(ModelNotServed) as exc:
            await Run(scenario(tmp_path, SCENARIO), options, sinks=[NullSink()]).execute()
        assert key not in str(exc.value) and "'<redacted>'" in str(exc.value)
