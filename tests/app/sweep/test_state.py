"""sweep.json: a resumed sweep must be the same sweep."""

import pytest

from rampwatch.app.sweep.spec import load_sweep
from rampwatch.app.sweep.state import new_state, resume_state
from rampwatch.core.errors import UserError
from tests.app.sweep.sweep_files import GOOD_SWEEP, write


def test_resume_refuses_another_number_of_repeats(tmp_path):
    path = write(tmp_path, GOOD_SWEEP)
    old = new_state(load_sweep(path), ["rampwatch", "sim"])
    again = new_state(load_sweep(path, repeats=3), ["rampwatch", "sim"])
    with pytest.raises(UserError, match=r"is a sweep of 1 run\(s\) a configuration; give the same repeats"):
        resume_state(old, again, tmp_path)


def test_a_searched_sweep_states_its_own_best_rule_and_plan(tmp_path):
    from rampwatch.core.figures.search_best import SEARCH_BEST_RULE
    from rampwatch.core.figures.sweep import BEST_RULE

    plain = new_state(load_sweep(write(tmp_path, GOOD_SWEEP)), ["rampwatch", "sim"])
    assert plain["best_rule"] == BEST_RULE and "search" not in plain
    text = GOOD_SWEEP + "  search: {tolerance: 0.5}\nslo: ttft_p90<300ms\n"
    state = new_state(load_sweep(write(tmp_path, text, "search.yaml")), ["rampwatch", "sim"])
    assert state["best_rule"] == SEARCH_BEST_RULE
    assert state["search"] == {"slo": "ttft_p90<300ms", "by": "rate", "tolerance": "0.5", "hold_s": None}
