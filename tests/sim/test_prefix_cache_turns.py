"""Generated tokens are cacheable: a conversation's next turn hits its previous answer.

vLLM v1 hashes every full block of a request's tokens, prompt and generated alike, and
caches a block once its KV is computed (the last generated token's never is).
"""

import pytest

from rampwatch.sim.engine import BlockPool, Engine, SimRequest
from tests.sim.test_engine import make_engine, prompt, run_to_completion

BS = 16


def small_engine(**kwargs) -> Engine:
    base = dict(hardware="instant", model="tiny", block_size=BS, num_gpu_blocks=64, max_model_len=1024)
    base.update(kwargs)
    return make_engine(**base)


def finish(engine: Engine, req: SimRequest, t: float = 0.0) -> float:
    engine.add_request(req, now=t)
    return run_to_completion(engine, t=t)


@pytest.mark.parametrize(
    ("prompt_len", "answer_len", "new_len", "cached"),
    [
        (40, 30, 10, 64),  # 69 computed tokens: 4 full blocks, 2 of them from the answer
        (40, 24, 10, 48),  # 64 tokens, but the last answer token's KV is never computed
        (40, 25, 10, 64),  # 65 tokens: the 64 before the last are computed
        (40, 30, 0, 64),  # the next prompt is exactly prompt + answer
        (8, 40, 3, 32),  # a short prompt: the answer's blocks are most of the hit
    ],
)
def test_next_turn_hits_the_previous_prompt_and_answer(prompt_len, answer_len, new_len, cached):
    engine = small_engine()
    first = SimRequest("turn1", prompt(prompt_len), max_tokens=answer_len)
    t = finish(engine, first)
    history = first.prompt_token_ids + first.output_token_ids
    second = SimRequest("turn2", history + prompt(new_len, salt=9), max_tokens=4)
    finish(engine, second, t)
    assert second.num_cached_tokens == cached
    assert engine.stats.prefix_hits == cached
    assert engine.stats.prefix_queries == prompt_len + len(second.prompt_token_ids)


def test_a_different_answer_hits_only_the_prompt_blocks():
    engine = small_engine()
    first = SimRequest("turn1", prompt(40), max_tokens=30)
    t = finish(engine, first)
    other_answer = [(x + 1) % 30000 for x in first.output_token_ids]
    second = SimRequest("turn2", first.prompt_token_ids + other_answer + prompt(10, salt=9), max_tokens=4)
    finish(engine, second, t)
    assert second.num_cached_tokens == 32  # the prompt's 2 full blocks; block 3 mixes in the answer


def test_finished_request_frees_answer_blocks_to_the_tail_and_its_partial_block_to_the_head():
    engine = small_engine(num_gpu_blocks=5, max_model_len=80)
    first = SimRequest("turn1", prompt(40), max_tokens=30)  # 69 computed tokens in 5 blocks
    t = finish(engine, first)
    pool = engine.pool
    # Blocks 0-1 hold the prompt, 2 straddles prompt and answer, 3 is answer, 4 is partial.
    assert [pool.block_hash[b] is not None for b in range(5)] == [True, True, True, True, False]
    # Head first: the partial block (reused first), then the cached ones tail block first.
    assert list(pool.free_queue) == [4, 3, 2, 1, 0]
    # Another request needing 2 blocks takes the partial block and evicts the answer's last one.
    finish(engine, SimRequest("other", prompt(20, salt=5), max_tokens=1), t)
    assert pool.block_hash[3] is None and pool.block_hash[2] is not None
    second = SimRequest("turn2", first.prompt_token_ids + first.output_token_ids + [7] * 2, max_tokens=2)
    finish(engine, second, t)
    assert second.num_cached_tokens == 48


def test_same_step_admission_hits_blocks_scheduled_in_that_step():
    # vLLM caches a block when it schedules its computation: two identical prompts
    # arriving together compute the prefix once.
    engine = small_engine()
    a = SimRequest("a", prompt(100), max_tokens=2)
    b = SimRequest("b", prompt(100), max_tokens=2)
    engine.add_request(a, now=0.0)
    engine.add_request(b, now=0.0)
    first = engine.step(0.0)
    assert first.num_scheduled_tokens == 100 + 4  # b recomputes 100 - 96 tokens
    assert b.num_cached_tokens == 96


def test_a_duplicate_copy_keeps_serving_hits_after_the_first_is_evicted():
    # vLLM's BlockHashToBlockMap holds every block computed with a hash; a lookup returns
    # the oldest, and evicting it leaves the next.
    pool = BlockPool(3)
    first, second = pool.allocate(2)
    pool.register(first, 42)
    pool.register(second, 42)
    assert pool.lookup([42], 1) == [first]
    pool.free([second])
    pool.free([first])
    assert list(pool.free_queue) == [second, first]  # both hashed: tail, in freed order
    pool.allocate(2)  # the never-used block, then the least recently freed: `second`
    assert pool.lookup([42], 1) == [first]
    pool.allocate(1)  # now `first` too
    assert pool.lookup([42], 1) == [] and not pool.duplicates


def test_preempted_request_recomputes_from_its_own_prompt_and_answer_blocks():
    # Two long generations on a small pool: the newer one is preempted (its blocks freed,
    # hashed ones kept), and when it is admitted again it hits its own prompt and
    # generated blocks instead of recomputing them; its output is the same as alone.
    engine = small_engine(num_gpu_blocks=12, max_model_len=192, max_num_seqs=2)
    a = SimRequest("a", prompt(40, 1), max_tokens=100)
    b = SimRequest("b", prompt(40, 2), max_tokens=100)
    engine.add_request(a, now=0.0)
    engine.add_request(b, now=0.0)
    readmitted_at: list[int] = []

    def watch(e: Engine, result) -> None:
        if b.num_preemptions and b.status == "running" and not readmitted_at:
            readmitted_at.append(len(b.output_token_ids))

    run_to_completion(engine, on_step=watch)
    assert b.num_preemptions == 1 and a.num_preemptions == 0
    alone = small_engine()
    b_alone = SimRequest("b", prompt(40, 2), max_tokens=100)
    finish(alone, b_alone)
    assert b.output_token_ids == b_alone.output_token_ids
    # b was admitted again with its output so far; the recompute looked up prompt + answer
    # blocks: more than the prompt's 2 full blocks were hits.
    assert readmitted_at and readmitted_at[0] > 0
    recompute_hits = engine.lookups.hits - engine.stats.prefix_hits
    assert recompute_hits > 2 * BS
    assert engine.stats.prefix_queries == 80  # vLLM 0.32 counts first admissions only
    assert engine.kv_usage() == 0.0
