"""The sweep's live view: progress and ETA (pure), and a snapshot mid-sweep."""

import pytest

from rampwatch.tui.sweep_view import SweepApp, SweepPanel, sweep_progress

T0 = 1_000_000.0


def row(i, status, config, **figures):
    return {
        "index": i,
        "args": {},
        "config": config,
        "command": f"rampwatch sim --hardware h100 --port 8311 {config}",
        "vllm_command": f"vllm serve meta-llama/Llama-3.1-8B-Instruct {config}",
        "gpus": 1,
        "status": status,
        **figures,
    }


def state_mid_sweep():
    done = dict(status="done", duration_s=18.0)
    return {
        "sweep": "sweep-sim",
        "slo": "ttft_p99<500ms,itl_p99<50ms",
        "started_at": T0,
        "finished": False,
        "current": 2,
        "current_line": "[     7s] ramping  target  22.0 rps | sent 21.4 done 20.8 err 0.0 | in-flight 31 | out 1650 tok/s",
        "best": 1,
        "rows": [
            row(
                0,
                **{**done, "started_at": T0},
                config="--max-num-seqs 4",
                knee_rps=12.0,
                max_goodput_rps=1.5,
                output_tps=709.7,
                tps_per_user=34.3,
                tps_per_gpu=709.7,
                ttft_p50_ms=813.0,
                ttft_p99_ms=3522.0,
                itl_p50_ms=10.0,
                itl_p99_ms=29.0,
                peak_kv_pct=0.4,
                preemptions=0.0,
                limit="batch-size cap",
            ),
            row(
                1,
                **{**done, "started_at": T0 + 18},
                config="--max-num-seqs 16",
                knee_rps=18.6,
                max_goodput_rps=11.4,
                output_tps=1393.8,
                tps_per_user=54.6,
                tps_per_gpu=1393.8,
                ttft_p50_ms=271.0,
                ttft_p99_ms=1947.0,
                itl_p50_ms=10.0,
                itl_p99_ms=34.0,
                peak_kv_pct=2.0,
                preemptions=0.0,
                limit="batch-size cap",
                pareto=True,
            ),
            row(2, "running", "--max-num-seqs 64", started_at=T0 + 36),
            row(3, "pending", "--max-num-seqs 64 --gpu-memory-utilization 0.22"),
        ],
    }


@pytest.mark.parametrize(
    ("statuses", "now", "finished", "eta"),
    [
        (["pending", "pending"], T0 + 5, 0, None),  # nothing to go by yet
        (["done", "running"], T0 + 25, 1, 15.0),  # 20 s each, 5 s into the second
        (["done", "failed"], T0 + 40, 2, 0.0),
        (["done", "running", "pending"], T0 + 60, 1, 20.0),  # the running one over its mean: counts as done
    ],
)
def test_sweep_progress(statuses, now, finished, eta):
    rows = [{"status": s, "duration_s": 20.0 if s in ("done", "failed") else None} for s in statuses]
    current = statuses.index("running") if "running" in statuses else None
    if current is not None:
        rows[current]["started_at"] = T0 + 20
    p = sweep_progress({"rows": rows, "started_at": T0, "current": current}, now)
    assert (p["finished"], p["total"], p["elapsed_s"]) == (finished, len(rows), now - T0)
    assert p["eta_s"] == (None if eta is None else pytest.approx(eta))


def test_a_finished_sweep_stops_its_clock():
    p = sweep_progress({"rows": [], "started_at": T0, "ended_at": T0 + 50}, T0 + 500)
    assert p["elapsed_s"] == 50


async def screen_settled(pilot) -> None:
    await pilot.pause()
    await pilot.pause()


@pytest.mark.slow
def test_sweep_progress_view_160x40(snap_compare):
    app = SweepApp(lambda: state_mid_sweep(), clock=lambda: T0 + 43)
    assert snap_compare(app, terminal_size=(160, 40), run_before=screen_settled)


@pytest.mark.slow
async def test_q_stops_the_sweep_and_leaves():
    stopped = []
    app = SweepApp(lambda: state_mid_sweep(), on_quit=lambda: stopped.append(True), clock=lambda: T0 + 43)
    async with app.run_test(size=(160, 40)) as pilot:
        assert app.query_one(SweepPanel).state["current"] == 2
        await pilot.press("q")
        await pilot.pause()
    assert stopped == [True] and app.return_value == 0


@pytest.mark.parametrize(
    ("width", "dropped"),
    [
        (200, set()),
        (140, {"ITL p50", "TTFT p50"}),
        (120, {"ITL p50", "TTFT p50", "preempt", "tok/s/user"}),
        (60, {"ITL p50", "TTFT p50", "preempt", "tok/s/user", "out tok/s"}),  # then the config is cut
    ],
)
def test_narrow_panels_drop_the_least_useful_columns_first(width, dropped):
    from rampwatch.core.figures.sweep_text import table_cells
    from rampwatch.tui.sweep_view import columns_for

    cells = table_cells(state_mid_sweep()["rows"])
    kept = [cells[0][i] for i in columns_for(width, cells)]
    assert {h for h in cells[0] if h not in kept} == dropped
    assert {"#", "config", "knee rps", "good-put", "TTFT p99", "ITL p99", "KV peak", "limit"} <= set(kept)


@pytest.mark.slow
def test_sweep_progress_view_80x24(snap_compare):
    app = SweepApp(lambda: state_mid_sweep(), clock=lambda: T0 + 43)
    assert snap_compare(app, terminal_size=(80, 24), run_before=screen_settled)


@pytest.mark.parametrize(
    ("text", "width", "shown"),
    [("--max-num-seqs 64", 20, "--max-num-seqs 64"), ("--max-num-seqs 64", 10, "…m-seqs 64"), ("abc", 3, "abc")],
)
def test_cut_left_keeps_the_values(text, width, shown):
    from rampwatch.tui.sweep_view import cut_left

    assert cut_left(text, width) == shown


@pytest.mark.slow
async def test_a_configuration_never_loaded_to_its_limit_is_named_not_judged():
    from rich.text import Text

    state = state_mid_sweep()
    state["rows"][2].update(
        status="done", duration_s=18.0, reached=False, peak_offered_rps=20.0, max_goodput_rps=15.0, output_tps=900.0
    )
    state.update(current=None, not_reached=[2])
    app = SweepApp(lambda: state, clock=lambda: T0 + 60)
    async with app.run_test(size=(160, 40)):
        group = app.query_one(SweepPanel).render()
        lines = "\n".join(part.plain for part in group.renderables if isinstance(part, Text))
    assert "best so far (on the front, max good-put): #2 --max-num-seqs 16" in lines
    assert "#3 not reached; extend the load: not judged" in lines


@pytest.mark.slow
async def test_tied_configurations_are_named_with_no_best():
    from rich.text import Text

    state = state_mid_sweep()
    state.update(current=None, best=None, tied=[0, 1])
    app = SweepApp(lambda: state, clock=lambda: T0 + 60)
    async with app.run_test(size=(160, 40)):
        group = app.query_one(SweepPanel).render()
        lines = "\n".join(part.plain for part in group.renderables if isinstance(part, Text))
    assert "tied so far (good-put intervals overlap): #1 --max-num-seqs 4, #2 --max-num-seqs 16" in lines
    assert "best so far" not in lines


@pytest.mark.parametrize(
    ("verdict", "says"),
    [
        (
            {"best": 1, "tied": [], "no_max": [0]},
            "best so far (highest confirmed max under the SLO): #2 b — max 12 req/s (± 0.5)\n"
            "  vllm serve m --max-num-seqs 16\n"
            "#1 no max under the SLO (the SLO was already broken at the start): not judged",
        ),
        ({"best": None, "tied": [1, 2], "no_max": []}, "tied so far (max intervals overlap): #2 b, #3 c"),
    ],
)
def test_a_searched_sweep_shows_its_best_by_the_confirmed_max(verdict, says):
    from rampwatch.tui.sweep_view import search_verdict

    rows = [
        {"config": "a", "search_max": None, "search_failure": "the SLO was already broken at the start"},
        {"config": "b", "search_max": 12.0, "search_plus_minus": 0.5, "command": "vllm serve m --max-num-seqs 16"},
        {"config": "c", "search_max": 11.8, "search_plus_minus": 0.5, "command": "vllm serve m --max-num-seqs 32"},
    ]
    text = search_verdict({"rows": rows, "search": {"by": "rate"}, **verdict}).plain
    assert text == says
