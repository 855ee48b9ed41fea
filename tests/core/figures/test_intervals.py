import math

import pytest

from rampwatch.core.figures.intervals import (
    intervals_overlap,
    mean_interval,
    sample_variance,
    t_quantile_975,
    welch_interval,
)


@pytest.mark.parametrize(
    ("df", "expected"),
    [
        (1, 12.706),
        (2, 4.303),
        (4, 2.776),
        (10, 2.228),
        (30, 2.042),
        (31, 2.0395),
        (40, 2.0211),
        (60, 2.0003),
        (120, 1.9799),
        (1000, 1.9623),
        (math.inf, 1.960),
    ],
)
def test_t_quantile_matches_the_table(df: float, expected: float) -> None:
    assert t_quantile_975(df) == pytest.approx(expected, abs=1e-3)


def test_a_fractional_df_lies_between_its_neighbours() -> None:
    assert t_quantile_975(4) > t_quantile_975(4.5) > t_quantile_975(5)


@pytest.mark.parametrize("df", [0, -1, float("nan")])
def test_no_quantile_without_degrees_of_freedom(df: float) -> None:
    with pytest.raises(ValueError):
        t_quantile_975(df)


def test_mean_interval_of_three_values() -> None:
    iv = mean_interval([10.0, 12.0, 14.0])
    assert iv is not None
    # s = 2, se = 2/sqrt(3), t(0.975, 2) = 4.303
    assert iv.mean == pytest.approx(12.0)
    assert iv.half_width == pytest.approx(4.303 * 2 / math.sqrt(3), rel=1e-4)
    assert iv.n == 3 and iv.values == (10.0, 12.0, 14.0)
    assert all(iv.contains(v) for v in (10.0, 12.0, 14.0))
    assert iv.text() == "12.0 ± 5.0"


def test_one_value_has_no_interval() -> None:
    iv = mean_interval([7.0])
    assert iv is not None and iv.half_width is None and iv.low is None and iv.text() == "7.0"
    assert not iv.contains(7.0)


@pytest.mark.parametrize("values", [[], [None], [float("nan"), None]])
def test_no_finite_value_gives_nothing(values: list[float | None]) -> None:
    assert mean_interval(values) is None


def test_missing_values_are_left_out() -> None:
    iv = mean_interval([1.0, None, 3.0, float("inf")])
    assert iv is not None and iv.n == 2 and iv.mean == 2.0


def test_sample_variance() -> None:
    assert sample_variance([2.0, 4.0, 6.0]) == pytest.approx(4.0)
    assert sample_variance([5.0]) == 0.0


def test_welch_interval_known_value() -> None:
    a = [10.0, 11.0, 12.0]
    b = [20.0, 22.0, 24.0]
    iv = welch_interval(a, b)
    assert iv is not None
    va, vb = 1.0 / 3, 4.0 / 3
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    assert iv.df == pytest.approx(df)
    assert iv.delta == pytest.approx(11.0)
    half = t_quantile_975(df) * math.sqrt(va + vb)
    assert (iv.low, iv.high) == (pytest.approx(11.0 - half), pytest.approx(11.0 + half))
    assert iv.excludes_zero


def test_welch_interval_of_overlapping_sets_contains_zero() -> None:
    iv = welch_interval([10.0, 12.0, 14.0], [11.0, 13.0, 12.0])
    assert iv is not None and not iv.excludes_zero


def test_welch_needs_two_values_a_side_for_bounds() -> None:
    iv = welch_interval([1.0], [2.0, 3.0])
    assert iv is not None and iv.delta == 1.5 and iv.low is None and not iv.excludes_zero
    assert welch_interval([], [1.0]) is None


def test_welch_of_constant_sets_is_the_difference() -> None:
    iv = welch_interval([2.0, 2.0], [3.0, 3.0])
    assert iv is not None and iv.low == iv.high == 1.0 and iv.excludes_zero


def test_intervals_overlap() -> None:
    a, b, c = mean_interval([1.0, 2.0, 3.0]), mean_interval([2.5, 3.0, 3.5]), mean_interval([100.0, 101.0])
    assert a is not None and b is not None and c is not None
    assert intervals_overlap(a, b) and not intervals_overlap(a, c)


def test_figures_past_floats_range_give_no_overflow_error() -> None:
    wide = mean_interval([1e200, -1e200])
    assert wide is not None and wide.half_width == float("inf")
    assert welch_interval([1e200, -1e200], [1.0, 2.0]) is not None
    tiny = welch_interval([0.0, 1e-160], [0.0, 2e-160])  # variances whose squares underflow to 0
    assert tiny is not None and tiny.low is not None and tiny.df == float("inf")
