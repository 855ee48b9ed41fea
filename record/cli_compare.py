"""`rampwatch compare A B`: two recordings' summaries side by side, the change per
metric and, where it can be told from noise, which run is better.

A metric with samples (``record.analysis.comparison_samples``: per request for the
latencies and the error rate, per second for the throughputs) gets a bootstrap interval
for B − A (``record.significance``); B is "better" or "worse" only when that interval
excludes 0 (and the change is at least 1%: else "negligible"), else "within noise". Counts, peaks, the knee and costs have no samples to
resample: their change is shown without a verdict. When the two runs ran different loads
(schedule, workload, endpoint, concurrency cap), one warning line says so first; when
the later run could have read the earlier one's prompts from the server's prefix cache
(same server, not restarted by the later run, same seed, the same cache salt or none),
another says so.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from rampwatch.core import strict_json
from rampwatch.core.cache_salt import UNKNOWN, describe_cache_policy
from rampwatch.core.figures.summary import client_lag_warning
from rampwatch.core.timeline import RunHeader
from rampwatch.record.analysis import comparison_samples, summarise
from rampwatch.record.reader import open_recording, print_warnings
from rampwatch.record.significance import DEFAULT_CONFIDENCE, Samples, bootstrap_delta

# (summary key, label, True when higher is better (None: neither, a trait of the workload),
# (sample name, statistic) or None)
COMPARED: list[tuple[str, str, bool | None, tuple[str, str] | None]] = [
    ("completed", "Successful requests", True, None),
    ("failed", "Failed requests", False, None),
    ("error_rate_pct", "Error rate (%)", False, ("error_pct", "mean")),
    ("request_throughput", "Request throughput (req/s)", True, ("completed_per_s", "mean")),
    ("request_goodput", "Request goodput (req/s)", True, None),
    ("output_throughput", "Output token throughput (tok/s)", True, ("output_tokens_per_s", "mean")),
    ("total_token_throughput", "Total token throughput (tok/s)", True, ("total_tokens_per_s", "mean")),
    ("max_output_tokens_per_s", "Peak output throughput (tok/s)", True, None),
    ("mean_ttft_ms", "Mean TTFT (ms)", False, ("ttft_ms", "mean")),
    ("median_ttft_ms", "Median TTFT (ms)", False, ("ttft_ms", "p50")),
    ("p99_ttft_ms", "P99 TTFT (ms)", False, ("ttft_ms", "p99")),
    # a reasoning run's (Summary.reasoning): absent from a plain run's summary, so no row
    ("mean_ttfa_ms", "Mean TTFA (ms)", False, ("ttfa_ms", "mean")),
    ("median_ttfa_ms", "Median TTFA (ms)", False, ("ttfa_ms", "p50")),
    ("p99_ttfa_ms", "P99 TTFA (ms)", False, ("ttfa_ms", "p99")),
    ("reasoning_share_pct", "Reasoning share of output (%)", None, None),
    ("mean_tpot_ms", "Mean TPOT (ms)", False, ("tpot_ms", "mean")),
    ("p99_tpot_ms", "P99 TPOT (ms)", False, ("tpot_ms", "p99")),
    ("mean_itl_ms", "Mean ITL (ms)", False, ("itl_ms", "mean")),
    ("median_itl_ms", "Median ITL (ms)", False, ("itl_ms", "p50")),
    ("p99_itl_ms", "P99 ITL (ms)", False, ("itl_ms", "p99")),
    ("mean_e2el_ms", "Mean E2E latency (ms)", False, ("e2el_ms", "mean")),
    ("p99_e2el_ms", "P99 E2E latency (ms)", False, ("e2el_ms", "p99")),
    ("knee_rps", "Knee (req/s)", True, None),
    ("cost_per_1m_output_tokens", "Cost per 1M output tokens", False, None),
    ("tokens_per_joule", "Output tokens per joule", True, None),  # runs with GPU power only
]
# The parts of a run's resolved scenario that make its load: runs that differ in them
# are not a like-for-like comparison of the servers.
LOAD_KEYS = ("endpoint", "max_concurrency", "schedule", "workload")
NO_TEST = "-"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if math.isnan(value) else float(value)


def _with_error_rate(summary: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(summary)
    reasoning = summary.get("reasoning")
    if isinstance(reasoning, Mapping):  # a reasoning run's figures, compared as the others
        out.update({k: v for k, v in reasoning.items() if k.endswith("_ttfa_ms")})
        share = _number(reasoning.get("reasoning_share"))
        out["reasoning_share_pct"] = None if share is None else share * 100.0
    completed, failed = _number(summary.get("completed")), _number(summary.get("failed"))
    if completed is not None and failed is not None and completed + failed > 0:
        out["error_rate_pct"] = failed / (completed + failed) * 100.0
    return out


def compare_rows(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    samples_a: Mapping[str, Samples] | None = None,
    samples_b: Mapping[str, Samples] | None = None,
    *,
    resamples: int = 1000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per metric present in either summary (``Summary.to_dict()``): the values,
    % change B vs A, and, with both runs' samples, the interval of B − A and the verdict
    ("better"/"worse" for B, "within noise", "negligible", "too few samples"; "-" untested).
    ``better`` names the better run ("A"/"B") only when the verdict is outside noise."""
    a, b = _with_error_rate(a), _with_error_rate(b)
    rows = []
    for key, label, higher_better, sampled in COMPARED:
        va, vb = _number(a.get(key)), _number(b.get(key))
        if va is None and vb is None:
            continue
        change = None
        if va is not None and vb is not None and va != 0:
            change = (vb - va) / abs(va) * 100.0
        low = high = None
        verdict = NO_TEST
        # a reasoning run beside a plain one: TTFA on one side only, nothing to test
        one_sided = key.endswith("_ttfa_ms") and (va is None or vb is None)
        if (
            sampled is not None
            and higher_better is not None
            and samples_a is not None
            and samples_b is not None
            and not one_sided
        ):
            name, statistic = sampled
            delta = bootstrap_delta(samples_a[name], samples_b[name], statistic, resamples=resamples, seed=seed)
            verdict = delta.verdict(higher_better)
            if delta.has_interval:
                low, high = delta.low, delta.high
        better = {"better": "B", "worse": "A"}.get(verdict)
        rows.append(
            {
                "key": key,
                "label": label,
                "a": va,
                "b": vb,
                "change_pct": change,
                "delta": None if va is None or vb is None else vb - va,
                "low": low,
                "high": high,
                "confidence": DEFAULT_CONFIDENCE,
                "verdict": verdict,
                "better": better,
                "higher_is_better": higher_better,
            }
        )
    return rows


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix] = value
    return out


def load_differences(scenario_a: Mapping[str, Any] | None, scenario_b: Mapping[str, Any] | None) -> list[str]:
    """``key: A vs B`` for each leaf of the load keys (``LOAD_KEYS``) that differs."""
    flat_a = _flatten({k: (scenario_a or {}).get(k) for k in LOAD_KEYS}, "", {})
    flat_b = _flatten({k: (scenario_b or {}).get(k) for k in LOAD_KEYS}, "", {})
    return [
        f"{key}: {flat_a.get(key, '-')} vs {flat_b.get(key, '-')}"
        for key in sorted(set(flat_a) | set(flat_b))
        if flat_a.get(key) != flat_b.get(key)
    ]


def load_warning(scenario_a: Mapping[str, Any] | None, scenario_b: Mapping[str, Any] | None) -> str | None:
    """One line when the runs' loads differ (else None), naming the first few differences."""
    differences = load_differences(scenario_a, scenario_b)
    if not differences:
        return None
    shown = "; ".join(differences[:3]) + ("; …" if len(differences) > 3 else "")
    return f"warning: A and B ran different loads ({shown}): the deltas mix the load's change with the server's"


def cache_policy(header: RunHeader | None) -> dict[str, Any]:
    """A run's seed and prefix-cache policy as its recording has them (``UNKNOWN``:
    recorded before the policy was)."""
    if header is None:
        return {"seed": None, "cache_salt_policy": UNKNOWN, "cache_salt": None}
    return {
        "seed": header.scenario.get("seed"),
        "cache_salt_policy": header.cache_salt_policy or UNKNOWN,
        "cache_salt": header.cache_salt,
    }


def describe_policy(header: RunHeader | None) -> str:
    policy = cache_policy(header)
    return f"seed {policy['seed'] if policy['seed'] is not None else '?'}, " + describe_cache_policy(
        policy["cache_salt_policy"], policy["cache_salt"]
    )


def _salt_sent(header: RunHeader) -> str | None:
    """The salt a run's requests carried: its header's, or for a recording made before
    rampwatch recorded one, the scenario's own ``extra_body`` salt (else none was sent)."""
    if header.cache_salt_policy is not None:
        return header.cache_salt
    extra = (header.scenario.get("workload") or {}).get("extra_body") or {}
    salt = extra.get("cache_salt")
    return salt if isinstance(salt, str) else None


def _origin(target: str) -> tuple[str, str | None, int | None]:
    """The server a target URL names: its scheme, host and port (the scheme's default
    when none is written), whatever the path."""
    parts = urlsplit(target)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.scheme, parts.hostname, port or {"http": 80, "https": 443}.get(parts.scheme)


def shared_cache_warning(a: RunHeader | None, b: RunHeader | None) -> str | None:
    """One line when the later of the two runs could have found the earlier one's prompts
    in the server's prefix cache, flattering its TTFT and prompt throughput: the same
    server (a server the later run started itself began empty), the same seed (the same
    prompts) and the same cache salt, or none (vLLM shares blocks between equal salts only)."""
    if a is None or b is None or a.started_at_unix == b.started_at_unix:  # a run compared with itself
        return None
    (first_side, first), (later_side, later) = sorted((("A", a), ("B", b)), key=lambda side: side[1].started_at_unix)
    if later.server_info.get("managed_server") or _origin(a.target) != _origin(b.target):
        return None
    seed = a.scenario.get("seed")
    if seed is None or seed != b.scenario.get("seed") or _salt_sent(a) != _salt_sent(b):
        return None
    salt = _salt_sent(a)
    why = "no cache salt" if salt is None else f"the same cache salt {salt}"
    return (
        f"warning: {later_side} ran after {first_side} against the same server with the same seed ({seed}) and "
        f"{why}: {later_side} may have read {first_side}'s prompts from the prefix cache (lower TTFT, fewer "
        "prompt tokens computed); rerun with --cache-salt auto or another --seed"
    )


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def format_interval(row: Mapping[str, Any]) -> str:
    """B − A with its interval, e.g. ``+2.10 [+0.40, +3.80]``; the bare change when untested."""
    if row["delta"] is None:
        return "-"
    text = f"{row['delta']:+,.2f}"
    if row["low"] is not None:
        text += f" [{row['low']:+,.2f}, {row['high']:+,.2f}]"
    return text


def verdict_text(row: Mapping[str, Any]) -> str:
    return {"better": "B better", "worse": "B worse"}.get(row["verdict"], row["verdict"])


def format_comparison(
    rows: list[dict[str, Any]],
    name_a: str,
    name_b: str,
    warning: str | None = None,
    confidence: float = 0.95,
    cache_warning: str | None = None,
    footer: str | None = None,
) -> str:
    """The table; ``name_a``/``name_b`` are each run's line (its path, seed and cache policy);
    ``footer``: how the verdicts were reached (default: the bootstrap's)."""
    w = max(len(r["label"]) for r in rows) if rows else 10
    intervals = [format_interval(r) for r in rows]
    wi = max([len(f"B − A [{confidence:.0%} interval]"), *map(len, intervals)])
    lines = [f"A: {name_a}", f"B: {name_b}"]
    lines += [line for line in (warning, cache_warning) if line]
    lines += ["", f"{'metric':<{w}}  {'A':>12}  {'B':>12}  {'change':>9}  {'B − A [95% interval]':<{wi}}  verdict"]
    lines.append("-" * (len(lines[-1]) + 8))
    for r, interval in zip(rows, intervals):
        change = "-" if r["change_pct"] is None else f"{r['change_pct']:+.1f}%"
        direction = {True: " (↑ better)", False: " (↓ better)"}.get(r["higher_is_better"], "")
        lines.append(
            f"{r['label']:<{w}}  {_fmt(r['a']):>12}  {_fmt(r['b']):>12}  {change:>9}  {interval:<{wi}}  "
            f"{verdict_text(r)}{direction}"
        )
    lines.append("")
    if footer is not None:
        lines.append(footer.format(confidence=confidence))
        return "\n".join(lines)
    lines.append(
        f"B better/worse only where the {confidence:.0%} bootstrap interval of B − A excludes 0 and the change "
        "is at least 1% (else negligible); per-request samples for latencies and errors, per-second bins for "
        "throughputs; - = not tested."
    )
    return "\n".join(lines)


def format_client_check(a: Mapping[str, Any], b: Mapping[str, Any], warnings: list[str]) -> str:
    """Each run's self-check side by side (how late its client sent and ran), then the
    warnings of a side whose client could have moved its latency figures: a difference
    between A and B can be the clients', not the servers'."""

    def figure(summary: Mapping[str, Any], group: str, key: str) -> str:
        value = (summary.get(group) or {}).get(key)
        return "n/a" if value is None else f"{value:.1f}"

    def full_gc(summary: Mapping[str, Any]) -> str:
        client = summary.get("client")
        return "n/a" if client is None else str(client["gc_collections"][2])

    rows = [
        ("send lateness p99 ms", figure(a, "send_lateness_ms", "p99"), figure(b, "send_lateness_ms", "p99")),
        ("client loop lag p99 ms", figure(a, "client", "loop_lag_p99_ms"), figure(b, "client", "loop_lag_p99_ms")),
        ("client loop lag max ms", figure(a, "client", "loop_lag_max_ms"), figure(b, "client", "loop_lag_max_ms")),
        ("full GC passes in the load", full_gc(a), full_gc(b)),
    ]
    w = max(len(label) for label, _, _ in rows)
    lines = ["", "client self-check", *(f"{label:<{w}}  {x:>12}  {y:>12}" for label, x, y in rows)]
    return "\n".join(lines + warnings)


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above 0")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "a", metavar="A", help="baseline recording (.rwrec), or a set of repeats (REC.repeats.json of run --repeats)"
    )
    parser.add_argument("b", metavar="B", help="recording (or set of repeats) compared with the baseline")
    parser.add_argument("--json", action="store_true", help="print the rows (and any load warning) as JSON")
    parser.add_argument(
        "--resamples",
        type=_at_least_one,
        default=1000,
        metavar="N",
        help="bootstrap resamples per metric (default 1000)",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the bootstrap (default 0)")


def same_file(a: str, b: str) -> bool:
    """Whether the two paths name one file (a link, a relative and an absolute path)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def main(args: argparse.Namespace) -> int:
    from rampwatch.record.repeat_set import is_set_file

    if is_set_file(args.a) or is_set_file(args.b):  # two sets of repeats (record.compare_sets)
        return compare_sets_main(args)
    recordings = [open_recording(args.a), open_recording(args.b)]
    figures = [summarise(rec) for rec in recordings]
    summaries = [f.to_dict() for f in figures]
    samples = [comparison_samples(rec) for rec in recordings]
    rows = compare_rows(summaries[0], summaries[1], samples[0], samples[1], resamples=args.resamples, seed=args.seed)
    headers = [rec.header for rec in recordings]
    warning = load_warning(*(h.scenario if h is not None else None for h in headers))
    cache_warning = shared_cache_warning(*headers)
    client_warnings = [
        f"{side}: {text}" for side, f in zip("AB", figures) if (text := client_lag_warning(f)) is not None
    ]
    same = same_file(args.a, args.b)
    if args.json:
        client = {
            side: {"send_lateness_ms": summary.get("send_lateness_ms"), "self_check": summary.get("client")}
            for side, summary in zip("ab", summaries)
        }
        out = {
            "same_recording": same,
            "load_warning": warning,
            "cache_warning": cache_warning,
            "cache": {side: cache_policy(h) for side, h in zip("ab", headers)},
            "rows": rows,
            "client": client,
            "client_warnings": client_warnings,
        }
        print(strict_json.dumps(out, indent=2))
    else:
        names = [f"{rec.path} ({describe_policy(rec.header)})" for rec in recordings]
        if same:
            print("note: A and B are the same recording: a comparison with itself, every change 0")
        print(format_comparison(rows, names[0], names[1], warning, cache_warning=cache_warning))
        print(format_client_check(summaries[0], summaries[1], client_warnings))
    return max(print_warnings(rec, "compare") for rec in recordings)


def compare_sets_main(args: argparse.Namespace) -> int:
    """Two ``REC.repeats.json`` sets: Welch's interval per figure over their repeats."""
    from rampwatch.core.errors import UserError
    from rampwatch.record.compare_sets import SET_FOOTER, compare_set_rows
    from rampwatch.record.repeat_set import is_set_file, read_set

    for path in (args.a, args.b):
        if not is_set_file(path):
            raise UserError(
                f"{path}: not a repeats file (*.repeats.json), and the other is: compare two sets of repeats, "
                "or two recordings"
            )
    sets = [read_set(args.a), read_set(args.b)]
    rows = compare_set_rows(sets[0], sets[1])
    headers = []
    for one in sets:  # the load as each set's first repeat recorded it
        with open_recording(one.recordings[0]) as rec:
            headers.append(rec.header)
    warning = load_warning(*(h.scenario if h is not None else None for h in headers))
    if args.json:
        out = {
            "same_recording": same_file(args.a, args.b),
            "sets": {side: [str(p) for p in one.recordings] for side, one in zip("ab", sets)},
            "load_warning": warning,
            "rows": rows,
        }
        print(strict_json.dumps(out, indent=2))
        return 0
    names = [f"{one.path} ({len(one.recordings)} repeats)" for one in sets]
    if same_file(args.a, args.b):
        print("note: A and B are the same set: a comparison with itself, every change 0")
    print(format_comparison(rows, names[0], names[1], warning, footer=SET_FOOTER))
    return 0
