"""CSV export cells a spreadsheet would run as formulas are written as text."""

import pytest

from rampwatch.record.cli_export import spreadsheet_text


@pytest.mark.parametrize(
    "cell, written",
    [
        ('=HYPERLINK("http://evil/","x")', '\'=HYPERLINK("http://evil/","x")'),
        ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1:A2)", "'@SUM(A1:A2)"),
        ("\t=1+1", "'\t=1+1"),
        ("\r=1+1", "'\r=1+1"),
        ("- server overloaded", "'- server overloaded"),
        # numbers stay numbers
        ("-5", "-5"),
        ("+1.5e3", "+1.5e3"),
        ("-.25", "-.25"),
        # ordinary text is left as it is
        ("stop", "stop"),
        ("HTTP 400: max_tokens = 10 is too large", "HTTP 400: max_tokens = 10 is too large"),
        ("", ""),
    ],
)
def test_a_cell_that_would_start_a_formula_is_written_as_text(cell, written):
    assert spreadsheet_text(cell) == written
