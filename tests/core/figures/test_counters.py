import pytest

from rampwatch.core.figures.counters import CounterTracker, counter_delta, sample_deltas
from rampwatch.core.timeline import ServerSample


@pytest.mark.parametrize(
    "prev, cur, prev_created, cur_created, expected",
    [
        (100.0, 150.0, None, None, 50.0),
        (100.0, 100.0, None, None, 0.0),
        (100.0, 30.0, None, None, 30.0),  # fell: restarted, 30 counted since
        (100.0, 130.0, 1.0, 2.0, 130.0),  # grew past the old value but _created changed
        (100.0, 130.0, 1.0, 1.0, 30.0),
        (None, 5.0, None, None, None),
        (5.0, None, None, None, None),
        (0.0, 0.0, None, 3.0, 0.0),  # one side has no identity: compare values only
    ],
)
def test_counter_delta(prev, cur, prev_created, cur_created, expected):
    assert counter_delta(prev, cur, prev_created, cur_created) == expected


def s(t, gen, created=1.0, per_engine=None, url="u", ok=True):
    return ServerSample(
        t=t,
        url=url,
        ok=ok,
        generation_tokens_total=gen,
        prompt_tokens_total=gen * 2,
        created=created,
        per_engine=per_engine or {},
    )


def test_sample_deltas_sums_per_engine_so_one_engine_reset_shows():
    prev = s(0, 300, per_engine={"0": {"generation_tokens_total": 200}, "1": {"generation_tokens_total": 100}})
    cur = s(1, 310, per_engine={"0": {"generation_tokens_total": 290}, "1": {"generation_tokens_total": 20}})
    # total rose by 10, but engine 0 made 90 and engine 1 restarted and made 20
    assert sample_deltas(prev, cur)["generation_tokens_total"] == 110


def test_tracker_per_url_and_restart():
    tr = CounterTracker()
    assert tr.update(s(0, 100)) is None
    dt, d = tr.update(s(1, 160))
    assert dt == 1 and d["generation_tokens_total"] == 60 and d["prompt_tokens_total"] == 120
    assert d["preemptions_total"] is None
    assert tr.update(s(2, 0, ok=False)) is None  # failed scrape: ignored
    dt, d = tr.update(s(3, 500, created=9.0))  # restarted and already past the old value
    assert dt == 2 and d["generation_tokens_total"] == 500
    assert tr.update(s(0.5, 7, url="other")) is None
