import pytest

from rampwatch.core.bins import complete_bins, latest_complete, recent_mean

NAN = float("nan")


@pytest.mark.parametrize(
    "times, now, complete",
    [
        ([0.0, 1.0, 2.0], 3.1, 3),
        ([0.0, 1.0, 2.0], 3.05, 2),
        ([0.0, 1.0, 2.0], 2.05, 1),
        ([], 5.0, 0),
        ([0.0, 1.0], 0.5, 0),
    ],
)
def test_a_bin_is_complete_a_moment_after_its_end(times, now, complete):
    assert complete_bins(times, now) == complete


@pytest.mark.parametrize(
    "values, complete, look_back, expected",
    [
        ([1.0, 2.0, 3.0], 2, None, 2.0),  # the filling bin is not read
        ([1.0, NAN, NAN, 9.0], 3, None, 1.0),  # past gaps...
        ([1.0, NAN, NAN, 9.0], 3, 2, None),  # ...but not further back than asked
        ([1.0, NAN, 5.0], 3, 1, 5.0),
        ([None, 4.0, None], 3, None, 4.0),
        ([], 0, None, None),
        ([1.0], 5, None, 1.0),  # more complete bins than values
    ],
)
def test_latest_complete(values, complete, look_back, expected):
    assert latest_complete(values, complete, look_back) == expected


@pytest.mark.parametrize(
    "values, complete, window, expected",
    [
        ([1.0, 2.0, 4.0, 6.0, 8.0, 0.5], 5, 3, 6.0),
        ([1.0, 2.0, 4.0, NAN, 8.0, 0.5], 5, 3, 6.0),  # a second without data is left out
        ([1.0, 2.0], 1, 0, 1.0),  # a window is at least one second
        ([NAN, NAN], 2, 2, None),
    ],
)
def test_recent_mean(values, complete, window, expected):
    assert recent_mean(values, complete, window) == expected
