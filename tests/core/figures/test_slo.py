import numpy as np
import pytest

from rampwatch.core.errors import UserError
from rampwatch.core.figures.slo import DEFAULT_MAX_ERROR_RATE, Bound, parse_slo


@pytest.mark.parametrize(
    ("text", "bounds", "error_rate"),
    [
        ("ttft_p99<500ms,itl_p99<50ms", (Bound("ttft", 99, 500), Bound("itl", 99, 50)), DEFAULT_MAX_ERROR_RATE),
        ("ttft_p90<=0.5s", (Bound("ttft", 90, 500),), DEFAULT_MAX_ERROR_RATE),
        ("e2el_p99.9<2000", (Bound("e2el", 99.9, 2000),), DEFAULT_MAX_ERROR_RATE),
        ("tpot_p50<800us, error_rate<1%", (Bound("tpot", 50, 0.8),), 0.01),
        ("ITL_P99<50MS,error_rate<0.02", (Bound("itl", 99, 50),), 0.02),
    ],
)
def test_parse_slo(text, bounds, error_rate):
    slo = parse_slo(text)
    assert slo.bounds == bounds
    assert slo.max_error_rate == pytest.approx(error_rate)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "expected comma-separated bounds"),
        ("ttft_p99<500ms,", "expected comma-separated bounds"),
        ("ttft_p99>500ms", "cannot read 'ttft_p99>500ms'"),
        ("ttft<500ms", "name a percentile, e.g. ttft_p99"),
        ("latency_p99<5s", "unknown metric 'latency'"),
        ("ttft_p0<5s", "the percentile must be above 0"),
        ("ttft_p99<5%", "a latency limit is in ms, s or us"),
        ("error_rate<150%", "an error rate is a fraction"),
    ],
)
def test_bad_slo_is_one_line_naming_the_flag(text, says):
    with pytest.raises(UserError) as err:
        parse_slo(text)
    message = str(err.value)
    assert message.startswith(f"--slo {text!r}") and says in message and "\n" not in message


def test_per_request_limits_read_itl_as_tpot_and_keep_the_tightest():
    slo = parse_slo("ttft_p99<500ms,ttft_p50<200ms,itl_p99<50ms")
    assert slo.per_request_ms() == {"ttft": 200.0, "tpot": 50.0}


def test_violations_compare_percentiles_and_error_rate():
    slo = parse_slo("ttft_p99<500ms,itl_p50<50ms,error_rate<10%")
    fast = {"ttft": np.full(100, 0.1), "itl": np.full(100, 0.02)}
    assert slo.violations(fast, 0.0) == []
    slow = {"ttft": np.r_[np.full(95, 0.1), np.full(5, 2.0)], "itl": np.full(100, 0.06)}
    assert slo.violations(slow, 0.2) == [
        "TTFT p99 2000 ms > 500 ms",
        "ITL p50 60 ms > 50 ms",
        "error rate 20.0% > 10.0%",
    ]
    assert slo.violations({}, None) == []  # nothing to judge breaks nothing


def test_text_round_trips():
    slo = parse_slo("ttft_p99<0.5s,itl_p99<50ms,error_rate<1%")
    assert parse_slo(slo.text) == slo


def test_a_ttfa_bound_reads_and_judges_each_request_by_its_first_answer():
    slo = parse_slo("ttfa_p99<2s,ttft_p99<500ms")
    assert slo.bounds[0] == Bound("ttfa", 99, 2000) and slo.per_request_ms() == {"ttfa": 2000.0, "ttft": 500.0}
    answered = {"ttfa": np.full(100, 1.5), "ttft": np.full(100, 0.2)}
    assert slo.violations(answered, 0.0) == []
    late = {"ttfa": np.r_[np.full(95, 1.5), np.full(5, 3.0)], "ttft": np.full(100, 0.2)}
    assert slo.violations(late, 0.0) == ["TTFA p99 3000 ms > 2000 ms"]
    # requests cut short while thinking never answered (inf): the bound breaks, named so
    never = {"ttfa": np.r_[np.full(90, 1.5), np.full(10, np.inf)]}
    assert slo.violations(never, 0.0) == ["TTFA p99 never (no answer) > 2000 ms"]


def test_a_sweeps_good_requests_under_a_ttfa_bound():
    from rampwatch.core.figures.sweep import good_requests, slo_breaks
    from tests.core.figures.reasoning_records import reasoning_record

    requests = [
        reasoning_record(0),  # TTFA 1.0 s
        reasoning_record(1, first_answer_at=2.0, chunk_times=(1.1, 2.0, 2.1)),  # TTFA 1.5 s
        reasoning_record(2, first_answer_at=None, reasoning_tokens=6),  # cut short: no answer
    ]
    assert good_requests(requests, parse_slo("ttfa_p99<1200ms")).tolist() == [True, False, False]
    assert good_requests(requests, parse_slo("ttft_p99<1200ms")).tolist() == [True, True, True]
    # the median of 1.0 s, 1.5 s and never
    assert slo_breaks(requests, parse_slo("ttfa_p50<1200ms")) == ["TTFA p50 1500 ms > 1200 ms"]
    assert slo_breaks(requests, parse_slo("ttfa_p50<2s")) == []
