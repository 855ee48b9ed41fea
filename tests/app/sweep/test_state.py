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
