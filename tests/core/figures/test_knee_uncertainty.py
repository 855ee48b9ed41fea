"""The knee's uncertainty: the range of offered rates the detector's window averaged at
the onset (core/figures/knee.py). The detector's decisions are those of tests/core/figures/test_knee.py."""

import pytest

from rampwatch.core.figures.knee import KneeDetector
from tests.core.figures.test_knee import run, synthetic_ramp


@pytest.mark.parametrize(
    ("capacity", "seconds", "end"),
    [
        (10.0, 240, 40.0),  # slope 0.16 req/s a second
        (20.0, 240, 40.0),
        (20.0, 120, 40.0),  # twice as steep: twice as wide
        (8.0, 60, 24.0),
    ],
)
def test_the_knee_carries_the_range_of_rates_its_window_averaged(capacity, seconds, end):
    knees = [e for e in run(synthetic_ramp(capacity=capacity, end=end, seconds=seconds)) if e.kind == "knee"]
    assert len(knees) == 1
    lo, hi = knees[0].data["offered_rps_range"]
    slope = (end - 1.0) / (seconds - 1)
    window = KneeDetector().window_s
    # a linear ramp: the window's rates span its slope times the window's seconds
    assert hi - lo == pytest.approx(slope * (window - 1))
    assert lo <= knees[0].data["offered_rps"] <= hi
    assert lo <= capacity <= hi  # the server's true limit lies within the stated range


def test_the_range_is_the_targets_of_the_seconds_up_to_the_onset():
    rows = synthetic_ramp(capacity=4.0, start=1.0, end=24.0, seconds=60)
    knees = [e for e in run(rows) if e.kind == "knee"]
    onset = int(knees[0].data["onset_t"])
    first = max(0, onset - KneeDetector().window_s + 1)
    assert knees[0].data["offered_rps_range"] == [
        pytest.approx(rows[first][1]["target_rps"]),
        pytest.approx(rows[onset][1]["target_rps"]),
    ]
