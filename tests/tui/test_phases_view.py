"""The live rows of where TTFT went: the client's part and the server's, only with marks."""

from __future__ import annotations

import pytest

from rampwatch.core.figures.summary import summarise_requests
from rampwatch.tui.phases_view import summary_rows
from tests.core.figures.test_phases import _run, marked


def test_the_rows_add_up_to_the_mean_ttft():
    summary = summarise_requests(None, _run(), [], []).to_dict()
    rows = dict(summary_rows(summary))
    assert list(rows) == ["TTFT connecting ms", "TTFT to headers ms", "TTFT headers→token ms"]
    # means over the three requests: connecting 110, 10 and 310 ms (one waited 300 ms for
    # its slot); 90 ms to the headers each; 300, 200 and 500 ms from them to the token
    assert rows == {"TTFT connecting ms": "143.3", "TTFT to headers ms": "90.0", "TTFT headers→token ms": "333.3"}
    total = sum(summary["ttft_phases"][f"mean_{n}_ms"] for n in ("slot", "dns", "connect", "send", "headers"))
    assert total + summary["ttft_phases"]["mean_first_token_ms"] == pytest.approx(summary["mean_ttft_ms"])


def test_no_rows_without_marks():
    assert summary_rows(summarise_requests(None, [marked(0)], [], []).to_dict()) == []
    assert summary_rows({}) == []
