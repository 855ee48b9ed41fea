"""The knee's explanation on screen: the banner under the header (live and replay), the
Events panel's knee line and its detail view; pure parts tested without Textual."""

from __future__ import annotations

import dataclasses

import pytest

from rampwatch.core.figures.knee_explain import KneeReview, explain_knee
from rampwatch.core.figures.knee_explanation import KneeExplanation
from rampwatch.core.figures.server_limits import ServerLimits
from rampwatch.core.timeline import Event, RunHeader
from rampwatch.tui.app import make_live_app
from rampwatch.tui.event_log import event_row
from rampwatch.tui.knee_banner import knee_banner_text, latest_knee
from tests.core.figures.test_knee_explain import N, flat, ramp, seconds_of, window
from tests.tui.fakes import KNEE_AT, FakeControl, FrozenSource, fake_snapshot
from tests.tui.settle import charts_settled

LIMITS = ServerLimits(max_num_seqs=32, sources={"max_num_seqs": "serve command"})
# A batch cap like the fake run's: running held at 32 while the queue grows.
BEFORE = window(running=ramp(10, 32, 0, 15), waiting=ramp(0, 41, 15, N), kv_usage_pct=flat(40.0))
WHY = explain_knee(BEFORE, LIMITS)
# … and the 30 s after the knee: the KV cache filled and preempted.
AFTER = {name: [values[-1]] * 30 for name, values in BEFORE.items()} | {
    "kv_usage_pct": [100.0] * 30,
    "preemptions": [4.0] * 30,
    "waiting": ramp(41, 90, 0, 30)[:30],
}


def explained_knee() -> Event:
    return Event(
        KNEE_AT,
        "knee",
        f"{WHY.title} at ~14.0 req/s offered → try {WHY.try_next}",
        {
            "offered_rps": 14.0,
            "onset_t": 73.0,
            "evidence": [
                "throughput_lag: completed 13.5 req/s vs offered 15.0 req/s",
                "queue_growth: waiting queue 21",
            ],
            "explanation": WHY.to_dict(),
            "limits": LIMITS.to_dict(),
        },
    )


def explained_snapshot(t: float = 95.0):
    snapshot = fake_snapshot(t)
    events = [explained_knee() if e.kind == "knee" else e for e in snapshot.events]
    return dataclasses.replace(snapshot, events=events)


def knee_review_event() -> Event:
    """The event ``KneeReview`` settles the fake run's knee with, 30 s after it."""
    review = KneeReview()
    before = seconds_of(BEFORE)
    for i, values in enumerate(before):
        review.update(KNEE_AT - len(before) + 1 + i, values, explained_knee() if i == len(before) - 1 else None)
    events = [e for i, values in enumerate(seconds_of(AFTER)) for e in review.update(KNEE_AT + 1 + i, values, None)]
    assert len(events) == 1
    return events[0]


def reviewed_snapshot(t: float = 110.0):
    snapshot = explained_snapshot(t)
    return dataclasses.replace(snapshot, events=sorted([*snapshot.events, knee_review_event()], key=lambda e: e.t))


def live_app(snapshot=None):
    return make_live_app(FrozenSource(snapshot or explained_snapshot()), FakeControl(), recording="runs/chat.rwrec")


def test_the_explanation_used_here_is_a_batch_cap():
    assert (WHY.limit, WHY.try_next) == ("batch_cap", "--max-num-seqs 64")


def test_banner_text_names_the_time_rate_limit_and_next_step():
    text = knee_banner_text(explained_knee(), WHY).plain
    assert text.startswith(" K  01:18 knee at ~14.0 req/s: batch-size cap (running 32 = max_num_seqs 32 for ")
    assert text.endswith("→ try --max-num-seqs 64")


def test_the_client_cap_banner_says_whose_flag_it_is():
    why = explain_knee(
        window(running=ramp(10, 32, 0, 15), client_queued=ramp(0, 35, 15, N)), ServerLimits(max_concurrency=32)
    )
    assert knee_banner_text(explained_knee(), why).plain.endswith("→ try --max-concurrency 64 (a rampwatch flag)")


def test_latest_knee_is_the_newest():
    snapshot = explained_snapshot()
    later = Event(200.0, "knee", "again", {})
    assert latest_knee(dataclasses.replace(snapshot, events=[*snapshot.events, later])) is later
    assert latest_knee(fake_snapshot(10.0)) is None


def test_the_knee_detail_lists_the_explanation_not_a_dict():
    detail = event_row(explained_knee()).detail.splitlines()
    assert "limit: batch-size cap [batch_cap]" in detail
    assert "try next: --max-num-seqs 64" in detail
    assert "limits known: max_num_seqs 32 (serve command)" in detail
    assert not any(line.startswith("explanation:") for line in detail)
    assert "offered_rps: 14.0" in detail
    at = detail.index("signals that marked it:")
    assert detail[at : at + 3] == [
        "signals that marked it:",
        "  throughput_lag: completed 13.5 req/s vs offered 15.0 req/s",
        "  queue_growth: waiting queue 21",
    ]


def test_limits_text_groups_by_source():
    from rampwatch.tui.event_log import limits_text

    limits = ServerLimits.of_run(
        RunHeader(
            "x",
            0.0,
            "t",
            "m",
            "s",
            options={"max_concurrency": 8},
            server_info={"cache_config": {"num_gpu_blocks": "4096", "block_size": "16"}},
        ),
        ServerLimits.from_engine_args({"max_num_seqs": "64", "data_parallel_size": "2"}),
    )
    assert limits_text(limits.to_dict()) == (
        "max_num_seqs 64 (serve command); max_concurrency 8 (run options); "
        "num_gpu_blocks 4096, block_size 16 (/metrics cache_config_info); engines 2"
    )
    assert limits_text({"engines": 1, "tensor_parallel_size": 1, "sources": {}}) == "none"


@pytest.mark.slow
async def test_a_live_knee_without_an_explanation_shows_no_banner():
    """A live knee always carries its explanation; one that does not (a fake, an older
    run process) is not guessed at from the tail of the series."""
    app = make_live_app(FrozenSource(fake_snapshot(95.0)), FakeControl())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert app.query_one("#knee-banner").display is False
    app = live_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert app.query_one("#knee-banner").display is True


@pytest.mark.slow
def test_knee_explained_live_160x48(snap_compare):
    assert snap_compare(live_app(), terminal_size=(160, 48), run_before=charts_settled)


@pytest.mark.slow
def test_knee_explained_live_80x24(snap_compare):
    assert snap_compare(live_app(), terminal_size=(80, 24), run_before=charts_settled)


@pytest.mark.slow
def test_knee_explained_detail_80x24(snap_compare):
    """The Events tab, the knee line selected (one above the newest, the mark) and opened."""
    assert snap_compare(live_app(), terminal_size=(80, 24), press=["7", "up", "enter"], run_before=charts_settled)


# -- the knee's review: the banner and the events panel say when it changed ------------


def test_the_review_of_the_fake_knee_names_the_kv_cache():
    review = knee_review_event()
    assert (review.t, review.data["knee_t"], review.data["revised"]) == (KNEE_AT + 30, KNEE_AT, True)
    assert review.message.startswith("knee revised with the 30 s after it: KV cache full → try ")
    assert review.message.endswith("(at the knee: batch-size cap → try --max-num-seqs 64)")


def test_the_banner_shows_the_settled_explanation_and_that_it_was_revised():
    snapshot = reviewed_snapshot()
    knee = latest_knee(snapshot)
    assert knee is not None
    from rampwatch.core.figures.knee_explain import explain_recorded_knee

    why = explain_recorded_knee(knee, snapshot)
    assert why.limit == "kv_full" and why.provisional is not None
    assert knee_banner_text(knee, why).plain.startswith(
        " K  01:18 knee at ~14.0 req/s, revised: KV cache full (KV 100 % for 30 s, 120 preemptions in 70 s"
    )
    # before the review, the knee's own explanation, not marked
    assert ", revised" not in knee_banner_text(knee, WHY).plain


@pytest.mark.slow
async def test_the_live_banner_changes_when_the_review_comes():
    source = FrozenSource(explained_snapshot(100.0))
    app = make_live_app(source, FakeControl())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        banner = app.query_one("#knee-banner")
        assert "knee at ~14.0 req/s: batch-size cap" in str(banner.render())
        source._snapshot = reviewed_snapshot()  # the review arrives
        app.poll_source()
        await pilot.pause()
        await pilot.pause()
        assert "knee at ~14.0 req/s, revised: KV cache full" in str(banner.render())


def test_the_reviews_detail_lists_the_final_explanation_and_what_it_replaced():
    detail = event_row(knee_review_event()).detail.splitlines()
    assert "limit: KV cache full [kv_full]" in detail
    assert "at the knee it read: batch-size cap → try --max-num-seqs 64" in detail
    assert "window: 40 s before the knee, 30 s after" in detail
    assert any(line.startswith("signals conflict: running at the cap 32 for ") for line in detail)
    assert not any(line.startswith("explanation:") for line in detail)
    why = KneeExplanation.from_dict(knee_review_event().data["explanation"])
    assert (
        why is not None
        and why.conflict is not None
        and why.conflict.endswith("KV binds first, raising --max-num-seqs would not help")
    )


@pytest.mark.slow
def test_knee_revised_live_80x24(snap_compare):
    assert snap_compare(live_app(reviewed_snapshot()), terminal_size=(80, 24), run_before=charts_settled)
