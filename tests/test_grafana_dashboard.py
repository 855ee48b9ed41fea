"""docs/grafana/rampwatch.json: every query names metrics rampwatch exports
(``--prometheus-port``) or vLLM's own, and the dashboard's variables are the labels the
target sets."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rampwatch.loadgen.run.prometheus_target import exported_metric_names

DASHBOARD = Path(__file__).resolve().parents[1] / "docs" / "grafana" / "rampwatch.json"

# The vLLM metrics the dashboard reads, as a scrape of vLLM 0.32 names them
# (vllm/v1/metrics/loggers.py; a counter's samples end in _total, a histogram's in
# _bucket / _sum / _count).
VLLM_METRICS = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:request_success_total",
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:num_preemptions_total",
    *(
        f"vllm:{name}_seconds_bucket"
        for name in (
            "time_to_first_token",
            "inter_token_latency",
            "e2e_request_latency",
            "request_queue_time",
        )
    ),
}
# A metric name inside a PromQL expression (a label matcher's value is quoted and skipped).
METRIC_NAME = re.compile(r'"[^"]*"|\b(rampwatch_[a-z0-9_]+|vllm:[a-z0-9_:]+)')


def names_in(expr: str) -> set[str]:
    return {m.group(1) for m in METRIC_NAME.finditer(expr) if m.group(1)}


def queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return exprs


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum(rate(rampwatch_requests_total{run_id=~"$run_id"}[1m]))', {"rampwatch_requests_total"}),
        ('vllm:kv_cache_usage_perc{model_name=~"rampwatch_x"}', {"vllm:kv_cache_usage_perc"}),
        ("label_values(rampwatch_run_info, run_id)", {"rampwatch_run_info"}),
        ("rate(vllm:e2e_request_latency_seconds_bucket[1m])", {"vllm:e2e_request_latency_seconds_bucket"}),
    ],
)
def test_names_in_reads_metric_names_and_not_label_values(expr, names):
    assert names_in(expr) == names


def test_every_query_names_metrics_rampwatch_or_vllm_exports():
    exported = exported_metric_names()
    unknown = {
        name for expr in queries() for name in names_in(expr) if name not in exported and name not in VLLM_METRICS
    }
    assert not unknown, f"the dashboard reads metrics nobody exports: {sorted(unknown)}"


def test_the_dashboard_puts_the_clients_figures_beside_vllms():
    read = {name for expr in queries() for name in names_in(expr)}
    assert {n for n in read if n.startswith("vllm:")} == VLLM_METRICS  # every vLLM name listed is used
    for family in ("time_to_first_token", "inter_token_latency", "e2e_request_latency"):
        assert f"rampwatch_{family}_seconds_bucket" in read and f"vllm:{family}_seconds_bucket" in read
    for client in ("rampwatch_send_lateness_seconds_bucket", "rampwatch_loop_lag_seconds_bucket",
                   "rampwatch_offered_rate_rps", "rampwatch_achieved_rate_rps", "rampwatch_in_flight_requests",
                   "rampwatch_client_queued_requests", "rampwatch_requests_total"):  # fmt: skip
        assert client in read


def test_the_run_variable_is_a_label_the_target_sets():
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "run_id", "model_name"} <= variables
    assert all('run_id=~"$run_id"' in e for e in queries() if "rampwatch_" in e and "label_values" not in e)


def test_a_series_that_is_not_a_duration_is_not_drawn_in_seconds():
    """A panel whose unit is seconds draws a per-second count (``…/s``, e.g. vLLM's
    preemptions) with its own unit, not as a duration (0.5 preemptions/s read as 500 ms)."""
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        field_config = panel.get("fieldConfig", {})
        if field_config.get("defaults", {}).get("unit") != "s":
            continue
        overridden = {
            override["matcher"]["options"]
            for override in field_config.get("overrides", [])
            if any(prop.get("id") == "unit" and prop.get("value") != "s" for prop in override["properties"])
        }
        for target in panel.get("targets", []):
            legend = target.get("legendFormat", "")
            if legend.endswith("/s"):
                assert legend in overridden, f"{panel['title']}: {legend!r} drawn in seconds"
