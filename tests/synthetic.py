"""A deterministic synthetic run, plausible enough to exercise recordings at scale.

Used by the tests of recordings and screens, ``bench/bench_recording.py`` (1 hour at 100
rps) and ``scripts/make_fixture_recording.py`` (the small committed fixture); not part of
the product (bench and scripts put the repository's root on ``sys.path`` to import it).
It emits the same stream a live run publishes into any ``TimelineSink``, in time order,
without holding the whole run in memory.

It is not the simulator (``sim.engine`` stepped by ``sim.virtual``'s clock, which
schedules real token-id requests through vLLM's scheduler model): it draws each
request's times from a few distributions around a ``capacity_rps``, cheap enough for an
hour at 100 rps, and writes the records, scrapes, ticks, a knee and ``config`` events
directly.

The model: one engine steps every ~20-30 ms (slower with more running requests, with
jitter and occasional prefill spikes); every running request receives one chunk per
step, observed by the client with a small random delay. Arrivals are Poisson at the
schedule's rate; above ``capacity_rps`` a backlog builds and TTFT grows with it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rampwatch.core.figures.segments import config_event
from rampwatch.core.timeline import Event, RequestRecord, RunHeader, ServerSample, Tick, TimelineSink


@dataclass
class SyntheticRun:
    duration_s: float = 60.0
    start_rps: float = 1.0
    end_rps: float = 20.0  # linear ramp from start to end over duration_s
    capacity_rps: float = 14.0
    mean_chunks: float = 40.0
    prompt_tokens: int = 512
    error_rate: float = 0.003
    seed: int = 0
    marks: list[tuple[float, str]] = field(default_factory=list)
    # Server restarts with other engine arguments: (t, serve command, [(name, old, new)]),
    # published as ``config`` events (the run resumed at the current rate).
    configs: list[tuple[float, str, list[tuple[str, object, object]]]] = field(default_factory=list)
    serve: str | None = None  # the first serve command, kept in the header's options
    scenario_name: str = "synthetic-ramp"
    target: str = "http://127.0.0.1:8000"
    model: str = "tiny"

    def rate(self, t: float) -> float:
        if t >= self.duration_s:
            return 0.0
        return self.start_rps + (self.end_rps - self.start_rps) * min(1.0, t / self.duration_s)

    def header(self) -> RunHeader:
        return RunHeader(
            rampwatch_version="0.1.0",
            started_at_unix=1_795_000_000.0,
            target=self.target,
            model=self.model,
            scenario_name=self.scenario_name,
            scenario={
                "name": self.scenario_name,
                "schedule": {
                    "kind": "ramp",
                    "start_rps": self.start_rps,
                    "end_rps": self.end_rps,
                    "duration_s": self.duration_s,
                },
                "workload": {
                    "kind": "synthetic",
                    "prompt_tokens": self.prompt_tokens,
                    "max_tokens": int(self.mean_chunks * 3),
                },
            },
            options={"target": self.target, "record": True, **({"serve": self.serve} if self.serve else {})},
            planned_duration_s=self.duration_s,
            server_info={
                "models": [self.model],
                "version": "0.32.0",
                "cache_config": {"block_size": "128", "num_gpu_blocks": "4096"},
            },
            host_info={"hostname": "synthetic", "cpus": 2},
            metrics_urls=[f"{self.target}/metrics"],
        )


@dataclass(order=True)
class _Pending:
    end_at: float
    id: int
    scheduled_at: float = field(compare=False)
    sent_at: float = field(compare=False)
    first_step: int = field(compare=False)
    n_tokens: int = field(compare=False)
    error: bool = field(compare=False)


def _step_grid(run: SyntheticRun, rng: np.random.Generator, horizon_s: float) -> np.ndarray:
    """Engine step end times up to ``horizon_s``."""
    times = []
    t = 0.0
    slow = 0.0
    while t < horizon_s:
        rate = min(run.rate(t), run.capacity_rps * 1.05)
        running = rate * run.mean_chunks * 0.025
        mean = 0.02 / max(0.2, 1.0 - 5e-6 * running * 1.0) + 2e-6 * running
        slow = 0.98 * slow + 0.02 * rng.normal(0.0, 0.03)  # slowly drifting batch cost
        d = mean * (1.0 + slow) + rng.normal(0.0, 0.0004)
        if rng.random() < 0.05:  # a prefill lands in this step
            d += rng.uniform(0.002, 0.010)
        t += max(0.005, d)
        times.append(t)
    return np.asarray(times)


def play_synthetic(
    run: SyntheticRun,
    sink: TimelineSink,
    *,
    on_flush: Callable[[float], None] | None = None,
    flush_every_s: float = 0.5,
    finish: bool = True,
) -> int:
    """Publish the synthetic run into ``sink``; call ``on_flush(t)`` every ``flush_every_s``
    of run time (e.g. a writer's flush). Returns the number of requests published."""
    rng = np.random.default_rng(run.seed)
    tail_s = run.mean_chunks * 0.1 * 4 + 30
    steps = _step_grid(run, rng, run.duration_s + tail_s)
    sink.on_start(run.header())
    sink.on_event(Event(0.0, "start", "run started"))
    marks = sorted(run.marks)
    configs = sorted(run.configs, key=lambda c: c[0])
    pending: list[_Pending] = []
    next_id = 0
    backlog = 0.0
    knee_sent = False
    counters = {"prompt": 0.0, "gen": 0.0, "queries": 0.0, "hits": 0.0, "preempt": 0.0}
    published = 0
    flush_step = max(1, round(1.0 / flush_every_s))
    s = 0
    while True:
        t0 = float(s)
        rate = run.rate(t0)
        done_sending = t0 >= run.duration_s
        if done_sending and not pending:
            break
        state = "stopping" if done_sending else "ramping"
        running_now = len(pending)
        backlog = max(0.0, backlog + rate - run.capacity_rps)
        sink.on_tick(Tick(t0, rate, state, in_flight=running_now, client_queued=0))
        if not knee_sent and not done_sending and backlog > run.capacity_rps * 0.5:
            knee_sent = True
            sink.on_event(
                Event(
                    t0 + 0.05,
                    "knee",
                    f"knee at {rate:.1f} rps",
                    {"rps": rate, "offered_rps": rate, "reason": "waiting queue growing"},
                )
            )
        # Arrivals in [t0, t0+1).
        if not done_sending:
            n = rng.poisson(rate)
            for at in np.sort(rng.uniform(t0, t0 + 1.0, size=n)):
                sent = float(at) + float(rng.exponential(0.0002))
                ttft = 0.03 + run.prompt_tokens / 20000 + backlog / run.capacity_rps + float(rng.exponential(0.01))
                first_step = int(np.searchsorted(steps, sent + ttft))
                n_tok = int(max(1, min(run.mean_chunks * 6, rng.lognormal(math.log(run.mean_chunks) - 0.08, 0.4))))
                err = bool(rng.random() < run.error_rate)
                if err:
                    end = sent + float(rng.uniform(0.005, 0.05))
                else:
                    last = min(first_step + n_tok - 1, len(steps) - 1)
                    end = float(steps[last]) + 0.0008
                heapq.heappush(pending, _Pending(end, next_id, float(at), sent, first_step, n_tok, err))
                next_id += 1
        for half in range(flush_step):
            h0 = t0 + half * flush_every_s
            h1 = h0 + flush_every_s
            scrape_t = t0 + 0.2
            emitted_scrape = not (h0 <= scrape_t < h1)
            while marks and marks[0][0] < h1:
                mt, note = marks.pop(0)
                sink.on_event(Event(mt, "mark", note, {"note": note}))
            while configs and configs[0][0] < h1:
                ct, command, diff = configs.pop(0)
                sink.on_event(config_event(ct, command, diff, "current", ct))
            while pending and pending[0].end_at < h1:
                if not emitted_scrape and pending[0].end_at >= scrape_t:
                    _scrape(run, sink, scrape_t, len(pending), backlog, counters, rng)
                    emitted_scrape = True
                p = heapq.heappop(pending)
                rec = _materialise(run, p, steps, rng)
                counters["prompt"] += rec.prompt_tokens
                counters["gen"] += rec.completion_tokens
                sink.on_request(rec)
                published += 1
            if not emitted_scrape:
                _scrape(run, sink, scrape_t, len(pending), backlog, counters, rng)
            if on_flush is not None:
                on_flush(h1)
        s += 1
    if finish:
        sink.on_event(Event(float(s), "stop", "run finished"))
        sink.on_finish(float(s))
    return published


def _materialise(run: SyntheticRun, p: _Pending, steps: np.ndarray, rng: np.random.Generator) -> RequestRecord:
    if p.error:
        return RequestRecord(
            id=p.id,
            scheduled_at=p.scheduled_at,
            sent_at=p.sent_at,
            end_at=p.end_at,
            prompt_tokens=0,
            completion_tokens=0,
            status=500,
            error_class="http_500",
            error="HTTP 500: engine dead",
            finish_reason=None,
            scenario_tag="synthetic",
        )
    idx = np.arange(p.first_step, min(p.first_step + p.n_tokens, len(steps)))
    arrivals = steps[idx] + rng.exponential(0.00006, size=len(idx))
    arrivals = np.maximum.accumulate(arrivals)
    return RequestRecord(
        id=p.id,
        scheduled_at=p.scheduled_at,
        sent_at=p.sent_at,
        end_at=max(p.end_at, float(arrivals[-1])),
        first_token_at=float(arrivals[0]),
        chunk_times=arrivals[1:].tolist(),
        prompt_tokens=run.prompt_tokens,
        completion_tokens=len(idx),
        finish_reason="length",
        status=200,
        scenario_tag="synthetic",
    )


def _scrape(
    run: SyntheticRun,
    sink: TimelineSink,
    t: float,
    in_system: int,
    backlog: float,
    counters: dict[str, float],
    rng: np.random.Generator,
) -> None:
    waiting = float(min(in_system, round(backlog)))
    running = float(in_system) - waiting
    kv = min(1.0, running * (run.prompt_tokens + run.mean_chunks) / (4096 * 128))
    counters["queries"] = counters["prompt"]
    counters["hits"] = counters["prompt"] * 0.3
    if kv > 0.9:
        counters["preempt"] += float(rng.poisson(1))
    labels = f'engine="0",model_name="{run.model}"'
    raw = {
        f"vllm:num_requests_running{{{labels}}}": running,
        f"vllm:num_requests_waiting{{{labels}}}": waiting,
        f"vllm:kv_cache_usage_perc{{{labels}}}": kv,
        f"vllm:prompt_tokens_total{{{labels}}}": counters["prompt"],
        f"vllm:generation_tokens_total{{{labels}}}": counters["gen"],
        f"vllm:prefix_cache_queries_total{{{labels}}}": counters["queries"],
        f"vllm:prefix_cache_hits_total{{{labels}}}": counters["hits"],
        f"vllm:num_preemptions_total{{{labels}}}": counters["preempt"],
    }
    sink.on_scrape(
        ServerSample(
            t=t,
            url=f"{run.target}/metrics",
            ok=True,
            backend="vllm",
            scrape_s=0.004,
            running=running,
            waiting=waiting,
            kv_usage=kv,
            prompt_tokens_total=counters["prompt"],
            generation_tokens_total=counters["gen"],
            prefix_queries_total=counters["queries"],
            prefix_hits_total=counters["hits"],
            preemptions_total=counters["preempt"],
            per_engine={
                "0": {
                    "running": running,
                    "waiting": waiting,
                    "kv_usage": kv,
                    "prompt_tokens_total": counters["prompt"],
                    "generation_tokens_total": counters["gen"],
                    "prefix_queries_total": counters["queries"],
                    "prefix_hits_total": counters["hits"],
                    "preemptions_total": counters["preempt"],
                }
            },
            created=1_795_000_000.0,
            raw=raw,
        )
    )
