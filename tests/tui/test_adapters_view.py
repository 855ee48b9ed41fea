"""A run that sends to LoRA adapters on screen: the class panel holds its adapters (titled
Adapters) when it has no mixture, and the Stats panel shows the server's LoRA state."""

from __future__ import annotations

import dataclasses

import pytest

from rampwatch.tui.app import make_live_app
from rampwatch.tui.class_panel import ClassPanel, adapters_grouped
from rampwatch.tui.stats_panel import StatsPanel
from tests.tui.fakes import FakeControl, FrozenSource, fake_mixed_snapshot, fake_snapshot

ADAPTERS = [{"name": "sql", "weight": 3.0}, {"name": "chat", "weight": 1.0}]
LORA = {"t": 94.0, "running": ["sql", "chat"], "waiting": ["code"], "max_lora": 2.0}


def adapted(snapshot, mix: bool = False):
    assert snapshot.header is not None
    workload = dict(snapshot.header.scenario.get("workload") or {})
    if mix:
        workload["mix"] = [{"name": "a", "weight": 1, "adapters": ADAPTERS}]
    else:
        workload["adapters"] = ADAPTERS
    header = dataclasses.replace(snapshot.header, scenario={**snapshot.header.scenario, "workload": workload})
    return dataclasses.replace(snapshot, header=header, lora=LORA)


def test_adapters_are_the_panels_groups_only_without_a_mixture():
    assert adapters_grouped(adapted(fake_mixed_snapshot(95.0)))
    assert not adapters_grouped(adapted(fake_mixed_snapshot(95.0), mix=True))
    assert not adapters_grouped(fake_mixed_snapshot(95.0))


def test_the_stats_panel_has_the_lora_rows_only_with_lora_state():
    panel = StatsPanel()
    now, _ = panel.rows(adapted(fake_snapshot(95.0)))
    assert ("LoRA running", "2/2 sql,chat") in now and ("LoRA waiting", "1 code") in now
    plain, _ = panel.rows(fake_snapshot(95.0))
    assert not any(label.startswith("LoRA") for label, _ in plain)


@pytest.mark.slow
async def test_the_live_screen_titles_the_panel_adapters():
    app = make_live_app(FrozenSource(adapted(fake_mixed_snapshot(95.0))), FakeControl(), recording="runs/a.rwrec")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        panel = app.main_screen.query_one(ClassPanel)
        assert panel.display and panel.border_title == "Adapters"
