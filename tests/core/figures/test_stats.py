import numpy as np
import pytest

from rampwatch.core.figures import stats
from rampwatch.core.timeline import RequestRecord


def rec(sent, first, chunks, tokens, ok=True):
    end = chunks[-1] if chunks else first
    return RequestRecord(
        id=0,
        scheduled_at=sent,
        sent_at=sent,
        end_at=end,
        first_token_at=first,
        chunk_times=list(chunks),
        completion_tokens=tokens,
        error_class=None if ok else "http_500",
    )


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


def _slo_inputs(r):
    return np.array([r.ttft or 0.0]), np.array([r.tpot or 0.0]), np.array([r.e2e])


@pytest.mark.parametrize(
    "slo, good",
    [
        ({"ttft": 250}, True),
        ({"ttft": 50}, False),
        ({"tpot": 151}, True),
        ({"tpot": 149}, False),
        ({"e2el": 400}, True),
        ({"e2el": 399}, False),
        ({"ttft": 250, "e2el": 300}, False),
    ],
)
def test_goodput_slo_is_inclusive(slo, good):
    assert stats.meets_slo(*_slo_inputs(rec(0.0, 0.1, [0.2, 0.4], 3)), slo).tolist() == [good]


def test_single_token_request_has_zero_tpot_for_goodput():
    assert stats.meets_slo(*_slo_inputs(rec(0.0, 0.1, [], 1)), {"tpot": 0}).all()


def test_unknown_slo_rejected():
    with pytest.raises(ValueError, match="unknown SLO"):
        stats.meets_slo(*_slo_inputs(rec(0.0, 0.1, [], 1)), {"itl": 5})


@pytest.mark.parametrize(
    "intervals, peak",
    [([(0, 1), (1, 2)], 1), ([(0, 1), (0.5, 2), (0.7, 0.8)], 3), ([], 0)],
)
def test_max_concurrent_half_open(intervals, peak):
    starts = np.array([s for s, _ in intervals], dtype=float)
    ends = np.array([e for _, e in intervals], dtype=float)
    assert stats.max_concurrent(starts, ends) == peak


def test_max_concurrent_is_the_peak_of_intervals_counted_at_every_start():
    rng = np.random.default_rng(0)
    for _ in range(200):  # whole-second times: many ties of starts and ends
        starts = rng.integers(0, 20, rng.integers(1, 30)).astype(float)
        ends = starts + rng.integers(0, 5, starts.size)
        counted = max(int(((starts <= t) & (ends > t)).sum()) for t in starts)
        assert stats.max_concurrent(starts, ends) == counted


def test_exact_values_fed_in_many_parts_describe_the_whole_bit_for_bit():
    rng = np.random.default_rng(1)
    parts = [rng.exponential(0.05, rng.integers(1, 60)) for _ in range(3 * stats.ExactValues.JOIN + 7)]
    kept = stats.ExactValues()
    for part in parts:
        kept.add(part)
    assert len(kept.parts) < stats.ExactValues.JOIN
    assert kept.n == sum(p.size for p in parts)
    assert kept.describe_ms(stats.PERCENTILES) == stats.describe_ms(np.concatenate(parts), stats.PERCENTILES)


@pytest.mark.parametrize(
    "times, origin, counts",
    [
        ([0.1, 0.2, 0.4, 0.6, 0.8, 2.2], 0.0, [5, 0, 1]),
        ([0.5, 1.49, 1.5], 0.5, [2, 1]),
        ([], 0.0, []),
        ([3.0], 1.0, [0, 0, 1]),
    ],
)
def test_per_second_counts(times, origin, counts):
    assert stats.per_second_counts(np.array(times), origin).tolist() == counts


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


def _random_records(n=300, seed=7):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        sent = float(rng.uniform(0, 100))
        first = None if i % 17 == 0 else sent + float(rng.lognormal(-2, 0.6))
        chunks = (
            [] if first is None else (first + np.cumsum(rng.lognormal(-4, 0.5, int(rng.integers(0, 300))))).tolist()
        )
        end = chunks[-1] if chunks else (first or sent) + 0.01
        out.append(
            RequestRecord(
                i, sent, sent, end, first, chunks, 10, len(chunks) + 1, error_class="timeout" if i % 23 == 0 else None
            )
        )
    return out


def test_itl_array_is_the_gap_of_each_chunk_to_the_one_before():
    for r in _random_records():
        fast = stats.itl_array(r)
        assert fast.dtype == np.float64
        if r.first_token_at is None or not r.chunk_times:
            assert fast.size == 0
            continue
        times = [r.first_token_at, *r.chunk_times]
        loop = [max(0.0, b - a) for a, b in zip(times, times[1:])]
        np.testing.assert_allclose(fast, loop, rtol=0, atol=1e-9)


@pytest.mark.parametrize(
    "gaps, expected",
    [
        ([0.020903000000000560], [0.020903]),  # float residue of subtracting µs-grid times
        ([1e-16, -1e-16], [0.0, 0.0]),
        ([-4e-6], [0.0]),  # two chunks of one read, stored on grids of different steps
        ([0.0, 0.5, 1.25], [0.0, 0.5, 1.25]),
        ([0.123456789123], [0.123456789]),
    ],
)
def test_clean_itls(gaps, expected):
    assert stats.clean_itls(np.array(gaps)).tolist() == expected


def test_live_summary_fed_record_by_record_equals_one_block():
    from rampwatch.core.figures.summary import RequestBlock, SummaryBuilder

    records = _random_records()
    fast, slow = SummaryBuilder(bounded=True), SummaryBuilder(bounded=True)
    for r in records:
        fast.add(r)  # as the live series feeds it
    slow.add_block(RequestBlock.from_records(records))
    for metric in ("ttft", "tpot", "itl", "e2el"):
        a, b = fast.latencies[metric], slow.latencies[metric]
        assert a.n == b.n
        assert a.total == pytest.approx(b.total, rel=1e-12)
        assert a.squares == pytest.approx(b.squares, rel=1e-12)
        np.testing.assert_array_equal(a.hist.counts, b.hist.counts)
    f, s = fast.build(duration_s=100.0).to_dict(), slow.build(duration_s=100.0).to_dict()
    for key, value in s.items():
        if isinstance(value, float):
            assert f[key] == pytest.approx(value, rel=1e-9, nan_ok=True), key
        else:
            assert f[key] == value, key


def test_log_histogram_bins_arrays_and_scalars_alike():
    rng = np.random.default_rng(2)
    values = rng.lognormal(-3, 2, 5000)
    mixed, plain = stats.LogHistogram(), stats.LogHistogram()
    mixed.add(values[:2000])
    mixed.add(values[2000:3000].tolist())
    mixed.add(values[3000:])
    mixed.add(np.empty(0))
    for v in values:
        plain.add([float(v)])
    assert mixed.total == plain.total == 5000
    np.testing.assert_array_equal(mixed.counts, plain.counts)
    expected = np.bincount(stats.LogHistogram.bucket_index(values), minlength=stats.LogHistogram.N)
    np.testing.assert_array_equal(plain.counts, expected)


@pytest.mark.parametrize("cuts", [[], [1], [5, 6, 7], [100, 2500], list(range(0, 3000, 37))])
def test_running_sum_is_the_left_fold_wherever_the_values_are_cut(cuts):
    values = np.random.default_rng(11).lognormal(-5, 2, 3000)
    left_fold = 0.25
    for v in values.tolist():
        left_fold += v
    total = 0.25
    for part in np.split(values, cuts):
        total = stats.running_sum(total, part)
    assert total == left_fold  # exactly: the same float however the batches fall


def test_requests_itls_equal_each_requests_itl_array_in_turn():
    records = [r for r in _random_records() if r.ok and r.first_token_at is not None]
    records.append(rec(1.0, 1.1, [], 1))  # a request with a first token and no later chunk
    firsts = np.array([r.first_token_at for r in records])
    chunks = [np.asarray(r.chunk_times, dtype=np.float64) for r in records]
    together = stats.requests_itls(firsts, chunks)
    one_by_one = np.concatenate([stats.itl_array(r) for r in records])
    assert together.tolist() == one_by_one.tolist()
    assert stats.requests_itls(np.array([1.0]), [np.empty(0)]).size == 0


def test_running_values_are_the_same_whether_fed_one_request_or_many_at_a_time():
    parts = [np.random.default_rng(i).lognormal(-4, 1, int(n)) for i, n in enumerate([300, 0, 1, 255, 40, 1000])]
    one, batched = stats.RunningValues(), stats.RunningValues()
    for part in parts:
        one.add(part)
    batched.add(np.concatenate(parts[:3]))
    batched.add(np.concatenate(parts[3:]))
    assert (one.n, one.total, one.squares) == (batched.n, batched.total, batched.squares)
    assert one.describe_ms([50, 99]) == batched.describe_ms([50, 99])
