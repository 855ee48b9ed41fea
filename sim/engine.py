"""The simulated engine: vLLM v1 scheduling and KV-cache semantics on a caller's clock.

Pure: no asyncio, no wall clock, no randomness except seeded per-request generators.
Drive it with ``add_request(req, now)`` and ``step(now)``; each step returns the tokens it
emitted, the requests it finished and how long it took (a roofline over the hardware and
model presets). A virtual-clock loop is::

    engine = Engine(SimConfig(...).resolved())
    engine.add_request(SimRequest("r1", prompt_ids, max_tokens=64), now=0.0)
    t = 0.0
    while engine.has_work():
        result = engine.step(t)
        t += result.duration   # tokens in `result.emitted` appear at this time

Semantics follow vLLM v1 (``vllm/v1/core/sched/scheduler.py``,
``vllm/v1/core/kv_cache_manager.py``, ``vllm/v1/core/block_pool.py``):

- Each step first serves running requests in order (decode: one token; unfinished chunked
  prefill: as much as the token budget allows), then admits waiting requests FCFS while
  ``max_num_seqs``, the token budget ``max_num_batched_tokens`` and free KV blocks allow.
  A waiting request that does not fit blocks the ones behind it. No admission happens in
  a step that had to preempt.
- When a running request needs a block and none is free, the newest running request is
  preempted (recompute): its blocks are freed and it goes back to the head of the queue.
- Prefix caching: every full block of a request's tokens, prompt and generated alike, is
  identified by a hash chained over the token ids of it and of every block before it
  (``Request.block_hashes``, extended as tokens are appended). A block joins the cache when
  its computation is scheduled (``allocate_slots``), so a request admitted later in the same
  step already hits it; the last generated token's KV is never computed, so a finished
  request leaves ``(prompt + output - 1) // block_size`` cached blocks, and the next turn
  of a conversation, whose prompt repeats this one's prompt and answer, hits them. Admission
  reuses the longest run of cached blocks (at most ``tokens - 1``, the last token is always
  recomputed); a preempted request recomputing its prompt and output hits its own blocks.
  A request's ``cache_salt`` is hashed into its first block, as vLLM puts it in the first
  block's extra keys: requests with different salts (or one salted, one not) never share a
  block, those with the same salt share as usual.
  Two requests computing the same block at once both keep a hashed copy; a lookup returns
  the older. Freed blocks keep their hash and join the tail of the free queue (a request's
  tail blocks ahead of its head blocks); freed blocks without a hash (partial blocks) join
  its head, so they are reused first and cached blocks are evicted in the order they were
  freed (``BlockPool.free_blocks``). Queries and hits are counted in tokens, once per
  request, when it is first admitted (vLLM 0.32; earlier versions counted every lookup, see
  ``Engine.lookups``); ``SimRequest.num_cached_tokens`` is that request's hit, what vLLM
  reports as ``usage.prompt_tokens_details.cached_tokens``.
- Without chunked prefill a waiting request is admitted only if its whole prefill fits
  the step's remaining token budget.
- KV usage counts cached-but-unreferenced blocks as free, like ``vllm:kv_cache_usage_perc``.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Protocol

from rampwatch.core.tokenizer import VOCAB_SIZE
from rampwatch.sim.config import SimConfig
from rampwatch.sim.lora import LoraSlots
from rampwatch.sim.multimodal import encoder_flops_in
from rampwatch.sim.speculation import Speculator, draft_cost
from rampwatch.sim.stats import EngineStats

_MASK64 = (1 << 64) - 1
_LCG_A = 6364136223846793005
_LCG_C = 1442695040888963407
_EOS_SCALE = 1 << 24

WAITING, RUNNING, FINISHED = "waiting", "running", "finished"


class RequestClient(Protocol):
    """What a front end hangs on a request: told after each step that gave it a token."""

    def push(self) -> None: ...


@dataclass(slots=True, eq=False)
class SimRequest:
    """One generation request. Fill the first block of fields; the engine owns the rest."""

    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = True
    seed: int | None = None  # the request's own `seed`, mixed into its token stream
    cache_salt: str | None = None  # the request's `cache_salt`: only equal salts share cached blocks
    # Its images (sim.multimodal): each one's first placeholder position and encoder FLOPs.
    mm_inputs: list[tuple[int, float]] = field(default_factory=list)
    lora: str | None = None  # the LoRA adapter it runs on (sim.lora); None: the base model
    # Engine-owned state below.
    arrival: float = 0.0
    status: str = WAITING
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    blocks: list[int] = field(default_factory=list)
    block_hashes: list[int] | None = None
    num_registered_blocks: int = 0
    num_cached_tokens: int = 0  # prefix-cache hit at first scheduling
    num_preemptions: int = 0
    first_scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    finish_reason: str | None = None
    rng_state: int = 0
    client: RequestClient | None = None  # the front end's per-request handle (e.g. its output stream)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)


@dataclass(slots=True)
class StepCost:
    """Where one step's time goes, in seconds. The GPU is busy for ``gpu``; the host part
    (scheduling, sampling, output processing) is not overlapped with it."""

    compute: float = 0.0  # FLOPs / achievable FLOP/s (per GPU of the TP group)
    memory: float = 0.0  # bytes read / achievable bandwidth (per GPU)
    allreduce: float = 0.0  # tensor-parallel all-reduces, 2 per layer
    host: float = 0.0  # fixed per-step + per-request host overhead
    draft: float = 0.0  # speculative decoding's draft passes (sim.speculation.draft_cost)

    @property
    def gpu(self) -> float:
        return max(self.compute, self.memory) + self.allreduce + self.draft

    @property
    def total(self) -> float:
        return self.gpu + self.host


@dataclass(slots=True)
class StepResult:
    """What one engine step did. Emitted tokens appear at ``now + duration``."""

    duration: float
    num_scheduled_tokens: int
    # Each got one new token, ``req.output_token_ids[-1]``; with speculative decoding one
    # or more (its accepted drafts too).
    emitted: list[SimRequest]
    finished: list[SimRequest]
    preempted: list[SimRequest]
    cost: StepCost = field(default_factory=StepCost)


@dataclass(slots=True)
class LookupCounts:
    """Prefix-cache lookups counted the way vLLM up to 0.10 logged its hit rate: every
    admission attempt, including attempts that found no room and recomputations after a
    preemption (vLLM issues #25780 and #43736). Diagnostic only; ``/metrics`` follows 0.32."""

    queries: int = 0
    hits: int = 0


class BlockPool:
    """Fixed pool of KV blocks with a content-hash cache and an LRU free queue.

    Never-used blocks are handed out before any freed block (they sit at the head of
    vLLM's initial free queue); they are counted, not materialised, so a pool of
    millions of blocks costs nothing until used.
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.ref_count: list[int] = []  # per materialised block id
        self.block_hash: list[int | None] = []
        self.cached: dict[int, int] = {}  # hash -> the block a lookup returns (its oldest copy)
        # Later copies of a cached block, oldest first: two requests that computed the same
        # block at once both keep theirs hashed (vLLM's BlockHashToBlockMap holds several
        # blocks per hash), so the copy outlives the eviction of the first one.
        self.duplicates: dict[int, dict[int, None]] = {}  # insertion-ordered sets
        # Insertion order = eviction order (head is least recently freed).
        self.free_queue: OrderedDict[int, None] = OrderedDict()

    @property
    def num_free(self) -> int:
        return self.num_blocks - len(self.ref_count) + len(self.free_queue)

    @property
    def num_used(self) -> int:
        return len(self.ref_count) - len(self.free_queue)

    def usage(self) -> float:
        return (len(self.ref_count) - len(self.free_queue)) / self.num_blocks

    def lookup(self, hashes: list[int], max_blocks: int) -> list[int]:
        out = []
        cached = self.cached
        for h in hashes[:max_blocks]:
            block = cached.get(h)
            if block is None:
                break
            out.append(block)
        return out

    def touch(self, blocks: list[int]) -> None:
        ref, free = self.ref_count, self.free_queue
        for b in blocks:
            if ref[b] == 0:
                del free[b]
            ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        if n > self.num_free:
            raise RuntimeError("KV block pool exhausted")
        ref, block_hash = self.ref_count, self.block_hash
        fresh = min(n, self.num_blocks - len(ref))
        start = len(ref)
        out = list(range(start, start + fresh))
        ref.extend([1] * fresh)
        block_hash.extend([None] * fresh)
        free = self.free_queue
        for _ in range(n - fresh):
            b, _unused = free.popitem(last=False)
            h = block_hash[b]
            if h is not None:
                self._forget(b, h)
                block_hash[b] = None
            ref[b] = 1
            out.append(b)
        return out

    def free(self, blocks: list[int]) -> None:
        ref, free, block_hash = self.ref_count, self.free_queue, self.block_hash
        # Reverse order: a request's tail blocks are evicted before its head blocks,
        # which are the ones most likely shared as a prefix. Blocks without a hash can
        # never be hit, so they go, in that same order, to the head of the queue and are
        # reused first (vLLM's prepend_n / append_n).
        unhashed = []
        for b in reversed(blocks):
            ref[b] -= 1
            if ref[b] == 0:
                free[b] = None
                if block_hash[b] is None:
                    unhashed.append(b)
        for b in reversed(unhashed):
            free.move_to_end(b, last=False)

    def register(self, block: int, h: int) -> None:
        """Give a block whose KV is computed its content hash, so lookups can find it."""
        if self.block_hash[block] is not None:
            return
        self.block_hash[block] = h
        first = self.cached.setdefault(h, block)
        if first != block:
            self.duplicates.setdefault(h, {})[block] = None

    def _forget(self, block: int, h: int) -> None:
        """Drop an evicted block from the cache; an older-first copy takes its place."""
        copies = self.duplicates.get(h)
        if self.cached.get(h) == block:
            if copies:
                oldest = next(iter(copies))
                del copies[oldest]
                self.cached[h] = oldest
            else:
                del self.cached[h]
        elif copies is not None:
            del copies[block]
        if copies is not None and not copies:
            del self.duplicates[h]


def block_hashes(token_ids: list[int], block_size: int, cache_salt: str | None = None) -> list[int]:
    """Chained hash per full block: equal hashes mean equal content *and* equal prefix
    (and equal ``cache_salt``)."""
    out: list[int] = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        out.append(next_block_hash(out, token_ids[start : start + block_size], cache_salt))
    return out


def next_block_hash(hashes: list[int], block_tokens: list[int], cache_salt: str | None = None) -> int:
    """The hash of the block after those ``hashes`` cover (vLLM's ``hash_block_tokens``);
    the salt counts in the first block only, whose hash every later one chains from."""
    if hashes:
        parent = hashes[-1]
    else:
        parent = 0 if cache_salt is None else hash(("cache_salt", cache_salt))
    return hash((parent, tuple(block_tokens)))


def request_rng_seed(seed: int, prompt_token_ids: list[int], request_seed: int | None) -> int:
    """The generator state a request starts from: a function of the content, not of timing."""
    return hash((seed, request_seed, len(prompt_token_ids), tuple(prompt_token_ids))) & _MASK64


class Engine:
    """One simulated engine (one data-parallel rank)."""

    def __init__(self, config: SimConfig, index: int = 0, created: float = 0.0) -> None:
        if config.num_gpu_blocks is None or config.max_model_len is None or config.max_num_batched_tokens is None:
            config = config.resolved()
        self.config = config
        self.capacity = config.capacity()
        self.index = index
        self.hardware = config.hardware_preset
        self.model = config.model_preset
        self.block_size = config.block_size
        self.pool = BlockPool(self.capacity.num_gpu_blocks)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.requests: dict[str, SimRequest] = {}
        self.stats = EngineStats(max_model_len=self.capacity.max_model_len, created=created)
        self.eos_threshold = int(config.eos_probability * _EOS_SCALE)
        self.lookups = LookupCounts()
        self.lora = LoraSlots(config.lora) if config.lora.enable_lora else None  # adapter slots (sim.lora)
        spec = config.speculation
        self.speculator = None if spec is None else Speculator(spec, config.seed, index, config.max_num_seqs)
        self._roofline_constants()

    def _roofline_constants(self) -> None:
        """Per-GPU rates of one tensor-parallel group: every GPU holds 1/tp of the weights
        and of the attention heads, so per-GPU work is the model's work divided by tp."""
        hw, m, cfg = self.hardware, self.model, self.config
        self._instant = hw.instant
        if self._instant:
            return
        tp = cfg.tensor_parallel_size
        self._linear_flops = hw.flops_for(m.fp8_weights) * hw.compute_efficiency
        self._attn_flops = hw.bf16_flops * hw.compute_efficiency  # attention runs in bf16
        self._bandwidth = hw.hbm_bandwidth * hw.memory_efficiency
        self._kv_bandwidth = hw.hbm_bandwidth * hw.attention_efficiency
        self._flops_per_token = 2.0 * m.params / tp
        # QK^T and PV: 2 matmuls x 2 FLOP per multiply-add, per query token per context token.
        self._attn_flops_per_pair = 4.0 * m.num_layers * m.num_attention_heads * m.head_dim / tp
        self._kv_bytes_per_token = cfg.kv_bytes_per_token_per_gpu
        self._weight_bytes = m.weight_bytes / tp
        # Ring all-reduce of the bf16 hidden state after attention and after the MLP of every
        # layer: each GPU sends and receives 2(tp-1)/tp of the message over its link.
        self._allreduces = 0 if tp == 1 else 2 * m.num_layers
        self._allreduce_bytes_per_token = 2.0 * (tp - 1) / tp * m.hidden_size * 2
        self._link_bandwidth = hw.link_bandwidth
        self._allreduce_latency = 2 * (tp - 1) * hw.allreduce_hop_latency_s
        self._overhead = hw.step_overhead_s if cfg.step_overhead_s is None else cfg.step_overhead_s
        self._per_request_overhead = (
            hw.per_request_overhead_s if cfg.per_request_overhead_s is None else cfg.per_request_overhead_s
        )

    # ------------------------------------------------------------------ requests

    def add_request(self, req: SimRequest, now: float) -> None:
        """Queue a request (FCFS). Raises ValueError if it can never fit."""
        if req.request_id in self.requests:
            raise ValueError(f"duplicate request id {req.request_id}")
        if not req.prompt_token_ids:
            raise ValueError("empty prompt")
        if req.num_prompt_tokens + req.max_tokens > self.capacity.max_model_len:
            raise ValueError("prompt + max_tokens exceeds max_model_len")
        req.arrival = now
        req.status = WAITING
        req.rng_state = request_rng_seed(self.config.seed, req.prompt_token_ids, req.seed)
        self.requests[req.request_id] = req
        self.waiting.append(req)

    def abort(self, request_id: str, now: float) -> SimRequest | None:
        """Drop a request (client went away). Its blocks are freed at once."""
        req = self.requests.get(request_id)
        if req is None or req.status == FINISHED:
            return None
        if req.status == RUNNING:
            self.running.remove(req)
        else:
            self.waiting.remove(req)
        self._finish(req, "abort", now, record_latency=False)
        return req

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def kv_usage(self) -> float:
        return self.pool.usage()

    def load(self) -> int:
        """Router's load figure: requests this engine holds."""
        return len(self.running) + len(self.waiting)

    # ------------------------------------------------------------------ scheduling

    def _preempt(self, req: SimRequest) -> None:
        self.pool.free(req.blocks)
        req.blocks = []
        req.num_computed_tokens = 0
        req.num_registered_blocks = 0
        req.status = WAITING
        req.num_preemptions += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(req)

    def step(self, now: float) -> StepResult:
        """Run one engine iteration starting at ``now``."""
        budget = self.capacity.max_num_batched_tokens
        pool = self.pool
        scheduled: list[tuple[SimRequest, int]] = []
        preempted: list[SimRequest] = []
        running = self.running
        bs = self.block_size
        k = 0 if self.speculator is None else self.speculator.draft_len(len(running))

        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            computed = req.num_computed_tokens
            n = min(len(req.prompt_token_ids) + len(req.output_token_ids) - computed, budget)
            # Speculative decoding: a decoding request also verifies its k drafts (their KV
            # slots are allocated; the rejected ones are rolled back in _execute). As in
            # vLLM, only the step's budget and max_model_len cut a draft, never max_tokens:
            # tokens past it are dropped when they are accepted.
            drafts = 0
            if k and n == 1 and req.output_token_ids:
                drafts = max(0, min(k, budget - 1, self.capacity.max_model_len - 1 - computed - 1))
            need = -(-(computed + n + drafts) // bs) - len(req.blocks)
            while need > pool.num_free:
                victim = running.pop()
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    break
            if req.status != RUNNING:
                break
            if need > 0:
                req.blocks.extend(pool.allocate(need))
            if (computed + n) // bs > req.num_registered_blocks and req.block_hashes is not None:
                self._cache_blocks(req, computed + n)
            scheduled.append((req, n + drafts))
            budget -= n + drafts
            i += 1

        if not preempted:
            if self.lora is not None:
                self.lora.begin_step(r.lora for r in running)
            self._admit(now, budget, scheduled)

        return self._execute(now, scheduled, preempted)

    def _cache_blocks(self, req: SimRequest, num_tokens: int) -> None:
        """Register the full blocks among a request's first ``num_tokens`` tokens, as vLLM's
        ``allocate_slots`` does for the tokens it schedules: a request admitted later in the
        same step already hits them (each layer writes the step's KV before attending)."""
        pool, blocks, hashes = self.pool, req.blocks, req.block_hashes
        assert hashes is not None
        full = num_tokens // self.block_size
        for j in range(req.num_registered_blocks, full):
            pool.register(blocks[j], hashes[j])
        req.num_registered_blocks = max(req.num_registered_blocks, full)

    def _admit(self, now: float, budget: int, scheduled: list[tuple[SimRequest, int]]) -> None:
        pool, waiting, running = self.pool, self.waiting, self.running
        max_seqs = self.config.max_num_seqs
        caching = self.config.enable_prefix_caching
        chunked = self.config.enable_chunked_prefill
        lookups = self.lookups
        bs = self.block_size
        lora, skipped = self.lora, []
        while waiting and budget > 0 and len(running) < max_seqs:
            req = waiting[0]
            if lora is not None and not lora.admits(req.lora):
                skipped.append(waiting.popleft())  # no slot for its adapter: those behind it may go (vLLM)
                continue
            hit_blocks: list[int] = []
            if caching:
                if req.block_hashes is None:  # first admission: no output yet; later ones keep them
                    req.block_hashes = block_hashes(req.prompt_token_ids, bs, req.cache_salt)
                hit_blocks = pool.lookup(req.block_hashes, (req.num_tokens - 1) // bs)
                lookups.queries += req.num_tokens
                lookups.hits += len(hit_blocks) * bs
            num_cached = len(hit_blocks) * bs
            if not chunked and req.num_tokens - num_cached > budget:
                break  # the whole prefill must fit this step; FCFS keeps the rest behind it
            n = min(req.num_tokens - num_cached, budget)
            new_blocks = -(-(num_cached + n) // bs) - len(hit_blocks)
            evictable_hits = sum(1 for b in hit_blocks if pool.ref_count[b] == 0)
            if new_blocks > pool.num_free - evictable_hits:
                break  # FCFS: the head of the queue blocks the rest
            waiting.popleft()
            pool.touch(hit_blocks)
            req.blocks = hit_blocks + pool.allocate(new_blocks)
            req.num_computed_tokens = num_cached
            req.num_registered_blocks = len(hit_blocks)
            if caching:
                self._cache_blocks(req, num_cached + n)
            req.status = RUNNING
            if req.first_scheduled_at is None:
                req.first_scheduled_at = now
                req.num_cached_tokens = num_cached
                self.stats.prefix_queries += req.num_tokens
                self.stats.prefix_hits += num_cached
            running.append(req)
            scheduled.append((req, n))
            budget -= n
            if lora is not None:
                lora.take(req.lora)
        waiting.extendleft(reversed(skipped))

    def _execute(self, now: float, scheduled: list[tuple[SimRequest, int]], preempted: list[SimRequest]) -> StepResult:
        total = 0
        attn_pairs = 0.0
        kv_tokens = 0
        encoder_flops = 0.0
        drafting = max_drafts = 0
        for req, n in scheduled:
            total += n
            ctx = req.num_computed_tokens
            attn_pairs += n * (ctx + (n + 1) * 0.5)
            kv_tokens += ctx + n
            if req.mm_inputs:
                encoder_flops += encoder_flops_in(req.mm_inputs, ctx, ctx + n)
            drafts = ctx + n - req.num_tokens
            if drafts > 0:
                drafting += 1
                max_drafts = max(max_drafts, drafts)
        cost = self.step_cost(total, attn_pairs, kv_tokens, len(scheduled))
        if encoder_flops and not self._instant:  # the vision encoder, in bf16
            cost.compute += encoder_flops / self._attn_flops
        if self.lora is not None and total and not self._instant:  # adapter loads, low-rank matmuls
            cost.host += self.lora.step_time(cost.gpu, any(req.lora is not None for req, _ in scheduled))
        if drafting and self.speculator is not None and not self._instant:
            gpu, host = draft_cost(
                self.speculator.config,
                drafting,
                max_drafts,
                self._flops_per_token,
                self._linear_flops,
                self._weight_bytes,
                self._bandwidth,
            )
            cost.draft += gpu
            cost.host += host
        duration = cost.total
        end = now + duration
        emitted: list[SimRequest] = []
        finished: list[SimRequest] = []
        stats = self.stats
        bs = self.block_size
        max_len = self.capacity.max_model_len
        eos_threshold = self.eos_threshold
        itl = stats.itl
        for req, n in scheduled:
            req.num_computed_tokens += n
            prompt_len = len(req.prompt_token_ids)
            drafts = req.num_computed_tokens - req.num_tokens
            if drafts < 0:
                continue  # chunked prefill still in progress
            new_tokens = 1
            if drafts:
                assert self.speculator is not None  # only a speculating engine drafts
                accepted = self.speculator.verify(drafts)
                req.num_computed_tokens -= drafts - accepted  # the rejected drafts' KV is rolled back
                new_tokens += accepted
            out = req.output_token_ids
            done = False
            for _ in range(new_tokens):
                x = (req.rng_state * _LCG_A + _LCG_C) & _MASK64
                req.rng_state = x
                out.append((x >> 20) % VOCAB_SIZE)
                n_out = len(out)
                if (prompt_len + n_out) % bs == 0 and req.block_hashes is not None:
                    # The new token completed a block: hash it now, once per block; it is
                    # cached when its KV computation is scheduled (the next step's _cache_blocks).
                    start = prompt_len + n_out - bs
                    tokens = out[start - prompt_len :] if start >= prompt_len else req.prompt_token_ids[start:] + out
                    req.block_hashes.append(next_block_hash(req.block_hashes, tokens, req.cache_salt))
                stats.generation_tokens += 1
                if n_out >= req.max_tokens or prompt_len + n_out >= max_len:
                    done = True
                elif not req.ignore_eos and n_out >= req.min_tokens and (x >> 40) % _EOS_SCALE < eos_threshold:
                    req.finish_reason = "stop"
                    done = True
                if done:
                    break  # a stop among accepted drafts drops the ones after it, as vLLM does
            emitted.append(req)
            last_token_at = req.last_token_at
            if last_token_at is None:  # set together with first_token_at
                req.first_token_at = end
                stats.ttft.observe(end - req.arrival)
                stats.prompt_tokens += prompt_len
                stats.prompt_tokens_cached += req.num_cached_tokens
            else:
                itl.observe(end - last_token_at)
            req.last_token_at = end
            if done:
                finished.append(req)
        if finished:
            for req in finished:
                self.running.remove(req)
                self._finish(req, req.finish_reason or "length", end, record_latency=True)
        if total:
            stats.iteration_tokens.observe(total)
        return StepResult(duration, total, emitted, finished, preempted, cost)

    def _finish(self, req: SimRequest, reason: str, now: float, record_latency: bool) -> None:
        self.pool.free(req.blocks)
        req.blocks = []
        req.status = FINISHED
        req.finish_reason = reason
        req.finished_at = now
        del self.requests[req.request_id]
        stats = self.stats
        stats.finished[reason] += 1
        if not record_latency:
            return
        gen = len(req.output_token_ids)
        scheduled_at, first_token_at = req.first_scheduled_at, req.first_token_at
        # Latency is recorded only for a request that finished by generating: it was
        # scheduled and gave a token.
        assert scheduled_at is not None and first_token_at is not None
        stats.e2e.observe(now - req.arrival)
        stats.queue.observe(scheduled_at - req.arrival)
        stats.inference.observe(now - scheduled_at)
        stats.prefill.observe(first_token_at - scheduled_at)
        stats.decode.observe(now - first_token_at)
        if gen > 1:
            stats.tpot.observe((now - first_token_at) / (gen - 1))
        stats.request_prompt_tokens.observe(req.num_prompt_tokens)
        stats.request_generation_tokens.observe(gen)
        stats.request_max_generation_tokens.observe(req.max_tokens)
        stats.request_params_max_tokens.observe(req.max_tokens)
        stats.request_prefill_kv_computed.observe(req.num_prompt_tokens - req.num_cached_tokens)
        stats.params_n.observe(1)
        stats.num_preemptions.observe(req.num_preemptions)

    # ------------------------------------------------------------------ roofline

    def step_duration(self, num_tokens: int, attn_pairs: float, kv_tokens_read: int, num_requests: int = 1) -> float:
        """The step's length in seconds; 0 for an empty step (see ``step_cost``)."""
        return self.step_cost(num_tokens, attn_pairs, kv_tokens_read, num_requests).total

    def step_cost(self, num_tokens: int, attn_pairs: float, kv_tokens_read: int, num_requests: int) -> StepCost:
        """max(compute, memory) + all-reduce + host overhead, per GPU of the TP group.

        compute   = 2·params·tokens / linear FLOP/s + 4·layers·heads·head_dim·Σ(query × context) / bf16 FLOP/s
        memory    = weight bytes / weight-read bandwidth + KV bytes read (context of every scheduled
                    request) / attention bandwidth
        all-reduce = 2·layers · (2(tp−1) · hop latency + 2(tp−1)/tp · tokens · hidden · 2 bytes / link bandwidth)
        host      = step overhead + per-request overhead · requests in the step
        (every work term divided by the tensor-parallel size)
        """
        if num_tokens == 0 or self._instant:
            return StepCost()
        compute = (
            self._flops_per_token * num_tokens / self._linear_flops
            + self._attn_flops_per_pair * attn_pairs / self._attn_flops
        )
        memory = self._weight_bytes / self._bandwidth + self._kv_bytes_per_token * kv_tokens_read / self._kv_bandwidth
        allreduce = 0.0
        if self._allreduces:
            allreduce = self._allreduces * (
                self._allreduce_latency + self._allreduce_bytes_per_token * num_tokens / self._link_bandwidth
            )
        host = self._overhead + self._per_request_overhead * num_requests
        return StepCost(compute, memory, allreduce, host)
