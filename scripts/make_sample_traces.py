"""Writes the small sample traces shipped in ``scenarios/traces/``, one per format that
``schedule: {kind: trace}`` reads (seeded: the same files every time).

    python scripts/make_sample_traces.py [--out scenarios/traces]

- ``mooncake-sample.jsonl``: 32 rows over about 6 s in the Mooncake traces' layout
  (``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids`` of 512-token
  blocks). Rows belong to four "applications", each with its own shared prefix of one or
  two blocks, and a third of the rows continue an earlier row of theirs (its blocks
  and more), so a server's prefix cache has something to reuse, as in the real traces.
- ``azure-sample.csv``: 40 rows over about 5 s in the Azure LLM inference trace's layout
  (``TIMESTAMP`` as a date and time with seven decimals, ``ContextTokens``,
  ``GeneratedTokens``).
- ``jsonl-sample.jsonl``: 24 rows over about 3 s (``time`` in s, ``input_tokens``,
  ``output_tokens``), a few carrying their own ``prompt`` or chat ``messages``.

Lengths are kept small (answers of tens of tokens) so that ``rampwatch run trace-replay``
finishes in seconds on the embedded simulator.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

BLOCK = 512
SEED = 16


def arrivals(rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    """Poisson arrival times (s), with a burst in the middle third at twice the rate."""
    gaps = rng.exponential(1.0 / rate, n)
    gaps[n // 3 : 2 * n // 3] /= 2
    return np.cumsum(gaps) - gaps[0]


def mooncake_rows(rng: np.random.Generator) -> list[dict]:
    next_id = 0

    def fresh(k: int) -> list[int]:
        nonlocal next_id
        ids = list(range(next_id, next_id + k))
        next_id += k
        return ids

    apps = [fresh(int(k)) for k in (1, 2, 1, 1)]  # each application's shared prefix blocks
    earlier: list[list[int]] = []
    rows = []
    for t in arrivals(rng, 32, 5.0):
        if earlier and rng.random() < 1 / 3:
            base = earlier[int(rng.integers(len(earlier)))]  # a conversation going on
        else:
            base = apps[int(rng.integers(len(apps)))]
        own = int(rng.integers(0, 2))
        partial = int(rng.integers(1, BLOCK // 2))  # the last block is partial, as in the traces
        ids = base + fresh(own + 1)
        earlier.append(ids[:-1])
        rows.append(
            {
                "timestamp": int(round(t * 1000)),
                "input_length": (len(ids) - 1) * BLOCK + partial,
                "output_length": int(rng.integers(4, 24)),
                "hash_ids": ids,
            }
        )
    return rows


def azure_lines(rng: np.random.Generator) -> list[str]:
    start = datetime(2023, 11, 16, 18, 15, 46)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t in arrivals(rng, 40, 8.0):
        moment = start + timedelta(seconds=float(t))
        stamp = moment.strftime("%Y-%m-%d %H:%M:%S.%f") + str(int(rng.integers(10)))
        lines.append(f"{stamp},{int(rng.lognormal(np.log(800), 0.6)) + 1},{int(rng.integers(4, 64))}")
    return lines


def jsonl_rows(rng: np.random.Generator) -> list[dict]:
    rows: list[dict] = []
    for i, t in enumerate(arrivals(rng, 24, 6.0)):
        row: dict = {"time": round(float(t), 4)}
        if i % 8 == 3:
            row["prompt"] = "Summarise the trade-offs of continuous batching in two sentences."
        elif i % 8 == 6:
            row["messages"] = [
                {"role": "system", "content": "You are a concise assistant."},
                {"role": "user", "content": "Name three causes of a long time to first token."},
            ]
        else:
            row["input_tokens"] = int(rng.integers(64, 1500))
        row["output_tokens"] = int(rng.integers(8, 48))
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "scenarios" / "traces")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    (args.out / "mooncake-sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mooncake_rows(rng)))
    (args.out / "azure-sample.csv").write_text("\n".join(azure_lines(rng)) + "\n")
    (args.out / "jsonl-sample.jsonl").write_text("".join(json.dumps(r) + "\n" for r in jsonl_rows(rng)))
    for name in ("mooncake-sample.jsonl", "azure-sample.csv", "jsonl-sample.jsonl"):
        print(args.out / name)


if __name__ == "__main__":
    main()
