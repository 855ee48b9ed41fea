"""Fakes for the UI: a synthetic run (a ramp with a hold, a knee and a mark), a RunControl
that records calls, and a replay source with the ReplayTimeline controls.

The numbers are invented but shaped like a real ramp: completed throughput follows the
offered rate until the knee (~14 rps), then flattens while the queue, KV usage and
latency climb.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from rampwatch.core.figures.steps import StepTracker
from rampwatch.core.timeline import SERIES_NAMES, Event, RequestRecord, RunHeader, ScrapeErrorLine, Snapshot, StepRow

PLANNED_S = 120.0
HOLD = (40.0, 50.0)
KNEE_AT = 78.0
MARK_AT = 90.0
CAPACITY_RPS = 14.0


def fake_header(*, metrics: bool = True) -> RunHeader:
    return RunHeader(
        rampwatch_version="0.1.0",
        started_at_unix=1_700_000_000.0,
        target="http://127.0.0.1:8000",
        model="Qwen/Qwen3-0.6B",
        scenario_name="chat",
        planned_duration_s=PLANNED_S,
        metrics_urls=["http://127.0.0.1:8000/metrics"] if metrics else [],
        scenario={
            "schedule": {
                "kind": "linear",
                "start_rps": 1,
                "end_rps": 20,
                "duration_s": PLANNED_S,
                "arrival": "poisson",
            },
            "slo": {"ttft_ms": 2000, "tpot_ms": 100},
        },
        options={"stop_grace": 10.0},
    )


def target_rate(t: float) -> float:
    """1 → 20 rps over the planned time, frozen during the hold."""
    held = min(max(t - HOLD[0], 0.0), HOLD[1] - HOLD[0])
    ramp_t = t - held
    return 1.0 + 19.0 * ramp_t / (PLANNED_S - (HOLD[1] - HOLD[0]))


def _row(t: float, metrics: bool, down_at: float | None = None, stale_at: float | None = None) -> dict[str, float]:
    nan = math.nan  # one object: snapshots built twice compare equal (a list compares NaN by identity)
    offered = target_rate(t)
    completed = min(offered, CAPACITY_RPS) * (0.98 + 0.02 * math.sin(t / 3.0))
    overload = max(0.0, offered - CAPACITY_RPS)
    waiting = overload * (t - KNEE_AT + 5.0) * 0.8 if overload else 0.0
    running = min(offered * 2.2, 32.0)
    kv = min(99.0, 8.0 + 5.5 * running / 2.0 + waiting * 0.3)
    ttft = 0.045 + 0.004 * running + 0.09 * waiting / max(completed, 1.0)
    itl = 0.011 + 0.0006 * running
    row = {name: nan for name in SERIES_NAMES}
    row.update(
        target_rps=offered,
        offered_rps=offered,
        sent_rps=offered * 0.995,
        completed_rps=completed,
        error_rps=0.4 if t > 100 else 0.0,
        errors_http_rps=0.4 if t > 100 else 0.0,
        errors_timeout_rps=0.0,
        errors_connection_rps=0.0,
        errors_protocol_rps=0.0,
        client_queued=0.0,
        client_output_tps=completed * 180.0,
        ttft_p50=ttft,
        ttft_p90=ttft * 1.6,
        ttft_p99=ttft * 2.4,
        itl_p50=itl,
        itl_p90=itl * 1.3,
        itl_p99=itl * 1.9,
        in_flight=running + waiting,
    )
    if metrics:
        row.update(
            server_prompt_tps=completed * 420.0,
            server_generation_tps=completed * 181.0,
            running=running,
            waiting=waiting,
            kv_usage_pct=kv,
            prefix_hit_pct=62.0 + 10.0 * math.sin(t / 20.0),
            preemptions=1.0 if kv > 95 else 0.0,
        )
    if (stale_at is not None and t >= stale_at) or (down_at is not None and t >= down_at):
        for name in ("server_prompt_tps", "server_generation_tps", "running", "waiting", "kv_usage_pct"):
            row[name] = nan  # no good scrape since
        row["prefix_hit_pct"] = nan
        row["preemptions"] = nan
    if down_at is not None and t >= down_at:
        # Every request is refused at once: nothing completes, nothing waits.
        row.update(
            completed_rps=0.0,
            client_output_tps=0.0,
            error_rps=row["sent_rps"],
            errors_http_rps=0.0,
            errors_connection_rps=row["sent_rps"],
            in_flight=0.0,
            **{name: nan for name in ("ttft_p50", "ttft_p90", "ttft_p99", "itl_p50", "itl_p90", "itl_p99")},
        )
    return row


def fake_events(t: float) -> list[Event]:
    events = [Event(0.0, "start", "ramp 1 → 20 rps over 2:00")]
    if t >= HOLD[0]:
        events.append(Event(HOLD[0], "hold", "hold at 7.3 rps"))
    if t >= HOLD[1]:
        events.append(Event(HOLD[1], "resume", "resume ramp"))
    if t >= 33.0:
        events.append(Event(33.0, "scrape_error", "GET /metrics: timeout after 2.0 s"))
    if t >= KNEE_AT:
        events.append(Event(KNEE_AT, "knee", "knee at 14.0 rps (TTFT p99 ×3)", {"rps": 14.0}))
    if t >= MARK_AT:
        events.append(Event(MARK_AT, "mark", "raised max-num-seqs"))
    if t >= 101.0:
        events.append(Event(101.0, "error", "http_503 ×4", {"error_class": "http_503", "count": 4}))
    return events


def fake_steps(t: float, rows: list[dict[str, float]], metrics: bool) -> list[StepRow]:
    """The step table of the fake run, built by the real ``StepTracker`` from one tick, a
    scrape and the second's completed requests (TTFT and ITL at its p50, every 20th at
    its p99) per second."""
    tracker = StepTracker()
    tracker.configure("linear", PLANNED_S - (HOLD[1] - HOLD[0]))
    events = {e.t: e for e in fake_events(t) if e.kind in ("hold", "resume")}
    n = 0
    for second, row in enumerate(rows):
        if float(second) in events:
            tracker.on_event(events[float(second)])
        state = "holding" if HOLD[0] <= second < HOLD[1] else "ramping"
        tracker.on_tick(second + 0.01, state, row["target_rps"])
        if metrics:
            tracker.on_gauges(second + 0.02, row["waiting"], row["kv_usage_pct"])
        done = round(row["completed_rps"]) if math.isfinite(row["completed_rps"]) else 0
        for k in range(done):
            p99 = k % 20 == 19
            ttft, itl = (row["ttft_p99"], row["itl_p99"]) if p99 else (row["ttft_p50"], row["itl_p50"])
            if not (math.isfinite(ttft) and math.isfinite(itl)):
                continue
            sent = second + 0.02 + 0.9 * k / max(1, done)
            first = sent + ttft
            tracker.on_request(
                RequestRecord(
                    id=n,
                    scheduled_at=sent,
                    sent_at=sent,
                    end_at=first + 3 * itl,
                    first_token_at=first,
                    chunk_times=[first + itl, first + 2 * itl, first + 3 * itl],
                    completion_tokens=180,
                )
            )
            n += 1
        if row["error_rps"] > 0 and second % 5 == 0:
            tracker.on_request(
                RequestRecord(
                    id=n, scheduled_at=second, sent_at=second + 0.5, end_at=second + 0.6, error_class="http_503"
                )
            )
            n += 1
    return tracker.rows(t)


def fake_snapshot(
    t: float,
    *,
    metrics: bool = True,
    state: str | None = None,
    down_at: float | None = None,
    stale_at: float | None = None,
) -> Snapshot:
    """The run as it looks ``t`` seconds in (1-second bins up to t). ``down_at``: the
    server dies then (connections refused, /metrics too); ``stale_at``: only its
    /metrics stops answering (scrapes time out) while requests go on."""
    times = [float(i) for i in range(int(t))]
    rows = [_row(x, metrics, down_at, stale_at) for x in times]
    series = {name: [r[name] for r in rows] for name in SERIES_NAMES}
    completed = sum(series["completed_rps"])
    if state is None:
        state = "holding" if HOLD[0] <= t < HOLD[1] else ("done" if t >= PLANNED_S else "ramping")
    summary: dict[str, Any] = {
        "duration": t,
        "completed": int(completed),
        "failed": 4 if t > 101 else 0,
        "request_throughput": completed / t if t else 0.0,
        "output_throughput": completed * 180.0 / t if t else 0.0,
        "mean_ttft_ms": 72.5,
        "p50_ttft_ms": 61.0,
        "p99_ttft_ms": 410.0,
        "p50_itl_ms": 16.9,
        "p99_itl_ms": 41.0,
        "server": {"backend": "vllm"},
    }
    events = fake_events(t)
    scrape_errors: list[ScrapeErrorLine] = []
    last_good: float | None = (t - 0.4) if metrics else None
    url = "http://127.0.0.1:8000/metrics"
    if t >= 33.0:
        scrape_errors.append(ScrapeErrorLine(url, "timeout after 2 s", 1, 33.0, 33.0))
    for lost_at, reason in ((down_at, "connection refused"), (stale_at, "timeout after 2 s")):
        if lost_at is not None and t >= lost_at and metrics:
            last_good = lost_at - 0.6
            failures = int(t - lost_at) + 1
            scrape_errors = [line for line in scrape_errors if line.message != reason]
            previous = 1 if reason == "timeout after 2 s" and t >= 33.0 else 0
            first = 33.0 if previous else lost_at + 0.4
            scrape_errors.append(ScrapeErrorLine(url, reason, failures + previous, first, lost_at + failures - 0.6))
            events.append(Event(lost_at + 0.4, "scrape_error", f"{url}: {reason}", {"url": url}))
    if down_at is not None and t >= down_at:
        refused = int(sum(series["errors_connection_rps"]))
        summary["failed"] = summary.get("failed", 0) + refused
        summary["errors_by_class"] = {"connect": refused, **({"http_503": 4} if t > 101 else {})}
        events.sort(key=lambda e: e.t)
    return Snapshot(
        t=t,
        header=fake_header(metrics=metrics),
        state=state,
        target_rps=target_rate(t),
        times=times,
        series=series,
        in_flight=int(rows[-1]["in_flight"]) if rows else 0,
        events=events,
        summary=summary,
        server_metrics_available=metrics,
        planned_duration_s=PLANNED_S,
        steps=fake_steps(t, rows, metrics),
        last_good_scrape_t=last_good,
        scrape_errors=scrape_errors,
    )


# A mixture's classes in the fake run: (name, share of the requests, latency scale, SLO
# met %). The chat class answers fast, classification's long prompts queue first.
FAKE_CLASSES = (("chat", 0.6, 0.7, 97.0), ("classification", 0.3, 2.5, 81.0), ("code-generation", 0.1, 1.6, 92.0))


def fake_mixed_snapshot(t: float, **kwargs: Any) -> Snapshot:
    """``fake_snapshot`` of a mixture: each class's series are its share of the run's
    rates and the run's latencies times its scale; its summary likewise."""
    from rampwatch.core.timeline import CLASS_SERIES_NAMES, ClassFigures

    snap = fake_snapshot(t, **kwargs)
    classes = []
    for name, share, scale, met in FAKE_CLASSES:
        series = {}
        for key in CLASS_SERIES_NAMES:
            if key == "good_rps":
                series[key] = [v * share * met / 100 for v in snap.series["completed_rps"]]
            elif key.startswith(("ttft", "itl")):
                series[key] = [v * scale for v in snap.series[key]]
            elif key.startswith("e2el"):  # the first token, then ~150 more at the ITL
                q = key.removeprefix("e2el_")
                ttft, itl = snap.series[f"ttft_{q}"], snap.series[f"itl_{q}"]
                series[key] = [(a + 150 * b) * scale for a, b in zip(ttft, itl, strict=True)]
            else:
                series[key] = [v * share for v in snap.series[key]]
        summary = {
            **snap.summary,
            "completed": int(snap.summary["completed"] * share),
            "failed": int(snap.summary["failed"] * share),
            "request_throughput": snap.summary["request_throughput"] * share,
            "output_throughput": snap.summary["output_throughput"] * share,
            **{k: snap.summary[k] * scale for k in ("p50_ttft_ms", "p99_ttft_ms", "p50_itl_ms", "p99_itl_ms")},
        }
        finished = summary["completed"] + summary["failed"]
        summary["request_goodput"] = finished * met / 100 / t if t else None
        classes.append(ClassFigures(name, series, summary))
    return dataclasses.replace(snap, classes=classes)


class FrozenSource:
    """Always the same snapshot: what the screen tests draw."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self.polls = 0

    def snapshot(self) -> Snapshot:
        self.polls += 1
        return self._snapshot


class AdvancingSource:
    """Each poll moves the fake run forward by ``step`` seconds (for the dev script)."""

    def __init__(self, start: float = 5.0, step: float = 0.25, metrics: bool = True) -> None:
        self.t = start
        self.step = step
        self.metrics = metrics

    def snapshot(self) -> Snapshot:
        self.t = min(self.t + self.step, PLANNED_S)
        return fake_snapshot(self.t, metrics=self.metrics)


@dataclass
class FakeControl:
    """Records every RunControl call, in order."""

    calls: list[tuple[str, Any]] = field(default_factory=list)

    def hold(self) -> None:
        self.calls.append(("hold", None))

    def resume(self) -> None:
        self.calls.append(("resume", None))

    def set_rate(self, rps: float) -> None:
        self.calls.append(("set_rate", rps))

    def step_rate(self, delta_rps: float) -> None:
        self.calls.append(("step_rate", delta_rps))

    def mark(self, note: str) -> None:
        self.calls.append(("mark", note))

    def stop(self) -> None:
        self.calls.append(("stop", None))

    def cancel_in_flight(self) -> None:
        self.calls.append(("cancel_in_flight", None))


class FakeReplay:
    """A replay of the fake run with the ReplayTimeline controls; time moves only by the
    controls (and `advance`), so tests stay deterministic."""

    def __init__(self, position: float = 0.0, duration: float = PLANNED_S) -> None:
        self.position = position
        self.duration = duration
        self.speed = 1.0
        self.playing = False
        self.calls: list[tuple[str, Any]] = []

    def snapshot(self) -> Snapshot:
        return fake_snapshot(self.position, state="replay")

    def play(self) -> None:
        self.playing = True
        self.calls.append(("play", None))

    def pause(self) -> None:
        self.playing = False
        self.calls.append(("pause", None))

    def toggle(self) -> None:
        self.playing = not self.playing
        self.calls.append(("toggle", None))

    def seek(self, t: float) -> None:
        self.position = min(max(t, 0.0), self.duration)
        self.calls.append(("seek", t))

    def seek_relative(self, dt: float) -> None:
        self.seek(self.position + dt)

    def step(self, dt: float) -> None:
        self.seek(self.position + dt)

    def marks(self) -> list[Event]:
        return [e for e in fake_events(self.duration) if e.kind in ("mark", "knee", "hold", "resume")]


class SteeredFake:
    """A frozen run that takes steering as the runner does: each call that changes
    something adds the event the run would record (its snapshot then carries it), and a
    call the run would refuse in its state adds nothing. Source and control at once."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.base = snapshot
        self.events = list(snapshot.events)
        self.calls: list[tuple[str, Any]] = []
        self.held = snapshot.state == "holding"

    def snapshot(self) -> Snapshot:
        return dataclasses.replace(self.base, events=list(self.events))

    def _add(self, kind: str, message: str, data: dict[str, Any] | None = None) -> None:
        self.events.append(Event(self.base.t, kind, message, data or {}))

    def _steerable(self) -> bool:
        return self.base.state in ("ramping", "holding")

    def hold(self) -> None:
        self.calls.append(("hold", None))
        if self._steerable() and not self.held:
            self.held = True
            rate = self.base.target_rps + 0.3  # the schedule's rate now, not the last tick's (up to 1 s old)
            self._add("hold", f"hold at {rate:.3g} req/s", {"before_rps": rate, "after_rps": rate})

    def resume(self) -> None:
        self.calls.append(("resume", None))
        if self._steerable() and self.held:
            self.held = False
            self._add("resume", "resume ramp at 7.3 req/s", {"before_rps": 7.3, "after_rps": 7.3})

    def set_rate(self, rps: float) -> None:
        self.calls.append(("set_rate", rps))

    def step_rate(self, delta_rps: float) -> None:
        self.calls.append(("step_rate", delta_rps))
        if self._steerable():
            after = self.base.target_rps + delta_rps
            self.held = True
            self._add(
                "set_rate",
                f"hold at {after:.3g} req/s",
                {"before_rps": self.base.target_rps, "after_rps": after, "delta_rps": delta_rps},
            )

    def mark(self, note: str) -> None:
        self.calls.append(("mark", note))
        if self.base.state != "done":
            self._add("mark", note or "mark", {"note": note})

    def stop(self) -> None:
        self.calls.append(("stop", None))
        if self.base.state not in ("stopping", "done"):
            self._add("stop", "stop requested: no new requests; in-flight ones get 10 s", {"grace_s": 10.0})

    def cancel_in_flight(self) -> None:
        self.calls.append(("cancel_in_flight", None))
        if self.base.state in ("draining", "stopping") and self.base.in_flight:
            n = self.base.in_flight
            self._add("cancel", f"ending the drain now: cancelling {n} requests ({n} in flight)", {"requests": n})


def fake_comparison(load_differs: bool = True) -> tuple[list[dict[str, Any]], str | None]:
    """`rampwatch compare`'s rows for two invented runs: B has a lower TTFT (outside noise)
    and the same throughput (within noise); seeded, so always the same rows."""
    import numpy as np

    from rampwatch.record.cli_compare import compare_rows, load_warning
    from rampwatch.record.significance import Samples, statistic_of

    def run(ttft_ms: float, seed: int) -> tuple[dict[str, Any], dict[str, Samples]]:
        rng = np.random.default_rng(seed)
        ttft = rng.lognormal(np.log(ttft_ms), 0.4, 600)
        itl = rng.normal(17.0, 2.0, 6000)
        per_s = rng.normal(10.0, 1.5, 120)
        samples = {
            "ttft_ms": Samples.of(ttft),
            "tpot_ms": Samples.of(rng.normal(17.0, 0.5, 600)),
            "e2el_ms": Samples.of(ttft + rng.normal(3000.0, 300.0, 600)),
            "itl_ms": Samples.of(itl, np.repeat(np.arange(600), 10)),
            "error_pct": Samples.of(np.where(rng.random(600) < 0.01, 100.0, 0.0)),
            "completed_per_s": Samples.of(per_s),
            "output_tokens_per_s": Samples.of(per_s * 180.0),
            "total_tokens_per_s": Samples.of(per_s * 600.0),
        }
        summary: dict[str, Any] = {"completed": 594, "failed": 6}
        for key, (name, statistic) in {
            "request_throughput": ("completed_per_s", "mean"),
            "output_throughput": ("output_tokens_per_s", "mean"),
            "mean_ttft_ms": ("ttft_ms", "mean"),
            "median_ttft_ms": ("ttft_ms", "p50"),
            "p99_ttft_ms": ("ttft_ms", "p99"),
            "median_itl_ms": ("itl_ms", "p50"),
            "p99_itl_ms": ("itl_ms", "p99"),
            "mean_tpot_ms": ("tpot_ms", "mean"),
            "p99_e2el_ms": ("e2el_ms", "p99"),
        }.items():
            summary[key] = statistic_of(samples[name], statistic)
        return summary, samples

    (sa, xa), (sb, xb) = run(120.0, 1), run(80.0, 2)
    schedule_b = {"kind": "linear", "end_rps": 30 if load_differs else 20}
    warning = load_warning({"schedule": {"kind": "linear", "end_rps": 20}}, {"schedule": schedule_b})
    return compare_rows(sa, sb, xa, xb, resamples=300), warning


class FakeServer:
    """A ``ServerControl`` for screens: a fixed command; the diff from a plain reading of
    ``--flag value`` pairs (no program is looked up)."""

    def __init__(self, command: str = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 8") -> None:
        self.command = command
        self.restarts: list[tuple[str, str]] = []

    @staticmethod
    def _args(text: str) -> dict[str, str | bool]:
        import shlex

        from rampwatch.core.errors import UserError

        try:
            words = shlex.split(text)
        except ValueError as exc:
            raise UserError(f"--serve {text!r}: {exc}") from None
        if not words:
            raise UserError("--serve: empty command")
        args: dict[str, str | bool] = {}
        flags = [w for w in words if w.startswith("--")]
        for flag in flags:
            i = words.index(flag)
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else True
            args[flag[2:].replace("-", "_")] = value
        return args

    def preview(self, text: str) -> str:
        from rampwatch.core.figures.segments import diff_text

        old, new = self._args(self.command), self._args(text)
        return diff_text([(k, old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)])

    def restart(self, text: str, resume: str) -> None:
        self.restarts.append((text, resume))
