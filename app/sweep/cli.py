"""`rampwatch sweep`: its flags, and the choice between the live view (on a terminal,
``live``) and the headless sweep (``run``). A headless sweep never imports the live
view's UI (the live view's child is one)."""

from __future__ import annotations

import argparse
import sys

from rampwatch.app import credentials
from rampwatch.app.run import want_tui
from rampwatch.app.run_config import non_negative_float, positive_float
from rampwatch.app.sweep.spec import MAX_REPEATS


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", metavar="SWEEP", help="sweep file (YAML): scenario, serve command, matrix, load, SLO")
    parser.add_argument(
        "--slo",
        metavar="BOUNDS",
        help='the SLO the best configuration must meet and the early stop judges, e.g. "ttft_p99<500ms,itl_p99<50ms" '
        "(default: the file's slo:)",
    )
    parser.add_argument(
        "--output-dir", metavar="DIR", help="where the recordings and sweep.json go (default: the file's output_dir:)"
    )
    parser.add_argument(
        "--repeats",
        type=repeat_count,
        metavar="N",
        help="run each configuration N times; the table gives each figure's mean ± its 95%% interval "
        "over them, and a best only when its max good-put interval lies above the other Pareto-front "
        "candidates', else tied (default: the file's repeats:, else 1)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the sweep in the output dir: completed configurations are kept, the others run",
    )
    parser.add_argument(
        "--headless", action="store_true", help="no UI: one line per configuration, the table at the end"
    )
    credentials.add_flags(parser, headers=False, whose=" of the servers")
    parser.add_argument(
        "--stop-grace",
        type=non_negative_float,
        metavar="SECONDS",
        help="after a configuration's load stops, how long in-flight requests may finish "
        "(default: the file's stop_grace_s:, else 5)",
    )
    parser.add_argument(
        "--startup-timeout",
        type=positive_float,
        metavar="SECONDS",
        help="how long a server may take to serve (default: the file's startup_timeout_s:, else 600)",
    )


def repeat_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_REPEATS:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to {MAX_REPEATS}, got {text!r}")
    return value


def main(args: argparse.Namespace) -> int:
    # The servers' key, from its flag or its file (the sweep has no header flags).
    args.api_key, _, warnings = credentials.resolve_secrets(args.api_key, args.api_key_file, None, None)
    for warning in warnings:
        print(f"rampwatch sweep: warning: {warning}", file=sys.stderr)
    credentials.hide_in_process_table(credentials.command_line_secrets(args.api_key, [], [], None))
    # Imported here, each only on its own path: the headless sweep (the live view's child
    # among them) never loads Textual, the live view never loads the run's machinery.
    if want_tui(args):
        from rampwatch.app.sweep.live import run_sweep_live

        return run_sweep_live(args)
    from rampwatch.app.sweep.run import run_sweep

    return run_sweep(args)
