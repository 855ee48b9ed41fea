"""The checkpoint schema (``record.checkpoint``): a current checkpoint passes the upgrade
unchanged, and each shape an older rampwatch wrote (its builder then lacked a part)
upgrades to the current schema and restores the builder that rampwatch restored."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.figures.stats import LogHistogram
from rampwatch.core.timeline import ERROR_SERIES, GPU_SERIES, SERIES_NAMES, RequestRecord, RunHeader, ServerSample, Tick
from rampwatch.record import format as fmt
from rampwatch.record.checkpoint import (
    SCHEMA_VERSION,
    CheckpointTooOld,
    read_checkpoint,
    schema_version,
    series_builder,
    upgrade,
    write_checkpoint,
)

HEADER = RunHeader(
    rampwatch_version="0",
    started_at_unix=0,
    target="t",
    model="m",
    scenario_name="s",
    scenario={
        "schedule": {"kind": "linear", "start_rps": 2, "end_rps": 6, "duration_s": 20},
        "workload": {"mix": [{"name": "chat"}, {"name": "code", "slo": {"ttft": 300}}]},
    },
    planned_duration_s=20,
)


def rec(i: int, t: float, error: str | None = None, request_class: str | None = None) -> RequestRecord:
    first = None if error else t + 0.1
    return RequestRecord(
        id=i,
        scheduled_at=t,
        sent_at=t,
        end_at=t + 0.3,
        first_token_at=first,
        chunk_times=[] if error else [t + 0.1, t + 0.2, t + 0.3],
        completion_tokens=0 if error else 3,
        prompt_tokens=10,
        error_class=error,
        request_class=request_class,
    )


def scrape(t: float, ok: bool = True) -> ServerSample:
    if not ok:
        return ServerSample(t=t, url="http://s/metrics", ok=False, backend="vllm", error="connection refused")
    return ServerSample(
        t=t,
        url="http://s/metrics",
        ok=True,
        backend="vllm",
        running=2.0,
        waiting=1.0,
        kv_usage=0.3,
        generation_tokens_total=30.0 * t,
        prompt_tokens_total=100.0 * t,
        preemptions_total=0.0,
        created=1.0,
    )


def feed(b: SeriesBuilder, start: float, end: float, mix: bool = False) -> None:
    """Four requests a second from ``start`` to ``end`` (a mixture's classes in turn, with
    one failure at 5 s), a scrape (one failed at 3.6 s) and a tick each second."""
    n = int(start * 4)
    while n < end * 4:
        t = n / 4
        cls = ("chat", "code")[n % 2] if mix else None
        b.on_request(rec(n, t, error="http_500" if t == 5.0 else None, request_class=cls))
        if n % 4 == 0:
            b.on_tick(Tick(t=t, target_rps=4.0, state="ramping", in_flight=1, offered_total=n, sent_total=n))
            b.on_scrape(scrape(t + 0.5, ok=t != 3.0))
        n += 1


def builder(upto: float = 10.0, mix: bool = False) -> SeriesBuilder:
    b = series_builder(HEADER if mix else RunHeader("0", 0, "t", "m", "s", scenario=HEADER.scenario | {"workload": {}}))
    feed(b, 0.0, upto, mix)
    return b


def written(b: SeriesBuilder) -> tuple[dict, dict]:
    """The builder's checkpoint as a reader gets it back from the file."""
    _t, state, arrays = fmt.decode_checkpoint(fmt.encode_checkpoint(b.now, *write_checkpoint(b)))
    return state, arrays


# The per-second tables: a series added by the upgrade comes last (order does not matter).
TABLES = ("counts", "last", "tick_counts", "session_counts", "final")


def assert_same_checkpoint(got: tuple[dict, dict], want: tuple[dict, dict]) -> None:
    def tables_sorted(state: dict) -> dict:
        return {k: sorted(v) if k in TABLES else v for k, v in _nan_safe(state).items()}

    assert tables_sorted(got[0]) == tables_sorted(want[0])
    assert sorted(got[1]) == sorted(want[1])
    for name, a in want[1].items():
        np.testing.assert_array_equal(got[1][name], a, err_msg=name)


def _nan_safe(value):
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, dict):
        return {k: _nan_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_safe(v) for v in value]
    return value


def assert_same_snapshot(one: SeriesBuilder, two: SeriesBuilder, t: float) -> None:
    for b in (one, two):
        feed(b, 10.0, t, mix=bool(b.classes))
        b.on_finish(t)
    a, b = one.snapshot(), two.snapshot()
    assert a.times == b.times
    for name in SERIES_NAMES:
        np.testing.assert_array_equal(a.series[name], b.series[name], err_msg=name)
    assert _nan_safe(a.summary) == _nan_safe(b.summary)
    assert _nan_safe([r.to_dict() for r in a.steps]) == _nan_safe([r.to_dict() for r in b.steps])
    assert a.scrape_errors == b.scrape_errors and a.gpus == b.gpus
    assert _nan_safe([c.series for c in a.classes]) == _nan_safe([c.series for c in b.classes])
    assert _nan_safe([c.summary for c in a.classes]) == _nan_safe([c.summary for c in b.classes])


def drop_series(state: dict, arrays: dict, table: str, names, prefix: str = "") -> None:
    state[table] = [spec for spec in state[table] if spec[0] not in names]
    for name in names:
        arrays.pop(f"{prefix}{table}.{name}", None)


# ---- the current schema --------------------------------------------------------------


@pytest.mark.parametrize("mix", [False, True], ids=["run", "mixture"])
def test_a_current_checkpoint_passes_the_upgrade_unchanged(mix):
    state, arrays = written(builder(mix=mix))
    assert schema_version(state) == SCHEMA_VERSION == 1 and "schema" not in state
    kept = (repr(_nan_safe(state)), {k: a.copy() for k, a in arrays.items()})
    assert_same_checkpoint(upgrade(state, arrays), (state, arrays))
    assert repr(_nan_safe(state)) == kept[0]  # the arguments are left as they were
    assert all(np.array_equal(arrays[k], a, equal_nan=True) for k, a in kept[1].items())


def test_a_checkpoint_of_a_newer_schema_is_refused():
    state, arrays = written(builder())
    with pytest.raises(ValueError, match="newer"):
        read_checkpoint(None, {**state, "schema": SCHEMA_VERSION + 1}, arrays)


def test_a_checkpoint_from_before_the_step_table_cannot_be_upgraded():
    state, arrays = written(builder())
    del state["steps"]
    arrays.pop("steps.hists")
    with pytest.raises(CheckpointTooOld):
        read_checkpoint(HEADER, state, arrays)


# ---- each older shape: what its builder lacked ---------------------------------------
#
# Each function turns a current checkpoint of a run that did not use a part into the
# shape a builder without that part wrote: the upgrade must give back the current one,
# and so the same builder and snapshots.


def before_the_plan_in_ticks(state, arrays):
    assert state["oldest_sent_at"] is None and state["planned_end_s"] is None
    del state["oldest_sent_at"], state["planned_end_s"]


def before_gpu_telemetry(state, arrays):
    drop_series(state, arrays, "last", GPU_SERIES)
    del state["gpu_latest"], state["last_good_gpu_t"], state["gpu_totals"]
    state["scrape_errors"] = [line[:5] for line in state["scrape_errors"]]


def before_sessions(state, arrays):
    drop_series(state, arrays, "last", ("sessions_active",))
    del state["session_counts"], state["session_totals"]
    for name in ("sessions_started_per_s", "sessions_finished_per_s"):
        del arrays[f"session_counts.{name}"]
    return {"session_totals": [0.0, 0, 0]}  # the last tick's time: only read once sessions start


def before_the_self_check(state, arrays):
    assert state["client_totals"] is None
    del state["client_totals"]


def before_cancelled_requests_and_error_examples(state, arrays):
    summary = state["summary"]
    assert summary["cancelled"] == 0 and summary["tokens_from_usage"]
    del summary["cancelled"], summary["tokens_from_usage"], summary["error_examples"]


def before_restarts_classes_and_turns(state, arrays):
    assert not {"config_segments", "classes", "turns"} & set(state)  # optional: nothing to do


def when_the_run_kept_e2e_percentiles(state, arrays):
    """The run's own builder kept E2E histograms for a while: they are dropped."""
    hists = arrays["hists"]
    arrays["hists"] = np.concatenate([hists, np.ones_like(hists[:, :1])], axis=1)
    state["hist_totals"] = [[*totals, 7] for totals in state["hist_totals"]]
    for q in ("p50", "p90", "p99"):
        state["final"].append([f"e2el_{q}", math.nan])
        arrays[f"final.e2el_{q}"] = np.zeros(256)


SHAPES = [
    before_the_plan_in_ticks,
    before_gpu_telemetry,
    before_sessions,
    before_the_self_check,
    before_cancelled_requests_and_error_examples,
    before_restarts_classes_and_turns,
    when_the_run_kept_e2e_percentiles,
]


@pytest.mark.parametrize("shape", SHAPES, ids=[f.__name__ for f in SHAPES])
def test_an_older_shape_upgrades_to_the_current_checkpoint(shape):
    b = builder()
    current = written(b)
    old = written(b)
    expected = (current[0] | (shape(*old) or {}), current[1])
    assert_same_checkpoint(upgrade(*old), expected)
    assert_same_snapshot(read_checkpoint(b.header, *old), read_checkpoint(b.header, *current), 16.0)


def test_the_oldest_usable_shape_has_every_part_filled_in():
    """Every addition missing at once (the step table's first checkpoints), with the
    parts whose seconds so far are unknown: error and client-queue series."""
    b = builder()
    current = written(b)
    state, arrays = written(b)
    for shape in SHAPES:
        shape(state, arrays)
    drop_series(state, arrays, "counts", ERROR_SERIES.values())
    drop_series(state, arrays, "last", ("client_queued", "client_lag_ms"))
    del state["last_good_scrape_t"], state["scrape_errors"]
    up_state, up_arrays = upgrade(state, arrays)
    restored = read_checkpoint(b.header, state, arrays)
    # the builder's parts as the current builder has them, in its order
    assert [n for n, _ in up_state["counts"]] == [n for n, _ in current[0]["counts"]]
    assert sorted(n for n, _ in up_state["last"]) == sorted(n for n, _ in current[0]["last"])
    for name in ERROR_SERIES.values():  # the seconds before the checkpoint: unknown
        assert np.isnan(up_arrays[f"counts.{name}"][:10]).all() and (up_arrays[f"counts.{name}"][10:] == 0).all()
    assert np.isnan(up_arrays["last.client_queued"]).all()
    feed(restored, 10.0, 16.0)
    restored.on_finish(16.0)
    snap = restored.snapshot()
    assert math.isnan(snap.series["errors_http_rps"][4]) and snap.series["errors_http_rps"][12] == 0.0
    assert snap.scrape_errors == [] and snap.last_good_scrape_t == 15.5


def test_scrape_failures_from_before_gpu_sources_had_theirs_are_the_servers():
    b = builder()
    state, arrays = written(b)
    assert [line[5] for line in state["scrape_errors"]] == [False]
    state["scrape_errors"] = [line[:5] for line in state["scrape_errors"]]
    assert upgrade(state, arrays)[0]["scrape_errors"] == written(b)[0]["scrape_errors"]


def test_a_summary_from_before_the_queue_store_keeps_its_sum():
    b = builder()
    state, arrays = written(b)
    summary = state["summary"]
    records, (_n, total, _squares) = summary["records"], summary["sums"].pop("queue")
    summary["queue_sum"] = total
    del summary["hist_totals"]["queue"], arrays["summary.queue"]
    up_state, up_arrays = upgrade(state, arrays)
    assert up_state["summary"]["sums"]["queue"] == [records, total, 0.0]
    assert up_state["summary"]["hist_totals"]["queue"] == 0
    assert not up_arrays["summary.queue"].any() and up_arrays["summary.queue"].size == LogHistogram.N
    assert read_checkpoint(b.header, state, arrays).summary.client_queue.total == total


def test_step_rows_from_before_the_achieved_rate_count_what_did_not_fail():
    b = builder()
    state, arrays = written(b)
    current = [list(row) for row in state["steps"]["rows"]]
    state["steps"]["rows"] = [row[:15] for row in current]
    del state["steps"]["unsettled_from"]
    rows = upgrade(state, arrays)[0]["steps"]["rows"]
    assert [row[15] for row in rows] == [max(0, row[5] - row[6]) for row in current]
    assert [row[16] for row in rows] == [0] * len(current)
    assert upgrade(state, arrays)[0]["steps"]["unsettled_from"] is None


def test_a_class_checkpoint_from_before_e2e_percentiles_has_those_seconds_unknown():
    b = builder(mix=True)
    current = written(b)
    state, arrays = written(b)
    assert [name for name, _ in state["classes"]] == ["chat", "code"]
    for i, (_name, sub) in enumerate(state["classes"]):
        sub["final"] = [spec for spec in sub["final"] if not spec[0].startswith("e2el")]
        for q in ("p50", "p90", "p99"):
            del arrays[f"class{i}/final.e2el_{q}"]
        arrays[f"class{i}/hists"] = arrays[f"class{i}/hists"][:, :2]
        sub["hist_totals"] = [totals[:2] for totals in sub["hist_totals"]]
    up_state, up_arrays = upgrade(state, arrays)
    for i, (_name, sub) in enumerate(up_state["classes"]):
        want = current[0]["classes"][i][1]
        assert [n for n, _ in sub["final"]] == [n for n, _ in want["final"]]
        assert np.isnan(up_arrays[f"class{i}/final.e2el_p99"]).all()
        assert not up_arrays[f"class{i}/hists"][:, 2].any() and all(t[2] == 0 for t in sub["hist_totals"])
        np.testing.assert_array_equal(up_arrays[f"class{i}/hists"][:, :2], current[1][f"class{i}/hists"][:, :2])
    restored = read_checkpoint(HEADER, state, arrays)
    feed(restored, 10.0, 16.0, mix=True)
    restored.on_finish(16.0)
    e2e = restored.snapshot().classes[0].series["e2el_p99"]
    assert math.isnan(e2e[5]) and e2e[14] == pytest.approx(0.3, rel=0.02)
