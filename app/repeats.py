"""`rampwatch run --repeats N`: the run N times, one after another, then their figures
combined as mean ± 95 % interval (``record.repeat_set``).

Each repeat is an ordinary run (headless, or its own live screen, one after another)
with its own recording ``REC-rK.rwrec``, result JSON and server log beside it; by
default it draws fresh prompts and arrivals (the seed moved on by one a repeat, as a
sweep's repeats do; ``--cache-salt auto`` gives each repeat a fresh salt anyway), with
``--same-prompts`` the same seed each time. Between repeats a cool-down
(``--cool-down``), and against a server of the user's (``--target``) a bounded wait for
its /metrics to show nothing running or waiting, so one repeat's tail does not load the
next. After the last (or the first that fails or is interrupted: its recording is kept)
the combined result JSON, the set file ``REC.repeats.json`` and the summary of the
completed repeats are written; the exit code is the failed repeat's.
"""

from __future__ import annotations

import http.client
import math
import re
import ssl
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from rampwatch.app.run_config import RunConfig
from rampwatch.core.errors import UserError
from rampwatch.core.redact import redact_text
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.record import repeat_set
from rampwatch.record.reader import open_recording
from rampwatch.record.writer import default_recording_path

# How long, at most, to wait after the cool-down for the server to show nothing running
# or waiting (a server that never drains does not hold the repeats up for ever).
IDLE_WAIT_S = 60.0
IDLE_POLL_S = 1.0
_QUEUE_METRIC = re.compile(r"^vllm:num_requests_(running|waiting)(\{[^}]*\})?\s+(\S+)", re.MULTILINE)


def check_repeats(config: RunConfig) -> None:
    """The flags a repeated run cannot take, as one line."""
    if config.detach:
        raise UserError(
            "--detach with --repeats: not supported; run the repeats headless in the background instead "
            "(e.g. nohup rampwatch run … --repeats N --headless &)"
        )
    if config.no_record:
        raise UserError("--no-record with --repeats: each repeat's recording is what the combined result is read from")


def base_recording(config: RunConfig, scenario_name: str) -> Path:
    if config.record:
        return Path(config.record)
    from rampwatch.app.session.plan import unused_default_path

    return unused_default_path(default_recording_path(scenario_name, time.time()))


def repeat_config(config: RunConfig, k: int, base: Path, base_seed: int) -> RunConfig:
    """Repeat ``k``'s (1-based) configuration: its own recording, result JSON and server
    log; its seed moved on by ``k - 1`` unless ``--same-prompts``. A repeat before the last
    serves its final figures (``--prometheus-linger``) no longer than the cool-down that
    follows it: the next repeat is not held up waiting for a scrape."""
    rec = repeat_set.repeat_recording(base, k)
    server_log = None if config.server_log is None else str(repeat_set.repeat_recording(Path(config.server_log), k))
    return replace(
        config,
        record=str(rec),
        result_json=None,  # beside the repeat's recording; --result-json is the combined one
        server_log=server_log,
        seed=base_seed if config.same_prompts else base_seed + k - 1,
        repeat=k,
        run_id=None,
        prometheus_linger=config.prometheus_linger
        if k == config.repeats
        else min(config.prometheus_linger, config.cool_down),
    )


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The idle wait follows no redirect: a /metrics that sends it elsewhere would get
    the --header values (the run's own scrape follows none to another origin)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def server_queue(url: str, config: RunConfig, timeout_s: float = 2.0) -> float | None:
    """Requests running plus waiting on the server's /metrics (vLLM's gauges); None when
    the page cannot be read (within ``timeout_s`` in all: a page that trickles in is
    given up), redirects elsewhere, or has neither. It carries the ``--header`` headers,
    as the run's own scrape does, not the API key."""
    request = urllib.request.Request(url, headers=dict(config.header))
    context = None
    if config.ca_cert:
        context = ssl.create_default_context(cafile=config.ca_cert)
    elif config.insecure:  # as the run itself: --insecure asked for no verification
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(_NoRedirect(), urllib.request.HTTPSHandler(context=context))
    deadline = time.monotonic() + timeout_s
    body = bytearray()
    try:
        with opener.open(request, timeout=timeout_s) as response:
            if response.status != 200:
                return None
            while len(body) < 4_000_000:
                if time.monotonic() > deadline:
                    return None
                chunk = response.read1(65536)
                if not chunk:
                    break
                body += chunk
    except (OSError, ValueError, http.client.HTTPException):
        return None
    text = body.decode("utf-8", "replace")
    values = [float(m.group(3)) for m in _QUEUE_METRIC.finditer(text)]
    total = sum(values) if values else None
    return total if total is not None and math.isfinite(total) else None


def wait_for_idle(config: RunConfig, out: TextIO, limit_s: float = IDLE_WAIT_S) -> None:
    """Against a server of the user's: until its /metrics shows nothing running or
    waiting, at most ``limit_s`` (a page that cannot be read: no wait)."""
    if config.serve is not None or not config.target:
        return  # a server the run starts is started afresh for each repeat
    url = config.metrics_url[0] if config.metrics_url else config.target.rstrip("/").removesuffix("/v1") + "/metrics"
    deadline = time.monotonic() + limit_s
    while True:
        queue = server_queue(url, config)
        if queue is None or queue <= 0:
            return
        if time.monotonic() >= deadline:
            print(
                f"rampwatch run: the server still shows {queue:.0f} request(s) running or waiting after "
                f"{limit_s:.0f} s; starting the next repeat anyway",
                file=out,
                flush=True,
            )
            return
        time.sleep(IDLE_POLL_S)


def repeat_figures(rec: Path, slo_ms: dict[str, float] | None) -> tuple[dict[str, Any], dict[str, float]] | None:
    """A finished repeat's result JSON and its figures (the JSON's numbers, its knee and
    max good-put); None when either cannot be read."""
    import json

    from rampwatch.app.session.plan import result_json_path

    path = result_json_path(None, rec)
    if path is None:
        return None
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
        with open_recording(rec) as recording:
            extras = repeat_set.recording_extras(recording, slo_ms)
    except (OSError, ValueError, UserError):
        return None
    figures: dict[str, float] = repeat_set.numeric_figures(result)
    figures.update({k: v for k, v in extras.items() if v is not None})
    return result, figures


def check_set_outputs(
    config: RunConfig, base: Path, combined_json: Path, set_path: Path, configs: list[RunConfig]
) -> None:
    """Before the first repeat: ``--record`` names a file (not a directory or a device:
    the repeats' files are named after it), and the combined result JSON is none of the
    repeats' own files nor the set file, and can be written (else it would replace a
    repeat's recording, or be lost after the last repeat)."""
    if base.exists() and not base.is_file():
        raise UserError(
            f"--record {base}: not a file; --repeats names its files after it (REC-r1.rwrec …): give a file path"
        )
    from rampwatch.app.session.plan import check_outputs, result_json_path
    from rampwatch.loadgen.server.managed import server_log_path

    theirs = [set_path]
    for one in configs:
        rec = Path(one.record or "")
        theirs += [
            rec,
            result_json_path(None, rec) or rec,
            Path(one.server_log) if one.server_log else server_log_path(rec),
        ]
    resolved = combined_json.resolve()
    if any(resolved == other.resolve() for other in theirs):
        raise UserError(
            f"--result-json {combined_json}: is one of the repeats' own files (a recording, its result JSON or "
            "server log, or the set file); give it another path"
        )
    check_outputs(None, combined_json, [])
    check_outputs(None, set_path, [])


def run_repeats(config: RunConfig, run_one: Callable[[RunConfig], int], out: TextIO | None = None) -> int:
    """The repeats, one after another, then the combined figures (see the module)."""
    from rampwatch.app.session.server import signals_interrupt

    out = out if out is not None else sys.stdout
    check_repeats(config)
    scenario = load_scenario(config.scenario, overrides=config.scenario_sets(), flags=config.scenario_flags())
    base = base_recording(config, scenario.name)
    combined_json = Path(config.result_json) if config.result_json else base.with_suffix(".json")
    set_path = repeat_set.set_file(base)
    seed = config.seed if config.seed is not None else scenario.seed
    configs = [repeat_config(config, k, base, seed) for k in range(1, config.repeats + 1)]
    check_set_outputs(config, base, combined_json, set_path, configs)
    if not config.force:  # every output claimed before the first repeat starts, not at repeat 3
        for path in [combined_json, set_path, *(Path(c.record or "") for c in configs)]:
            if path.exists():
                raise UserError(f"{path}: exists (a repeat's output); --force replaces it")
    results: list[dict[str, Any]] = []
    figures: list[dict[str, float]] = []
    recordings: list[Path] = []
    code = 0
    for k, one in enumerate(configs, start=1):
        if k > 1:
            print(
                f"rampwatch run: cool-down {config.cool_down:g} s before repeat {k}/{config.repeats}",
                file=out,
                flush=True,
            )
            try:
                with signals_interrupt():  # as they stop a headless run: the completed repeats are combined
                    time.sleep(config.cool_down)
                    wait_for_idle(config, out)
            except KeyboardInterrupt:  # between two repeats: the completed ones are combined
                print(f"rampwatch run: interrupted before repeat {k}/{config.repeats}", file=sys.stderr)
                code = 130
                break
        print(
            f"rampwatch run: repeat {k}/{config.repeats} (seed {one.seed}) recording to {one.record}",
            file=out,
            flush=True,
        )
        try:
            code = run_one(one)
        except KeyboardInterrupt:
            code = 130
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except UserError as exc:  # e.g. the target gone between two repeats: the ones done are combined
            print(f"rampwatch run: error: {exc}", file=sys.stderr)
            code = exc.exit_code
        rec = Path(one.record or "")
        if code != 0:
            kept = f"; its recording {rec} is kept" if rec.is_file() else ""
            print(f"rampwatch run: repeat {k}/{config.repeats} ended with exit {code}{kept}", file=sys.stderr)
            break
        got = repeat_figures(rec, scenario.slo)
        if got is None:
            print(
                f"rampwatch run: repeat {k}/{config.repeats}: cannot read its figures back from {rec}", file=sys.stderr
            )
            code = 1
            break
        results.append(got[0])
        figures.append(got[1])
        recordings.append(rec)
    if not results:
        return code or 1
    combined = repeat_set.combine_figures(figures)
    names = [str(r) for r in recordings]
    try:
        repeat_set.write_json(combined_json, repeat_set.combined_result(results, combined, names, config.repeats))
        repeat_set.write_set(set_path, scenario.name, config.repeats, recordings, combined)
    except OSError as exc:
        print(f"rampwatch run: cannot write the repeats' combined result: {exc.strerror or exc}", file=sys.stderr)
        return code or 1
    print("", file=out)
    print(repeat_set.format_set_summary(combined, config.repeats), file=out)
    print(f"combined result JSON: {redact_text(str(combined_json))}", file=out)
    print(f"repeats: {set_path} (rampwatch compare A.repeats.json B.repeats.json)", file=out, flush=True)
    return code
