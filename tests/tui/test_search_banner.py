"""The search's line on the live screen: its holds as they come, the running one marked."""

from __future__ import annotations

from rampwatch.core.timeline import Event
from rampwatch.tui.search_banner import search_banner_text


def search_event(t: float, what: str, **data) -> Event:
    return Event(t, "search", what, {"search": what, **data})


def test_no_search_no_line():
    assert search_banner_text([Event(1.0, "mark", "m", {})]) is None


def test_the_line_follows_the_search():
    events = [search_event(0.0, "start", slo="ttft_p90<300ms"), search_event(2.0, "window", level=3.0)]
    assert search_banner_text(events).plain == " S  ttft_p90<300ms · ramping to bracket it (last window judged: 3)"
    events += [
        search_event(8.0, "bracket", lo=2.9, hi=4.8),
        search_event(8.0, "hold", level=3.85),
        search_event(
            12.0,
            "verdict",
            hold={"level": 3.85, "passed": True, "seconds": 2.0, "figures": {"ttft_p90": 226.4, "error_rate": 2.0}},
        ),
        search_event(12.0, "hold", level=4.8),
    ]
    text = search_banner_text(events)
    assert text.plain.endswith("· bracket 2.9–4.8 · 3.85 2s 226ms 2.0%err PASS · [4.8 holding…]")
    running = next(span for span in text.spans if text.plain[span.start : span.end] == "[4.8 holding…]")
    assert "reverse" in str(running.style)
    events += [
        search_event(
            16.0, "verdict", hold={"level": 4.8, "passed": False, "seconds": 2.0, "figures": {"ttft_p90": 792.0}}
        ),
        search_event(16.0, "result", result={"line": "max 3.85 req/s (± 0.95) under SLO ttft_p90<300ms"}),
    ]
    plain = search_banner_text(events).plain
    assert "4.8 2s 792ms FAIL → max 3.85 req/s (± 0.95)" in plain and "holding" not in plain
