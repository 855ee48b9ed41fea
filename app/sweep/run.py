"""`rampwatch sweep SWEEP.yaml`, headless: for each configuration of the sweep's matrix,
start the server (``loadgen.server.managed.ManagedServer``), ramp the scenario against it
with the run path of `rampwatch run` (``app.session``'s ``plan_run`` and ``build_run`` on
a ``RunConfig`` built here, one recording per configuration) until the knee is past and the SLO broken, stop it, and go on; then the
table, the Pareto front and the best configuration as a ``vllm serve`` command.

The sweep's state (``state``: ``OUTPUT_DIR/sweep.json``) is rewritten at each
configuration's start and end and every few seconds in between; the live screen
(``live``) runs this same headless sweep in a child process and reads that file.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shlex
import signal
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from rampwatch.app.run_config import RunConfig
from rampwatch.app.session import build_run, plan_run, progress_line
from rampwatch.app.sweep.early_stop import EarlyStopRule
from rampwatch.app.sweep.serve_args import apply_args, command_line, shown_command
from rampwatch.app.sweep.spec import load_sweep
from rampwatch.app.sweep.state import (
    SWEEP_STATE,
    check_output_dir,
    new_state,
    read_state,
    resume_state,
    run_slug,
    write_state,
)
from rampwatch.core import strict_json
from rampwatch.core.errors import ServerExited, UserError
from rampwatch.core.figures.search import search_row
from rampwatch.core.figures.sweep import choose_best, combine_runs, config_row, mark_pareto
from rampwatch.core.figures.sweep_text import format_pareto, format_table, knee_text, verdict_text
from rampwatch.core.text import server_text
from rampwatch.loadgen.run import eventloop
from rampwatch.loadgen.server.managed import ServeCommand
from rampwatch.record.reader import open_recording
from rampwatch.record.sweep_report import write_sweep_report
from rampwatch.sim.gpu_telemetry import DCGM_PATH
from rampwatch.sim.serve_flags import is_sim_command

SWEEP_REPORT = "sweep.html"
INTERRUPTED_EXIT = 130
STATUS_INTERVAL_S = 2.0


# --------------------------------------------------------------------------- one configuration


class ConfigRun:
    """One configuration on `rampwatch run --serve`'s path (``app.session``: plan, start
    the server, build the run, execute it, watch the server), with the early stop added
    and the outcome written to its row rather than ending the sweep."""

    def __init__(self, sweep: Sweep, row: dict[str, Any], repeat: int | None = None) -> None:
        self.sweep = sweep
        self.row = row
        self.repeat = repeat  # which of the configuration's repeated runs (None: it runs once)
        self.stop_reason: str | None = None
        self.figures: dict[str, Any] = {}

    def execute(self) -> None:
        sweep, row = self.sweep, self.row
        recording = sweep.out_dir / f"{run_slug(row['slug'], self.repeat)}.rwrec"
        argv = apply_args(sweep.base_argv, row["args"])
        started = time.monotonic()
        row.update(status="starting", reason=None, recording=None)
        if not self.repeat:  # the ETA reads how long the configuration, all its runs, has run
            row["started_at"] = time.time()
        sweep.save(current=row["index"], line="starting the server")
        plan = plan_run(sweep.run_config(command_line(argv), recording))
        if self.repeat:  # other arrivals and prompts each repeat: the spread holds that noise too
            plan = dataclasses.replace(plan, scenario=repeat_scenario(plan.scenario, self.repeat))
        server = plan.server
        assert server is not None  # --serve always names one
        try:
            try:
                row["startup_s"] = server.start(sweep.startup_timeout_s)
            except ServerExited as exc:  # its code and last log line
                self._failed(str(exc), exc.server_exit_code)
                return
            except UserError as exc:  # not ready in time, port taken: stopped already
                self._failed(str(exc), server.poll())
                return
            row["status"] = "running"
            sweep.save(line=f"server ready in {row['startup_s']:.1f} s; ramping")
            try:
                self._run_load(plan, recording)
            except UserError as exc:  # e.g. the server went away before the first request
                code = server.poll()
                self._failed(
                    str(exc) if code is None else f"server exited with code {code}; {_last_line(server)}", code
                )
        finally:
            server.stop()
            if plan.outputs is not None:
                plan.outputs.release()  # this configuration's recording is written
            row["duration_s"] = time.monotonic() - started

    def _failed(self, reason: str, code: int | None) -> None:
        self.row.update(status="failed", reason=reason)
        if code is not None:
            self.row["server_exit_code"] = code

    def _run_load(self, plan: Any, recording: Path) -> None:
        sweep, row = self.sweep, self.row
        prepared = build_run(plan)
        run = prepared.run  # its knee is judged against the server's own caps (build_run)
        # What the recording's header keeps of the sweep (redacted there like every option).
        run.options.cli_options["sweep"] = {"file": sweep.spec.path, "index": row["index"], "args": row["args"]}
        loop_holder: dict[str, asyncio.AbstractEventLoop] = {}

        def stop_early(reason: str) -> None:
            self.stop_reason = reason
            loop_holder["loop"].call_soon(run.stop)

        if sweep.spec.search is None:  # a search stops its own load, once it has its answer
            run.sink.sinks.append(EarlyStopRule(sweep.spec.slo, sweep.spec.early_stop, stop_early))
        row["recording"] = recording.name
        result = eventloop.run(self._execute(prepared, loop_holder))
        requests, samples, unreadable = _recorded(recording, result)
        self.figures = strict_json.finite(
            config_row(
                requests,
                samples,
                result.events,
                sweep.spec.slo,
                load_end_s=run.schedule.planned_duration_s,
                schedule=sweep.spec.schedule,
            )
        )
        self.figures.update(search_row(result.events))  # load: search: the max under the SLO
        row.update(self.figures)
        row["early_stop"] = self.stop_reason
        if result.recording_error:
            self._failed(f"recording {recording.name} failed: {result.recording_error}", None)
        elif unreadable is not None:
            self._failed(f"recording {recording.name} cannot be read back: {unreadable}", None)
        elif prepared.server_exit is not None:
            self._failed(str(prepared.server_exit), prepared.server_exit.server_exit_code)
        elif sweep.interrupted:
            row.update(status="interrupted", reason="the sweep was stopped during this configuration")
        else:
            row["status"] = "done"

    async def _execute(self, prepared: Any, loop_holder: dict[str, Any]) -> Any:
        loop = asyncio.get_running_loop()
        loop_holder["loop"] = loop
        run = prepared.run
        sweep = self.sweep

        def on_signal() -> None:
            if run.state == "stopping":  # the second time: end the drain now
                run.options.stop_grace_s = 0.0
                run.cancel_in_flight()
            else:
                run.interrupt()

        async def watch() -> None:
            while True:
                await asyncio.sleep(STATUS_INTERVAL_S)
                prepared.check_server()  # died mid-run: the run records why and stops
                line = progress_line(run.snapshot(), STATUS_INTERVAL_S)
                if self.stop_reason and run.state in ("stopping", "draining"):
                    line += " | early stop"
                sweep.save(line=line)

        watcher = asyncio.create_task(watch())
        sweep.on_signal = lambda: loop.call_soon_threadsafe(on_signal)
        try:
            return await prepared.execute()
        finally:
            sweep.on_signal = None
            watcher.cancel()


def repeat_scenario(scenario: Any, repeat: int) -> Any:
    """The scenario of a configuration's run ``repeat`` (0-based): its seed moved on by
    ``repeat``, so that repeats draw other arrival gaps and prompt lengths (with one seed
    the spread of repeats left that sampling noise out, and a knee range read 11.7-11.7)."""
    seed = scenario.seed + repeat
    return dataclasses.replace(scenario, seed=seed, raw={**scenario.raw, "seed": seed})


def _last_line(server: Any) -> str:
    tail = [line for line in server.tail if line.strip()]
    return f"last log line: {tail[-1]}" if tail else "no log output"


# --------------------------------------------------------------------------- the sweep


class Sweep:
    def __init__(self, args: argparse.Namespace, out: TextIO = sys.stdout) -> None:
        self.args = args
        self.out = out
        self.spec = load_sweep(args.sweep, slo_text=args.slo, output_dir=args.output_dir, repeats=args.repeats)
        self.base_argv = shlex.split(self.spec.serve)
        self.out_dir = Path(self.spec.output_dir)
        self.startup_timeout_s = args.startup_timeout or self.spec.startup_timeout_s
        self.interrupted = False
        self.on_signal: Callable[[], object] | None = None  # set while a configuration's load runs
        self.state: dict[str, Any] = {}
        self.state_path = self.out_dir / SWEEP_STATE

    def prepare(self) -> None:
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"--output-dir {self.out_dir}: {exc.strerror or exc}") from None
        check_output_dir(self.out_dir, self.args.resume)
        fresh = new_state(self.spec, self.base_argv)
        old = read_state(self.state_path)
        self.state = fresh if old is None else resume_state(old, fresh, self.out_dir)
        self.save()

    def save(self, current: int | None | str = "keep", line: str | None = None) -> None:
        if current != "keep":
            self.state["current"] = current
        if line is not None:
            self.state["current_line"] = line
        rows = self.state["rows"]
        mark_pareto(rows)
        verdict = choose_best(rows, search=self.spec.search is not None)
        self.state.update(verdict)  # best, not_reached, tied (and no_max: load: search)
        self.state.pop("overlap", None)  # a sweep.json from before intervals
        try:
            write_state(self.state_path, self.state)
        except OSError as exc:  # the disk filled: the sweep goes on, the end says so
            self.state["state_error"] = str(exc.strerror or exc)

    def run_config(self, serve: str, recording: Path) -> RunConfig:
        """`rampwatch run --serve`'s configuration for one configuration of the sweep: the
        run's own defaults (``RunConfig``'s), the sweep's scenario, load and stop grace,
        this configuration's serve command and recording."""
        grace = self.spec.stop_grace_s if self.args.stop_grace is None else self.args.stop_grace
        sets = [f"{key}={value if isinstance(value, str) else json.dumps(value)}" for key, value in self.spec.sets]
        sets.append("schedule=" + json.dumps(self.spec.schedule))
        argv = shlex.split(serve)
        # a simulator serving GPU gauges: read them, as --gpu-metrics-url would
        sim_gauges = is_sim_command(argv) and "--gpu-telemetry" in argv
        return RunConfig(
            scenario=self.spec.scenario,
            headless=True,
            serve=serve,
            record=str(recording),
            stop_grace=float(grace),  # as the flag gives it: the recording's header keeps it
            set=tuple(sets),
            api_key=self.args.api_key or None,
            gpu_metrics_url=(ServeCommand.parse(serve).base_url + DCGM_PATH,) if sim_gauges else (),
            search=self.spec.search,
        )

    def say(self, text: str) -> None:
        for line in text.split("\n"):
            print(server_text(line), file=self.out, flush=True)

    def _signalled(self, signum: int, frame: Any) -> None:
        """Ctrl-C, SIGTERM, SIGHUP: during a load, its graceful stop (a second one cancels
        the in-flight requests); elsewhere (a server starting, between configurations)
        ``KeyboardInterrupt``, which stops the server and ends the loop over them."""
        self.interrupted = True
        if self.on_signal is not None:
            self.on_signal()
        else:
            raise KeyboardInterrupt

    def execute(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._signalled)
        rows = self.state["rows"]
        total = len(rows)
        self.say(
            f"rampwatch sweep: {self.spec.name}: {total} configurations of {shown_command(shlex.split(self.spec.serve))}; SLO {self.spec.slo.text}"
        )
        self.say(f"output: {self.out_dir}")
        try:
            for row in rows:
                if self.interrupted:
                    break
                self._one(row, f"[{row['index'] + 1}/{total}]")
        except KeyboardInterrupt:  # between two configurations
            self.interrupted = True
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the end is written whatever comes
            signal.signal(sig, signal.SIG_IGN)
        self.state["finished"] = not self.interrupted
        self.state["ended_at"] = time.time()
        self.save(current=None, line=None)
        return self.finish()

    def _one(self, row: dict[str, Any], n: str) -> None:
        if row.get("status") == "done":
            self.say(f"{n} kept from the earlier run: {row['config']}")
            return
        try:
            # Inside the try: a signal landing while the start line is written (after the
            # flush, before say returns) interrupts this configuration, which was announced.
            self.say(f"{n} start: {row['config']}")
            self._runs(row, n)
        except KeyboardInterrupt:
            self.interrupted = True
            row.update(status="interrupted", reason="the sweep was stopped during this configuration")
        self.save(current=None, line="")
        self.say(f"{n} {row['status']} in {row.get('duration_s', 0):.0f} s: {row['config']}; {end_summary(row)}")

    def _runs(self, row: dict[str, Any], n: str) -> None:
        """The configuration run ``repeats`` times (to the first that does not complete);
        its row then holds the mean of each figure and its 95 % interval (``combine_runs``)."""
        repeats = self.spec.repeats
        if repeats == 1:
            ConfigRun(self, row).execute()
            return
        runs: list[dict[str, Any]] = []
        duration = 0.0
        for repeat in range(repeats):
            if self.interrupted:
                break
            config_run = ConfigRun(self, row, repeat)
            try:
                config_run.execute()
            finally:
                duration += row.get("duration_s", 0.0)
                row["duration_s"] = duration
            if row["status"] != "done":
                return
            runs.append({**config_run.figures, "recording": row["recording"], "early_stop": row.get("early_stop")})
            if repeat + 1 < repeats:
                self.say(f"{n} run {repeat + 1}/{repeats} done: {end_summary(row)}")
        if len(runs) < repeats:  # stopped between two runs
            row.update(status="interrupted", reason="the sweep was stopped during this configuration")
            return
        figures = [{k: v for k, v in run.items() if k not in ("recording", "early_stop")} for run in runs]
        row.update(strict_json.finite(combine_runs(figures)))
        row.update(runs=runs, recordings=[run["recording"] for run in runs])

    def finish(self) -> int:
        rows = self.state["rows"]
        self.say("")
        self.say(format_table(rows))
        self.say("")
        self.say(format_pareto(rows))
        self.say("")
        self.say(verdict_text(self.state))
        report = self.out_dir / SWEEP_REPORT
        try:
            write_sweep_report(self.state, report)
            self.say(f"report: {report}")
        except OSError as exc:
            print(f"rampwatch sweep: cannot write {report}: {exc.strerror or exc}", file=sys.stderr)
        self.say(f"table: {self.state_path}")
        if self.state.get("state_error"):
            print(f"rampwatch sweep: cannot write {self.state_path}: {self.state['state_error']}", file=sys.stderr)
            return 1
        if self.interrupted:
            print(f"rampwatch sweep: stopped; continue with --resume (exit {INTERRUPTED_EXIT})", file=sys.stderr)
            return INTERRUPTED_EXIT
        failed = [r for r in rows if r.get("status") != "done"]
        if failed:
            print(
                f"rampwatch sweep: {len(failed)} of {len(rows)} configurations failed: "
                + ", ".join(f"#{r['index'] + 1}" for r in failed),
                file=sys.stderr,
            )
            return 1
        return 0


def end_summary(row: dict[str, Any]) -> str:
    if row.get("status") != "done":
        return str(row.get("reason") or row.get("status"))

    knee = knee_text(row)
    goodput = row.get("max_goodput_rps") or 0.0
    text = f"knee {knee}, good-put {goodput:.1f} req/s, limit {row.get('limit') or '—'}"
    if row.get("try_next"):
        text += f" (try {row['try_next']})"
    if row.get("early_stop"):
        text += f" (early stop: {row['early_stop']})"
    if row.get("search_line"):  # load: search: its answer first
        text = f"{row['search_line']}; {text}"
    return text


def run_sweep(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    sweep = Sweep(args, out)
    sweep.prepare()
    return sweep.execute()


def _recorded(path: Path, result: Any) -> tuple[list, list, str | None]:
    """A configuration's records and scrapes, read back from its recording (the run keeps
    none in RAM), chunk times packed (8 bytes each), and why they could not be read. Empty
    when the recording failed or cannot be read: the row is failed then, its figures empty."""

    if result.recording_error:
        return [], [], None
    try:
        with open_recording(path) as recording:
            requests = [
                dataclasses.replace(r, chunk_times=array("d", r.chunk_times)) for r in recording.iter_requests()
            ]
            return requests, list(recording.samples_without_raw), None
    except (UserError, OSError) as exc:
        return [], [], str(exc)
