"""Why the knee: which limit the server (or the client) hit, from the series around it.

``explain_knee(window, limits, after)`` is a pure function of the 1-second series of the
seconds before the knee was declared (``window``: ``SERIES_NAMES`` -> values, oldest
first, NaN where a second has no figure), optionally of those after it in the same
overload (``after``), and of the limits the run knows (``ServerLimits``: from the ``vllm
serve`` command line, the server's ``vllm:cache_config_info`` and the run's own
``--max-concurrency``). It checks each limit's rule (below) and names the first that holds,
in ``PRIORITY`` order, with the evidence as numbers, the seconds it read (``window``) and
the argument to try next; any other rule that holds too is mentioned under ``also``, and
when the KV cache binds while the batch cap or the token budget held too, ``conflict``
says so. When no rule holds, the limit is ``undetermined`` and the evidence is the figures
that were looked at: never a guess presented as a finding.

The explanation the knee event carries is provisional: it read only the seconds before
the knee, when a KV cache that fills a little later is still at 86 %. ``KneeReview``
explains it again with the ``REVIEW_S`` seconds after it (fewer when the server recovers,
the load pauses for a restart or the run ends first) and settles it with an ``info``
event; the summary, the result JSON, the banner and the report read that one.

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
- ``client_cap``: rampwatch's own queue (``client_queued``) reached ``CLIENT_QUEUE_MIN``
  and grew, while the server had room (recent waiting mean under ``WAITING_MIN``, running
  under the cap when the cap is known);
- ``compute_bound``: running below the cap, and the step time (ITL p50) grew at least
  ``ITL_GROWTH``-fold as the batch (running) grew at least ``RUNNING_GROWTH``-fold: the
  GPU's compute or memory bandwidth is the limit.

"Rose" and "grew" compare the mean of the recent seconds with the mean of the window's
first ``RECENT_S`` seconds. ``PRIORITY`` puts the hard limits the server reached first —
the KV cache (raising the batch cap would not help while it is full), then the batch cap,
then the token budget — then the client's cap, then the soft compute bound.

The advice is a change that can matter: a batch cap is raised to twice its value, or to
what keeps KV under ``KV_ROOM_TARGET_PCT``, and only when that is at least ``MIN_RAISE``
times the cap — else the KV cache is the next limit and its advice comes first. A full
cache: ``--gpu-memory-utilization`` ``MEMORY_TOP``, an FP8 cache (twice the tokens), half
the sequences, the cache split over twice the GPUs, shorter contexts.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rampwatch.core.figures.summary import KNEE_REVIEW, concurrency_cap, knee_review, provisional_text
from rampwatch.core.timeline import Event, RunHeader, Snapshot

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
RECENT_S = 10  # seconds at the end of the window that describe the knee; as many at its start are the baseline
WINDOW_S = 45  # seconds of series the knee detector keeps for the explanation
REVIEW_S = 30  # seconds after the knee that settle its explanation (fewer when the overload or the run ends first)

PRIORITY = ("kv_full", "batch_cap", "token_budget", "client_cap", "compute_bound")
TITLES = {
    "kv_full": "KV cache full",
    "batch_cap": "batch-size cap",
    "token_budget": "token budget",
    "client_cap": "client concurrency cap",
    "compute_bound": "compute/bandwidth bound",
    "undetermined": "undetermined",
}


# vLLM's defaults for the OpenAI server when --max-num-batched-tokens / --max-num-seqs
# are absent: vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults and
# _set_default_max_num_seqs_and_batched_tokens_args, vLLM 0.32.0 (read from the installed
# package). They depend on the device, which a command line does not say.
def vllm_batch_defaults(
    device_memory_gib: float | None, device_name: str = "", cpu: bool = False, world_size: int = 1
) -> tuple[int, int] | None:
    """(max_num_batched_tokens, max_num_seqs) vLLM 0.32 picks for ``vllm serve`` on this
    device; None when the device is unknown (the defaults differ 4-fold between GPUs)."""
    if cpu:
        return 2048 * world_size, 128 * world_size
    if device_memory_gib is None:
        return None
    if device_memory_gib >= 160:  # B200/B300
        return 16384, 1024
    if device_memory_gib >= 70 and "a100" not in device_name.lower():  # H100/H200
        return 8192, 1024
    return 2048, 256  # every other GPU, the A100 80GB among them


def _int_arg(value: Any) -> int | None:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _float_arg(value: Any) -> float | None:
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None


@dataclass(frozen=True)
class ServerLimits:
    """The limits a knee can be explained by; None where unknown. ``max_num_seqs`` and
    ``max_num_batched_tokens`` are per engine; ``engines`` is the data-parallel size (the
    ``running`` series sums the engines). ``sources`` says where each came from."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_concurrency: int | None = None  # rampwatch's --max-concurrency, a client-side cap
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    engines: int = 1
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str | None = None
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def running_cap(self) -> int | None:
        return None if self.max_num_seqs is None else self.max_num_seqs * self.engines

    @property
    def kv_tokens(self) -> int | None:
        if self.num_gpu_blocks is None or self.block_size is None:
            return None
        return self.num_gpu_blocks * self.block_size

    @classmethod
    def from_engine_args(
        cls,
        args: Mapping[str, Any],
        device_memory_gib: float | None = None,
        device_name: str = "",
        cpu: bool = False,
    ) -> ServerLimits:
        """From ``vllm serve``'s arguments (``{"max_num_seqs": "64", ...}``, dashes or
        underscores). An absent batch argument takes vLLM 0.32's default when the device
        is given (``vllm_batch_defaults``), else stays unknown (the explanation then infers
        the batch cap from a plateau). A value that is not a positive number is ignored."""
        a = {str(k).lstrip("-").replace("-", "_"): v for k, v in args.items()}
        sources: dict[str, str] = {}

        def given(name: str, parse: Callable[[Any], Any]) -> Any:
            value = parse(a.get(name)) if name in a else None
            if value is not None:
                sources[name] = "serve command"
            return value

        seqs = given("max_num_seqs", _int_arg)
        budget = given("max_num_batched_tokens", _int_arg)
        tp = _int_arg(a.get("tensor_parallel_size", a.get("tp"))) or 1
        pp = _int_arg(a.get("pipeline_parallel_size", a.get("pp"))) or 1
        defaults = vllm_batch_defaults(device_memory_gib, device_name, cpu, world_size=tp * pp)
        if defaults is not None:
            double = str(a.get("performance_mode", "")).strip() == "throughput"  # vLLM doubles both then
            if budget is None:
                budget = defaults[0] * (2 if double else 1)
                no_chunking = (
                    str(a.get("enable_chunked_prefill", "")).lower() == "false" or "no_enable_chunked_prefill" in a
                )
                max_len = _int_arg(a.get("max_model_len"))
                if no_chunking and max_len is not None:  # a whole prompt must fit one step
                    budget = max(budget, max_len)
                sources["max_num_batched_tokens"] = "vLLM default"
            if seqs is None:
                seqs = defaults[1] * (2 if double else 1)
                sources["max_num_seqs"] = "vLLM default"
        blocks = given("num_gpu_blocks_override", _int_arg)
        block_size = given("block_size", _int_arg)
        memory = given("gpu_memory_utilization", _float_arg)
        dtype = a.get("kv_cache_dtype")
        return cls(
            max_num_seqs=seqs,
            max_num_batched_tokens=budget,
            num_gpu_blocks=blocks,
            block_size=block_size,
            engines=_int_arg(a.get("data_parallel_size", a.get("dp"))) or 1,
            tensor_parallel_size=tp,
            gpu_memory_utilization=memory,
            kv_cache_dtype=str(dtype) if dtype else None,
            sources=sources,
        )

    @classmethod
    def from_cache_config(cls, labels: Mapping[str, Any]) -> ServerLimits:
        """From the labels of vLLM's ``vllm:cache_config_info`` (the run header's
        ``server_info["cache_config"]``): the KV cache's size, never the batch limits."""
        sources: dict[str, str] = {}
        values: dict[str, Any] = {}
        for name, label, parse in (
            ("num_gpu_blocks", "num_gpu_blocks", _int_arg),
            ("block_size", "block_size", _int_arg),
            ("gpu_memory_utilization", "gpu_memory_utilization", _float_arg),
        ):
            value = parse(labels.get(label))
            if value is not None:
                values[name] = value
                sources[name] = "/metrics cache_config_info"
        dtype = labels.get("cache_dtype")
        if isinstance(dtype, str) and dtype and dtype != "auto":
            values["kv_cache_dtype"] = dtype
        return cls(sources=sources, **values)

    @classmethod
    def of_run(cls, header: RunHeader | None, given: ServerLimits | None = None) -> ServerLimits:
        """What a run knows: ``given`` (the serve command's), then the server's cache
        config from the run header, then the run's --max-concurrency."""
        limits = given or cls()
        if header is not None:
            cache = header.server_info.get("cache_config") if isinstance(header.server_info, dict) else None
            if isinstance(cache, dict):
                limits = limits.merged(cls.from_cache_config(cache))
            cap = concurrency_cap(header)
            if limits.max_concurrency is None and cap is not None:
                sources = {**limits.sources, "max_concurrency": "run options"}
                limits = cls(**{**limits._fields(), "max_concurrency": cap, "sources": sources})
        return limits

    def _fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def merged(self, other: ServerLimits) -> ServerLimits:
        """These limits, with ``other``'s filling what these do not know."""
        out = self._fields()
        sources = dict(self.sources)
        for name, value in other._fields().items():
            if name in ("sources", "engines", "tensor_parallel_size"):
                continue
            if out[name] is None and value is not None:
                out[name] = value
                if name in other.sources:
                    sources[name] = other.sources[name]
        out["sources"] = sources
        return ServerLimits(**out)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self._fields().items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServerLimits:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


@dataclass(frozen=True)
class KneeExplanation:
    """Which limit, the evidence as numbers, and what to try next (``try_next``, with
    ``try_is`` saying whose argument it is: ``vllm serve``'s or rampwatch's)."""

    limit: str  # one of PRIORITY, or "undetermined"
    title: str
    evidence: str
    try_next: str | None = None
    try_is: str = "engine argument"  # or "rampwatch flag"
    alternatives: tuple[str, ...] = ()
    also: tuple[dict[str, str], ...] = ()  # other limits that held: {"limit", "title", "evidence"}
    # Two hard limits held: which binds first and what that means for the advice.
    conflict: str | None = None
    window: str = ""  # the seconds the rules read: "45 s before the knee, 30 s after"
    # The explanation declared at the knee, when the seconds after it changed the limit
    # or the advice: {"limit", "title", "try"}.
    provisional: dict[str, str | None] | None = None
    # A few words of the evidence, for another limit's conflict line; not kept.
    brief: str = field(default="", compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The stable form kept in the knee event's data (``explanation``), the result
        JSON and the sweep table (docs/recording-format.md)."""
        return {
            "limit": self.limit,
            "title": self.title,
            "evidence": self.evidence,
            "try": self.try_next,
            "try_is": self.try_is,
            "alternatives": list(self.alternatives),
            "also": [dict(a) for a in self.also],
            "conflict": self.conflict,
            "window": self.window,
            "provisional": dict(self.provisional) if self.provisional else None,
        }

    @classmethod
    def from_dict(cls, data: Any) -> KneeExplanation | None:
        """From a knee event's data; None when it holds no explanation (older recordings)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("limit"), str):
            return None
        alternatives = data.get("alternatives")
        also = data.get("also")
        provisional = data.get("provisional")
        return cls(
            limit=data["limit"],
            title=str(data.get("title") or TITLES.get(data["limit"], data["limit"])),
            evidence=str(data.get("evidence") or ""),
            try_next=str(data["try"]) if data.get("try") else None,
            try_is=str(data.get("try_is") or "engine argument"),
            alternatives=tuple(str(a) for a in alternatives) if isinstance(alternatives, list) else (),
            also=tuple({k: str(v) for k, v in a.items()} for a in also if isinstance(a, Mapping))
            if isinstance(also, list)
            else (),
            conflict=str(data["conflict"]) if data.get("conflict") else None,
            window=str(data.get("window") or ""),
            provisional={k: None if v is None else str(v) for k, v in provisional.items()}
            if isinstance(provisional, Mapping)
            else None,
        )

    def line(self) -> str:
        """One line: ``batch-size cap (running = max_num_seqs 64 …) → try --max-num-seqs 128``."""
        text = f"{self.title} ({self.evidence})"
        if self.try_next:
            text += f" → try {self.try_next}"
        return text

    def lines(self) -> list[str]:
        """The whole explanation, a line per item (the event's detail view, the report)."""
        out = [f"limit: {self.title} [{self.limit}]", f"evidence: {self.evidence}"]
        if self.try_next:
            whose = " (a rampwatch flag, not an engine argument)" if self.try_is == "rampwatch flag" else ""
            out.append(f"try next: {self.try_next}{whose}")
        out.extend(f"or: {a}" for a in self.alternatives)
        out.extend(f"also: {a.get('title', a.get('limit', ''))} ({a.get('evidence', '')})" for a in self.also)
        if self.conflict:
            out.append(self.conflict)
        if self.window:
            out.append(f"window: {self.window}")
        if self.provisional:
            out.append(f"at the knee it read: {provisional_text(self.provisional)}")
        return out


# -- the figures the rules read --------------------------------------------------------


def _padded(values: Sequence[float] | None, n: int) -> np.ndarray:
    """``values`` as ``n`` seconds, NaN for the missing oldest ones (or all)."""
    a = np.asarray(values if values is not None else [], dtype=float)[-n:] if n else np.zeros(0)
    return np.concatenate([np.full(n - a.size, math.nan), a])


class _Window:
    """The seconds before the knee and, once known, those after it in the same overload.
    "Recent" is the overload: the last ``RECENT_S`` seconds before the knee and every
    second after it; the baseline (``early``) is the window's first ``RECENT_S``."""

    def __init__(
        self, window: Mapping[str, Sequence[float]], after: Mapping[str, Sequence[float]] | None = None
    ) -> None:
        before = {name: np.asarray(values, dtype=float) for name, values in window.items()}
        self.knee_at = max((a.size for a in before.values()), default=0)
        self.after_n = max((len(v) for v in (after or {}).values()), default=0)
        if self.after_n:
            names = set(before) | set(after or {})
            self.arrays = {
                name: np.concatenate(
                    [_padded(window.get(name), self.knee_at), _padded((after or {}).get(name), self.after_n)]
                )
                for name in names
            }
        else:
            self.arrays = before
        self.n = self.knee_at + self.after_n
        self.recent_start = max(0, self.knee_at - RECENT_S)

    def get(self, name: str) -> np.ndarray:
        return self.arrays.get(name, np.full(self.n, math.nan))

    def recent(self, name: str) -> np.ndarray:
        return self.overload(self.get(name))

    def overload(self, a: np.ndarray) -> np.ndarray:
        """The recent part of any of the window's arrays."""
        return a[self.recent_start :] if self.after_n else a[-RECENT_S:]

    def before(self, a: np.ndarray) -> np.ndarray:
        """The seconds up to the knee of any of the window's arrays."""
        return a[: self.knee_at]

    def text(self) -> str:
        """The seconds the rules read, said: ``45 s before the knee, 30 s after``."""
        return f"{self.knee_at} s before the knee" + (f", {self.after_n} s after" if self.after_n else "")

    def early(self, name: str) -> np.ndarray:
        return self.get(name)[:RECENT_S]

    @staticmethod
    def mean(a: np.ndarray) -> float | None:
        finite = a[np.isfinite(a)]
        return float(finite.mean()) if finite.size else None

    @staticmethod
    def peak(a: np.ndarray) -> float | None:
        finite = a[np.isfinite(a)]
        return float(finite.max()) if finite.size else None

    @staticmethod
    def ends(a: np.ndarray) -> tuple[float, float] | None:
        finite = a[np.isfinite(a)]
        return (float(finite[0]), float(finite[-1])) if finite.size else None

    def growth(self, name: str) -> tuple[float, float] | None:
        """(baseline mean, recent mean) of a series, when both are known and positive."""
        before, after = self.mean(self.early(name)), self.mean(self.recent(name))
        if before is None or after is None or before <= 0:
            return None
        return before, after


def _n(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 10 else f"{x:.1f}".rstrip("0").rstrip(".")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def _from_to(w: _Window, name: str, unit: str = "") -> str | None:
    ends = w.ends(w.get(name))
    return None if ends is None else f"{_n(ends[0])}→{_n(ends[1])}{unit}"


def _longest_run(mask: np.ndarray) -> int:
    return _longest_stretch(mask)[1]


def _longest_stretch(mask: np.ndarray) -> tuple[int, int]:
    """(start, length) of the longest stretch of True."""
    best = (0, 0)
    run = 0
    for i, held in enumerate(mask):
        run = run + 1 if held else 0
        if run > best[1]:
            best = (i - run + 1, run)
    return best


def _kv_text(w: _Window) -> str | None:
    kv = w.peak(w.recent("kv_usage_pct"))
    return None if kv is None else f"KV {kv:.0f} %"


def _waiting_text(w: _Window) -> str:
    span = _from_to(w, "waiting")
    return f"waiting {span}" if span else "waiting unknown"


# -- the rules: each returns its explanation when it holds, else None -------------------

Rule = Callable[[_Window, ServerLimits], KneeExplanation | None]


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


def _kv_full(w: _Window, limits: ServerLimits) -> KneeExplanation | None:
    kv = w.peak(w.recent("kv_usage_pct"))
    if kv is None or kv < KV_FULL_PCT:
        return None
    preempted = float(np.nansum(w.get("preemptions"))) if w.n else 0.0
    waiting = w.mean(w.recent("waiting")) or 0.0
    if preempted <= 0 and waiting < WAITING_MIN:
        return None
    full = np.nan_to_num(w.get("kv_usage_pct"), nan=0.0) >= KV_FULL_PCT
    held = w.mean(w.get("running")[full])  # the batch the full cache held
    parts = [f"KV {kv:.0f} % for {_longest_run(full)} s", f"{preempted:.0f} preemptions in {w.n} s", _waiting_text(w)]
    if held is not None:
        parts.append(f"running {_n(held)} while full")
    if limits.kv_tokens is not None:
        each = f" (~{_n(limits.kv_tokens / held)} a sequence)" if held else ""
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


def _at_cap(w: _Window, limits: ServerLimits) -> tuple[int, int, bool] | None:
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
        seconds = _longest_run(at_cap)
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
    start, seconds = _longest_stretch(flat)
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


def _batch_cap(w: _Window, limits: ServerLimits) -> KneeExplanation | None:
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
    parts.append(_waiting_text(w))
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
        parts.append(f"~{_n(tokens)} tokens per step")
        alternatives += (
            f"if --max-num-batched-tokens is about {_n(tokens)}, the token budget holds running flat too: raise it",
        )
    return KneeExplanation(
        "batch_cap",
        TITLES["batch_cap"],
        ", ".join(parts),
        try_next,
        alternatives=alternatives,
        brief=f"running at the cap {cap} for {seconds} s",
    )


def _computed_prompt_tps(w: _Window) -> np.ndarray:
    """Prompt tokens the server computed per second: prefix-cache hits take no budget."""
    hit = np.nan_to_num(w.get("prefix_hit_pct"), nan=0.0).clip(0.0, 100.0)
    return w.get("server_prompt_tps") * (1 - hit / 100)


def _tokens_per_step(w: _Window) -> float | None:
    """Tokens each step computed over the recent seconds: (computed prompt tok/s +
    generation tok/s) x the step time, which is the client's ITL p50."""
    prompt = w.mean(w.overload(_computed_prompt_tps(w)))
    generation = w.mean(w.recent("server_generation_tps")) or 0.0
    step = w.mean(w.recent("itl_p50"))
    if prompt is None or step is None or step <= 0:
        return None
    return (prompt + generation) * step


def _prompt_flat(w: _Window) -> tuple[float, float] | None:
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


def _token_budget(w: _Window, limits: ServerLimits) -> KneeExplanation | None:
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
        parts = [f"~{_n(tokens)} tokens per step of max_num_batched_tokens {budget:,} ({tokens / budget * 100:.0f} %)"]
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
            f"prompt {_n(flat[0])} tok/s flat (±{flat[1] * 100:.0f} %)",
            f"~{_n(tokens)} tokens per step (the budget, inferred)",
        ]
        try_next = f"--max-num-batched-tokens {_doubled_budget(tokens)}"
        brief = "prompt tok/s flat at the inferred token budget"
    parts += [f"TTFT p50 {_ms(ttft[0])}→{_ms(ttft[1])}", f"ITL p50 {_ms(itl[0])}→{_ms(itl[1])}", _waiting_text(w)]
    return KneeExplanation(
        "token_budget",
        TITLES["token_budget"],
        ", ".join(parts),
        try_next,
        alternatives=("a larger budget puts more prefill in each step: ITL rises",),
        brief=brief,
    )


def _client_cap(w: _Window, limits: ServerLimits) -> KneeExplanation | None:
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
    parts = [f"client queue {_n(ends[0])}→{_n(ends[1])}" + (f" at --max-concurrency {conc}" if conc else "")]
    if waiting is not None:
        parts.append(f"server waiting {_n(waiting)}")
    if running is not None:
        parts.append(f"running {_n(running)}" + (f" of max_num_seqs {cap}" if cap else ""))
    kv = _kv_text(w)
    if kv:
        parts.append(kv)
    return KneeExplanation(
        "client_cap",
        TITLES["client_cap"],
        ", ".join(parts),
        f"--max-concurrency {conc * 2}" if conc else "--max-concurrency up",
        try_is="rampwatch flag",
    )


def _compute_bound(w: _Window, limits: ServerLimits) -> KneeExplanation | None:
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
        f"running {_n(running[0])}→{_n(running[1])}" + (f" (below max_num_seqs {cap})" if cap else ""),
        f"ITL p50 {_ms(itl[0])}→{_ms(itl[1])}: the step time grows with the batch",
    ]
    kv = _kv_text(w)
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
    "client_cap": _client_cap,
    "compute_bound": _compute_bound,
}


# Two hard limits held at once: why the first in PRIORITY binds, in the terms of the
# other's advice.
CONFLICTS = {
    ("kv_full", "batch_cap"): "KV binds first, raising --max-num-seqs would not help",
    ("kv_full", "token_budget"): "KV binds first, a larger --max-num-batched-tokens would not help",
}


def _undetermined(w: _Window) -> KneeExplanation:
    parts = []
    for name, label in (("running", "running"), ("waiting", "waiting"), ("client_queued", "client queue")):
        span = _from_to(w, name)
        if span and (name != "client_queued" or (w.peak(w.get(name)) or 0) > 0):  # no queue: no cap to speak of
            parts.append(f"{label} {span}")
    kv = _kv_text(w)
    if kv:
        parts.append(kv)
    for name, label in (("ttft_p50", "TTFT p50"), ("itl_p50", "ITL p50")):
        grown = w.growth(name)
        if grown:
            parts.append(f"{label} {_ms(grown[0])}→{_ms(grown[1])}")
    evidence = ", ".join(parts) if parts else "no server or latency figures around the knee"
    return KneeExplanation("undetermined", TITLES["undetermined"], evidence)


def explain_knee(
    window: Mapping[str, Sequence[float]],
    limits: ServerLimits | None = None,
    after: Mapping[str, Sequence[float]] | None = None,
) -> KneeExplanation:
    """The limit behind a knee, from the seconds before it was declared (``window``) and,
    for the final explanation, the seconds after it in the same overload (``after``; see
    the module docstring for the rules, their order and the conflicts)."""
    w = _Window(window, after)
    limits = limits or ServerLimits()
    held = [found for name in PRIORITY if (found := RULES[name](w, limits)) is not None]
    if not held:
        return replace(_undetermined(w), window=w.text())
    first = held[0]
    also = tuple({"limit": e.limit, "title": e.title, "evidence": e.evidence} for e in held[1:])
    conflict = next(
        (
            f"signals conflict: {other.brief} AND {first.brief}: {CONFLICTS[first.limit, other.limit]}"
            for other in held[1:]
            if (first.limit, other.limit) in CONFLICTS
        ),
        None,
    )
    return replace(first, also=also, conflict=conflict, window=w.text())


def first_knee(events: Sequence[Event]) -> Event | None:
    return next((e for e in events if e.kind == "knee"), None)


def knee_explanation_of(snapshot: Snapshot) -> tuple[Event, KneeExplanation] | None:
    """The first knee of a run or recording and why (``explain_recorded_knee``); None
    without a knee."""
    knee = first_knee(snapshot.events)
    return None if knee is None else (knee, explain_recorded_knee(knee, snapshot))


def explain_recorded_knee(knee: Event, snapshot: Snapshot) -> KneeExplanation:
    """Why ``knee`` happened: as its review settled it (``KneeReview``), else as its event
    declared it, or — for a knee recorded before explanations — worked out now from the
    snapshot's series of the ``WINDOW_S`` seconds before it, with the limits its header
    tells (the cache config, the concurrency cap; the batch cap is then inferred)."""
    review = knee_review(snapshot.events, knee)
    recorded = KneeExplanation.from_dict((review or knee).data.get("explanation"))
    if recorded is not None:
        return recorded
    picked = [i for i, t in enumerate(snapshot.times) if knee.t - WINDOW_S <= t and t + 1 <= knee.t]
    window = {
        name: [values[i] for i in picked]
        for name, values in snapshot.series.items()
        if len(values) == len(snapshot.times)
    }
    return explain_knee(window, ServerLimits.of_run(snapshot.header))


class KneeReview:
    """The knee's explanation is provisional: declared from the seconds before the knee,
    it is judged again with the seconds after it in the same overload — a KV cache that
    fills later, preemptions, a queue that keeps growing — and settled by an ``info``
    event (``data``: ``knee_review``, ``knee_t``, ``explanation``, ``revised``) whose
    message says whether the seconds after changed it. It is settled ``REVIEW_S`` seconds
    after the knee, when the server recovers (the overload is over), or at ``finish``
    (the run's end, a restart of the server), whichever comes first.

    ``update`` takes each completed second and the knee detector's event for it, and
    returns the events to publish, in order."""

    def __init__(self, review_s: int = REVIEW_S) -> None:
        self.review_s = review_s
        self._before: deque[Mapping[str, float]] = deque(maxlen=WINDOW_S)
        self._knee: Event | None = None
        self._window: list[Mapping[str, float]] = []
        self._after: list[Mapping[str, float]] = []

    def update(self, t: float, values: Mapping[str, float], event: Event | None) -> list[Event]:
        out: list[Event] = []
        if self._knee is not None:
            self._after.append(values)
            recovered = event is not None and bool(event.data.get("knee_recovered"))
            if recovered or len(self._after) >= self.review_s or (event is not None and event.kind == "knee"):
                out += self.finish(t)
        self._before.append(values)
        if event is not None:
            out.append(event)
            if event.kind == "knee" and isinstance(event.data.get("explanation"), Mapping):
                # the detector's explanation read the seconds up to this one
                self._knee, self._window, self._after = event, list(self._before), []
        return out

    def finish(self, t: float) -> list[Event]:
        """The pending knee's review, settled with the seconds seen so far after it."""
        knee, self._knee = self._knee, None
        if knee is None:
            return []
        first = KneeExplanation.from_dict(knee.data.get("explanation"))
        assert first is not None  # only knees with an explanation are reviewed
        final = explain_knee(
            _columns(self._window), ServerLimits.from_dict(knee.data.get("limits") or {}), _columns(self._after)
        )
        revised = (final.limit, final.try_next) != (first.limit, first.try_next)
        if revised:
            final = replace(final, provisional={"limit": first.limit, "title": first.title, "try": first.try_next})
        message = f"knee {'revised' if revised else 'confirmed'} with the {len(self._after)} s after it: {final.title}"
        if final.try_next:
            message += f" → try {final.try_next}"
        if final.provisional:
            message += f" (at the knee: {provisional_text(final.provisional)})"
        self._window, self._after = [], []
        return [
            Event(
                t,
                "info",
                message,
                {KNEE_REVIEW: True, "knee_t": knee.t, "explanation": final.to_dict(), "revised": revised},
            )
        ]


def _columns(seconds: Sequence[Mapping[str, float]]) -> dict[str, list[float]]:
    names = {name for values in seconds for name in values}
    return {name: [values.get(name, math.nan) for values in seconds] for name in names}
