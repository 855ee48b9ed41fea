import pytest

from rampwatch.loadgen.server.backends import detect_backend, extract_fields


@pytest.mark.parametrize(
    "names, backend",
    [
        (["vllm:kv_cache_usage_perc", "vllm:num_requests_running"], "vllm"),
        (["vllm:gpu_cache_usage_perc", "vllm:num_requests_running"], "vllm-legacy"),
        (["vllm:num_requests_running"], "vllm"),
        (["sglang:num_running_reqs"], "sglang"),
        (["tgi_queue_size"], "tgi"),
        (["llamacpp:requests_processing"], "llamacpp"),
        (["python_info"], "unknown"),
        ([], "unknown"),
    ],
)
def test_detect_backend(names, backend):
    assert detect_backend(names) == backend


def test_extract_sums_labels_and_averages_kv():
    samples = [
        ("vllm:num_requests_running", {"engine": "0"}, 2.0),
        ("vllm:num_requests_running", {"engine": "1"}, 3.0),
        ("vllm:kv_cache_usage_perc", {"engine": "0"}, 0.2),
        ("vllm:kv_cache_usage_perc", {"engine": "1"}, 0.4),
        ("vllm:generation_tokens_created", {"engine": "0"}, 10.0),
        ("vllm:generation_tokens_created", {"engine": "1"}, 12.0),
        ("vllm:num_requests_waiting_by_reason", {"engine": "0", "reason": "capacity"}, 99.0),
    ]
    fields, engines, created = extract_fields("vllm", samples)
    assert fields["running"] == 5 and fields["kv_usage"] == pytest.approx(0.3)
    assert fields["waiting"] is None  # the by-reason breakdown is not the total
    assert engines == {"0": {"running": 2.0, "kv_usage": 0.2}, "1": {"running": 3.0, "kv_usage": 0.4}}
    assert created == 12.0


def test_tgi_kv_proxy_needs_both_gauges():
    fields, _, _ = extract_fields("tgi", [("tgi_batch_current_max_tokens", {}, 10.0)])
    assert fields["kv_usage"] is None
    fields, _, _ = extract_fields(
        "tgi", [("tgi_batch_current_max_tokens", {}, 10.0), ("tgi_batch_max_total_tokens", {}, 40.0)]
    )
    assert fields["kv_usage"] == 0.25


def test_llamacpp_without_cache_counter_has_no_hit_rate():
    fields, _, _ = extract_fields("llamacpp", [("llamacpp:prompt_tokens_total", {}, 10.0)])
    assert fields["prefix_queries_total"] is None and fields["prefix_hits_total"] is None
