"""A sweep's figures: one configuration's row from its run's records (``config_row``),
the mean and 95 % interval of repeated runs, the Pareto front and the best configuration
(``BEST_RULE``). Pure: ``rampwatch.app.sweep`` runs the configurations and writes the
rows into ``sweep.json``; ``sweep_text`` words them; ``record`` and ``tui`` show them.

Definitions (docs/tuning.md says the same):

- *good request*: ended OK with every latency within the SLO's bound read as a
  per-request limit (``Slo.per_request_ms``), as ``vllm bench serve --goodput`` counts it;
- *max good-put*: the most good requests ending in any ``GOODPUT_WINDOW_S`` seconds of the
  run, per second;
- *at the knee*: the requests sent in the ``KNEE_WINDOW_S`` seconds before the knee's
  onset (without a knee: before the load's end), the load the server last kept up with;
- *output tok/s*: what the server delivered (the tokens of the requests that ended OK)
  in the ``KNEE_WINDOW_S`` seconds from the knee's onset — saturated, the server's
  capacity — or, without a knee, in the load's last ``KNEE_WINDOW_S`` seconds;
- *tok/s per user*: at the knee, output tokens over the summed request latencies, which
  is the output throughput divided by the mean number of requests in flight (Little's
  law) — what ``vllm bench sweep plot_pareto`` plots as tokens/s/user;
- *GPUs*: tensor × pipeline × data parallel size of the configuration's arguments;
- *knee ±*: how far the per-second offered rates the knee detector's window averaged
  reach from its estimate (the knee event's ``offered_rps_range``);
- *loaded to its limit*: a knee was declared, or the requests sent in the load's last
  ``KNEE_WINDOW_S`` seconds broke the SLO; a configuration that was not is never on the
  front nor best (``BEST_RULE``);
- *repeats*: each figure the mean of the runs with its 95 % Student-t interval
  (``ci95``, the half-width), ``spread`` the min–max of the ``SPREAD_KEYS``; with
  repeats a best is declared only when its max good-put interval lies entirely above
  every other loaded configuration's (on the front or off it by its means), else those it overlaps are ``tied``;
- *load: search*: the best is the highest confirmed max under the SLO instead
  (``search_best.SEARCH_BEST_RULE``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rampwatch.core.figures import stats
from rampwatch.core.figures.intervals import mean_interval
from rampwatch.core.figures.knee_explanation import KneeExplanation
from rampwatch.core.figures.search_best import choose_search_best
from rampwatch.core.figures.slo import Slo
from rampwatch.core.figures.summary import gpu_figures, knee_explanation, server_figures, tokens_per_joule
from rampwatch.core.timeline import CANCELLED, Event, RequestRecord, ServerSample

GOODPUT_WINDOW_S = 10.0
KNEE_WINDOW_S = 10.0


def good_requests(requests: Sequence[RequestRecord], slo: Slo) -> np.ndarray:
    """Which requests are good: ended OK with every latency within the SLO's per-request
    limits (vLLM's ``--goodput`` rule; a request with one token has TPOT 0)."""
    ok = [r.ok and r.ttft is not None for r in requests]
    ttft = np.array([r.ttft if r.ttft is not None else math.inf for r in requests], dtype=float)
    tpot = np.array([r.tpot or 0.0 for r in requests], dtype=float)
    e2el = np.array([r.e2e for r in requests], dtype=float)
    ttfa = np.array([math.inf if r.ttfa is None else r.ttfa for r in requests], dtype=float)
    if not requests:
        return np.zeros(0, dtype=bool)
    return np.array(ok, dtype=bool) & stats.meets_slo(ttft, tpot, e2el, slo.per_request_ms(), ttfa_s=ttfa)


def max_window_rate(times: np.ndarray, window_s: float = GOODPUT_WINDOW_S) -> float:
    """The most of ``times`` falling in any ``window_s``-long interval, per second; 0.0
    for none. Windows start at an event, so a window shorter than the run is never
    stretched over empty time."""
    if len(times) == 0:
        return 0.0
    t = np.sort(np.asarray(times, dtype=float))
    ends = np.searchsorted(t, t + window_s, side="left")
    return float((ends - np.arange(len(t))).max()) / window_s


def max_goodput_rps(requests: Sequence[RequestRecord], slo: Slo, window_s: float = GOODPUT_WINDOW_S) -> float:
    good = good_requests(requests, slo)
    ends = np.array([r.end_at for r in requests], dtype=float)
    return max_window_rate(ends[good] if len(ends) else ends, window_s)


def knee_event(events: Sequence[Event]) -> Event | None:
    return next((e for e in events if e.kind == "knee"), None)


def delivered_tps(requests: Sequence[RequestRecord], t_from: float, t_to: float) -> float | None:
    """Output tokens per second the server delivered in ``[t_from, t_to]``: the tokens of
    the requests that ended OK in it, over its length (None for an empty span)."""
    if t_to <= t_from:
        return None
    return float(sum(stats.output_len(r) for r in requests if r.ok and t_from <= r.end_at <= t_to)) / (t_to - t_from)


def window_figures(requests: Sequence[RequestRecord], t_from: float, t_to: float) -> dict[str, float | None]:
    """Of the requests *sent* in ``[t_from, t_to)`` that ended OK: TTFT and ITL p50/p99 in
    ms and tok/s per user (their tokens over their summed latencies)."""
    ok = [r for r in requests if r.ok and t_from <= r.sent_at < t_to and r.first_token_at is not None]
    if not ok:
        return dict.fromkeys(("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "tps_per_user"))
    ttft = np.array([r.ttft for r in ok], dtype=float)
    itls = np.concatenate([stats.itl_array(r) for r in ok])
    tokens = float(sum(stats.output_len(r) for r in ok))
    latency = float(sum(r.e2e for r in ok))

    def pct(values: np.ndarray, q: float) -> float | None:
        return float(np.percentile(values, q)) * 1000 if len(values) else None

    return {
        "ttft_p50_ms": pct(ttft, 50),
        "ttft_p99_ms": pct(ttft, 99),
        "itl_p50_ms": pct(itls, 50),
        "itl_p99_ms": pct(itls, 99),
        "tps_per_user": tokens / latency if latency > 0 else None,
    }


def slo_breaks(window: Sequence[RequestRecord], slo: Slo) -> list[str]:
    """What of the SLO these requests break (cancelled ones aside): a latency percentile
    over its bound (TTFT and ITL of the successful ones) or the failed fraction over the
    SLO's error rate; empty when they meet it."""
    judged = [r for r in window if r.error_class != CANCELLED]
    if not judged:
        return []
    ok = [r for r in judged if r.ok and r.first_token_at is not None]
    values = {
        "ttft": np.array([r.ttft for r in ok], dtype=float),
        "itl": np.concatenate([stats.itl_array(r) for r in ok]) if ok else np.zeros(0),
        "tpot": np.array([r.tpot for r in ok if r.tpot is not None], dtype=float),
        "e2el": np.array([r.e2e for r in ok], dtype=float),
        # a request cut short while thinking has no answer: it counts as never answering
        "ttfa": np.array([math.inf if r.ttfa is None else r.ttfa for r in ok], dtype=float),
    }
    failed = sum(1 for r in judged if not r.ok)
    return slo.violations(values, failed / len(judged))


def peak_target_rps(schedule: dict[str, Any], t: float) -> float | None:
    """The highest rate a sweep's load (``SweepSpec.schedule``: a linear ramp or steps)
    asked for up to run time ``t`` (its last send): what a configuration that never
    reached its limit was shown to keep up with."""
    if schedule.get("kind") == "linear":
        start, end, duration = schedule["start_rps"], schedule["end_rps"], schedule["duration_s"]
        reached = start + (end - start) * min(1.0, max(0.0, t / duration))
        return max(start, reached)
    if schedule.get("kind") == "steps":
        rates: list[float] = []
        elapsed = 0.0
        for step in schedule["steps"]:
            if elapsed > t and rates:
                break
            rates.append(step["rate"])
            elapsed += step["duration_s"]
        return max(rates, default=None)
    return None


def config_row(
    requests: Sequence[RequestRecord],
    samples: Sequence[ServerSample],
    events: Sequence[Event],
    slo: Slo,
    load_end_s: float | None = None,
    schedule: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The table's figures for one configuration's run (see the module's definitions)."""
    knee = knee_event(events)
    why = KneeExplanation.from_dict(knee_explanation(events))  # as the review settled it
    sends = [r.sent_at for r in requests if r.error_class != CANCELLED]
    last_send = max(sends, default=0.0)
    if knee is not None:
        at = float(knee.data.get("onset_t", knee.t))
    else:
        at = min(load_end_s, last_send) if load_end_s is not None else last_send
    # The window starts no earlier than the load (a knee 6 s into a run has 6 s before it).
    first_send = min(sends, default=0.0)
    window = (max(first_send, at - KNEE_WINDOW_S), at + (0 if knee is not None else 1e-9))
    figures = window_figures(requests, *window)
    # The server's output once saturated: from the knee's onset on (to the last answer at
    # most); without a knee, over the load's last seconds.
    last_end = max((r.end_at for r in requests if r.ok), default=at)
    if knee is not None:
        figures["output_tps"] = delivered_tps(requests, at, min(at + KNEE_WINDOW_S, last_end))
    else:
        figures["output_tps"] = delivered_tps(requests, max(first_send, at - KNEE_WINDOW_S), at)
    # Without a knee, the load still reached the configuration's limit when the requests
    # sent in its last seconds broke the SLO: more load would not serve more users.
    broken = [] if knee is not None else slo_breaks([r for r in requests if window[0] <= r.sent_at < window[1]], slo)
    server = server_figures(samples)
    judged = [r for r in requests if r.error_class != CANCELLED]
    failed = sum(1 for r in judged if not r.ok)
    knee_rps = float(knee.data["offered_rps"]) if knee is not None and "offered_rps" in knee.data else None
    return {
        "knee_rps": knee_rps,
        "knee_rps_pm": knee_uncertainty(knee_rps, None if knee is None else knee.data.get("offered_rps_range")),
        "knee_t": at if knee is not None else None,
        "reached": knee is not None or bool(broken),
        "slo_broken_at_end": "; ".join(broken) or None,
        "peak_offered_rps": None if schedule is None else peak_target_rps(schedule, last_send),
        "max_goodput_rps": max_goodput_rps(requests, slo),
        **figures,
        "peak_kv_pct": server.get("max_kv_usage_pct"),
        # over the whole run, as the run's summary gives it; None without GPU power
        "tokens_per_joule": tokens_per_joule(
            sum(stats.output_len(r) for r in requests if r.ok), gpu_figures(samples).get("energy_j")
        ),
        "preemptions": server.get("preemptions"),
        "limit": None if why is None else why.title,
        "limit_key": None if why is None else why.limit,
        "try_next": None if why is None else why.try_next,
        "requests": len(judged),
        "failed": failed,
        "error_rate": failed / len(judged) if judged else 0.0,
    }


def knee_uncertainty(knee_rps: float | None, offered_range: Sequence[float] | None) -> float | None:
    """The ± of a knee estimate: how far the offered rates its window averaged reach
    from it on either side (``KneeDetector``'s ``offered_rps_range``); None without them."""
    if knee_rps is None or not offered_range or len(offered_range) != 2:
        return None
    lo, hi = float(offered_range[0]), float(offered_range[1])
    return max(knee_rps - lo, hi - knee_rps, 0.0)


# A configuration's figures the table shows with their interval over repeats (every
# numeric figure gets one in ``ci95``; these also a min–max ``spread``).
SPREAD_KEYS = ("knee_rps", "max_goodput_rps", "output_tps", "tps_per_user")


def combine_runs(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's row from the figures of its repeated runs (``config_row``'s):
    each numeric figure's mean over the runs that have it, ``ci95`` its 95 % Student-t
    half-width (``intervals.mean_interval``; none for a figure only one run has),
    ``spread`` the min and max of the ``SPREAD_KEYS``, ``n_runs``; reached only when every
    run reached its limit (a limit that one run of three missed is not established); the
    limit the runs named most. One run is itself."""
    if len(runs) == 1:
        return dict(runs[0])
    out: dict[str, Any] = {}
    ci95: dict[str, float] = {}
    for key in sorted({k for run in runs for k in run}):
        values = [run.get(key) for run in runs]
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numbers and len(numbers) == len([v for v in values if v is not None]):
            interval = mean_interval(numbers)
            out[key] = None if interval is None else interval.mean
            if interval is not None and interval.half_width is not None:
                ci95[key] = interval.half_width
        else:
            present = [v for v in values if v is not None]
            out[key] = max(present, key=present.count) if present else None
    out["reached"] = all(run.get("reached") for run in runs)
    limits = [run.get("limit") for run in runs if run.get("limit")]
    if limits:
        common = max(limits, key=limits.count)
        first = next(run for run in runs if run.get("limit") == common)
        out.update(limit=common, limit_key=first.get("limit_key"), try_next=first.get("try_next"))
    out["spread"] = {
        key: [min(vals), max(vals)]
        for key in SPREAD_KEYS
        if (vals := [float(run[key]) for run in runs if run.get(key) is not None])
    }
    failed_searches = [run["search_failure"] for run in runs if run.get("search_failure")]
    if failed_searches:  # load: search: a max that one run could not bracket is not established
        out.update(search_max=None, search_failure=f"{len(failed_searches)} of {len(runs)} runs: {failed_searches[0]}")
        ci95.pop("search_max", None)
    out["ci95"] = ci95
    out["n_runs"] = len(runs)
    return out


def pareto_front(points: Sequence[tuple[float | None, float | None]]) -> list[bool]:
    """Which points no other point beats on both axes (higher is better on each): a point
    is off the front when another is at least as good on both and better on one. A point
    with a missing coordinate is never on it."""
    out = []
    for i, (x, y) in enumerate(points):
        if x is None or y is None or math.isnan(x) or math.isnan(y):
            out.append(False)
            continue
        dominated = False
        for j, (x2, y2) in enumerate(points):
            if j == i or x2 is None or y2 is None or math.isnan(x2) or math.isnan(y2):
                continue
            if x2 >= x and y2 >= y and (x2 > x or y2 > y):
                dominated = True
                break
        out.append(not dominated)
    return out


BEST_RULE = (
    "best: of the configurations loaded to their limit (a knee, or the SLO broken), those on the "
    "Pareto front (tok/s/user vs out tok/s per GPU), the highest max good-put (tie: fewer GPUs, "
    "then out tok/s); a configuration whose load never reached its limit is never best"
)


def limit_reached(row: dict[str, Any]) -> bool:
    """Whether a configuration's load reached its limit (a row from before the sweep
    judged that: whether it had a knee)."""
    return bool(row["reached"]) if "reached" in row else row.get("knee_rps") is not None


def loaded_to_limit(row: dict[str, Any]) -> bool:
    """A completed configuration whose load reached its limit: its figures are its
    capacity, not whatever load the sweep happened to stop at."""
    return row.get("status") == "done" and limit_reached(row)


def mark_pareto(rows: list[dict[str, Any]]) -> None:
    """Set each row's ``tps_per_gpu`` and ``pareto``: on the front of tok/s per user vs
    tok/s per GPU among the configurations loaded to their limit (one that never was has
    figures from below its limit, so it is not compared)."""
    points: list[tuple[float | None, float | None]] = []
    for row in rows:
        out = row.get("output_tps")
        row["tps_per_gpu"] = None if out is None else out / max(1, row.get("gpus", 1))
        points.append((row.get("tps_per_user"), row["tps_per_gpu"]) if loaded_to_limit(row) else (None, None))
    for row, on in zip(rows, pareto_front(points), strict=True):
        row["pareto"] = on


def goodput_interval(row: dict[str, Any]) -> tuple[float, float] | None:
    """A repeated configuration's max good-put interval (mean ± its ``ci95``); None for a
    configuration run once (or a sweep.json from before intervals)."""
    half = (row.get("ci95") or {}).get("max_goodput_rps")
    mean = row.get("max_goodput_rps")
    return None if half is None or mean is None else (mean - half, mean + half)


def choose_best(rows: Sequence[dict[str, Any]], search: bool = False) -> dict[str, Any]:
    """The sweep's verdict by ``BEST_RULE`` over rows ``mark_pareto`` has marked: ``best``
    (an index, or None), ``not_reached`` (completed configurations whose load never
    reached their limit: extend the load to judge them) and ``tied``: with repeats, the
    leader and the configurations loaded to their limit (on the front or off it by their
    means) whose max good-put interval reaches into the leader's (no single best then:
    ``best`` is None). A sweep that searched (``search``)
    is judged by its confirmed max under the SLO instead (``search_best``)."""
    if search:
        return choose_search_best(rows)
    not_reached = [i for i, row in enumerate(rows) if row.get("status") == "done" and not limit_reached(row)]
    candidates = [
        i
        for i, row in enumerate(rows)
        if loaded_to_limit(row) and row.get("pareto") and (row.get("max_goodput_rps") or 0) > 0
    ]
    best = (
        max(
            candidates,
            key=lambda i: (rows[i]["max_goodput_rps"], -rows[i].get("gpus", 1), rows[i].get("output_tps") or 0.0),
        )
        if candidates
        else None
    )
    tied: list[int] = []
    leader = None if best is None else goodput_interval(rows[best])
    if best is not None and leader is not None:
        # every configuration loaded to its limit, not only the front's: the front is drawn
        # from the means, and one off it by its means may be the leader's equal within noise
        judged = [i for i, row in enumerate(rows) if loaded_to_limit(row) and (row.get("max_goodput_rps") or 0) > 0]
        for i in judged:
            other = goodput_interval(rows[i])
            top = rows[i]["max_goodput_rps"] if other is None else other[1]
            if i != best and top >= leader[0]:
                tied.append(i)
        if tied:
            tied, best = sorted([best, *tied]), None
    return {"best": best, "not_reached": not_reached, "tied": tied}
