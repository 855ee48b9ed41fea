"""A window of a large trace (`schedule.start_s`, `duration_s`) is read as a window: only its
rows are kept, and a file in time order is read no further than the window's end (a
10-million-row trace was read whole, 613 MB, for a 2 s window). Whatever the order of the
file, the rows are those the whole file, windowed, holds."""

from __future__ import annotations

import json
import pathlib
import random
from datetime import UTC, datetime

import numpy as np
import pytest

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.traces import load_trace, window


def trace_text(fmt: str, times_s: list[float], seed: int) -> str:
    rng = random.Random(seed)
    rows = []
    for t in times_s:
        n_in, n_out = rng.randint(1, 900), rng.randint(0, 50)
        if fmt == "mooncake":
            ids = [rng.randint(0, 20) for _ in range(rng.randint(0, 3))]
            rows.append(
                json.dumps(
                    {"timestamp": round(t * 1000), "input_length": n_in, "output_length": n_out, "hash_ids": ids}
                )
            )
        elif fmt == "jsonl":
            row = {"time": t, "input_tokens": n_in, "output_tokens": n_out}
            if rng.random() < 0.3:
                row["prompt"] = f"prompt {t}"
            rows.append(json.dumps(row))
        else:
            stamp = datetime.fromtimestamp(1_700_000_000 + t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
            rows.append(f"{stamp},{n_in},{n_out}")
    head = ["TIMESTAMP,ContextTokens,GeneratedTokens"] if fmt == "azure" else []
    return "\n".join(head + rows) + "\n"


def same(a, b) -> None:
    assert a.times_s.tolist() == pytest.approx(b.times_s.tolist())
    for column in ("input_tokens", "output_tokens", "hash_offsets", "hash_ids"):
        assert np.array_equal(getattr(a, column), getattr(b, column)), column
    assert a.prompts == b.prompts


ORDERS = {
    "in order": [i * 0.5 for i in range(40)],
    "jittered": [i * 0.5 + (0.7 if i % 5 == 0 else 0.0) for i in range(40)],  # later rows earlier than some before
    "earliest not first": [3.0] + [i * 0.5 for i in range(40)],  # the trace's 0 is its second row
}


@pytest.mark.parametrize("fmt", ["mooncake", "jsonl", "azure"])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("start_s, duration_s", [(2.0, 3.0), (0.0, 1.2), (7.3, None), (19.0, 5.0)])
def test_a_window_read_while_reading_holds_what_the_whole_file_windowed_holds(
    tmp_path, fmt, order, start_s, duration_s
):
    path = tmp_path / f"t.{fmt}"
    path.write_text(trace_text(fmt, ORDERS[order], seed=len(order)))
    same(load_trace(path, fmt, start_s, duration_s), window(load_trace(path, fmt), start_s, duration_s))


class LineCounter:
    """Wraps the file a trace is read from, counting the lines taken from it."""

    def __init__(self, fh) -> None:
        self.fh, self.lines = fh, 0

    def __iter__(self):
        for line in self.fh:
            self.lines += 1
            yield line

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()


def test_a_window_of_a_trace_in_time_order_stops_reading_at_its_end(tmp_path, monkeypatch):
    rows = 100_000  # 1,000 a second for 100 s
    path = tmp_path / "big.jsonl"
    path.write_text("".join(f'{{"time": {i / 1000}, "input_tokens": 5, "output_tokens": 2}}\n' for i in range(rows)))
    opened: list[LineCounter] = []
    real_open = pathlib.Path.open

    def counting_open(self, *args, **kwargs):
        opened.append(LineCounter(real_open(self, *args, **kwargs)))
        return opened[-1]

    monkeypatch.setattr(pathlib.Path, "open", counting_open)
    trace = load_trace(path, "jsonl", start_s=10.0, duration_s=2.0)
    assert len(trace) == 2000 and trace.times_s[0] == 0.0
    assert [c.lines for c in opened] == [12_001]  # up to the first row past the window, not 100,000


def test_an_empty_window_before_the_end_of_a_trace_in_order_says_so(tmp_path):
    path = tmp_path / "gap.jsonl"
    times = [0, 1, 2, 50, 51]
    path.write_text("".join(f'{{"time": {t}, "input_tokens": 5, "output_tokens": 2}}\n' for t in times))
    with pytest.raises(UserError) as err:
        load_trace(path, "jsonl", start_s=10.0, duration_s=5.0)
    assert str(err.value) == (
        f"{path}: the window 10–15 s holds no row of this trace (the trace goes on after it); "
        "change schedule.start_s or schedule.duration_s"
    )
