"""``--prometheus-port``'s target where the run is built: a scenario with more classes than
are labelled by name is said in one line on stderr (and only then)."""

from __future__ import annotations

import pytest

from rampwatch.app.run_config import RunConfig
from rampwatch.app.session.build import prometheus_sinks
from rampwatch.loadgen.run.prometheus_target import MAX_CLASS_LABELS
from tests.processes import free_port


@pytest.mark.parametrize(("classes", "lines"), [(3, 0), (MAX_CLASS_LABELS + 7, 1)])
def test_many_classes_are_said_once_where_the_run_is_built(classes, lines, capsys):
    config = RunConfig("chat", prometheus_port=free_port())
    scenario = {"workload": {"mix": [{"name": f"class-{i}", "weight": 1} for i in range(classes)]}}
    sinks = prometheus_sinks(config, scenario)
    try:
        assert len(sinks) == 1
        err = capsys.readouterr().err.splitlines()
        assert len(err) == lines
        if lines:
            assert err[0].startswith(f"rampwatch run: --prometheus-port: the scenario has {classes} classes; ")
            assert 'the other 7 share class="(other)"' in err[0]
    finally:
        for sink in sinks:
            sink.close()  # type: ignore[attr-defined]
