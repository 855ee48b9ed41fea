"""The early stop: nothing before the knee, then the last window judged against the SLO."""

from rampwatch.app.sweep.early_stop import EarlyStopRule
from rampwatch.app.sweep.spec import EarlyStop
from rampwatch.core.figures.slo import parse_slo
from rampwatch.core.timeline import Event, Tick
from tests.core.figures.sweep_rows import req


def test_early_stop_waits_for_the_knee_then_judges_the_last_window():
    slo = parse_slo("ttft_p99<500ms")
    reasons = []
    rule = EarlyStopRule(slo, EarlyStop(window_s=5, min_requests=3), reasons.append)
    for i in range(5):
        rule.on_request(req(i, float(i), 2.0, i + 3.0))  # slow: TTFT 2 s
    rule.on_tick(Tick(8.0, 1.0, "ramping", 0, 0))
    assert reasons == []  # no knee yet
    rule.on_event(Event(8.5, "knee", "knee", {}))
    rule.on_tick(Tick(9.0, 1.0, "ramping", 0, 0))
    assert len(reasons) == 1 and "TTFT p99 2000 ms > 500 ms" in reasons[0]
    rule.on_tick(Tick(10.0, 1.0, "ramping", 0, 0))
    assert len(reasons) == 1  # once


def test_early_stop_needs_enough_recent_requests_and_can_be_off():
    slo = parse_slo("ttft_p99<500ms")
    reasons = []
    rule = EarlyStopRule(slo, EarlyStop(window_s=5, min_requests=3), reasons.append)
    rule.on_event(Event(1.0, "knee", "knee", {}))
    for i in range(3):
        rule.on_request(req(i, 0.0, 2.0, 3.0))
    rule.on_tick(Tick(20.0, 1.0, "ramping", 0, 0))  # they ended 17 s ago: out of the window
    assert reasons == []
    off = EarlyStopRule(slo, EarlyStop(enabled=False), reasons.append)
    off.on_event(Event(1.0, "knee", "knee", {}))
    for i in range(10):
        off.on_request(req(i, 0.0, 2.0, 3.0))
    off.on_tick(Tick(4.0, 1.0, "ramping", 0, 0))
    assert reasons == []
