import math
import shlex
import textwrap

import pytest

from rampwatch.core.errors import UserError
from rampwatch.core.timeline import Event, RequestRecord, Tick
from rampwatch.loadgen.slo import parse_slo
from rampwatch.loadgen.sweep import (
    EarlyStop,
    EarlyStopRule,
    apply_args,
    best_config,
    command_line,
    config_row,
    expand_matrix,
    format_table,
    good_requests,
    gpu_count,
    load_sweep,
    max_window_rate,
    pareto_front,
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


@pytest.mark.parametrize(
    ("rows", "best"),
    [
        ([{"status": "done", "max_goodput_rps": 3.0}, {"status": "done", "max_goodput_rps": 5.0}], 1),
        ([{"status": "failed", "max_goodput_rps": 9.0}, {"status": "done", "max_goodput_rps": 5.0}], 1),
        ([{"status": "done", "max_goodput_rps": 0.0}], None),
        (
            [
                {"status": "done", "max_goodput_rps": 5.0, "gpus": 2},
                {"status": "done", "max_goodput_rps": 5.0, "gpus": 1},
            ],
            1,
        ),
        (
            [
                {"status": "done", "max_goodput_rps": 5.0, "output_tps": 10.0},
                {"status": "done", "max_goodput_rps": 5.0, "output_tps": 20.0},
            ],
            1,
        ),
    ],
)
def test_best_config(rows, best):
    assert best_config(rows) == best


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
    rows = [{"index": 0, "config": "--max-num-seqs 8", "status": "done", "tokens_per_joule": None}]
    assert "tok/J" not in format_table(rows)
    rows.append({"index": 1, "config": "--max-num-seqs 64", "status": "done", "tokens_per_joule": 1.234})
    header, first, second = format_table(rows).splitlines()
    assert "tok/J" in header and first.split()[-2] == "—" and second.split()[-2] == "1.23"
