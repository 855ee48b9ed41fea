"""Memory of a long run: a real headless `rampwatch run` at a constant rate against the
embedded simulator on the ``instant`` hardware preset (zero-cost steps: the load process,
not the server, is what is measured), sampling the run's RSS every ``--every`` seconds.

    .venv/bin/python bench/bench_soak_rss.py [--rate 100] [--duration 3600]
        [--output-tokens 250] [--every 10] [--csv PATH] [--rampwatch PATH]

The run is `rampwatch run --headless` with a scenario of constant arrivals at ``--rate``
requests/s and ``--output-tokens`` tokens per answer (``ignore_eos``), recording to a
temporary directory. The CSV gets one row per sample as it goes (``t_s,rss_mb,in_flight``:
the seconds since the start, the rampwatch process's RSS — headless, the run is executed
in that process — and the requests in flight from its latest progress line: a server
that cannot keep up makes them, and so the RSS, grow); the run's output is passed
through as it comes. At the end the
curve is printed (RSS at each ``--print-every`` seconds) with the peak. ``--rampwatch``
runs another installation's command (e.g. an older checkout's venv) for a before/after.
``--live`` runs it with its live UI in a detached tmux session instead and samples both
processes: the UI and the forked run process (CSV ``t_s,ui_rss_mb,run_rss_mb``).
The simulator is a process of its own (the managed server) and is not counted.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SCENARIO = """name: soak
endpoint: completions
seed: 0
schedule:
  kind: constant
  rate: {rate}
  duration_s: {duration}
workload:
  input_tokens: 32
  output_tokens: {output_tokens}
  ignore_eos: true
"""

IN_FLIGHT = re.compile(r"in-flight (\d+)")


def rss_mb(pid: int) -> float | None:
    """The process's resident set (VmRSS), MB; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def soak_live(command: list[str], out_csv: Path, every: float) -> int:
    """The run with its live UI in a detached tmux session (its own socket): samples the
    UI process and the run process it forks (the child with the same command line; the
    server's guard is the other child). When the run process has ended, ``q`` leaves."""
    socket = f"rampwatch-soak-{os.getpid()}"
    tmux = ["tmux", "-L", socket]
    subprocess.run([*tmux, "new-session", "-d", "-x", "160", "-y", "48", "exec " + shlex.join(command)], check=True)
    started = time.monotonic()
    ui = int(subprocess.run([*tmux, "display", "-p", "#{pane_pid}"], capture_output=True, text=True).stdout)
    run_pid: int | None = None
    peaks = [0.0, 0.0]
    try:
        with open(out_csv, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["t_s", "ui_rss_mb", "run_rss_mb"])
            while (ui_rss := rss_mb(ui)) is not None:
                if run_pid is None:
                    run_pid = next((c for c in children(ui) if cmdline(c) == cmdline(ui)), None)
                run_rss = rss_mb(run_pid) if run_pid is not None else None
                t = time.monotonic() - started
                writer.writerow([f"{t:.0f}", f"{ui_rss:.1f}", "" if run_rss is None else f"{run_rss:.1f}"])
                f.flush()
                peaks = [max(peaks[0], ui_rss), max(peaks[1], run_rss or 0.0)]
                print(f"{t / 60:6.1f}m  UI {ui_rss:7.1f} MB  run {run_rss or 0.0:7.1f} MB", flush=True)
                if run_pid is not None and run_rss is None:  # the run is over: leave the UI
                    subprocess.run([*tmux, "send-keys", "q"])
                time.sleep(every)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    print(f"peak RSS: UI {peaks[0]:.1f} MB, run process {peaks[1]:.1f} MB; samples in {out_csv}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--duration", type=float, default=3600.0)
    parser.add_argument("--output-tokens", type=int, default=250)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between RSS samples")
    parser.add_argument("--print-every", type=float, default=300.0, help="seconds between the printed curve's rows")
    parser.add_argument("--csv", default=None, help="the samples (default: bench-soak-rss.csv in the work directory)")
    parser.add_argument("--rampwatch", default=str(Path(sys.executable).with_name("rampwatch")))
    parser.add_argument(
        "--live", action="store_true", help="the live UI in a detached tmux session: samples the UI and the run process"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rampwatch-soak-"))
    scenario = work / "soak.yaml"
    scenario.write_text(SCENARIO.format(rate=args.rate, duration=args.duration, output_tokens=args.output_tokens))
    out_csv = Path(args.csv) if args.csv else work / "bench-soak-rss.csv"
    command = [
        args.rampwatch,
        "run",
        str(scenario),
        "--headless",
        "--sim-hardware",
        "instant",
        "--record",
        str(work / "soak.rwrec"),
        "--progress-interval",
        "10",
    ]
    if args.live:
        return soak_live([c for c in command if c not in ("--headless",)], out_csv, args.every)
    print(" ".join(command), flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    in_flight = [""]  # from the latest progress line

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            found = IN_FLIGHT.search(line)
            if found:
                in_flight[0] = found.group(1)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    samples: list[tuple[float, float]] = []
    with open(out_csv, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["t_s", "rss_mb", "in_flight"])
        while proc.poll() is None:
            rss = rss_mb(proc.pid)
            if rss is not None:
                t = time.monotonic() - started
                samples.append((t, rss))
                writer.writerow([f"{t:.0f}", f"{rss:.1f}", in_flight[0]])
                f.flush()
            try:
                proc.wait(timeout=args.every)
            except subprocess.TimeoutExpired:
                pass
    reader.join(timeout=5)
    print(f"exit {proc.returncode}; samples in {out_csv}")
    if not samples:
        return 1
    print(f"\n{'t':>8}  {'RSS MB':>7}")
    next_row = 0.0
    for t, rss in samples:
        if t >= next_row:
            print(f"{t / 60:7.1f}m  {rss:7.1f}")
            next_row += args.print_every
    t_last, rss_last = samples[-1]
    peak = max(rss for _, rss in samples)
    print(f"{t_last / 60:7.1f}m  {rss_last:7.1f}  (last)")
    print(f"peak RSS {peak:.1f} MB over {t_last / 60:.1f} min at {args.rate:g} req/s, {args.output_tokens} tokens each")
    print(
        f"work directory (recording, CSV): {work}; remove it when done ({os.path.getsize(work / 'soak.rwrec') if (work / 'soak.rwrec').exists() else 0:,} bytes of recording)"
    )
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
