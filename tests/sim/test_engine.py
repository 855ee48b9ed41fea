"""The engine on a virtual clock: scheduling, KV cache, prefix caching, preemption, roofline."""

import pytest

from rampwatch.sim.config import SimConfig
from rampwatch.sim.engine import BlockPool, Engine, SimRequest, block_hashes


def make_engine(**kwargs) -> Engine:
    base = dict(hardware="h100", model="llama-3.1-8b", seed=1)
    base.update(kwargs)
    return Engine(SimConfig(**base).resolved())


def prompt(n: int, salt: int = 0) -> list[int]:
    return [(salt * 7919 + i) % 30000 + 10 for i in range(n)]


def run_to_completion(engine: Engine, t: float = 0.0, max_steps: int = 100_000, on_step=None) -> float:
    steps = 0
    while engine.has_work():
        result = engine.step(t)
        t += result.duration
        if on_step:
            on_step(engine, result)
        steps += 1
        assert steps < max_steps, "engine did not drain"
    return t


def test_single_request_timeline():
    engine = make_engine()
    req = SimRequest("a", prompt(100), max_tokens=5)
    engine.add_request(req, now=0.0)
    first = engine.step(0.0)
    assert first.num_scheduled_tokens == 100  # whole prompt in one step
    assert first.emitted == [req] and len(req.output_token_ids) == 1
    t = first.duration
    while engine.has_work():
        r = engine.step(t)
        assert r.num_scheduled_tokens == 1
        t += r.duration
    assert len(req.output_token_ids) == 5 and req.finish_reason == "length"
    assert engine.stats.finished["length"] == 1
    assert engine.stats.prompt_tokens == 100 and engine.stats.generation_tokens == 5
    assert engine.stats.ttft.n == 1 and engine.stats.itl.n == 4 and engine.stats.e2e.n == 1
    assert engine.pool.num_used == 0 or engine.kv_usage() == 0.0


def test_chunked_prefill_respects_token_budget():
    engine = make_engine(max_num_batched_tokens=256)
    req = SimRequest("a", prompt(1000), max_tokens=2)
    engine.add_request(req, now=0.0)
    sizes = []
    run_to_completion(engine, on_step=lambda e, r: sizes.append(r.num_scheduled_tokens))
    assert sizes == [256, 256, 256, 232, 1]
    assert all(s <= 256 for s in sizes)


def test_max_num_seqs_caps_running():
    engine = make_engine(max_num_seqs=4)
    for i in range(10):
        engine.add_request(SimRequest(f"r{i}", prompt(20, i), max_tokens=50), now=0.0)
    engine.step(0.0)
    assert engine.num_running == 4 and engine.num_waiting == 6


def test_kv_usage_never_exceeds_capacity_and_counts_blocks():
    engine = make_engine(num_gpu_blocks=64, block_size=16, max_model_len=512, max_num_seqs=64)
    for i in range(40):
        engine.add_request(SimRequest(f"r{i}", prompt(100, i), max_tokens=100), now=0.0)
    seen = []

    def check(e, r):
        used = sum(len(q.blocks) for q in e.running)
        assert used <= e.pool.num_blocks
        assert e.pool.num_used <= e.pool.num_blocks
        assert 0.0 <= e.kv_usage() <= 1.0
        for q in e.running:  # every running request has room for what it computed
            assert len(q.blocks) * 16 >= q.num_computed_tokens
        seen.append(e.kv_usage())

    run_to_completion(engine, on_step=check)
    assert max(seen) > 0.9  # the small cache really was full
    assert engine.stats.finished["length"] == 40


def test_identical_prefixes_hit_in_tokens():
    engine = make_engine(block_size=16)
    shared = prompt(100)
    engine.add_request(SimRequest("a", shared + [5, 6, 7], max_tokens=2), now=0.0)
    run_to_completion(engine)
    assert engine.stats.prefix_hits == 0 and engine.stats.prefix_queries == 103
    engine.add_request(SimRequest("b", shared + [8, 9], max_tokens=2), now=1.0)
    run_to_completion(engine, t=1.0)
    # 100 shared tokens = 6 full blocks of 16 = 96 tokens reusable
    assert engine.stats.prefix_hits == 96
    assert engine.stats.prefix_queries == 103 + 102
    assert engine.stats.prompt_tokens == 103 + 102  # cached tokens still count as prompt tokens
    assert engine.stats.prompt_tokens_cached == 96


def test_fully_cached_prompt_recomputes_last_token():
    engine = make_engine(block_size=16)
    p = prompt(64)  # exactly 4 blocks
    engine.add_request(SimRequest("a", p, max_tokens=1), now=0.0)
    run_to_completion(engine)
    engine.add_request(SimRequest("b", list(p), max_tokens=1), now=1.0)
    first = engine.step(1.0)
    assert engine.stats.prefix_hits == 48  # at most prompt-1 tokens: 3 full blocks
    assert first.num_scheduled_tokens == 16


def test_prefix_caching_can_be_disabled():
    engine = make_engine(enable_prefix_caching=False)
    for name in "ab":
        engine.add_request(SimRequest(name, prompt(100), max_tokens=2), now=0.0)
        run_to_completion(engine)
    assert engine.stats.prefix_hits == 0


def test_different_prefix_same_block_content_does_not_hit():
    block = [11] * 16
    assert block_hashes([1] * 16 + block, 16)[1] != block_hashes([2] * 16 + block, 16)[1]


def test_lru_eviction_of_freed_cached_blocks():
    pool = BlockPool(4)
    a = pool.allocate(2)
    pool.register(a[0], 111)
    pool.register(a[1], 222)
    pool.free(a)
    assert pool.num_free == 4 and pool.usage() == 0.0  # cached-but-free counts as free
    assert pool.lookup([111, 222], 2) == a
    pool.allocate(3)  # two never-used blocks, then the LRU cached one (the tail block first)
    assert pool.lookup([111], 1) == [a[0]]
    assert 222 not in pool.cached


def test_free_queue_reuses_unhashed_blocks_before_evicting_cached_ones():
    # vLLM v1 block_pool.free_blocks: blocks without a hash go to the head of the free
    # queue, hashed ones to the tail in the order freed (a request's tail block first).
    pool = BlockPool(6)
    older = pool.allocate(2)
    pool.register(older[0], 1)
    pool.register(older[1], 2)
    pool.free(older)
    newer = pool.allocate(4)  # the 4 never-used blocks
    pool.register(newer[0], 3)
    pool.free(newer)  # newer[1:] carry no hash: they go to the head
    assert list(pool.free_queue) == [newer[3], newer[2], newer[1], older[1], older[0], newer[0]]
    taken = pool.allocate(3)
    assert set(taken) == set(newer[1:])  # no cached block evicted yet
    assert pool.lookup([1, 2], 2) == older and pool.lookup([3], 1) == [newer[0]]
    pool.allocate(1)  # now the least recently freed cached block goes: older's tail block
    assert 2 not in pool.cached and pool.lookup([1], 1) == [older[0]] and 3 in pool.cached


def test_cyclic_reuse_larger_than_the_cache_thrashes():
    # Freed-order eviction is LRU: cycling over more documents than the cache holds
    # evicts each one just before it is needed again, so nothing hits.
    engine = make_engine(num_gpu_blocks=40, block_size=16, max_model_len=600)
    docs = [prompt(160, salt) for salt in range(5)]  # 5 x 10 blocks > 40 blocks
    t = 0.0
    for round_ in range(3):
        for i, doc in enumerate(docs):
            engine.add_request(SimRequest(f"r{round_}-{i}", doc + [1, 2], max_tokens=1), now=t)
            t = run_to_completion(engine, t=t)
    assert engine.stats.prefix_hits == 0


def test_lookup_counts_every_admission_attempt():
    # One request holds the cache; the next cannot be admitted and is looked up on every step.
    engine = make_engine(num_gpu_blocks=20, block_size=16, max_model_len=320)
    engine.add_request(SimRequest("a", prompt(200, 1), max_tokens=40), now=0.0)
    engine.add_request(SimRequest("b", prompt(200, 2), max_tokens=40), now=0.0)
    engine.step(0.0)
    engine.step(0.1)
    engine.step(0.2)
    assert engine.stats.prefix_queries == 200  # vLLM 0.32: at admission only
    assert engine.lookups.queries == 200 + 3 * 200  # a once, b at each of 3 failed attempts


def test_overload_grows_queue_and_preempts_with_small_kv():
    engine = make_engine(num_gpu_blocks=40, block_size=16, max_model_len=600, max_num_seqs=32)
    waiting = []
    for i in range(30):
        engine.add_request(SimRequest(f"r{i}", prompt(50, i), max_tokens=300), now=0.0)
    run_to_completion(engine, on_step=lambda e, r: waiting.append(e.num_waiting))
    assert max(waiting) >= 20
    assert engine.stats.preemptions > 0
    assert engine.stats.finished["length"] == 30  # preempted requests still finish
    assert engine.stats.num_preemptions.n == 30


def test_waiting_queue_grows_when_arrivals_outpace_service():
    engine = make_engine(hardware="l4", max_num_seqs=8)
    t, waiting, i = 0.0, [], 0
    while t < 5.0:
        while i * 0.02 <= t:  # 50 requests/s against ~8 concurrent slots
            engine.add_request(SimRequest(f"r{i}", prompt(200, i), max_tokens=200), now=i * 0.02)
            i += 1
        t += max(engine.step(t).duration, 0.001)
        waiting.append(engine.num_waiting)
    assert waiting[-1] > waiting[len(waiting) // 4] > 0


def decode_throughput(hardware: str, batch: int, context: int = 512) -> float:
    # A large KV override isolates the roofline from cache capacity.
    engine = make_engine(
        hardware=hardware, max_num_seqs=batch, max_num_batched_tokens=65536, num_gpu_blocks=20000, max_model_len=4096
    )
    for i in range(batch):
        engine.add_request(SimRequest(f"r{i}", prompt(context, i), max_tokens=200), now=0.0)
    engine.step(0.0)  # prefill
    r = engine.step(1.0)
    assert r.num_scheduled_tokens == batch
    return batch / r.duration


@pytest.mark.parametrize("hardware", ["h100", "l4"])
def test_throughput_rises_with_batch_until_compute_bound(hardware):
    sizes = [1, 4, 16, 64, 256, 1024, 2048]
    tps = [decode_throughput(hardware, b, context=16) for b in sizes]
    assert all(b > a for a, b in zip(tps, tps[1:4]))  # memory-bound region: more batch, more tokens/s
    assert tps[1] > 3 * tps[0]
    # compute-bound at the top: doubling the batch gains well under 2x
    assert tps[-1] / tps[-2] < 1.25
    hw = SimConfig(hardware=hardware).hardware_preset
    ceiling = hw.bf16_flops * hw.compute_efficiency / (2 * 8.03e9)
    assert tps[-1] <= ceiling


def test_roofline_single_decode_is_memory_bound():
    engine = make_engine(hardware="h100")
    d = engine.step_duration(1, 100.0, 100)
    hw, m = engine.hardware, engine.model
    expected = m.weight_bytes / (hw.hbm_bandwidth * hw.memory_efficiency) + 100 * m.kv_bytes_per_token / (
        hw.hbm_bandwidth * hw.attention_efficiency
    )
    assert d == pytest.approx(expected + hw.step_overhead_s + hw.per_request_overhead_s)


def test_instant_hardware_takes_no_time():
    engine = make_engine(hardware="instant")
    engine.add_request(SimRequest("a", prompt(10), max_tokens=3), now=0.0)
    assert run_to_completion(engine) == 0.0


def test_deterministic_for_a_seed():
    def run(seed):
        engine = make_engine(seed=seed, num_gpu_blocks=50, max_model_len=400)
        reqs = [SimRequest(f"r{i}", prompt(60, i % 3), max_tokens=80, ignore_eos=False) for i in range(12)]
        for i, r in enumerate(reqs):
            engine.add_request(r, now=i * 0.01)
        end = run_to_completion(engine)
        return [r.output_token_ids for r in reqs], end, engine.stats.preemptions, engine.stats.ttft.counts

    assert run(3) == run(3)
    assert run(3)[0] != run(4)[0]


def test_early_eos_respects_min_tokens():
    engine = make_engine(eos_probability=0.5)
    reqs = [SimRequest(f"r{i}", prompt(10, i), max_tokens=50, min_tokens=7, ignore_eos=False) for i in range(20)]
    for r in reqs:
        engine.add_request(r, now=0.0)
    run_to_completion(engine)
    lengths = [len(r.output_token_ids) for r in reqs]
    assert min(lengths) >= 7
    assert any(r.finish_reason == "stop" for r in reqs)
    assert engine.stats.finished["stop"] == sum(r.finish_reason == "stop" for r in reqs)


def test_ignore_eos_runs_to_max_tokens():
    engine = make_engine(eos_probability=0.5)
    r = SimRequest("a", prompt(10), max_tokens=40, ignore_eos=True)
    engine.add_request(r, now=0.0)
    run_to_completion(engine)
    assert len(r.output_token_ids) == 40 and r.finish_reason == "length"


def test_abort_frees_blocks_and_counts():
    engine = make_engine()
    engine.add_request(SimRequest("a", prompt(500), max_tokens=100), now=0.0)
    engine.step(0.0)
    assert engine.kv_usage() > 0
    engine.abort("a", now=0.1)
    assert engine.kv_usage() == 0 and not engine.has_work()
    assert engine.stats.finished["abort"] == 1


def test_request_over_max_model_len_is_refused():
    engine = make_engine(max_model_len=100, num_gpu_blocks=100)
    with pytest.raises(ValueError):
        engine.add_request(SimRequest("a", prompt(90), max_tokens=20), now=0.0)


@pytest.mark.parametrize(
    "salt_a, salt_b, hits",
    [
        (None, None, 96),  # no salts: the shared 100 tokens hit (6 full blocks)
        ("run-1", "run-1", 96),  # the same salt: shared as without one
        ("run-1", "run-2", 0),  # different salts never share a block
        (None, "run-2", 0),  # salted and unsalted neither
        ("run-1", None, 0),
    ],
)
def test_only_requests_with_the_same_cache_salt_share_prefix_blocks(salt_a, salt_b, hits):
    engine = make_engine(block_size=16)
    shared = prompt(100)
    engine.add_request(SimRequest("a", shared + [5, 6, 7], max_tokens=2, cache_salt=salt_a), now=0.0)
    run_to_completion(engine)
    engine.add_request(SimRequest("b", shared + [8, 9], max_tokens=2, cache_salt=salt_b), now=1.0)
    run_to_completion(engine, t=1.0)
    assert engine.stats.prefix_hits == hits


def test_a_salted_requests_generated_blocks_stay_salted():
    """A prompt shorter than a block: its first block is completed by generated tokens,
    whose hash must carry the salt too (a next turn with another salt must miss it)."""
    engine = make_engine(block_size=16)
    first = SimRequest("a", prompt(10), max_tokens=12, cache_salt="run-1")
    engine.add_request(first, now=0.0)
    run_to_completion(engine)
    history = first.prompt_token_ids + first.output_token_ids  # 22 tokens: one full block
    for name, salt, hits in (("b", "run-2", 0), ("c", "run-1", 16)):
        before = engine.stats.prefix_hits
        engine.add_request(SimRequest(name, history + [1, 2], max_tokens=1, cache_salt=salt), now=1.0)
        run_to_completion(engine, t=1.0)
        assert engine.stats.prefix_hits - before == hits
