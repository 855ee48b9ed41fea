"""Calibration of the simulator against published vLLM results, on the virtual clock.

Each row of the calibration table names a setup (hardware, model, engine arguments), a
workload shaped like the benchmark behind the published figure, and the published figures.
``run_row`` runs the setup on ``VirtualCluster`` and measures the same figures the source
reports; ``scripts/calibrate_sim.py`` renders the table into ``docs/sim-presets.md`` and
``tests/sim/test_calibration.py`` fails when a row leaves the band.

Workloads (token ids are synthetic; only lengths and sharing matter to the engine):

- ``sharegpt_batch``: vLLM's ``benchmark_serving.py`` at request rate inf: N prompts all at
  t=0 with ShareGPT-like long-tailed lengths (log-normal with the published means).
- ``chat`` / ``classification`` / ``code``: the ``inference-benchmarker`` profiles as a
  closed loop of users, each sending its next request when the last one finished; figures
  are averaged over a window after a warm-up, like vLLM's periodic log lines.
- ``batch1``: one user, one request at a time.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rampwatch.core.tokenizer import VOCAB_SIZE
from rampwatch.sim.config import SimConfig
from rampwatch.sim.engine import SimRequest
from rampwatch.sim.virtual import Submission, VirtualCluster

BAND = (0.67, 1.5)

# Figures a row may publish, with how each is measured (see ``measure_*``).
FIGURES = {
    "prompt_tps": "prompt tok/s",
    "generation_tps": "generation tok/s",
    "output_tps": "output tok/s",
    "itl_ms": "mean ITL ms",
    "hit_pct": "hit %",
    "max_kv_pct": "max KV %",
    "max_waiting": "max waiting",
    "decode_tps": "tok/s",
}
# Figures compared against the band; the others are shown for context.
GATED = ("prompt_tps", "generation_tps", "output_tps", "itl_ms", "decode_tps")


@dataclass(frozen=True)
class Row:
    id: str
    table: str
    label: str
    setup: dict[str, Any]
    workload: dict[str, Any]
    published: dict[str, float]
    reasons: dict[str, str] = field(default_factory=dict)  # figure -> why it is outside the band


def load_rows(path: Path) -> list[Row]:
    data = json.loads(path.read_text())
    return [
        Row(
            r["id"],
            r["table"],
            r["label"],
            r["setup"],
            r["workload"],
            {k: float(v) for k, v in r["published"].items()},
            r.get("reasons", {}),
        )
        for r in data["rows"]
    ]


# ---------------------------------------------------------------------------- token ids


def token_block(rng: random.Random, n: int) -> list[int]:
    """``n`` token ids unlike any other block's: 16 random ids, then a fixed stride. Blocks are
    hashed in a chain, so a random first block keeps every later block distinct too, and
    the stride is far cheaper than n draws (prompts of 10k tokens, thousands of them)."""
    span = VOCAB_SIZE - 10
    head = [rng.randrange(span) + 10 for _ in range(min(n, 16))]
    last = head[-1] if head else 0
    return head + [(last + i * 7919) % span + 10 for i in range(1, n - len(head) + 1)]


def clipped_normal(rng: random.Random, mean: float, sd: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, round(rng.gauss(mean, sd)))))


def lognormal_with_mean(rng: random.Random, mean: float, sigma: float) -> float:
    return rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)


# ---------------------------------------------------------------------------- workloads


class ClosedLoop:
    """``users`` users, each sending its next request the moment the previous one finished."""

    def __init__(self, users: int, make: Callable[[int, int], Submission]) -> None:
        self.users = users
        self.make = make
        self.sent = [0] * users

    def start(self, cluster: VirtualCluster) -> None:
        for u in range(self.users):
            # Users join over the first second, as a benchmark's virtual users ramp in.
            cluster.submit(self._next(u), at=u / self.users)

    def _next(self, user: int) -> Submission:
        sub = self.make(user, self.sent[user])
        sub.user = user
        self.sent[user] += 1
        return sub

    def on_finish(self, cluster: VirtualCluster) -> Callable[[SimRequest, Submission, float], None]:
        def finished(req: SimRequest, sub: Submission, now: float) -> None:
            cluster.submit(self._next(sub.user), at=now)

        return finished


def chat_maker(params: dict[str, Any], seed: int) -> Callable[[int, int], Submission]:
    """Multi-turn chat: every prompt repeats the conversation so far (a shared system header
    and the earlier user turns), then adds a new user turn; a conversation has ``turns``
    turns, then the user starts a new one. Output lengths follow the profile."""
    rng = random.Random(seed)
    header = token_block(random.Random(seed + 1), params["system_tokens"])
    turn_tokens, turns = params["turn_tokens"], params["turns"]
    history: dict[int, list[int]] = {}

    def make(user: int, k: int) -> Submission:
        if k % turns == 0:
            history[user] = list(header)
        history[user] = history[user] + token_block(rng, turn_tokens)
        out = clipped_normal(
            rng, params["output_mean"], params["output_sd"], params["output_min"], params["output_max"]
        )
        return Submission(list(history[user]), out)

    return make


def classification_maker(params: dict[str, Any], seed: int) -> Callable[[int, int], Submission]:
    """A small set of fixed long documents, each request one of them plus its own question."""
    rng = random.Random(seed)
    doc_rng = random.Random(seed + 1)
    docs = [
        token_block(doc_rng, doc_rng.randint(params["doc_min"], params["doc_max"])) for _ in range(params["documents"])
    ]

    def make(user: int, k: int) -> Submission:
        doc = docs[rng.randrange(len(docs))]
        question = token_block(rng, rng.randint(params["question_min"], params["question_max"]))
        out = clipped_normal(
            rng, params["output_mean"], params["output_sd"], params["output_min"], params["output_max"]
        )
        return Submission(doc + question, out)

    return make


def code_maker(params: dict[str, Any], seed: int) -> Callable[[int, int], Submission]:
    """Long prompts with nothing in common."""
    rng = random.Random(seed)

    def make(user: int, k: int) -> Submission:
        n = clipped_normal(rng, params["input_mean"], params["input_sd"], params["input_min"], params["input_max"])
        out = clipped_normal(
            rng, params["output_mean"], params["output_sd"], params["output_min"], params["output_max"]
        )
        return Submission(token_block(rng, n), out)

    return make


def fixed_maker(params: dict[str, Any], seed: int) -> Callable[[int, int], Submission]:
    rng = random.Random(seed)

    def make(user: int, k: int) -> Submission:
        return Submission(token_block(rng, params["input_tokens"]), params["output_tokens"])

    return make


MAKERS = {"chat": chat_maker, "classification": classification_maker, "code": code_maker, "batch1": fixed_maker}


def sharegpt_batch(params: dict[str, Any], seed: int, max_len: int) -> list[Submission]:
    rng = random.Random(seed)
    subs = []
    for _ in range(params["requests"]):
        n_in = max(4, round(lognormal_with_mean(rng, params["input_mean"], params["sigma"])))
        n_out = max(4, round(lognormal_with_mean(rng, params["output_mean"], params["sigma"])))
        n_in = min(n_in, max_len // 2)
        n_out = min(n_out, max_len - n_in)
        subs.append(Submission(token_block(rng, n_in), n_out))
    return subs


# ---------------------------------------------------------------------------- running


def row_config(row: Row) -> SimConfig:
    return SimConfig(**row.setup)


def run_row(row: Row, scale: float = 1.0, seed: int = 0) -> dict[str, float]:
    """The row's figures measured on the virtual clock. ``scale`` < 1 shortens the closed-loop
    warm-up and window (the test's quick mode); figures are rates, so they keep their meaning.
    A batch run always sends the whole batch: its figures depend on the batch's tail."""
    kind = row.workload["kind"]
    if kind == "sharegpt_batch":
        return run_batch(row, seed)
    return run_closed_loop(row, scale, seed)


def run_batch(row: Row, seed: int) -> dict[str, float]:
    params = row.workload
    cluster = VirtualCluster(row_config(row), keep_samples=False)
    for sub in sharegpt_batch(params, seed, cluster.config.max_model_len or 2048):
        cluster.submit(sub, at=0.0)
    cluster.run(until=math.inf)
    reqs = [r for r, _ in cluster.completed]
    end = max(r.finished_at or 0.0 for r in reqs)
    output = sum(len(r.output_token_ids) for r in reqs)
    decode_time = sum((r.last_token_at or 0.0) - (r.first_token_at or 0.0) for r in reqs)
    gaps = sum(len(r.output_token_ids) - 1 for r in reqs)
    return {"output_tps": output / end, "itl_ms": 1000 * decode_time / max(1, gaps)}


def run_closed_loop(row: Row, scale: float, seed: int) -> dict[str, float]:
    params = row.workload
    warmup, window = params["warmup_s"] * scale, params["window_s"] * scale
    cluster = VirtualCluster(row_config(row))
    loop = ClosedLoop(params["users"], MAKERS[params["kind"]](params, seed))
    cluster.on_finish = loop.on_finish(cluster)
    loop.start(cluster)
    cluster.run(until=warmup)
    before = [(e.lookups.queries, e.lookups.hits) for e in cluster.engines]
    cluster.samples.clear()
    cluster.run(until=warmup + window)
    samples = cluster.samples
    queries = sum(e.lookups.queries - q for e, (q, _h) in zip(cluster.engines, before, strict=True))
    hits = sum(e.lookups.hits - h for e, (_q, h) in zip(cluster.engines, before, strict=True))
    n_engines = len(cluster.engines)
    out = {
        "prompt_tps": sum(s.prompt_tokens for s in samples) / window,
        "generation_tps": sum(s.generated for s in samples) / window,
        "max_waiting": float(max((s.num_waiting for s in samples), default=0)),
        "max_kv_pct": 100.0 * max((s.kv_usage for s in samples), default=0.0),
        "hit_pct": 100.0 * hits / queries if queries else 0.0,
    }
    if params["kind"] == "batch1":
        out["decode_tps"] = out["generation_tps"] / n_engines
    return out


# ---------------------------------------------------------------------------- the table


@dataclass
class Comparison:
    row: Row
    figure: str
    published: float
    simulated: float

    @property
    def ratio(self) -> float:
        return self.simulated / self.published if self.published else math.nan

    @property
    def gated(self) -> bool:
        return self.figure in GATED

    @property
    def in_band(self) -> bool:
        return BAND[0] <= self.ratio <= BAND[1]

    @property
    def reason(self) -> str:
        return self.row.reasons.get(self.figure, "")


def compare(row: Row, measured: dict[str, float]) -> list[Comparison]:
    return [Comparison(row, fig, pub, measured[fig]) for fig, pub in row.published.items()]


def _fmt(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def render_table(results: list[tuple[Row, dict[str, float]]]) -> str:
    """The markdown calibration table: one line per published figure."""
    lines = [
        "| table | setup | figure | published | simulator | ratio | cause when outside [0.67, 1.5] |",
        "|---|---|---|---|---|---|---|",
    ]
    for row, measured in results:
        for c in compare(row, measured):
            mark = "" if not c.gated else (" ✓" if c.in_band else " ✗")
            cause = c.reason if (c.gated and not c.in_band) or not c.gated else ""
            lines.append(
                f"| {row.table} | {row.label} | {FIGURES[c.figure]} | {_fmt(c.published)} | {_fmt(c.simulated)} "
                f"| {c.ratio:.2f}{mark} | {cause} |"
            )
    return "\n".join(lines)


@dataclass(frozen=True)
class Relation:
    """A published ratio between two rows' total tokens/s (e.g. DP 8 over TP 8).

    ``numerator_scale`` multiplies the numerator row: N data-parallel engines with N times the
    users are N independent copies of the one-engine row (engines share nothing and the
    router spreads users evenly), so DP 8 is 8 × the single-GPU row without running it."""

    label: str
    numerator: str
    denominator: str
    published: float
    numerator_scale: float = 1.0
    reason: str = ""  # why the simulated ratio is outside the band, when it is

    def simulated(self, results: dict[str, dict[str, float]]) -> float:
        return self.numerator_scale * total_tps(results[self.numerator]) / total_tps(results[self.denominator])


def total_tps(measured: dict[str, float]) -> float:
    return measured.get("prompt_tps", 0.0) + measured.get("generation_tps", 0.0) + measured.get("output_tps", 0.0)


def load_relations(path: Path) -> list[Relation]:
    return [Relation(**r) for r in json.loads(path.read_text())["relations"]]


def render_relations(relations: list[Relation], results: dict[str, dict[str, float]]) -> str:
    lines = ["| relation | published | simulator | ratio | cause when outside [0.67, 1.5] |", "|---|---|---|---|---|"]
    for rel in relations:
        simulated = rel.simulated(results)
        ratio = simulated / rel.published
        inside = BAND[0] <= ratio <= BAND[1]
        cause = "" if inside else rel.reason
        lines.append(
            f"| {rel.label} | {rel.published:.2f}× | {simulated:.2f}× | {ratio:.2f}{' ✓' if inside else ' ✗'} | {cause} |"
        )
    return "\n".join(lines)
