"""The speculative-decoding knee rule on synthetic windows whose answer is known: a
speculating server whose step time grows with the batch, one whose acceptance falls, and
the same windows without speculation (or without a growing batch), where it must not hold."""

from __future__ import annotations

import pytest

from rampwatch.core.figures.knee_explain import explain_knee
from rampwatch.core.figures.knee_spec import spec_decode
from rampwatch.core.figures.knee_window import KneeWindow
from rampwatch.core.figures.server_limits import ServerLimits

N = 40


def ramp(a: float, b: float) -> list[float]:
    return [a + (b - a) * i / (N - 1) for i in range(N)]


def flat(v: float) -> list[float]:
    return [v] * N


def window(spec: bool = True, **series: list[float]) -> dict[str, list[float]]:
    base = {
        "running": ramp(8, 64),
        "waiting": flat(0.0),
        "kv_usage_pct": flat(20.0),
        "preemptions": flat(0.0),
        "client_queued": flat(0.0),
        "ttft_p50": flat(0.05),
        "itl_p50": ramp(0.009, 0.025),
        "server_prompt_tps": flat(2000.0),
        "server_generation_tps": flat(5000.0),
        "prefix_hit_pct": flat(0.0),
    }
    if spec:
        base.update(spec_acceptance_pct=flat(57.0), spec_accept_len=flat(2.71), spec_draft_len=flat(3.0))
    base.update(series)
    return base


def test_a_step_time_growing_with_the_batch_turns_speculation_off_above_the_batch_where_it_paid():
    why = explain_knee(window(), ServerLimits(max_num_seqs=256))
    assert why.limit == "spec_decode", why
    assert "acceptance 57→57 %" in why.evidence and "accepted length 2.71→2.71 of 3 drafted" in why.evidence
    assert "running 14→58" in why.evidence and "ITL p50 11 ms→23 ms (a token every 4.0→8.5 ms)" in why.evidence
    # 1 + 3 verified, 2.71 kept: 32 % of the verified tokens thrown away
    assert "verifies 4 tokens a request and keeps 2.7: 32 %" in why.evidence
    # ITL within 1.25x of its baseline (the first 10 s: 11 ms) up to 23 running: off above it
    assert why.try_next == (
        '"num_speculative_tokens_per_batch_size": [[1, 23, 3], [24, 256, 0]] in --speculative-config '
        "(speculation off above 23 running)"
    )
    assert {a["limit"] for a in why.also} == {"compute_bound"}  # the same seconds read as compute bound too


def test_acceptance_falling_as_the_batch_grows_is_reason_enough():
    w = window(itl_p50=flat(0.01), spec_acceptance_pct=ramp(70.0, 40.0), spec_accept_len=ramp(3.1, 2.2))
    why = explain_knee(w, ServerLimits(max_num_seqs=128, engines=2))
    assert why.limit == "spec_decode", why
    assert "acceptance 67→43 %" in why.evidence
    assert why.brief.endswith("acceptance fell as the batch grew")
    assert "per engine" in why.try_next and "[[1, 32, 3], [33, 128, 0]]" in why.try_next


@pytest.mark.parametrize(
    "series",
    [
        {"spec": False},  # no speculation: the same seconds are a compute bound
        {"running": flat(30.0)},  # the batch did not grow
        {"itl_p50": flat(0.01)},  # the step held and acceptance held: speculation pays
    ],
    ids=["no-speculation", "flat-batch", "step-held"],
)
def test_the_rule_does_not_hold_without_its_signals(series):
    w = window(**series)
    assert spec_decode(KneeWindow(w), ServerLimits()) is None
    assert explain_knee(w, ServerLimits()).limit != "spec_decode"


def test_at_the_batch_cap_with_compute_bound_steps_speculation_comes_first():
    # running reaches the cap (64) and requests wait, while the speculating steps grew 2.5x
    w = window(
        running=[min(8 + 4 * i, 64.0) for i in range(N)],
        waiting=[max(0.0, 2.0 * (i - 14)) for i in range(N)],
        ttft_p50=ramp(0.05, 1.0),
    )
    why = explain_knee(w, ServerLimits(max_num_seqs=64))
    assert why.limit == "spec_decode"
    assert "batch_cap" in {a["limit"] for a in why.also}
    assert why.conflict is not None and "a larger batch would lengthen them further" in why.conflict
    # the same seconds while speculation still paid (the step held): the batch cap
    held = explain_knee({**w, "itl_p50": flat(0.01)}, ServerLimits(max_num_seqs=64))
    assert held.limit == "batch_cap"


def test_a_full_kv_cache_comes_first():
    w = window(kv_usage_pct=ramp(50.0, 99.0), preemptions=[0.0] * 30 + [3.0] * 10)
    why = explain_knee(w, ServerLimits())
    assert why.limit == "kv_full" and "spec_decode" in {a["limit"] for a in why.also}


def test_without_a_known_batch_cap_the_schedule_ends_at_vllms_default():
    why = explain_knee(window(), ServerLimits())
    assert why.limit == "spec_decode" and "[24, 1024, 0]" in why.try_next
