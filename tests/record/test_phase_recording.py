"""A recording's phase marks (where TTFT went): a damaged or crafted column makes its
block undecodable (a lost block with a warning), never a traceback in the figures."""

from __future__ import annotations

import pytest

from rampwatch.record import format as fmt
from tests.core.figures.test_phases import marked


@pytest.mark.parametrize("field", fmt._OPTIONAL_TIMES[1:])
@pytest.mark.parametrize("value", ["soon", 1.5, True])
def test_a_phase_column_of_the_wrong_type_makes_its_block_undecodable(field, value, monkeypatch):
    good = fmt.encode_requests([marked(0, **{field: 1.2})])
    assert getattr(fmt.decode_requests(good)[0], field) == pytest.approx(1.2)
    monkeypatch.setattr(fmt, "_OPTIONAL_TIMES", ())  # written as it is, not in time quanta
    crafted = fmt.encode_requests([marked(0, **{field: value})])
    with pytest.raises(ValueError, match=f"its {field} column is not 1 values of type int"):
        fmt.decode_request_columns(crafted)
