import math
import shlex
import textwrap

import pytest

from rampwatch.core.errors import UserError
from rampwatch.core.figures.slo import parse_slo
from rampwatch.core.timeline import Event, RequestRecord, Tick
from rampwatch.loadgen.sweep import (
    NOT_REACHED,
    EarlyStop,
    EarlyStopRule,
    apply_args,
    best_config,
    choose_best,
    combine_runs,
    command_line,
    config_row,
    expand_matrix,
    format_pareto,
    format_table,
    good_requests,
    gpu_count,
    knee_uncertainty,
    load_sweep,
    mark_pareto,
    max_window_rate,
    pareto_front,
    peak_target_rps,
    place_labels,
    table_cells,
    verdict_text,
    vllm_serve_argv,
)

GOOD_SWEEP = """\
scenario: chat
serve: vllm serve Qwen/Qwen2.5-0.5B --port 8311
matrix:
  product:
    max_num_seqs: [8, 64]
load:
  ramp: {start_rps: 1, end_rps: 20, duration_s: 30}
"""


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_minimal_sweep_has_defaults(tmp_path):
    spec = load_sweep(write(tmp_path, GOOD_SWEEP))
    assert spec.configs == [{"--max-num-seqs": 8}, {"--max-num-seqs": 64}]
    assert spec.schedule == {
        "kind": "linear",
        "start_rps": 1.0,
        "end_rps": 20.0,
        "duration_s": 30.0,
        "arrival": "poisson",
    }
    assert spec.slo.text == "ttft_p99<500ms,itl_p99<50ms"
    assert spec.early_stop == EarlyStop()
    assert spec.output_dir == "sweeps/s"


def test_rates_become_a_steps_schedule_and_flags_override_the_file(tmp_path):
    text = GOOD_SWEEP.replace("  ramp: {start_rps: 1, end_rps: 20, duration_s: 30}", "  rates: [2, 4]\n  hold_s: 5")
    spec = load_sweep(write(tmp_path, text + "slo: ttft_p99<1s\n"), slo_text="itl_p99<20ms", output_dir="out")
    assert spec.schedule["steps"] == [{"rate": 2.0, "duration_s": 5.0}, {"rate": 4.0, "duration_s": 5.0}]
    assert spec.slo.text == "itl_p99<20ms" and spec.output_dir == "out"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (("matrix:", "matrixx: {}\nmatrix:"), "s.yaml:3: matrixx: unknown key; did you mean 'matrix'?"),
        (
            ("max_num_seqs: [8, 64]", "max_num_seqs: []"),
            "s.yaml:5: matrix.product.max_num_seqs: expected a non-empty list",
        ),
        (
            ("max_num_seqs: [8, 64]", "max_num_seqs: [8, null]"),
            "s.yaml:5: matrix.product.max_num_seqs[1]: expected a number",
        ),
        (("end_rps: 20", "end_rps: fast"), "s.yaml:7: load.ramp.end_rps: expected a number > 0, got 'fast'"),
        (("scenario: chat", "scenario: nope"), "s.yaml:1: scenario: scenario 'nope': no such file"),
        (("serve: vllm serve Qwen/Qwen2.5-0.5B --port 8311", "serve: 'vllm \"serve'"), "s.yaml:2: serve: cannot split"),
        (("load:", "slo: ttft<5\nload:"), "s.yaml:6: slo 'ttft<5': 'ttft<5': name a percentile"),
        (("  ramp:", "  hold_s: 3\n  ramp:"), "s.yaml:7: load.hold_s: belongs to rates:"),
    ],
)
def test_errors_name_the_file_line_and_key(tmp_path, change, says):
    path = write(tmp_path, GOOD_SWEEP.replace(*change))
    with pytest.raises(UserError) as err:
        load_sweep(path)
    assert str(err.value).startswith(str(path).replace("s.yaml", "")) and says in str(err.value), str(err.value)


@pytest.mark.parametrize(
    ("line", "given", "repeats"),
    [("", None, 1), ("repeats: 3\n", None, 3), ("repeats: 3\n", 2, 2)],
)
def test_repeats_from_the_file_or_the_flag(tmp_path, line, given, repeats):
    assert load_sweep(write(tmp_path, GOOD_SWEEP + line), repeats=given).repeats == repeats


@pytest.mark.parametrize("value", ["0", "2.5", "yes", "21"])
def test_a_bad_repeats_names_its_line(tmp_path, value):
    with pytest.raises(UserError, match=r"s.yaml:8: repeats: expected a whole number from 1 to 20"):
        load_sweep(write(tmp_path, GOOD_SWEEP + f"repeats: {value}\n"))


def test_a_missing_file_and_a_bad_flag_slo(tmp_path):
    with pytest.raises(UserError, match="no such sweep file"):
        load_sweep(tmp_path / "missing.yaml")
    with pytest.raises(UserError, match=r"^--slo 'ttft_p99<5%'"):
        load_sweep(write(tmp_path, GOOD_SWEEP), slo_text="ttft_p99<5%")


@pytest.mark.parametrize(
    ("product", "sets", "expected"),
    [
        (
            {"a": [1, 2], "--b": ["x", "y"]},
            None,
            [{"--a": 1, "--b": "x"}, {"--a": 1, "--b": "y"}, {"--a": 2, "--b": "x"}, {"--a": 2, "--b": "y"}],
        ),
        (None, [{"max_num_seqs": 8}, {"max-num-seqs": 8}], [{"--max-num-seqs": 8}]),  # the same configuration once
        ({"a": [1]}, [{"a": 1}, {"a": 2, "c": True}], [{"--a": 1}, {"--a": 2, "--c": True}]),
    ],
)
def test_expand_matrix(product, sets, expected):
    assert expand_matrix(product, sets) == expected


@pytest.mark.parametrize(
    ("base", "args", "expected"),
    [
        ("vllm serve m --max-num-seqs 4", {"--max-num-seqs": 64}, "vllm serve m --max-num-seqs 64"),
        ("vllm serve m --max-num-seqs=4 --port 1", {"--max-num-seqs": 8}, "vllm serve m --port 1 --max-num-seqs 8"),
        (
            "vllm serve m --enable-chunked-prefill",
            {"--enable-chunked-prefill": False},
            "vllm serve m --no-enable-chunked-prefill",
        ),
        (
            "vllm serve m --no-enable-prefix-caching",
            {"--enable-prefix-caching": True},
            "vllm serve m --enable-prefix-caching",
        ),
        ("vllm serve m", {"--gpu-memory-utilization": 0.5}, "vllm serve m --gpu-memory-utilization 0.5"),
    ],
)
def test_apply_args(base, args, expected):
    assert apply_args(shlex.split(base), args) == shlex.split(expected)


@pytest.mark.parametrize(
    ("command", "model", "expected"),
    [
        (
            "rampwatch sim --hardware h100 --model llama-3.1-8b --port 8311 --speed 2 --gpu-telemetry --max-num-seqs 64 --engines 2",
            "meta-llama/Llama-3.1-8B-Instruct",
            "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 64 --data-parallel-size 2",
        ),
        (
            "rampwatch sim --num-gpu-blocks=300 --block-size 32",
            None,
            "vllm serve MODEL --num-gpu-blocks-override=300 --block-size 32",
        ),
        (  # --api-server-count is vLLM's too; the gaps file is the simulator's own
            "rampwatch sim -dp 2 --api-server-count 2 --chunk-gaps-out /tmp/g.npy",
            "m",
            "vllm serve m -dp 2 --api-server-count 2",
        ),
        ("vllm serve m --chat-template 'a b'", None, "vllm serve m --chat-template 'a b'"),  # already vllm: as is
    ],
)
def test_vllm_serve_line(command, model, expected):
    assert command_line(vllm_serve_argv(shlex.split(command), model)) == expected


def test_command_line_quotes_what_a_shell_would_split():
    argv = ["vllm", "serve", "m", "--override-generation-config", '{"temperature": 0.5}']
    line = command_line(argv)
    assert line == "vllm serve m --override-generation-config '{\"temperature\": 0.5}'"
    assert shlex.split(line) == argv


@pytest.mark.parametrize(
    ("command", "gpus"),
    [
        ("vllm serve m", 1),
        ("vllm serve m -tp 2", 2),
        ("vllm serve m --tensor-parallel-size 2 --data-parallel-size=4", 8),
        ("vllm serve m -tp 2 -pp 2 -dp 2", 8),
        ("rampwatch sim --engines 3", 3),
    ],
)
def test_gpu_count(command, gpus):
    assert gpu_count(shlex.split(command)) == gpus


@pytest.mark.parametrize(
    ("points", "front"),
    [
        ([(1, 1), (2, 2)], [False, True]),
        ([(1, 3), (3, 1), (2, 2)], [True, True, True]),
        ([(1, 3), (3, 1), (1, 1)], [True, True, False]),
        ([(2, 2), (2, 2)], [True, True]),  # equal points do not dominate each other
        ([(2, 2), (2, 1)], [True, False]),  # as good on one axis, worse on the other
        ([(None, 5), (1, 1)], [False, True]),
        ([(math.nan, 5), (1, 1)], [False, True]),
    ],
)
def test_pareto_front(points, front):
    assert pareto_front(points) == front


def config(goodput, out, per_user, reached=True, status="done", gpus=1, **more):
    """A completed configuration's figures as the best rule reads them."""
    return dict(
        status=status,
        reached=reached,
        max_goodput_rps=goodput,
        output_tps=out,
        tps_per_user=per_user,
        gpus=gpus,
        **more,
    )


# The issue's sweep (rampwatch sweep sweep-sim before its ramp was lengthened): #3 was
# never loaded (its 8 s ramp ended first) and #4 beat it on both axes of the front.
ISSUE_SWEEP = [
    config(1.9, 554.4, 50.6),
    config(2.6, 935.7, 80.6),
    config(15.0, 965.9, 84.7, reached=False),
    config(5.5, 1195.5, 96.2),
]


@pytest.mark.parametrize(
    ("rows", "best", "not_reached"),
    [
        (ISSUE_SWEEP, 3, [2]),  # the one on the front: never the unloaded #3
        ([config(3.0, 900, 50), config(5.0, 1000, 60)], 1, []),
        ([config(9.0, 500, 50, status="failed"), config(5.0, 400, 40)], 1, []),
        ([config(0.0, 500, 50)], None, []),  # no good request
        ([config(15.0, 966, 85, reached=False), config(9.0, 900, 80, reached=False)], None, [0, 1]),
        # more good-put but dominated on both axes of the front: not best
        ([config(10.0, 1000, 50), config(8.0, 1100, 60)], 1, []),
        # both on the front (one faster per user, one more throughput): the higher good-put
        ([config(6.0, 1500, 40), config(8.0, 1000, 90)], 1, []),
        # the same figures: fewer GPUs are more tok/s per GPU, hence the front
        ([config(5.0, 1000, 60, gpus=2), config(5.0, 1000, 60, gpus=1)], 1, []),
        # the SLO broken without a knee is a limit reached
        ([config(4.0, 800, 70, reached=True, slo_broken_at_end="TTFT p99 900 ms > 500 ms")], 0, []),
    ],
)
def test_the_best_is_on_the_front_of_the_configurations_loaded_to_their_limit(rows, best, not_reached):
    rows = [dict(row, index=i) for i, row in enumerate(rows)]
    mark_pareto(rows)
    verdict = choose_best(rows)
    assert (verdict["best"], verdict["not_reached"]) == (best, not_reached)
    assert best_config(rows) == best
    if best is not None:
        assert rows[best]["pareto"] and rows[best]["reached"]  # never dominated, never unloaded


def test_an_unloaded_configuration_is_off_the_front_whatever_its_figures():
    rows = [dict(row, index=i) for i, row in enumerate(ISSUE_SWEEP)]
    mark_pareto(rows)
    assert [row["pareto"] for row in rows] == [False, False, False, True]


@pytest.mark.parametrize(
    ("spreads", "overlap"),
    [
        ([[5.0, 6.0], [4.0, 5.5], [1.0, 2.0]], [1]),  # #2 reaches into #1's range
        ([[5.0, 6.0], [3.0, 4.9], [1.0, 2.0]], []),
    ],
)
def test_repeats_whose_good_put_overlaps_the_best_are_named(spreads, overlap):
    rows = [
        dict(config(sum(s) / 2, 1000 - 100 * i, 60 + 10 * i), index=i, spread={"max_goodput_rps": s})
        for i, s in enumerate(spreads)
    ]
    mark_pareto(rows)
    verdict = choose_best(rows)
    assert verdict["best"] == 0 and verdict["overlap"] == overlap


def test_combine_runs_gives_medians_spreads_and_reached_only_when_every_run_was():
    runs = [
        {"knee_rps": 10.0, "knee_rps_pm": 1.0, "max_goodput_rps": 5.0, "output_tps": 900.0, "reached": True,
         "limit": "batch-size cap", "limit_key": "batch_cap", "try_next": "--max-num-seqs 16", "peak_kv_pct": 3.0},
        {"knee_rps": 12.0, "knee_rps_pm": 1.4, "max_goodput_rps": 6.0, "output_tps": 1000.0, "reached": True,
         "limit": "batch-size cap", "limit_key": "batch_cap", "try_next": "--max-num-seqs 16", "peak_kv_pct": 5.0},
        {"knee_rps": 11.0, "knee_rps_pm": 1.2, "max_goodput_rps": 7.0, "output_tps": 950.0, "reached": True,
         "limit": "undetermined", "limit_key": "undetermined", "try_next": None, "peak_kv_pct": 4.0},
    ]  # fmt: skip
    row = combine_runs(runs)
    assert (row["knee_rps"], row["knee_rps_pm"], row["max_goodput_rps"], row["output_tps"]) == (11.0, 1.2, 6.0, 950.0)
    assert row["spread"] == {"knee_rps": [10.0, 12.0], "max_goodput_rps": [5.0, 7.0], "output_tps": [900.0, 1000.0]}
    assert (row["limit"], row["try_next"], row["reached"]) == ("batch-size cap", "--max-num-seqs 16", True)
    assert not combine_runs([*runs[:2], {**runs[2], "reached": False, "knee_rps": None}])["reached"]
    assert combine_runs(runs[:1]) == runs[0]


@pytest.mark.parametrize(
    ("schedule", "t", "peak"),
    [
        ({"kind": "linear", "start_rps": 1.0, "end_rps": 21.0, "duration_s": 40.0}, 20.0, 11.0),
        ({"kind": "linear", "start_rps": 1.0, "end_rps": 21.0, "duration_s": 40.0}, 45.0, 21.0),  # drained past it
        ({"kind": "steps", "steps": [{"rate": 2.0, "duration_s": 10}, {"rate": 4.0, "duration_s": 10}]}, 12.0, 4.0),
        ({"kind": "steps", "steps": [{"rate": 2.0, "duration_s": 10}, {"rate": 4.0, "duration_s": 10}]}, 5.0, 2.0),
    ],
)
def test_peak_target_rps(schedule, t, peak):
    assert peak_target_rps(schedule, t) == pytest.approx(peak)


@pytest.mark.parametrize(
    ("knee", "offered_range", "pm"),
    [(11.5, [10.3, 12.7], 1.2), (11.5, [11.0, 14.5], 3.0), (11.5, None, None), (None, [1, 2], None)],
)
def test_knee_uncertainty_covers_the_window_on_either_side(knee, offered_range, pm):
    assert knee_uncertainty(knee, offered_range) == (None if pm is None else pytest.approx(pm))


@pytest.mark.parametrize(
    ("figures", "knee", "limit"),
    [
        (
            {"knee_rps": 11.5, "knee_rps_pm": 1.24, "reached": True, "limit": "KV cache full"},
            "11.5 ±1.2",
            "KV cache full",
        ),
        ({"knee_rps": None, "reached": False, "peak_offered_rps": 24.0}, ">24.0", NOT_REACHED),
        (
            {"knee_rps": None, "reached": True, "slo_broken_at_end": "TTFT p99 900 ms > 500 ms"},
            "none",
            "SLO broken, no knee",
        ),
        (
            {"knee_rps": 11.0, "knee_rps_pm": 1.2, "reached": True, "spread": {"knee_rps": [10.0, 12.0]}},
            "11.0 ±1.2 (10.0–12.0)",
            "—",
        ),
    ],
)
def test_the_table_says_the_knee_with_its_uncertainty_and_an_unloaded_configuration(figures, knee, limit):
    rows = [{"index": 0, "config": "--max-num-seqs 8", "status": "done", **figures}]
    header, cells = table_cells(rows)
    assert cells[header.index("knee rps")] == knee and cells[header.index("limit")] == limit


def test_labels_of_close_points_do_not_print_as_one_number():
    placed = place_labels([(3, 10, "2"), (3, 11, "3*"), (3, 10, "4")], width=20, height=6)
    cells = [(r, c + k) for r, c, label in placed for k in range(len(label))]
    assert len(cells) == len(set(cells))  # no cell written twice
    for (r, c, _), (r2, c2, _) in zip(placed, placed[1:], strict=False):
        assert r != r2 or abs(c - c2) > 1  # and a blank between neighbours on a line
    assert placed[0] == (3, 10, "2")  # the first keeps its place


def test_the_text_plane_brackets_an_unloaded_configuration():
    rows = [dict(row, index=i, config=f"c{i}") for i, row in enumerate(ISSUE_SWEEP)]
    mark_pareto(rows)
    text = format_pareto(rows)
    assert "(3)" in text and "4*" in text and "* on the Pareto front: #4" in text
    assert "(n): not loaded to its limit" in text


@pytest.mark.parametrize(
    ("times", "window", "rate"),
    [([], 10.0, 0.0), ([0.0, 1.0, 2.0], 10.0, 0.3), ([0, 1, 2, 20, 20.5, 21, 21.5], 2.0, 2.0), ([0, 10], 10.0, 0.1)],
)
def test_max_window_rate(times, window, rate):
    assert max_window_rate(times, window) == pytest.approx(rate)


def req(i, sent, ttft, end, tokens=11, ok=True, cancelled=False):
    return RequestRecord(
        id=i,
        scheduled_at=sent,
        sent_at=sent,
        end_at=end,
        tokens_from_usage=True,
        first_token_at=None if ttft is None else sent + ttft,
        chunk_times=[]
        if ttft is None
        else [sent + ttft + (end - sent - ttft) * k / (tokens - 1) for k in range(1, tokens)],
        completion_tokens=tokens if ok else 0,
        error_class=None if ok else ("cancelled" if cancelled else "http"),
    )


def test_good_requests_follow_vllm_goodput():
    slo = parse_slo("ttft_p99<500ms,itl_p99<50ms")
    records = [
        req(0, 0.0, 0.2, 0.2 + 10 * 0.04),  # good
        req(1, 0.0, 0.6, 0.6 + 10 * 0.04),  # TTFT over
        req(2, 0.0, 0.2, 0.2 + 10 * 0.06),  # TPOT over
        req(3, 0.0, None, 1.0, ok=False),  # failed
        req(4, 0.0, 0.5, 0.5 + 10 * 0.05),  # equal to both limits: good, as --goodput
    ]
    assert good_requests(records, slo).tolist() == [True, False, False, False, True]


def test_config_row_reads_the_knee_window_and_its_explanation():
    slo = parse_slo("ttft_p99<500ms,itl_p99<50ms")
    records = [req(i, i * 0.5, 0.125, i * 0.5 + 0.375) for i in range(40)]  # 2 req/s, 0..20 s (binary-exact times)
    knee = Event(
        15.0,
        "knee",
        "knee",
        {"offered_rps": 2.0, "onset_t": 10.0, "explanation": {"limit": "batch_cap", "try": "--max-num-seqs 16"}},
    )
    row = config_row(records, [], [knee], slo)
    assert row["knee_rps"] == 2.0 and row["knee_t"] == 10.0
    assert row["limit"] == "batch-size cap" and row["try_next"] == "--max-num-seqs 16"
    assert row["ttft_p50_ms"] == pytest.approx(125.0)
    assert row["itl_p50_ms"] == pytest.approx(25.0)
    # delivered from the onset (10 s) to the last answer (19.875 s): 20 requests of 11 tokens
    assert row["output_tps"] == pytest.approx(20 * 11 / 9.875)
    assert row["tps_per_user"] == pytest.approx(11 / 0.375)
    assert row["max_goodput_rps"] == pytest.approx(2.0)
    # the seconds after the knee settled another limit: the row gives the settled one
    review = Event(
        45.0,
        "info",
        "knee revised",
        {
            "knee_review": True,
            "knee_t": 15.0,
            "explanation": {"limit": "kv_full", "try": "--gpu-memory-utilization 0.95"},
            "revised": True,
        },
    )
    settled = config_row(records, [], [knee, review], slo)
    assert settled["limit"] == "KV cache full" and settled["try_next"] == "--gpu-memory-utilization 0.95"
    no_knee = config_row(records, [], [], slo, load_end_s=20.0)
    assert no_knee["knee_rps"] is None and no_knee["limit"] is None
    # the load's last 10 s: sends up to 19.5 s, answers ending in [9.5, 19.5]: 20 of them (i = 19..38)
    assert no_knee["output_tps"] == pytest.approx(20 * 11 / 10)


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


def test_format_table_marks_the_front_and_says_why_a_row_failed():
    rows = [
        {
            "index": 0,
            "config": "--max-num-seqs 8",
            "status": "done",
            "pareto": True,
            "knee_rps": 4.0,
            "limit": "batch-size cap",
        },
        {
            "index": 1,
            "config": "--max-num-seqs 64",
            "status": "failed",
            "reason": "server exited with code 1 during startup: OOM",
        },
    ]
    text = format_table(rows)
    lines = text.splitlines()
    assert lines[1].startswith("1*") and lines[1].endswith("batch-size cap")
    assert lines[2].startswith("2 ") and lines[2].endswith("failed")
    assert lines[3] == "#2 failed: server exited with code 1 during startup: OOM"


def test_the_tokens_per_joule_column_shows_only_with_gpu_power():
    rows = [{"index": 0, "config": "--max-num-seqs 8", "status": "done", "reached": True, "tokens_per_joule": None}]
    assert "tok/J" not in format_table(rows)
    rows.append(
        {"index": 1, "config": "--max-num-seqs 64", "status": "done", "reached": True, "tokens_per_joule": 1.234}
    )
    header, first, second = format_table(rows).splitlines()[:3]
    assert "tok/J" in header and first.split()[-2] == "—" and second.split()[-2] == "1.23"


def verdict_of(rows, repeats=1):
    rows = [
        dict(row, index=i, config=f"--max-num-seqs {4 * 2**i}", command="vllm serve m") for i, row in enumerate(rows)
    ]
    mark_pareto(rows)
    state = {"slo": "ttft_p99<500ms", "rows": rows, "repeats": repeats, **choose_best(rows)}
    return verdict_text(state).splitlines()


@pytest.mark.parametrize(
    ("rows", "repeats", "lines"),
    [
        (
            [
                dict(row, knee_rps=10.0 if row["reached"] else None, knee_rps_pm=1.5, peak_offered_rps=40.0)
                for row in ISSUE_SWEEP
            ],
            1,
            [
                "best under ttft_p99<500ms (of those loaded to their limit, on the Pareto front, the highest max "
                "good-put): #4 --max-num-seqs 32 — 5.5 good req/s, knee 10.0 ±1.5 rps",
                "  vllm serve m",
                "#3 --max-num-seqs 16: not reached; extend the load (kept up to 40.0 rps offered) — not judged",
            ],
        ),
        (
            [config(15.0, 966, 85, reached=False, peak_offered_rps=40.0)],
            1,
            [
                "best under ttft_p99<500ms: none — no configuration was loaded to its limit: extend the load "
                "(a higher end_rps or longer ramp)",
                "#1 --max-num-seqs 4: not reached; extend the load (kept up to 40.0 rps offered) — not judged",
            ],
        ),
        (
            [config(None, None, None, status="failed"), config(0.0, 500, 50, knee_rps=3.0)],
            1,
            ["best under ttft_p99<500ms: none — no configuration loaded to its limit served a request meeting the SLO"],
        ),
        (
            [config(None, None, None, status="failed")],
            1,
            ["best under ttft_p99<500ms: none — no configuration completed"],
        ),
        (
            [
                config(5.5, 1000, 60, knee_rps=8.0, spread={"max_goodput_rps": [5.0, 6.0]}),
                config(5.2, 900, 70, knee_rps=7.0, spread={"max_goodput_rps": [4.5, 5.4]}),
            ],
            3,
            [
                "best under ttft_p99<500ms (of those loaded to their limit, on the Pareto front, the highest max "
                "good-put): #1 --max-num-seqs 4 — 5.5 good req/s, knee 8.0 rps",
                "  vllm serve m",
                "#1 and #2 overlap (good-put over 3 runs): not distinguishable at 3 repeats",
            ],
        ),
        (  # the best's p99 at its knee breaks the SLO its good-put was judged by: said, not left to contradict it
            [config(7.6, 1640, 86, knee_rps=10.8, ttft_p99_ms=814.0, ttft_p50_ms=371.0)],
            1,
            [
                "best under ttft_p99<500ms (of those loaded to their limit, on the Pareto front, the highest max "
                "good-put): #1 --max-num-seqs 4 — 7.6 good req/s, knee 10.8 rps",
                "  vllm serve m",
                "  at its knee #1 breaks the SLO (TTFT p99 814 ms > 500 ms): good-put judges each request against "
                "the bounds, so run it at its max good-put (7.6 req/s), not its knee",
            ],
        ),
    ],
)
def test_the_verdict_names_the_best_what_it_cannot_tell_apart_and_what_was_not_judged(rows, repeats, lines):
    assert verdict_of(rows, repeats) == lines


def test_a_repeat_moves_the_seed_on_so_its_arrivals_differ():
    from rampwatch.app.sweep import repeat_scenario
    from rampwatch.loadgen.workload.scenario import load_scenario

    first = load_scenario("chat")
    second = repeat_scenario(first, 1)
    assert second.seed == first.seed + 1 and second.raw["seed"] == second.seed
    assert first.raw["seed"] == first.seed  # the first run's scenario is left as it was
    gaps = [[s.next_send_time() for _ in range(20)] for s in (first.build_schedule(), second.build_schedule())]
    assert gaps[0] != gaps[1]
