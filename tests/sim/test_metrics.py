"""The simulator's /metrics against a real vLLM 0.32 capture."""

from prometheus_client.parser import text_string_to_metric_families

from rampwatch.sim.config import SimConfig
from rampwatch.sim.engine import Engine, SimRequest
from rampwatch.sim.metrics import make_registry, render
from rampwatch.sim.stats import Hist, buckets_1_2_5

CAPTURE = "metrics-under-load.txt"

# Families the simulator must export (the panels read them).
REQUIRED = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries",
    "vllm:prefix_cache_hits",
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:num_preemptions",
    "vllm:request_success",
    "vllm:cache_config_info",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:iteration_tokens_total",
}
# Families absent from the capture that the simulator exports: none. Everything the
# simulator exports is checked below; the capture's extra families (external/mm caches,
# sleep state, admission rejections, MFU estimates, cached-by-source) describe features the
# simulator does not model, so it leaves them out rather than export constant zeros.
SIM_ONLY: set[str] = set()


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def label_names(family) -> set[str]:
    names = set()
    for s in family.samples:
        names |= set(s.labels) - {"le"}
    return names


def busy_engines(n: int = 2) -> list[Engine]:
    cfg = SimConfig(hardware="h100", model="llama-3.1-8b", num_gpu_blocks=128, max_model_len=2048, engines=n).resolved()
    engines = [Engine(cfg, i, created=1.7e9) for i in range(n)]
    for e in engines:
        # One request first so that its prompt blocks are cached when the others arrive.
        e.add_request(SimRequest("first", [7] * 64 + [99] * 40, max_tokens=60), now=0.0)
        t = e.step(0.0).duration
        for i in range(20):
            e.add_request(SimRequest(f"r{i}", [7] * 64 + [i] * 40, max_tokens=60), now=t)
        for _ in range(30):
            t += e.step(t).duration
    return engines


def sim_text(n: int = 2) -> str:
    return render(make_registry(busy_engines(n), "llama-3.1-8b")).decode()


def test_every_sim_family_exists_in_capture_with_same_type_and_labels(vllm_captures):
    real = families((vllm_captures / CAPTURE).read_text())
    sim = families(sim_text())
    vllm_families = {name: f for name, f in sim.items() if name.startswith("vllm:")}
    assert REQUIRED <= set(vllm_families)
    for name, fam in vllm_families.items():
        if name in SIM_ONLY:
            continue
        assert name in real, f"{name} not in the real capture"
        assert fam.type == real[name].type, name
        assert label_names(fam) == label_names(real[name]), name


def test_histogram_buckets_match_capture(vllm_captures):
    real = families((vllm_captures / CAPTURE).read_text())
    sim = families(sim_text(1))
    for name, fam in sim.items():
        if fam.type != "histogram":
            continue

        def bounds(f):
            return [s.labels["le"] for s in f.samples if s.name.endswith("_bucket") and s.labels.get("engine") == "0"]

        assert bounds(fam) == bounds(real[name]), name


def test_values_reflect_engine_state():
    engines = busy_engines(2)
    sim = families(render(make_registry(engines, "m")).decode())

    def value(family, engine, sample_suffix=""):
        return next(
            s.value
            for s in sim[family].samples
            if s.labels.get("engine") == engine and s.name == family + sample_suffix
        )

    for e in engines:
        idx = str(e.index)
        assert value("vllm:num_requests_running", idx) == e.num_running
        assert value("vllm:num_requests_waiting", idx) == e.num_waiting
        assert value("vllm:kv_cache_usage_perc", idx) == e.kv_usage()
        assert value("vllm:prefix_cache_hits", idx, "_total") == e.stats.prefix_hits > 0
        assert value("vllm:generation_tokens", idx, "_total") == e.stats.generation_tokens
        assert value("vllm:prefix_cache_queries_created", idx) == 1.7e9  # restart detection reads it
    info = [s for s in sim["vllm:cache_config_info"].samples]
    assert {s.labels["engine"] for s in info} == {"0", "1"}
    assert info[0].labels["num_gpu_blocks"] == "128" and info[0].labels["block_size"] == "16"
    assert info[0].labels["enable_prefix_caching"] == "True"


def test_hist_le_semantics_and_cumulative():
    h = Hist((1.0, 2.0))
    for v in (0.5, 1.0, 1.5, 2.0, 3.0):
        h.observe(v)
    assert h.cumulative() == [("1.0", 2), ("2.0", 4), ("+Inf", 5)]
    assert h.total == 8.0 and h.n == 5


def test_token_buckets_follow_max_model_len():
    assert buckets_1_2_5(2048) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
    assert buckets_1_2_5(4) == (1, 2)
