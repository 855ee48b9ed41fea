import numpy as np
import pytest

from loadgen import stats
from loadgen.timeline import RequestRecord


def rec(sent, first, chunks, tokens, ok=True):
    end = chunks[-1] if chunks else first
    return RequestRecord(id=0, scheduled_at=sent, sent_at=sent, end_at=end, first_token_at=first, chunk_times=list(chunks),
                         completion_tokens=tokens, error_class=None if ok else "http_500")


def test_describe_matches_numpy_linear_percentiles():
    values = [0.1, 0.3, 0.2]
    d = stats.describe_ms(values)
    assert d["mean"] == pytest.approx(200) and d["median"] == pytest.approx(200)
    assert d["std"] == pytest.approx(81.6496580927726)
    assert d["p50"] == pytest.approx(200) and d["p90"] == pytest.approx(280) and d["p99"] == pytest.approx(298)


def test_describe_empty_reports_zero_like_vllm():
    assert stats.describe_ms([]) == {"mean": 0.0, "median": 0.0, "std": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0}
    assert "p99.9" in stats.describe_ms([1.0], percentiles=[99.9])


def test_tpot_and_output_len():
    r = rec(0.0, 0.1, [0.2, 0.4], 3)
    assert r.tpot == pytest.approx(0.15)
    assert rec(0.0, 0.1, [], 1).tpot is None
    assert stats.output_len(rec(0.0, 0.1, [0.2], 0)) == 1  # vLLM's last resort


@pytest.mark.parametrize(
    "slo, good",
    [({"ttft": 250}, True), ({"ttft": 50}, False), ({"tpot": 151}, True), ({"tpot": 149}, False),
     ({"e2el": 400}, True), ({"e2el": 399}, False), ({"ttft": 250, "e2el": 300}, False)],
)
def test_goodput_slo_is_inclusive(slo, good):
    assert stats.is_good(rec(0.0, 0.1, [0.2, 0.4], 3), slo) is good


def test_single_token_request_has_zero_tpot_for_goodput():
    assert stats.is_good(rec(0.0, 0.1, [], 1), {"tpot": 0})


def test_unknown_slo_rejected():
    with pytest.raises(ValueError, match="unknown SLO"):
        stats.is_good(rec(0.0, 0.1, [], 1), {"itl": 5})


def test_max_concurrent_half_open():
    assert stats.max_concurrent([(0, 1), (1, 2)]) == 1
    assert stats.max_concurrent([(0, 1), (0.5, 2), (0.7, 0.8)]) == 3
    assert stats.max_concurrent([]) == 0


def test_peak_chunks_per_second():
    records = [rec(0.0, 0.1, [0.2, 0.4], 3), rec(0.3, 0.6, [0.8], 2), rec(2.0, 2.2, [], 1)]
    assert stats.peak_chunks_per_second(records) == 5.0
    assert stats.peak_chunks_per_second([]) == 0.0


def test_log_histogram_quantiles_close_to_exact():
    rng = np.random.default_rng(1)
    values = rng.lognormal(-3, 1, 20000)
    h = stats.LogHistogram()
    h.add(values[:10000])
    other = stats.LogHistogram()
    other.add(values[10000:])
    h.merge(other)
    assert h.total == 20000
    for q, exact in zip((0.5, 0.9, 0.99), np.percentile(values, [50, 90, 99])):
        assert h.quantiles([q])[0] == pytest.approx(exact, rel=0.02)
    assert np.isnan(stats.LogHistogram().quantiles([0.5])[0])
    tiny = stats.LogHistogram()
    tiny.add([0.0, 1e9])  # out-of-range values are clamped into the end buckets
    assert tiny.total == 2
