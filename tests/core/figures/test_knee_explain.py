"""explain_knee on synthetic windows: one per limit, the ambiguous cases (two limits at
once: the priority picks, the other is mentioned) and the undetermined ones."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rampwatch.core.figures.knee import KneeDetector
from rampwatch.core.figures.knee_explain import KneeReview, explain_knee
from rampwatch.core.figures.knee_explanation import PRIORITY, KneeExplanation
from rampwatch.core.figures.server_limits import ServerLimits, vllm_batch_defaults
from rampwatch.core.timeline import Event, RunHeader, Snapshot
from rampwatch.loadgen.server.scrape import cache_config_from_metrics

N = 40  # seconds in a window: 10 of baseline, 10 recent
DATA = Path(__file__).resolve().parents[2] / "data"


def ramp(a: float, b: float, start: int = 0, end: int = N) -> list[float]:
    """a until ``start``, a→b linearly to the second before ``end``, b from there."""
    out = []
    for i in range(N):
        if i < start:
            out.append(a)
        elif i >= end:
            out.append(b)
        else:
            out.append(a + (b - a) * (i - start) / max(1, end - 1 - start))
    return out


def flat(v: float) -> list[float]:
    return [v] * N


def window(**series: list[float]) -> dict[str, list[float]]:
    """A window where nothing is wrong, with ``series`` replacing the defaults."""
    base = {
        "running": flat(20.0),
        "waiting": flat(0.0),
        "kv_usage_pct": flat(30.0),
        "preemptions": flat(0.0),
        "client_queued": flat(0.0),
        "ttft_p50": flat(0.08),
        "itl_p50": flat(0.02),
        "server_prompt_tps": flat(2000.0),
        "server_generation_tps": flat(1000.0),
        "prefix_hit_pct": flat(0.0),
    }
    base.update(series)
    return base


BATCH_CAP = dict(
    running=ramp(10, 64, 0, 15),
    waiting=ramp(0, 41, 15, N),
    kv_usage_pct=flat(38.0),
    ttft_p50=ramp(0.08, 1.5, 15, N),
)
KV_FULL = dict(
    running=ramp(40, 120, 0, 25),
    waiting=ramp(0, 30, 25, N),
    kv_usage_pct=ramp(50, 99, 0, 28),
    preemptions=[0.0] * 30 + [3.0] * 10,
    ttft_p50=ramp(0.08, 2.0, 25, N),
)
TOKEN_BUDGET = dict(
    running=flat(30.0),
    waiting=ramp(0, 25, 20, N),
    server_prompt_tps=ramp(40_000, 95_000, 0, 20),
    server_generation_tps=flat(1500.0),
    ttft_p50=ramp(0.1, 0.8, 20, N),
    itl_p50=ramp(0.020, 0.022, 0, N),
)
CLIENT_CAP = dict(
    running=ramp(10, 32, 0, 15),
    client_queued=ramp(0, 35, 15, N),
    ttft_p50=flat(0.08),
)
WANDERING = [60.0 + (i % 7) * 3 for i in range(N)]
COMPUTE = dict(
    running=ramp(20, 120, 0, N),
    itl_p50=ramp(0.02, 0.05, 0, N),
    kv_usage_pct=ramp(20, 60, 0, N),
    ttft_p50=ramp(0.08, 0.3, 0, N),
)


@pytest.mark.parametrize(
    ("series", "limits", "limit", "evidence", "try_next"),
    [
        (
            BATCH_CAP,
            ServerLimits(max_num_seqs=64),
            "batch_cap",
            ["running 64 = max_num_seqs 64 for 26 s", "waiting 0→41", "KV 38 %"],
            "--max-num-seqs 128",
        ),
        (
            BATCH_CAP,
            ServerLimits(),
            "batch_cap",
            ["running plateaued at 64 (the cap, inferred)", "waiting 0→41"],
            "--max-num-seqs 128",
        ),
        # seconds without a scrape (NaN), in the plateau and at its end, change nothing
        (
            {**BATCH_CAP, "running": ramp(10, 64, 0, 15)[:30] + [math.nan] + ramp(10, 64, 0, 15)[31:-1] + [math.nan]},
            ServerLimits(),
            "batch_cap",
            ["running plateaued at 64 (the cap, inferred)"],
            "--max-num-seqs 128",
        ),
        # KV at 60 %: twice the batch would not fit; 64 x 90 / 60 = 96
        (
            {**BATCH_CAP, "kv_usage_pct": flat(60.0)},
            ServerLimits(max_num_seqs=64),
            "batch_cap",
            ["KV 60 %"],
            "--max-num-seqs 96",
        ),
        # two engines of 32: the running series sums them
        (
            BATCH_CAP,
            ServerLimits(max_num_seqs=32, engines=2),
            "batch_cap",
            ["max_num_seqs 32 x 2 engines"],
            "--max-num-seqs 64",
        ),
        (
            KV_FULL,
            ServerLimits(max_num_seqs=256, gpu_memory_utilization=0.9),
            "kv_full",
            ["KV 99 %", "30 preemptions in 40 s", "waiting 0→30"],
            "--kv-cache-dtype fp8",
        ),
        (
            KV_FULL,
            ServerLimits(gpu_memory_utilization=0.95),
            "kv_full",
            ["KV 99 %"],
            "--kv-cache-dtype fp8",
        ),
        (  # a memory share well under the top: raising it is the cheapest large step
            KV_FULL,
            ServerLimits(gpu_memory_utilization=0.5),
            "kv_full",
            ["KV 99 %"],
            "--gpu-memory-utilization 0.95",
        ),
        (
            TOKEN_BUDGET,
            ServerLimits(max_num_seqs=256, max_num_batched_tokens=2048),
            "token_budget",
            ["tokens per step of max_num_batched_tokens 2,048", "TTFT p50 100 ms→", "ITL p50 20 ms→22 ms"],
            "--max-num-batched-tokens 4096",
        ),
        # the budget unknown: the prompt rate grew, then stopped while requests queue
        (
            TOKEN_BUDGET,
            ServerLimits(max_num_seqs=256),
            "token_budget",
            ["prompt 95,000 tok/s flat (±0 %)", "tokens per step (the budget, inferred)", "ITL p50 20 ms→22 ms"],
            "--max-num-batched-tokens 4096",
        ),
        # a running count wobbling by one while the prompt rate is flat is the budget, not a cap
        (
            {**TOKEN_BUDGET, "running": [10.0 + i % 2 for i in range(N)]},
            ServerLimits(),
            "token_budget",
            ["(the budget, inferred)"],
            "--max-num-batched-tokens 4096",
        ),
        (
            CLIENT_CAP,
            ServerLimits(max_num_seqs=256, max_concurrency=32),
            "client_cap",
            ["client queue 0→35 at --max-concurrency 32", "server waiting 0", "running 32 of max_num_seqs 256"],
            "--max-concurrency 64",
        ),
        (
            COMPUTE,
            ServerLimits(max_num_seqs=256),
            "compute_bound",
            ["below max_num_seqs 256", "ITL p50", "the step time grows with the batch"],
            "more GPUs: --data-parallel-size 2 (a model that fits one GPU) or --tensor-parallel-size 2",
        ),
    ],
    ids=[
        "batch-cap",
        "batch-cap-inferred",
        "batch-cap-inferred-gaps",
        "batch-cap-kv-sized",
        "batch-cap-dp",
        "kv-full",
        "kv-full-memory-maxed",
        "kv-full-memory-low",
        "token-budget",
        "token-budget-inferred",
        "budget-not-an-inferred-cap",
        "client-cap",
        "compute",
    ],
)
def test_each_limit_is_named_with_its_numbers_and_next_step(series, limits, limit, evidence, try_next):
    why = explain_knee(window(**series), limits)
    assert why.limit == limit
    for part in evidence:
        assert part in why.evidence
    assert why.try_next == try_next
    assert why.also == ()


def test_the_client_cap_is_a_rampwatch_flag():
    why = explain_knee(window(**CLIENT_CAP), ServerLimits(max_concurrency=32))
    assert why.try_is == "rampwatch flag"
    assert "a rampwatch flag, not an engine argument" in "\n".join(why.lines())
    assert explain_knee(window(**BATCH_CAP), ServerLimits(max_num_seqs=64)).try_is == "engine argument"


@pytest.mark.parametrize(
    ("series", "limits", "first", "second"),
    [
        # running at the cap and the KV cache full: more sequences would not fit
        (
            {**BATCH_CAP, "kv_usage_pct": flat(97.0), "preemptions": flat(1.0)},
            ServerLimits(max_num_seqs=64),
            "kv_full",
            "batch_cap",
        ),
        # at the cap, and the steps full of prefill
        (
            {**TOKEN_BUDGET, "running": ramp(10, 64, 0, 15)},
            ServerLimits(max_num_seqs=64, max_num_batched_tokens=2048),
            "batch_cap",
            "token_budget",
        ),
        # the client's queue growing, and the batch slowing as it grows
        (
            {**COMPUTE, "client_queued": ramp(0, 20, 20, N)},
            ServerLimits(max_num_seqs=256),
            "client_cap",
            "compute_bound",
        ),
    ],
    ids=["kv-over-batch-cap", "batch-cap-over-budget", "client-over-compute"],
)
def test_two_limits_at_once_pick_by_priority_and_mention_the_other(series, limits, first, second):
    why = explain_knee(window(**series), limits)
    assert why.limit == first
    assert [a["limit"] for a in why.also] == [second]
    assert PRIORITY.index(first) < PRIORITY.index(second)
    assert any(line.startswith("also: ") for line in why.lines())


def test_kv_full_and_batch_cap_tells_not_to_raise_the_cap():
    series = {**BATCH_CAP, "kv_usage_pct": flat(97.0), "preemptions": flat(1.0)}
    why = explain_knee(window(**series), ServerLimits(max_num_seqs=64, gpu_memory_utilization=0.9))
    assert why.try_next == "--kv-cache-dtype fp8"
    assert "--max-num-seqs 32 (fewer sequences share the cache)" in why.alternatives


@pytest.mark.parametrize(
    ("series", "limits", "shown"),
    [
        # TTFT rising, nothing else moving: no rule holds
        (
            {"ttft_p50": ramp(0.08, 0.9, 20, N), "waiting": [0.0, 2.0] * (N // 2)},
            ServerLimits(max_num_seqs=256),
            ["TTFT p50 80 ms→"],
        ),
        # a running count that wanders while requests wait is no inferred cap
        (
            {"running": WANDERING, "waiting": ramp(0, 30, 15, N)},
            ServerLimits(),
            ["running ", "waiting 0→30"],
        ),
        # one request at a time while others queue (long prefills): too low to be taken for a cap
        ({"running": ramp(0, 2, 0, 10), "waiting": ramp(0, 30, 15, N)}, ServerLimits(), ["running 0→2"]),
        # a plateau that ended before the knee is not what held it
        (
            {"running": [32.0] * 20 + [20.0 + (i % 5) for i in range(20)], "waiting": ramp(0, 30, 15, N)},
            ServerLimits(),
            ["waiting 0→30"],
        ),
        # the token budget unknown and the prompt rate flat from the start: nothing shows a limit reached
        (
            {**TOKEN_BUDGET, "server_prompt_tps": flat(95_000.0)},
            ServerLimits(max_num_seqs=256),
            ["waiting 0→25", "TTFT p50"],
        ),
        # client queue growing while the server queues too: not the client's cap
        (
            {**CLIENT_CAP, "running": WANDERING, "waiting": ramp(0, 20, 15, N)},
            ServerLimits(),
            ["client queue 0→35", "waiting 0→20"],
        ),
        # no /metrics at all: the client's figures only
        (
            {name: flat(math.nan) for name in ("running", "waiting", "kv_usage_pct", "preemptions")}
            | {"ttft_p50": ramp(0.08, 2.0, 10, N)},
            ServerLimits(),
            ["TTFT p50 80 ms→"],
        ),
    ],
    ids=[
        "ttft-only",
        "wandering-running",
        "low-plateau",
        "plateau-over",
        "prompt-never-grew",
        "client-and-server-queue",
        "no-metrics",
    ],
)
def test_undetermined_shows_the_evidence_and_suggests_nothing(series, limits, shown):
    why = explain_knee(window(**series), limits)
    assert why.limit == "undetermined"
    assert why.try_next is None
    for part in shown:
        assert part in why.evidence


def test_an_empty_window_is_undetermined():
    why = explain_knee({}, None)
    assert (why.limit, why.evidence) == ("undetermined", "no server or latency figures around the knee")


def test_prefix_cache_hits_do_not_fill_the_token_budget():
    # the same prompt tok/s, 80 % of it served from the prefix cache: the steps are not full
    why = explain_knee(
        window(**TOKEN_BUDGET, prefix_hit_pct=flat(80.0)), ServerLimits(max_num_seqs=256, max_num_batched_tokens=2048)
    )
    assert why.limit == "undetermined"


# -- ServerLimits ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("memory_gib", "name", "cpu", "expected"),
    [
        (None, "", False, None),  # unknown device: unknown defaults
        (80, "NVIDIA H100 80GB HBM3", False, (8192, 1024)),
        (141, "NVIDIA H200", False, (8192, 1024)),
        (80, "NVIDIA A100-SXM4-80GB", False, (2048, 256)),
        (24, "NVIDIA L4", False, (2048, 256)),
        (192, "NVIDIA B200", False, (16384, 1024)),
        (None, "", True, (2048, 128)),
    ],
)
def test_vllm_batch_defaults(memory_gib, name, cpu, expected):
    assert vllm_batch_defaults(memory_gib, name, cpu) == expected


def test_limits_from_engine_args():
    limits = ServerLimits.from_engine_args(
        {
            "max_num_seqs": "64",
            "max-num-batched-tokens": "8192",
            "data_parallel_size": "2",
            "gpu_memory_utilization": "0.85",
        }
    )
    assert (limits.max_num_seqs, limits.max_num_batched_tokens, limits.running_cap) == (64, 8192, 128)
    assert limits.gpu_memory_utilization == 0.85
    assert limits.sources["max_num_seqs"] == "serve command"


@pytest.mark.parametrize(
    ("args", "kw", "expected"),
    [
        ({}, {}, (None, None)),
        ({}, {"device_memory_gib": 80, "device_name": "H100"}, (1024, 8192)),
        ({"max_num_seqs": "8"}, {"device_memory_gib": 24}, (8, 2048)),
        ({"performance_mode": "throughput"}, {"device_memory_gib": 24}, (512, 4096)),
        ({"no_enable_chunked_prefill": True, "max_model_len": "32768"}, {"device_memory_gib": 24}, (256, 32768)),
        ({"tensor_parallel_size": "2"}, {"cpu": True}, (256, 4096)),
        ({"max_num_seqs": "lots", "max_num_batched_tokens": "-5"}, {}, (None, None)),
    ],
    ids=["unknown", "h100-defaults", "given-seqs", "throughput-mode", "no-chunked-prefill", "cpu-tp2", "bad-values"],
)
def test_absent_engine_args_take_vllms_defaults_for_the_device(args, kw, expected):
    limits = ServerLimits.from_engine_args(args, **kw)
    assert (limits.max_num_seqs, limits.max_num_batched_tokens) == expected


def test_limits_of_a_run_from_its_header():
    cache = cache_config_from_metrics((DATA / "vllm-0.32.0-cpu" / "metrics.txt").read_text())
    header = RunHeader(
        "x", 0.0, "http://t", "m", "s", scenario={"max_concurrency": 16}, server_info={"cache_config": cache}
    )
    limits = ServerLimits.of_run(header, ServerLimits.from_engine_args({"max_num_seqs": "8", "block_size": "16"}))
    assert (limits.max_num_seqs, limits.num_gpu_blocks, limits.max_concurrency) == (8, 4096, 16)
    assert limits.block_size == 16  # the serve command's wins
    assert limits.gpu_memory_utilization == 0.92
    assert limits.sources["num_gpu_blocks"] == "/metrics cache_config_info"
    assert ServerLimits.from_dict(limits.to_dict()) == limits


def test_explanation_dict_round_trip_and_old_data():
    why = explain_knee(window(**{**KV_FULL, "running": ramp(10, 64, 0, 15)}), ServerLimits(max_num_seqs=64))
    assert why.also  # a whole explanation: alternatives and a second limit
    data = why.to_dict()
    assert set(data) == {
        "limit",
        "title",
        "evidence",
        "try",
        "try_is",
        "alternatives",
        "also",
        "conflict",
        "window",
        "provisional",
    }
    assert KneeExplanation.from_dict(data) == why
    assert KneeExplanation.from_dict(None) is None
    assert KneeExplanation.from_dict({"offered_rps": 3.0}) is None


def test_the_detector_puts_the_explanation_in_the_knee_event():
    """A ramp against a server capped at 32 running requests: the knee event says so
    (KV at 52 % with 32 running: 32 x 90 / 52 -> 48 would still fit)."""
    det = KneeDetector(limits=ServerLimits(max_num_seqs=32))
    knees = []
    waiting = 0.0
    for i in range(200):
        offered = 1 + 29 * i / 199
        running = min(32.0, offered * 2)
        waiting = max(0.0, waiting + (offered * 2 - 32) / 2) if offered * 2 > 32 else 0.0
        served = min(offered, 16.0)
        values = {
            "target_rps": offered,
            "offered_rps": offered,
            "completed_rps": served,
            "error_rps": 0.0,
            "ttft_p50": 0.08 + waiting / 16,
            "itl_p50": 0.02,
            "running": running,
            "waiting": waiting,
            "kv_usage_pct": 20 + running,
            "preemptions": 0.0,
            "client_queued": 0.0,
        }
        if (event := det.update(float(i), values)) is not None and event.kind == "knee":
            knees.append(event)
    assert len(knees) == 1
    why = KneeExplanation.from_dict(knees[0].data["explanation"])
    assert why is not None and why.limit == "batch_cap"
    assert knees[0].data["limits"] == {"max_num_seqs": 32, "engines": 1, "tensor_parallel_size": 1, "sources": {}}
    assert knees[0].message.startswith("batch-size cap at ~")
    assert knees[0].message.endswith(" req/s offered → try --max-num-seqs 48")
    assert np.isfinite(knees[0].data["offered_rps"])


# -- the summary, the result JSON and a recording's report --------------------------------


def test_the_summary_carries_the_knee_explanation_and_prints_it_under_the_knee():
    from rampwatch.core.figures.summary import format_summary, summarise_requests, to_bench_result

    why = explain_knee(window(**BATCH_CAP), ServerLimits(max_num_seqs=64))
    knee = Event(3.0, "knee", "k", {"offered_rps": 12.5, "explanation": why.to_dict()})
    summary = summarise_requests(None, [], [], [knee], duration_s=4.0)
    assert summary.to_dict()["knee_explanation"] == why.to_dict()
    lines = format_summary(summary).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Knee at offered rate"))
    assert lines[at + 1] == f"  why: batch-size cap ({why.evidence}) → try --max-num-seqs 128"
    assert to_bench_result(summary, None, [])["rampwatch_knee_explanation"] == why.to_dict()
    # a knee recorded before explanations: none, and no line
    old = summarise_requests(None, [], [], [Event(3.0, "knee", "k", {"offered_rps": 12.5})], duration_s=4.0)
    assert old.knee_explanation is None
    assert "  why:" not in format_summary(old)


def test_an_older_recordings_knee_is_explained_from_its_series():
    """A knee event without an explanation: the report works it out from the series of
    the seconds before it, with the limits the header tells (here the concurrency cap)."""
    from rampwatch.core.figures.summary import summarise_requests
    from rampwatch.record.analysis import with_knee_explanation
    from rampwatch.record.html_report import knee_section

    series = window(**CLIENT_CAP)
    header = RunHeader("x", 0.0, "http://t", "m", "s", options={"max_concurrency": 32})
    knee = Event(float(N), "knee", "k", {"offered_rps": 9.0})
    snapshot = Snapshot(float(N), header, "done", 0.0, [float(i) for i in range(N)], series, 0, [knee], {}, True)
    summary = with_knee_explanation(summarise_requests(header, [], [], [knee], duration_s=40.0), snapshot)
    assert summary.knee_explanation is not None
    assert summary.knee_explanation["limit"] == "client_cap"
    assert summary.knee_explanation["try"] == "--max-concurrency 64"
    html = knee_section(summary)
    assert "at 9.0 req/s offered: <b>client concurrency cap</b>" in html
    assert "<li>try next: --max-concurrency 64 (a rampwatch flag, not an engine argument)</li>" in html
    # no knee: nothing to explain, no section
    plain = summarise_requests(header, [], [], [], duration_s=40.0)
    assert with_knee_explanation(plain, snapshot) is plain and knee_section(plain) == ""


def test_an_inferred_cap_with_big_steps_says_a_small_budget_would_look_the_same():
    """As the simulator with --max-num-batched-tokens 512 and 1,500-token prompts shows:
    running held at exactly 11, ~450 tokens a step. With the budget unknown, both read
    alike; the explanation says so."""
    series = window(
        running=ramp(0, 11, 0, 8),
        waiting=ramp(0, 36, 8, N),
        server_prompt_tps=flat(15_000.0),
        server_generation_tps=flat(300.0),
        itl_p50=flat(0.03),
    )
    why = explain_knee(series, ServerLimits())
    assert why.limit == "batch_cap" and "~459 tokens per step" in why.evidence
    assert (
        "if --max-num-batched-tokens is about 459, the token budget holds running flat too: raise it"
        in why.alternatives
    )
    known = explain_knee(series, ServerLimits(max_num_batched_tokens=8192))
    assert "tokens per step" not in known.evidence


@pytest.mark.parametrize(
    ("waiting", "limit"),
    [
        # a scrape between a request's end and the next step's admission sees a slot free
        # while requests wait: still the batch cap (seen with max_num_seqs 8 on the simulator)
        (ramp(0, 52, 30, N), "batch_cap"),
        # a free slot and nobody waiting: not a cap that holds requests back
        (flat(0.0), "undetermined"),
    ],
)
def test_a_small_cap_with_a_slot_free_at_some_scrapes_is_still_the_cap(waiting, limit):
    running = ramp(0, 6, 0, 30)[:30] + [8.0, 8.0, 7.0, 8.0, 8.0, 7.0, 8.0, 8.0, 7.0, 8.0]
    why = explain_knee(window(running=running, waiting=waiting, kv_usage_pct=flat(3.0)), ServerLimits(max_num_seqs=8))
    assert why.limit == limit, why


# -- the final explanation: the seconds after the knee weighed with those before ---------

RECORDED = json.loads((DATA / "knee-chat-sim.json").read_text())
CHAT_LIMITS = ServerLimits.from_dict(RECORDED["limits"])
A = 30  # seconds after the knee, as KneeReview takes them


def after(**series: list[float]) -> dict[str, list[float]]:
    """The seconds after a knee: the end of ``window``'s defaults held, ``series`` replacing them."""
    base = {name: [values[-1]] * A for name, values in window().items()}
    base.update(series)
    return base


def test_the_readmes_run_provisionally_at_the_batch_cap_advises_no_raise_of_8():
    """The README's first command (recorded): running sat at max_num_seqs 256 for 8 s with
    KV at 86 %. A raise the cache can hold (to 90 %) is +3 %: not worth a restart, and
    not advised; the KV cache is the next limit."""
    why = explain_knee(RECORDED["before"], CHAT_LIMITS)
    assert why.limit == "batch_cap"
    assert why.evidence == "running 256 = max_num_seqs 256 for 8 s, waiting 0→48, KV 86 %: room for ~12 more sequences"
    assert why.try_next == "--kv-cache-dtype fp8"
    assert why.alternatives[0] == (
        "raising --max-num-seqs alone is not worth a restart: KV 86 % at 256 running leaves room for ~12 more; "
        "the KV cache is the next limit"
    )
    assert not any(a.startswith("--max-num-seqs") for a in why.alternatives)
    assert why.window == "45 s before the knee"


def test_the_readmes_run_is_kv_bound_once_the_seconds_after_the_knee_are_weighed():
    """The same run, with the 30 s after its knee: the cache filled (100 %) and preempted
    while running had sat at the cap. KV binds; the conflict is said."""
    why = explain_knee(RECORDED["before"], CHAT_LIMITS, after=RECORDED["after"])
    assert why.limit == "kv_full"
    assert why.evidence.startswith("KV 100 % for 22 s, 111 preemptions in 75 s, waiting 0→447")
    assert "cache 99,296 tokens" in why.evidence
    # the server runs at 0.90 already: the memory share's step to 0.95 is small, and said so
    assert why.try_next == "--kv-cache-dtype fp8"
    assert why.alternatives[0] == "--gpu-memory-utilization 0.95 (a small step from 0.90: a few % more cache)"
    assert why.conflict == (
        "signals conflict: running at the cap 256 for 26 s AND KV 100 % with 111 preemptions: "
        "KV binds first, raising --max-num-seqs would not help"
    )
    assert [a["limit"] for a in why.also] == ["batch_cap"]
    assert why.window == "45 s before the knee, 30 s after"


CAPPED_BEFORE = dict(  # running at the cap 256 for the last 8 s before the knee, KV 89 %
    running=ramp(100, 256, 0, 32),
    waiting=ramp(0, 49, 32, N),
    kv_usage_pct=ramp(40, 89, 0, N),
    ttft_p50=ramp(0.08, 0.4, 30, N),
)


@pytest.mark.parametrize(
    ("before", "later", "limits", "limit", "try_next", "conflict"),
    [
        # the case: at the cap first, then KV 100 % with 710 preemptions in the same overload
        (
            CAPPED_BEFORE,
            after(
                running=[256.0] * 5 + [240.0] * 25,
                waiting=ramp(49, 300, 0, A)[:A],
                kv_usage_pct=[100.0] * A,
                preemptions=[23.0] * 10 + [24.0] * 20,
            ),
            ServerLimits(max_num_seqs=256, gpu_memory_utilization=0.9),
            "kv_full",
            "--kv-cache-dtype fp8",
            "signals conflict: running at the cap 256 for 16 s AND KV 100 % with 710 preemptions: "
            "KV binds first, raising --max-num-seqs would not help",
        ),
        # batch-bound: at the cap with the cache half empty after the knee too
        (
            {**CAPPED_BEFORE, "kv_usage_pct": flat(40.0)},
            after(running=[256.0] * A, waiting=ramp(49, 200, 0, A)[:A], kv_usage_pct=[42.0] * A),
            ServerLimits(max_num_seqs=256),
            "batch_cap",
            "--max-num-seqs 512",
            None,
        ),
        # token-budget-bound: steps full of prefill, TTFT rising while ITL holds
        (
            TOKEN_BUDGET,
            after(
                waiting=ramp(25, 60, 0, A)[:A],
                server_prompt_tps=[95_000.0] * A,
                ttft_p50=ramp(0.8, 2.0, 0, A)[:A],
                itl_p50=[0.022] * A,
                server_generation_tps=[1500.0] * A,
                running=[30.0] * A,
            ),
            ServerLimits(max_num_seqs=256, max_num_batched_tokens=2048),
            "token_budget",
            "--max-num-batched-tokens 4096",
            None,
        ),
        # client-capped: rampwatch's own queue keeps growing, the server has room
        (
            CLIENT_CAP,
            after(running=[32.0] * A, client_queued=ramp(35, 90, 0, A)[:A]),
            ServerLimits(max_num_seqs=256, max_concurrency=32),
            "client_cap",
            "--max-concurrency 64",
            None,
        ),
        # compute-bound: the batch below the cap, each step slower as it grows
        (
            COMPUTE,
            after(running=ramp(120, 150, 0, A)[:A], itl_p50=ramp(0.05, 0.07, 0, A)[:A], kv_usage_pct=[60.0] * A),
            ServerLimits(max_num_seqs=256),
            "compute_bound",
            "more GPUs: --data-parallel-size 2 (a model that fits one GPU) or --tensor-parallel-size 2",
            None,
        ),
        # not reached: TTFT moved, nothing else did, before or after
        (
            {"ttft_p50": ramp(0.08, 0.9, 20, N), "waiting": [0.0, 2.0] * (N // 2)},
            after(ttft_p50=[0.9] * A, waiting=[0.0, 2.0] * (A // 2)),
            ServerLimits(max_num_seqs=256),
            "undetermined",
            None,
            None,
        ),
    ],
    ids=["kv-after-the-cap", "batch-bound", "token-budget-bound", "client-capped", "compute-bound", "not-reached"],
)
def test_the_final_explanation_names_the_binding_limit(before, later, limits, limit, try_next, conflict):
    why = explain_knee(window(**before), limits, after=later)
    assert why.limit == limit, why
    assert why.try_next == try_next
    assert why.conflict == conflict
    assert why.window == f"{N} s before the knee, {A} s after"


@pytest.mark.parametrize(
    ("cap", "kv_pct", "try_next"),
    [
        (256, 40.0, "--max-num-seqs 512"),  # room for twice the batch
        (256, 55.0, "--max-num-seqs 416"),  # 256 x 90 / 55 = 418: to 90 %, a round number
        (256, 60.0, "--max-num-seqs 384"),  # 1.5x: the smallest raise worth a restart
        (256, 62.0, "--kv-cache-dtype fp8"),  # 371 < 384: the cache is the next limit
        (256, 89.0, "--kv-cache-dtype fp8"),  # the issue's +8
        (64, 60.0, "--max-num-seqs 96"),
        (8, 20.0, "--max-num-seqs 16"),
        (8, 55.0, "--max-num-seqs 13"),  # 8 x 90 / 55 = 13.1: small caps step by one
    ],
)
def test_a_larger_batch_cap_is_advised_only_when_it_can_matter(cap, kv_pct, try_next):
    series = window(running=ramp(cap / 4, cap, 0, 15), waiting=ramp(0, 41, 15, N), kv_usage_pct=flat(kv_pct))
    why = explain_knee(series, ServerLimits(max_num_seqs=cap, gpu_memory_utilization=0.9))
    assert why.limit == "batch_cap"
    assert why.try_next == try_next
    if try_next.startswith("--max-num-seqs"):
        assert int(try_next.split()[1]) >= 1.5 * cap
    else:
        assert "raising --max-num-seqs alone is not worth a restart" in why.alternatives[0]


# -- the review: provisional at the knee, settled by the seconds after it ----------------


def knee_event(t: float, why: KneeExplanation, limits: ServerLimits) -> Event:
    return Event(t, "knee", "k", {"offered_rps": 10.3, "explanation": why.to_dict(), "limits": limits.to_dict()})


def seconds_of(columns: dict[str, list[float]]) -> list[dict[str, float]]:
    n = max(len(v) for v in columns.values())
    return [{name: (math.nan if v[i] is None else v[i]) for name, v in columns.items()} for i in range(n)]


def review_of_recorded(review: KneeReview, knee: Event, after_seconds: int) -> list[Event]:
    """Feed the recorded seconds: those up to the knee, the knee, ``after_seconds`` after."""
    out: list[Event] = []
    before = seconds_of(RECORDED["before"])
    for i, values in enumerate(before):
        out += review.update(float(i), values, knee if i == len(before) - 1 else None)
    for i, values in enumerate(seconds_of(RECORDED["after"])[:after_seconds]):
        out += review.update(float(len(before) + i), values, None)
    return out


def test_the_review_revises_the_knee_with_the_seconds_after_it_and_says_so():
    first = explain_knee(RECORDED["before"], CHAT_LIMITS)
    knee = knee_event(44.0, first, CHAT_LIMITS)
    events = review_of_recorded(KneeReview(), knee, A)
    assert events[0] is knee
    assert len(events) == 2
    review = events[1]
    assert (review.t, review.kind, review.data["knee_t"], review.data["revised"]) == (74.0, "info", 44.0, True)
    assert review.message == (
        "knee revised with the 30 s after it: KV cache full → try --kv-cache-dtype fp8 "
        "(at the knee: batch-size cap → try --kv-cache-dtype fp8)"
    )
    final = KneeExplanation.from_dict(review.data["explanation"])
    assert final is not None and final.limit == "kv_full"
    assert final.provisional == {
        "limit": "batch_cap",
        "title": "batch-size cap",
        "try": "--kv-cache-dtype fp8",
    }
    # the rules of explain_knee over the seconds before and after, nothing else
    assert final == replace(
        explain_knee(RECORDED["before"], CHAT_LIMITS, after=RECORDED["after"]), provisional=final.provisional
    )


def test_a_review_that_agrees_confirms_the_knee():
    first = explain_knee(window(**BATCH_CAP), ServerLimits(max_num_seqs=64))
    review = KneeReview(review_s=5)
    events = []
    for i, values in enumerate(seconds_of(window(**BATCH_CAP))):
        events += review.update(
            float(i), values, knee_event(39.0, first, ServerLimits(max_num_seqs=64)) if i == N - 1 else None
        )
    for i in range(5):
        events += review.update(float(N + i), {**seconds_of(window(**BATCH_CAP))[-1]}, None)
    settled = events[-1]
    assert settled.data["revised"] is False
    assert settled.message == "knee confirmed with the 5 s after it: batch-size cap → try --max-num-seqs 128"
    assert KneeExplanation.from_dict(settled.data["explanation"]).provisional is None


@pytest.mark.parametrize(
    ("after_seconds", "end", "settled_at"),
    [
        (10, "recovered", 54.0),  # the overload is over: settled with what came
        (10, "finish", 60.0),  # the run ends (or the server restarts) first
        (A, None, 74.0),  # REVIEW_S after the knee
    ],
)
def test_the_review_settles_at_the_first_of_its_ends(after_seconds, end, settled_at):
    first = explain_knee(RECORDED["before"], CHAT_LIMITS)
    review = KneeReview()
    events = review_of_recorded(review, knee_event(44.0, first, CHAT_LIMITS), after_seconds - (end == "recovered"))
    if end == "recovered":
        recovered = Event(54.0, "info", "server keeping up again after the knee", {"knee_recovered": True})
        events += review.update(54.0, seconds_of(RECORDED["after"])[after_seconds - 1], recovered)
        assert events[-1] is recovered  # the review belongs to the overload: it comes first
        events.pop()
    elif end == "finish":
        events += review.finish(60.0)
    reviews = [e for e in events if e.data.get("knee_review")]
    assert [e.t for e in reviews] == [settled_at]
    assert review.finish(99.0) == []  # settled once


def test_the_summary_reads_the_settled_explanation_with_its_conflict_and_what_it_replaced():
    from rampwatch.core.figures.summary import format_summary, summarise_requests, to_bench_result

    first = explain_knee(RECORDED["before"], CHAT_LIMITS)
    knee = knee_event(44.0, first, CHAT_LIMITS)
    events = review_of_recorded(KneeReview(), knee, A)
    summary = summarise_requests(None, [], [], events, duration_s=80.0)
    final = events[1].data["explanation"]
    assert summary.knee_explanation == final
    assert to_bench_result(summary, None, [])["rampwatch_knee_explanation"] == final
    lines = format_summary(summary).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Knee at offered rate"))
    assert lines[at + 1].startswith("  why: KV cache full (KV 100 % for 22 s, 111 preemptions in 75 s")
    assert lines[at + 1].endswith("→ try --kv-cache-dtype fp8")
    assert lines[at + 2] == f"  {final['conflict']}"
    assert lines[at + 3] == (
        "  judged on the 45 s before the knee, 30 s after; "
        "revised: at the knee it read batch-size cap → try --kv-cache-dtype fp8"
    )
    # before the review: the knee's own, provisional explanation
    assert summarise_requests(None, [], [], [knee], duration_s=50.0).knee_explanation == first.to_dict()


THINKING_TOKENS = 150  # each request of a reasoning run thinks this long before answering


def thinking(series: dict[str, list[float]]) -> dict[str, list[float]]:
    """``series`` of a reasoning run: the first answer ``THINKING_TOKENS`` ITLs after the first token."""
    ttfa = [a + THINKING_TOKENS * b for a, b in zip(series["ttft_p50"], series["itl_p50"], strict=True)]
    return {**series, "ttfa_p50": ttfa}


def test_a_reasoning_runs_knee_notes_when_the_answer_slowed_more_than_the_first_token():
    # compute bound: the batch grows, each step slows (ITL 20 → 50 ms) and TTFT rises a
    # little: the 150 thinking tokens before the answer take seconds more
    why = explain_knee(thinking(window(**COMPUTE)))
    assert why.limit == "compute_bound"
    assert why.note == (
        "time to first answer p50 rose 3,625 ms→7,255 ms while TTFT p50 went 105 ms→275 ms: "
        "the thinking before the answer slowed (ITL p50 23 ms→47 ms), which TTFT does not show"
    )
    assert why.to_dict()["note"] == why.note and KneeExplanation.from_dict(why.to_dict()) == why
    assert f"note: {why.note}" in why.lines()


def test_no_note_when_the_first_token_moved_as_much_as_the_answer():
    queued = window(ttft_p50=ramp(0.08, 4.0, 20), waiting=ramp(0.0, 40.0, 20), running=flat(64.0))
    why = explain_knee(thinking(queued))  # the TTFA's rise is the queue's, which TTFT shows
    assert why.note is None and "note" not in why.to_dict()
    plain = explain_knee(window(**COMPUTE))
    assert plain.note is None and "note" not in plain.to_dict()


def test_the_summary_prints_the_note_under_the_knee():
    from rampwatch.core.figures.summary import knee_why_lines

    why = explain_knee(thinking(window(**COMPUTE))).to_dict()
    assert knee_why_lines(why)[1] == f"  note: {why['note']}"
