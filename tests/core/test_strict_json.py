"""Every JSON rampwatch writes is strict: a non-finite number is null, never `NaN`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rampwatch.core import strict_json


def strict_loads(text: str):
    return json.loads(text, parse_constant=lambda word: pytest.fail(f"not strict JSON: {word}"))


@pytest.mark.parametrize(
    "value, expected",
    [
        (math.nan, None),
        (math.inf, None),
        (-math.inf, None),
        (1.5, 1.5),
        (np.float64("nan"), None),
        (np.float32("inf"), None),
        (np.float32(2.5), 2.5),
        ({"a": [1.0, math.nan, {"b": (math.inf, 3)}], "c": "NaN"}, {"a": [1.0, None, {"b": [None, 3]}], "c": "NaN"}),
        ([True, None, 0], [True, None, 0]),
    ],
)
def test_non_finite_numbers_are_written_as_null(value, expected):
    assert strict_loads(strict_json.dumps(value)) == expected


def test_a_sweep_state_with_a_nan_figure_is_written(tmp_path):
    from rampwatch.app.sweep.state import write_state

    path = tmp_path / "sweep.json"
    write_state(path, {"rows": [{"ttft_p99": math.nan, "rps": 3.0}]})  # used to raise ValueError
    assert strict_loads(path.read_text()) == {"rows": [{"ttft_p99": None, "rps": 3.0}]}
