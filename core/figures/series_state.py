"""``SeriesBuilder``'s state in the current checkpoint schema: JSON-able values plus named
numpy arrays (``export_state``), and a builder restored from them (``restore_state``).

The layout (key and array order included) is what recordings store as seek checkpoints,
so it stays as it is; ``record.checkpoint`` declares its version and brings older
checkpoints to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rampwatch.core.figures.client_lag import ClientTotals
from rampwatch.core.figures.series_bins import Growable
from rampwatch.core.figures.series_reasoning import ReasoningSeries
from rampwatch.core.figures.stats import LogHistogram
from rampwatch.core.figures.steps import StepTracker
from rampwatch.core.figures.summary import GpuTotals, SummaryBuilder
from rampwatch.core.figures.turns import TurnFigures
from rampwatch.core.timeline import Event, RunHeader, ScrapeErrorLine, ServerSample

if TYPE_CHECKING:
    from rampwatch.core.figures.series import SeriesBuilder

State = dict[str, Any]
Arrays = dict[str, np.ndarray]


def export_state(b: SeriesBuilder) -> tuple[State, Arrays]:
    """The builder's state (its queued records folded in first: ``SeriesBuilder.export_state``)."""
    arrays: Arrays = {}

    def put_growables(prefix: str, table: dict[str, Growable]) -> list[list[Any]]:
        out = []
        for name, g in table.items():
            arrays[f"{prefix}.{name}"] = g.data
            out.append([name, g.fill])
        return out

    latency, server, gpu, bins = b.latency, b.server, b.gpu, b.bins
    # the arrays in the order recordings have them: spread, hists, the tables, the rest
    spread = []
    for i, (url, fields) in enumerate(server.spread.items()):
        for field, (amount, covered) in fields.items():
            arrays[f"spread.{i}.{field}.amount"] = amount.data
            arrays[f"spread.{i}.{field}.covered"] = covered.data
            spread.append([url, i, field])
    seconds = sorted(latency.hists)
    if seconds:
        arrays["hists"] = np.stack([np.stack([h.counts for h in latency.hists[s]]) for s in seconds])
    counts = put_growables("counts", bins.counts)
    last = put_growables("last", b.gauges)
    tick_counts = put_growables("tick_counts", bins.tick_counts)
    session_counts = put_growables("session_counts", bins.session_counts)
    final = put_growables("final", latency.final)
    meta = {
        "window_s": b.window_s,
        "grace_s": b.grace_s,
        "state": b.state,
        "target_rps": b.target_rps,
        "in_flight": b.in_flight,
        "oldest_sent_at": b.oldest_sent_at,
        "planned_end_s": b.planned_end_s,
        "events": [e.to_dict() for e in b.events],
        "now": b.now,
        "finished_at": b.finished_at,
        "server_metrics_available": server.metrics_available,
        "counts": counts,
        "last": last,
        "tick_counts": tick_counts,
        "session_counts": session_counts,
        "session_totals": list(bins.session_totals),
        "final": final,
        "tick_totals": bins.tick_totals,
        "tracker": [s.to_dict() for s in server.tracker.latest()],
        "spread": spread,
        "hist_seconds": seconds,
        "hist_totals": [[h.total for h in latency.hists[s]] for s in seconds],
        "final_upto": latency.final_upto,
        "last_good_scrape_t": server.last_good_scrape_t,
        "scrape_errors": [
            [e.url, e.message, e.count, e.first_t, e.last_t, e.gpu] for e in server.scrape_errors.values()
        ],
        "gpu_latest": [s.to_dict() for s in gpu.latest.values()],
        "last_good_gpu_t": gpu.last_good_t,
        "gpu_totals": gpu.totals.export_state(),
        "client_totals": b.client_totals.export_state(),
        "newly_final": list(latency.newly_final),
        "summary": b.summary.export_state(arrays),
        "steps": b.steps.export_state(arrays),
    }
    if b.turns is not None:
        meta["turns"] = b.turns.export_state(arrays)
    if b.reasoning is not None:
        meta["reasoning"] = b.reasoning.export_state(arrays)
    if b.classes:
        classes = []
        for i, (name, sub) in enumerate(b.classes.items()):
            sub_meta, sub_arrays = sub.export_state()
            arrays.update({f"class{i}/{key}": value for key, value in sub_arrays.items()})
            classes.append([name, sub_meta])
        meta["classes"] = classes
    if b.segment_starts:
        meta["config_segments"] = {
            "starts": list(b.segment_starts),
            "summaries": [s.export_state(arrays, f"segment{i}") for i, s in enumerate(b.segment_summaries)],
        }
    return meta, arrays


def restore_state(
    cls: type[SeriesBuilder], header: RunHeader | None, meta: State, arrays: Arrays, e2e_latency: bool
) -> SeriesBuilder:
    """A builder of class ``cls`` restored from ``export_state`` output (``SeriesBuilder.from_state``)."""
    sm = meta["summary"]
    b = cls(
        window_s=meta["window_s"],
        grace_s=meta["grace_s"],
        slo=sm["slo"],
        gpu_price_per_hour=sm["gpu_price_per_hour"],
        e2e_latency=e2e_latency,
    )
    b.header = header
    b.state = meta["state"]
    b.target_rps = meta["target_rps"]
    b.in_flight = meta["in_flight"]
    b.oldest_sent_at = meta["oldest_sent_at"]
    b.planned_end_s = meta["planned_end_s"]
    b.events = [Event(**e) for e in meta["events"]]
    b.now = meta["now"]
    b.finished_at = meta["finished_at"]

    def growables(prefix: str, specs: list[list[Any]]) -> dict[str, Growable]:
        return {name: Growable.of(fill, arrays[f"{prefix}.{name}"]) for name, fill in specs}

    bins, server, gpu, latency = b.bins, b.server, b.gpu, b.latency
    bins.counts = growables("counts", meta["counts"])
    b.gauges = growables("last", meta["last"])
    bins.session_counts = growables("session_counts", meta["session_counts"])
    bins.session_totals = tuple(meta["session_totals"])
    bins.tick_counts = growables("tick_counts", meta["tick_counts"])
    bins.tick_totals = tuple(meta["tick_totals"]) if meta["tick_totals"] is not None else None

    server.metrics_available = meta["server_metrics_available"]
    server.last_good_scrape_t = meta["last_good_scrape_t"]
    for url, message, count, first_t, last_t, is_gpu in meta["scrape_errors"]:
        server.scrape_errors[(url, message)] = ScrapeErrorLine(url, message, count, first_t, last_t, bool(is_gpu))
    for d in meta["tracker"]:
        server.tracker.update(ServerSample(**d))
    for url, i, field in meta["spread"]:
        amount = Growable.of(0.0, arrays[f"spread.{i}.{field}.amount"])
        covered = Growable.of(0.0, arrays[f"spread.{i}.{field}.covered"])
        server.spread.setdefault(url, {})[field] = (amount, covered)

    for d in meta["gpu_latest"]:
        sample = ServerSample(**d)
        gpu.latest[sample.url] = sample
    gpu.last_good_t = meta["last_good_gpu_t"]
    gpu.totals = GpuTotals.restore_state(meta["gpu_totals"])
    b.client_totals = ClientTotals.restore_state(meta["client_totals"])

    latency.final = growables("final", meta["final"])
    for k, (second, totals) in enumerate(zip(meta["hist_seconds"], meta["hist_totals"])):
        hists = tuple(LogHistogram() for _ in latency.metrics)
        for j, hist in enumerate(hists):
            hist._counts = np.array(arrays["hists"][k, j], dtype=np.int64)
            hist.total = totals[j]
        latency.hists[second] = hists
    latency.final_upto = meta["final_upto"]
    latency.newly_final = list(meta["newly_final"])

    b.summary = SummaryBuilder.restore_state(sm, arrays)
    b.steps = StepTracker.restore_state(meta["steps"], arrays)
    # Optional parts: a run without a restart, sessions or a mixture has none.
    if "config_segments" in meta:
        segments = meta["config_segments"]
        b.segment_starts = [float(t) for t in segments["starts"]]
        b.segment_summaries = [
            SummaryBuilder.restore_state(state, arrays, f"segment{i}") for i, state in enumerate(segments["summaries"])
        ]
    if "turns" in meta:
        b.turns = TurnFigures.restore_state(meta["turns"], arrays)
    if "reasoning" in meta:
        b.reasoning = ReasoningSeries.restore_state(b.window_s, b.grace_s, meta["reasoning"], arrays)
    for i, (name, sub_meta) in enumerate(meta.get("classes", [])):
        prefix = f"class{i}/"
        sub_arrays = {key[len(prefix) :]: a for key, a in arrays.items() if key.startswith(prefix)}
        sub = b.classes[name] = restore_state(cls, header, sub_meta, sub_arrays, e2e_latency=True)
        sub.class_name = name
    return b
