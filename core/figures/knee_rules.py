"""The rules that say which limit a knee hit, each a pure function of the seconds around
it (``KneeWindow``) and the limits the run knows (``ServerLimits``), returning its
``KneeExplanation`` when it holds, else None; ``core.figures.knee_explain`` applies them.

The rules, over the whole window unless "recent" (its last ``RECENT_S`` seconds before
the knee, and every second after it when those are given):

- ``kv_full``: KV usage reached ``KV_FULL_PCT`` in the recent seconds, and requests were
  preempted or kept waiting;
- ``batch_cap``: running requests sat at the cap (``CAP_FRACTION`` x ``max_num_seqs`` x
  engines, or one below it while requests wait) for at least ``PLATEAU_S`` seconds while
  requests waited (recent mean at least
  ``WAITING_MIN``). Without a known ``max_num_seqs``, a running count of at least
  ``MIN_INFERRED_CAP`` within one request of its top for the last ``PLATEAU_S`` seconds
  or more, at exactly the top in ``EXACT_SHARE`` of them, with requests waiting and the
  KV cache not full, is taken as the cap, and said to be inferred (with steps of
  ``BIG_STEP_TOKENS`` tokens or more, and the budget unknown, the explanation adds that a
  budget set that low would hold running as flat);
- ``token_budget``: requests waited, the tokens each step computed filled at least
  ``BUDGET_FILL`` of ``max_num_batched_tokens`` (tokens per step ~ (computed prompt tok/s
  + generation tok/s) x the step time, which is the client's ITL p50), and TTFT p50 rose
  ``TTFT_RISE``-fold while ITL p50 held (rose less than ``ITL_HOLD``-fold). Without a
  known budget, the same with the computed prompt tok/s grown ``PROMPT_GREW``-fold and
  then flat (spread under ``FLAT_SPREAD``, at least ``PROMPT_TOP_SHARE`` of the window's
  90th percentile), neither the KV cache full nor running at a cap: said to be inferred;
- ``lora_slots``: adapters waited for a LoRA slot at ``--max-loras`` (``core.figures.knee_lora``,
  where the server exports ``vllm:lora_requests_info``);
- ``client_cap``: rampwatch's own queue (``client_queued``) reached ``CLIENT_QUEUE_MIN``
  and grew, while the server had room (recent waiting mean under ``WAITING_MIN``, running
  under the cap when the cap is known);
- ``spec_decode`` (``core.figures.knee_spec``): the server speculates, the batch grew, and
  the step time grew or the draft acceptance fell: speculation is to be turned off above a
  batch size;
- ``compute_bound``: running below the cap, and the step time (ITL p50) grew at least
  ``ITL_GROWTH``-fold as the batch (running) grew at least ``RUNNING_GROWTH``-fold: the
  GPU's compute or memory bandwidth is the limit.

"Rose" and "grew" compare the mean of the recent seconds with the mean of the window's
first ``RECENT_S`` seconds. ``PRIORITY`` puts the hard limits the server reached first —
the KV cache (raising the batch cap would not help while it is full), then the LoRA
slots, then the batch cap, then the token budget — then the client's cap, then the soft
compute bound. Speculative decoding comes right after the KV cache and the LoRA slots:
when its verification made the steps compute bound, raising the batch cap or the budget
only lengthens them further, while turning it off above the batch where it paid shortens
every step at high load.

The advice is a change that can matter: a batch cap is raised to twice its value, or to
what keeps KV under ``KV_ROOM_TARGET_PCT``, and only when that is at least ``MIN_RAISE``
times the cap — else the KV cache is the next limit and its advice comes first. A full
cache: ``--gpu-memory-utilization`` ``MEMORY_TOP``, an FP8 cache (twice the tokens), half
the sequences, the cache split over twice the GPUs, shorter contexts.

A reasoning run's knee can carry a note (``reasoning_note``, whatever the limit): when the
time to first answer p50 rose ``TTFA_RISE``-fold and at least ``AFTER_FIRST_TOKEN_SHARE``
of its rise came after the first token (TTFT p50 rose far less), the thinking before the
answer slowed — a slower ITL over the same reasoning tokens, or longer thinking — which
TTFT alone does not show.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from rampwatch.core.figures.knee_explanation import TITLES, KneeExplanation
from rampwatch.core.figures.knee_lora import lora_slots
from rampwatch.core.figures.knee_spec import spec_decode
from rampwatch.core.figures.knee_window import (
    RECENT_S,
    KneeWindow,
    from_to_text,
    kv_text,
    longest_run,
    longest_stretch,
    ms_text,
    number_text,
    waiting_text,
)
from rampwatch.core.figures.server_limits import ServerLimits

KV_FULL_PCT = 95.0  # KV usage at or above which the cache counts as full (the knee detector's kv_pressure level)
KV_ROOM_TARGET_PCT = 90.0  # a larger batch is sized so KV usage would stay under this
MIN_RAISE = 1.5  # a larger batch cap worth a restart: at least this many times the cap
MEMORY_TOP = 0.95  # the --gpu-memory-utilization a full KV cache is pointed to (leaves room for activations)
DEFAULT_MEMORY = 0.90  # vLLM's --gpu-memory-utilization when the run does not know it
# A memory share within this of MEMORY_TOP gives a few % more cache at most (0.90 -> 0.95:
# 5 % of the GPU's memory, against a cache that holds most of what is left after the
# weights): not the first advice, and said to be small.
SMALL_MEMORY_STEP = 0.10
CAP_FRACTION = 0.95  # running at or above this share of the batch cap counts as "at the cap"
PLATEAU_S = 3  # seconds at the cap (or flat, when inferred) before it counts: the knee is often declared ~5 s after the cap is reached
EXACT_SHARE = 0.8  # an inferred cap: the share of the plateau's seconds at exactly its top
MIN_INFERRED_CAP = 4  # a lower plateau (one long prefill at a time…) is not taken for a cap
BIG_STEP_TOKENS = 256  # an inferred cap with steps this large: a token budget set this low would hold it too
WAITING_MIN = 1.0  # mean requests waiting in the recent seconds that count as "requests wait"
CLIENT_QUEUE_MIN = 3.0  # requests in rampwatch's own queue that count as a client-side queue
BUDGET_FILL = 0.8  # share of max_num_batched_tokens per step that counts as a full budget
FLAT_SPREAD = 0.15  # an unknown budget: prompt tok/s varying less than this (std / mean) counts as flat
PROMPT_TOP_SHARE = 0.85  # … and at least this share of the window's 90th percentile (it stopped growing)
PROMPT_GREW = 1.3  # … having grown this many times over from the window's start (the ramp reached the budget)
TTFT_RISE = 2.0  # TTFT p50 rising this many times over counts as rising
ITL_HOLD = 1.5  # ITL p50 rising less than this many times counts as holding
ITL_GROWTH = 1.5  # ITL p50 growing this many times over counts as the step time growing
RUNNING_GROWTH = 1.3  # running growing this many times over counts as the batch growing

# -- the rules: each returns its explanation when it holds, else None -------------------

Rule = Callable[[KneeWindow, ServerLimits], KneeExplanation | None]


def _more_kv(limits: ServerLimits, running: float | None) -> list[tuple[str, str]]:
    """What gives the sequences more KV cache, as (argument, what it gives), the one that
    can matter most first: the memory share when it is well under ``MEMORY_TOP`` (within
    ``SMALL_MEMORY_STEP`` of it, vLLM's default 0.90 included, it gives a few % more
    cache: then after the FP8 cache, and said to be small), an FP8 cache, fewer sequences
    sharing it, the cache split over more GPUs, shorter contexts."""
    out = []
    memory = limits.gpu_memory_utilization
    small_share = None
    if memory is None or memory < MEMORY_TOP - 0.005:
        now = DEFAULT_MEMORY if memory is None else memory
        share = f"--gpu-memory-utilization {MEMORY_TOP:.2f}"
        if MEMORY_TOP - now < SMALL_MEMORY_STEP:
            default = ", vLLM's default" if memory is None else ""
            small_share = (share, f"a small step from {now:.2f}{default}: a few % more cache")
        else:
            out.append((share, f"from {now:.2f}: the cache grows by more than the share"))
    if limits.kv_cache_dtype is None or "fp8" not in limits.kv_cache_dtype:
        doubled = f": ~{2 * limits.kv_tokens:,} tokens" if limits.kv_tokens is not None else ""
        out.append(("--kv-cache-dtype fp8", f"twice the tokens in the same memory{doubled}"))
    if small_share is not None:
        out.append(small_share)
    cap = limits.max_num_seqs or (running / max(1, limits.engines) if running else None)
    out.append(
        (f"--max-num-seqs {max(1, int(cap) // 2)}", "fewer sequences share the cache")
        if cap
        else ("--max-num-seqs down", "fewer sequences share the cache")
    )
    out.append((f"--tensor-parallel-size {limits.tensor_parallel_size * 2}", "the cache split across GPUs"))
    out.append(("--max-model-len shorter", "when long contexts are rare"))
    return out


def _with_sizes(advice: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """``(argument, what it gives)`` pairs as the alternatives list them."""
    return tuple(f"{argument} ({gives})" for argument, gives in advice)


def _kv_full(w: KneeWindow, limits: ServerLimits) -> KneeExplanation | None:
    kv = w.peak(w.recent("kv_usage_pct"))
    if kv is None or kv < KV_FULL_PCT:
        return None
    preempted = float(np.nansum(w.get("preemptions"))) if w.n else 0.0
    waiting = w.mean(w.recent("waiting")) or 0.0
    if preempted <= 0 and waiting < WAITING_MIN:
        return None
    full = np.nan_to_num(w.get("kv_usage_pct"), nan=0.0) >= KV_FULL_PCT
    held = w.mean(w.get("running")[full])  # the batch the full cache held
    parts = [f"KV {kv:.0f} % for {longest_run(full)} s", f"{preempted:.0f} preemptions in {w.n} s", waiting_text(w)]
    if held is not None:
        parts.append(f"running {number_text(held)} while full")
    if limits.kv_tokens is not None:
        each = f" (~{number_text(limits.kv_tokens / held)} a sequence)" if held else ""
        parts.append(f"cache {limits.kv_tokens:,} tokens{each}")
    advice = _more_kv(limits, held)
    return KneeExplanation(
        "kv_full",
        TITLES["kv_full"],
        ", ".join(parts),
        advice[0][0],
        alternatives=_with_sizes(advice[1:]),
        brief=f"KV {kv:.0f} % with {preempted:.0f} preemptions",
    )


def _at_cap(w: KneeWindow, limits: ServerLimits) -> tuple[int, int, bool] | None:
    """(the cap, seconds at it, whether it is inferred) when running sat at a batch cap."""
    running = w.get("running")
    waiting = np.nan_to_num(w.get("waiting"), nan=0.0)
    cap = limits.running_cap
    if cap is None:  # an inferred cap is the plateau up to the knee
        running, waiting = w.before(running), w.before(waiting)
    else:
        # A scrape between a request's end and the next step's admission sees one slot
        # free while requests wait (the engine fills it at its next step): still the cap.
        known = np.nan_to_num(running, nan=0.0)
        at_cap = (known >= CAP_FRACTION * cap) | ((known >= cap - 1) & (waiting >= 1.0))
        seconds = longest_run(at_cap)
        return (cap, seconds, False) if seconds >= PLATEAU_S else None
    # Unknown cap: a hard cap holds running exactly flat while requests wait (a full KV
    # cache does too: then the plateau says nothing of a cap).
    finite = np.isfinite(running)
    kv = w.peak(w.recent("kv_usage_pct"))
    if not finite.any() or (kv is not None and kv >= KV_FULL_PCT):
        return None
    top = float(np.nanmax(running[-RECENT_S:])) if np.isfinite(running[-RECENT_S:]).any() else math.nan
    if not math.isfinite(top) or top < MIN_INFERRED_CAP or waiting[-1] < 1.0:
        return None
    # Up to the last second with a scrape; a second without one (NaN) neither makes nor
    # breaks the plateau. The plateau may begin a little before the queue does: the cap
    # is reached first.
    last = int(np.flatnonzero(finite)[-1]) + 1
    values, known = running[:last], finite[:last]
    flat = ~known | (np.abs(np.nan_to_num(values, nan=top) - top) <= 1.0)
    start, seconds = longest_stretch(flat)
    if start + seconds < last or seconds < PLATEAU_S:  # the plateau must last to the knee
        return None
    # A cap holds running at one value (a request leaving is replaced in the same step);
    # a running count that wobbles by one (10, 11, 10…) is held by something else, such
    # as the token budget, and is no cap.
    stretch = values[start:last][known[start:last]]
    exact = float(np.mean(stretch == top)) if stretch.size else 0.0
    return (int(round(top)), seconds, True) if exact >= EXACT_SHARE else None


def _larger_batch(cap: int, kv_pct: float | None, engines: int) -> int | None:
    """The next --max-num-seqs to try: twice the cap, or less when the KV cache would not
    hold it (running scales KV about linearly: sized to keep it under
    ``KV_ROOM_TARGET_PCT``), a round number; None when the cache leaves room for less than
    ``MIN_RAISE`` times the cap: a smaller step is not worth a restart."""
    per_engine = cap // max(1, engines)
    target = 2 * per_engine
    if kv_pct is not None and kv_pct > 0:
        target = min(target, int(per_engine * KV_ROOM_TARGET_PCT / kv_pct))
    step = 16 if target >= 64 else 8 if target >= 16 else 1
    target = target // step * step
    return target if target >= math.ceil(MIN_RAISE * per_engine) else None


def _batch_cap(w: KneeWindow, limits: ServerLimits) -> KneeExplanation | None:
    found = _at_cap(w, limits)
    waiting = w.mean(w.recent("waiting"))
    if found is None or waiting is None or waiting < WAITING_MIN:
        return None
    cap, seconds, inferred = found
    kv = w.peak(w.recent("kv_usage_pct"))
    if inferred:
        parts = [f"running plateaued at {cap} (the cap, inferred) for {seconds} s"]
    else:
        per = f"max_num_seqs {limits.max_num_seqs}" + (f" x {limits.engines} engines" if limits.engines > 1 else "")
        parts = [f"running {cap} = {per} for {seconds} s"]
    parts.append(waiting_text(w))
    if kv is not None:
        parts.append(f"KV {kv:.0f} %")
    larger = _larger_batch(cap, kv, limits.engines)
    if larger is not None:
        try_next: str | None = f"--max-num-seqs {larger}"
        alternatives: tuple[str, ...] = ("a larger batch lengthens each step: ITL rises",)
    else:
        # The cache would fill before a batch large enough to matter: it is the next limit.
        assert kv is not None  # without a KV figure the cap is always doubled
        room = max(0, int(cap * KV_ROOM_TARGET_PCT / kv) - cap)
        parts[-1] += f": room for ~{room} more sequences"  # why the advice is the cache's
        more_kv = _more_kv(limits, cap)
        try_next = more_kv[0][0]
        alternatives = (
            f"raising --max-num-seqs alone is not worth a restart: KV {kv:.0f} % at {cap} running leaves room "
            f"for ~{room} more; the KV cache is the next limit",
            *_with_sizes(a for a in more_kv[1:] if not a[0].startswith("--max-num-seqs")),
        )
    tokens = _tokens_per_step(w)
    if inferred and limits.max_num_batched_tokens is None and tokens is not None and tokens >= BIG_STEP_TOKENS:
        # A small token budget holds running as flat: the cap is inferred, the budget unknown.
        parts.append(f"~{number_text(tokens)} tokens per step")
        alternatives += (
            f"if --max-num-batched-tokens is about {number_text(tokens)}, the token budget holds running flat too: raise it",
        )
    return KneeExplanation(
        "batch_cap",
        TITLES["batch_cap"],
        ", ".join(parts),
        try_next,
        alternatives=alternatives,
        brief=f"running at the cap {cap} for {seconds} s",
    )


def _computed_prompt_tps(w: KneeWindow) -> np.ndarray:
    """Prompt tokens the server computed per second: prefix-cache hits take no budget."""
    hit = np.nan_to_num(w.get("prefix_hit_pct"), nan=0.0).clip(0.0, 100.0)
    return w.get("server_prompt_tps") * (1 - hit / 100)


def _tokens_per_step(w: KneeWindow) -> float | None:
    """Tokens each step computed over the recent seconds: (computed prompt tok/s +
    generation tok/s) x the step time, which is the client's ITL p50."""
    prompt = w.mean(w.overload(_computed_prompt_tps(w)))
    generation = w.mean(w.recent("server_generation_tps")) or 0.0
    step = w.mean(w.recent("itl_p50"))
    if prompt is None or step is None or step <= 0:
        return None
    return (prompt + generation) * step


def _prompt_flat(w: KneeWindow) -> tuple[float, float] | None:
    """(recent mean, relative spread) of the computed prompt tok/s when it stopped
    growing: flat to ``FLAT_SPREAD`` over the recent seconds and near the window's top."""
    prompt = _computed_prompt_tps(w)
    recent = w.overload(prompt)
    recent = recent[np.isfinite(recent)]
    whole = prompt[np.isfinite(prompt)]
    if recent.size < PLATEAU_S or recent.mean() <= 0:
        return None
    mean = float(recent.mean())
    spread = float(recent.std() / mean)
    if spread > FLAT_SPREAD or mean < PROMPT_TOP_SHARE * float(np.percentile(whole, 90)):
        return None
    return mean, spread


def _doubled_budget(tokens_per_step: float) -> int:
    """Twice the budget the steps suggest: vLLM's budgets are powers of two (2,048,
    8,192, 16,384), so the nearest one to the tokens per step, doubled."""
    return 2 << max(0, round(math.log2(max(tokens_per_step, 1.0))))


def _token_budget(w: KneeWindow, limits: ServerLimits) -> KneeExplanation | None:
    waiting = w.mean(w.recent("waiting"))
    ttft = w.growth("ttft_p50")
    itl = w.growth("itl_p50")
    tokens = _tokens_per_step(w)
    if waiting is None or waiting < WAITING_MIN or tokens is None:
        return None
    if ttft is None or ttft[1] < TTFT_RISE * ttft[0] or itl is None or itl[1] >= ITL_HOLD * itl[0]:
        return None
    budget = limits.max_num_batched_tokens
    if budget is not None:
        if tokens < BUDGET_FILL * budget:
            return None
        parts = [
            f"~{number_text(tokens)} tokens per step of max_num_batched_tokens {budget:,} ({tokens / budget * 100:.0f} %)"
        ]
        try_next = f"--max-num-batched-tokens {budget * 2}"
        brief = f"steps at {tokens / budget * 100:.0f} % of the token budget"
    else:
        # The budget unknown: prompt throughput that stopped growing while requests queue,
        # with the KV cache and the batch not at their limits, is the budget at work.
        kv = w.peak(w.recent("kv_usage_pct"))
        flat = _prompt_flat(w)
        grew = w.growth("server_prompt_tps")
        if flat is None or grew is None or grew[1] < PROMPT_GREW * grew[0]:
            return None
        if (kv is not None and kv >= KV_FULL_PCT) or _at_cap(w, limits) is not None:
            return None  # the cache or the batch cap holds the prompt rate flat
        parts = [
            f"prompt {number_text(flat[0])} tok/s flat (±{flat[1] * 100:.0f} %)",
            f"~{number_text(tokens)} tokens per step (the budget, inferred)",
        ]
        try_next = f"--max-num-batched-tokens {_doubled_budget(tokens)}"
        brief = "prompt tok/s flat at the inferred token budget"
    parts += [
        f"TTFT p50 {ms_text(ttft[0])}→{ms_text(ttft[1])}",
        f"ITL p50 {ms_text(itl[0])}→{ms_text(itl[1])}",
        waiting_text(w),
    ]
    return KneeExplanation(
        "token_budget",
        TITLES["token_budget"],
        ", ".join(parts),
        try_next,
        alternatives=("a larger budget puts more prefill in each step: ITL rises",),
        brief=brief,
    )


def _client_cap(w: KneeWindow, limits: ServerLimits) -> KneeExplanation | None:
    queued = w.get("client_queued")
    ends = w.ends(queued)
    if ends is None or ends[1] < CLIENT_QUEUE_MIN or ends[1] <= ends[0]:
        return None
    waiting = w.mean(w.recent("waiting"))
    if waiting is not None and waiting >= WAITING_MIN:
        return None
    running = w.peak(w.recent("running"))
    cap = limits.running_cap
    if cap is not None and running is not None and running >= CAP_FRACTION * cap:
        return None
    conc = limits.max_concurrency
    parts = [
        f"client queue {number_text(ends[0])}→{number_text(ends[1])}"
        + (f" at --max-concurrency {conc}" if conc else "")
    ]
    if waiting is not None:
        parts.append(f"server waiting {number_text(waiting)}")
    if running is not None:
        parts.append(f"running {number_text(running)}" + (f" of max_num_seqs {cap}" if cap else ""))
    kv = kv_text(w)
    if kv:
        parts.append(kv)
    return KneeExplanation(
        "client_cap",
        TITLES["client_cap"],
        ", ".join(parts),
        f"--max-concurrency {conc * 2}" if conc else "--max-concurrency up",
        try_is="rampwatch flag",
    )


def _compute_bound(w: KneeWindow, limits: ServerLimits) -> KneeExplanation | None:
    running = w.growth("running")
    itl = w.growth("itl_p50")
    if running is None or itl is None:
        return None
    if running[1] < RUNNING_GROWTH * running[0] or itl[1] < ITL_GROWTH * itl[0]:
        return None
    cap = limits.running_cap
    if cap is not None and (w.peak(w.recent("running")) or 0.0) >= CAP_FRACTION * cap:
        return None
    parts = [
        f"running {number_text(running[0])}→{number_text(running[1])}"
        + (f" (below max_num_seqs {cap})" if cap else ""),
        f"ITL p50 {ms_text(itl[0])}→{ms_text(itl[1])}: the step time grows with the batch",
    ]
    kv = kv_text(w)
    if kv:
        parts.append(kv)
    return KneeExplanation(
        "compute_bound",
        TITLES["compute_bound"],
        ", ".join(parts),
        "more GPUs: --data-parallel-size 2 (a model that fits one GPU) or --tensor-parallel-size "
        f"{limits.tensor_parallel_size * 2}",
        alternatives=(
            "FP8 weights (--quantization fp8)",
            "a smaller model",
            f"--max-num-seqs {max(1, int(running[1] / 2))} trades throughput for latency",
        ),
    )


RULES: dict[str, Rule] = {
    "kv_full": _kv_full,
    "batch_cap": _batch_cap,
    "token_budget": _token_budget,
    "lora_slots": lora_slots,
    "client_cap": _client_cap,
    "spec_decode": spec_decode,  # core.figures.knee_spec
    "compute_bound": _compute_bound,
}


TTFA_RISE = 1.5  # a reasoning run's TTFA p50, recent over baseline, that counts as risen
AFTER_FIRST_TOKEN_SHARE = 2 / 3  # of TTFA p50's rise, the share after the first token that makes the note


def reasoning_note(w: KneeWindow) -> str | None:
    """A reasoning run's note (see the module docstring); None in a plain run (no
    ``ttfa_p50`` series) or when the first token moved as much as the first answer."""
    ttfa = w.growth("ttfa_p50")
    if ttfa is None or ttfa[1] < TTFA_RISE * ttfa[0]:
        return None
    ttft = w.growth("ttft_p50")
    ttft_rise = 0.0 if ttft is None else max(0.0, ttft[1] - ttft[0])
    rise = ttfa[1] - ttfa[0]
    if rise - ttft_rise < AFTER_FIRST_TOKEN_SHARE * rise:
        return None
    first = "" if ttft is None else f" while TTFT p50 went {ms_text(ttft[0])}→{ms_text(ttft[1])}"
    itl = w.growth("itl_p50")
    why = "" if itl is None else f" (ITL p50 {ms_text(itl[0])}→{ms_text(itl[1])})"
    return (
        f"time to first answer p50 rose {ms_text(ttfa[0])}→{ms_text(ttfa[1])}{first}: "
        f"the thinking before the answer slowed{why}, which TTFT does not show"
    )


# Two hard limits held at once: why the first in PRIORITY binds, in the terms of the
# other's advice.
CONFLICTS = {
    ("kv_full", "batch_cap"): "KV binds first, raising --max-num-seqs would not help",
    ("spec_decode", "batch_cap"): "the speculating steps are compute bound: a larger batch would lengthen them further",
    ("spec_decode", "token_budget"): "the speculating steps are compute bound: a larger budget would lengthen them",
    ("kv_full", "token_budget"): "KV binds first, a larger --max-num-batched-tokens would not help",
}


def undetermined(w: KneeWindow) -> KneeExplanation:
    parts = []
    for name, label in (("running", "running"), ("waiting", "waiting"), ("client_queued", "client queue")):
        span = from_to_text(w, name)
        if span and (name != "client_queued" or (w.peak(w.get(name)) or 0) > 0):  # no queue: no cap to speak of
            parts.append(f"{label} {span}")
    kv = kv_text(w)
    if kv:
        parts.append(kv)
    for name, label in (("ttft_p50", "TTFT p50"), ("itl_p50", "ITL p50")):
        grown = w.growth(name)
        if grown:
            parts.append(f"{label} {ms_text(grown[0])}→{ms_text(grown[1])}")
    evidence = ", ".join(parts) if parts else "no server or latency figures around the knee"
    return KneeExplanation("undetermined", TITLES["undetermined"], evidence)
