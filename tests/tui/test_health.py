"""The header's health state, from a Snapshot's series and scrape status alone."""

import math

import pytest

from rampwatch.core.timeline import SERIES_NAMES, RunHeader, ScrapeErrorLine, Snapshot
from rampwatch.tui.health import DEGRADED, METRICS_STALE, OK, SERVER_DOWN, health

URL = "http://127.0.0.1:8000/metrics"


def snapshot(
    completed: list[float],
    *,
    http: list[float] | None = None,
    timeout: list[float] | None = None,
    connection: list[float] | None = None,
    last_good: float | None = None,
    scrape_errors: list[ScrapeErrorLine] | None = None,
    scrape_interval: float = 1.0,
) -> Snapshot:
    n = len(completed)
    series = {name: [math.nan] * n for name in SERIES_NAMES}
    series["completed_rps"] = list(completed)
    series["errors_http_rps"] = list(http or [0.0] * n)
    series["errors_timeout_rps"] = list(timeout or [0.0] * n)
    series["errors_connection_rps"] = list(connection or [0.0] * n)
    series["errors_protocol_rps"] = [0.0] * n
    header = RunHeader("0", 0.0, "http://127.0.0.1:8000", "m", "s", options={"scrape_interval": scrape_interval})
    t = n + 0.5
    return Snapshot(
        t=t,
        header=header,
        state="ramping",
        target_rps=5.0,
        times=[float(i) for i in range(n)],
        series=series,
        in_flight=0,
        events=[],
        summary={},
        server_metrics_available=True,
        last_good_scrape_t=t - 0.5 if last_good is None else last_good,
        scrape_errors=scrape_errors or [],
    )


def refused(first: float, last: float, count: int = 3) -> list[ScrapeErrorLine]:
    return [ScrapeErrorLine(URL, "connection refused", count, first, last)]


CASES = {
    "all well": (snapshot([5.0] * 20), OK),
    "one error in 500 is under 1 %": (snapshot([50.0] * 20, http=[0.0] * 19 + [1.0]), OK),
    "errors above 1 % of the last 10 s": (snapshot([5.0] * 20, http=[0.0] * 18 + [1.0, 1.0]), DEGRADED),
    "old errors have left the window": (snapshot([5.0] * 20, http=[3.0] + [0.0] * 19), OK),
    "timeouts degrade too": (snapshot([5.0] * 20, timeout=[0.0] * 19 + [2.0]), DEGRADED),
    "killed: connections refused, /metrics refused": (
        snapshot(
            [5.0] * 18 + [2.0, 0.0],
            connection=[0.0] * 18 + [3.0, 0.0],
            last_good=18.3,
            scrape_errors=refused(18.9, 19.9),
        ),
        SERVER_DOWN,
    ),
    "refused without /metrics to tell, three in a row": (
        snapshot([5.0] * 17 + [0.0] * 3, connection=[0.0] * 17 + [1.0, 1.0, 1.0]),
        SERVER_DOWN,
    ),
    "one refused connection is not an outage": (
        snapshot([5.0] * 19 + [0.0], connection=[0.0] * 19 + [1.0]),
        DEGRADED,
    ),
    "requests complete again: not down though /metrics is refused": (
        snapshot([5.0] * 20, connection=[0.0] * 18 + [1.0, 0.0], last_good=10.0, scrape_errors=refused(10.5, 19.5)),
        DEGRADED,
    ),
    "metrics time out but requests are fine": (
        snapshot(
            [5.0] * 20,
            last_good=12.0,
            scrape_errors=[ScrapeErrorLine(URL, "timeout after 2 s", 8, 13.0, 20.0)],
        ),
        METRICS_STALE,
    ),
    "a scrape 2 s old is not stale": (snapshot([5.0] * 20, last_good=18.5), OK),
    "stale is three scrape intervals: 5.5 s at 2 s": (snapshot([5.0] * 20, last_good=15.0, scrape_interval=2.0), OK),
    "stale is three scrape intervals: 5.5 s at 1 s": (snapshot([5.0] * 20, last_good=15.0), METRICS_STALE),
    "http 503s with /metrics refused are not an outage": (
        snapshot([0.0] * 20, http=[5.0] * 20, last_good=10.0, scrape_errors=refused(10.5, 19.5)),
        DEGRADED,
    ),
}


@pytest.mark.parametrize(("snap", "state"), list(CASES.values()), ids=list(CASES))
def test_health_state(snap, state):
    assert health(snap).state == state


def test_details_name_the_figures():
    degraded = health(CASES["errors above 1 % of the last 10 s"][0])
    assert degraded.detail == "3.8% errors in 10 s (http 2)"
    down = health(CASES["killed: connections refused, /metrics refused"][0])
    assert down.detail.startswith("since 00:18: 3 connection errors")
    stale = health(CASES["metrics time out but requests are fine"][0])
    assert stale.detail == "since 00:12 (8 s ago)"
    assert stale.metrics_stale_since == 12.0


def test_a_recorded_outage_reads_as_it_happened_at_each_position():
    """Through the series builder, as a replay feeds it: OK before the kill at 20 s, SERVER
    DOWN after it, DEGRADED once the server answers again at 40 s while the failures are in
    the last 10 s, then OK."""
    from rampwatch.core.figures.series import SeriesBuilder
    from rampwatch.core.timeline import RequestRecord, ServerSample, Tick

    header = RunHeader("0", 0.0, "http://127.0.0.1:8000", "m", "s", options={"scrape_interval": 1.0})
    builder = SeriesBuilder()
    builder.on_start(header)
    request_id = 0
    snapshots = {}
    for tenth in range(0, 600):
        t = tenth / 10
        down = 20.0 <= t < 40.0
        if tenth % 5 == 0:  # a request every 0.5 s, ending 0.2 s later
            end = t + 0.2
            if down:
                record = RequestRecord(request_id, t, t, t, error_class="connect", error="refused")
            else:
                record = RequestRecord(request_id, t, t, end, first_token_at=t + 0.1, completion_tokens=2)
            builder.on_request(record)
            request_id += 1
        if tenth % 10 == 3:  # a scrape each second
            if down:
                builder.on_scrape(ServerSample(t=t, url=URL, ok=False, error="connection refused"))
            else:
                builder.on_scrape(ServerSample(t=t, url=URL, ok=True, running=1.0, waiting=0.0))
        if tenth % 10 == 0:
            builder.on_tick(Tick(t=t, target_rps=2.0, state="ramping"))
        if tenth in (195, 225, 390, 455, 555):
            snapshots[t] = builder.snapshot(t)
    assert health(snapshots[19.5]).state == OK
    down = health(snapshots[22.5])
    assert down.state == SERVER_DOWN and down.detail.startswith("since 00:19:")
    assert health(snapshots[39.0]).state == SERVER_DOWN
    assert health(snapshots[45.5]).state == DEGRADED
    assert health(snapshots[55.5]).state == OK  # the failures have left the 10 s window
