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


def test_the_requests_csv_has_the_marks_and_phases_only_with_marks(tmp_path):
    import csv

    from rampwatch.record.cli_export import optional_columns, write_requests_csv
    from tests.core.figures.test_phases import _run

    records = _run()
    path = tmp_path / "r.csv"
    write_requests_csv(records, path, optional_columns(records))
    rows = list(csv.DictReader(path.open()))
    assert rows[2]["slot_at"] == "1.3" and rows[0]["slot_at"] == ""
    phases = ("slot", "dns", "connect", "send", "headers", "first_token")
    for row in rows:  # the phases add up to the TTFT
        assert sum(float(row[f"{p}_phase_s"]) for p in phases) == pytest.approx(float(row["ttft_s"]), abs=1e-6)
    assert rows[2]["slot_phase_s"] == "0.3"
    assert optional_columns([marked(0)]) == []  # a plain recording's CSV keeps its columns


def test_the_requests_csv_gives_a_failed_request_the_phases_it_reached(tmp_path):
    import csv

    from rampwatch.record.cli_export import optional_columns, write_requests_csv
    from tests.core.figures.test_phases import failed

    records = [failed(connected_at=1.02, request_sent_at=1.03, headers_at=1.2)]
    path = tmp_path / "r.csv"
    write_requests_csv(records, path, optional_columns(records))
    row = next(csv.DictReader(path.open()))
    assert float(row["connect_phase_s"]) == pytest.approx(0.02)
    assert float(row["headers_phase_s"]) == pytest.approx(0.17)
    assert row["first_token_phase_s"] == ""  # not reached: it failed at its headers
    reached = sum(float(row[f"{p}_phase_s"]) for p in ("slot", "dns", "connect", "send", "headers"))
    assert reached == pytest.approx(1.2 - 1.0)  # from the send to its last mark
