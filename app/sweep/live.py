"""`rampwatch sweep` on a terminal: the sweep runs headless in a child process (the same
``run`` path, its output to a log), and this process shows its state live
(``tui.sweep_view``) from the ``sweep.json`` the child rewrites. ``q`` stops the child the
way Ctrl-C stops a headless sweep (the running configuration drains, its server stops);
then the child's output — its lines and the final table — is printed here."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from rampwatch.app import credentials
from rampwatch.app.sweep.spec import load_sweep
from rampwatch.app.sweep.state import SWEEP_STATE, check_output_dir, read_state
from rampwatch.core.files import private_file
from rampwatch.core.interpreter import module_command
from rampwatch.tui.sweep_view import SweepApp

# After q, how long the child may take to stop its configuration and server.
STOP_TIMEOUT_S = 60.0


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def spawn_headless(
    args: argparse.Namespace, log_path: Path, extra_env: dict[str, str] | None = None
) -> subprocess.Popen:
    """The same sweep run headless in a child process (the live screen's load side)."""
    words = module_command("rampwatch.app.cli", "sweep", args.sweep, "--headless")
    named = (
        ("--slo", args.slo),
        ("--output-dir", args.output_dir),
        ("--startup-timeout", args.startup_timeout),
        ("--stop-grace", args.stop_grace),
        ("--repeats", args.repeats),
    )
    for flag, value in named:
        if value is not None:
            words += [flag, str(value)]
    if args.resume:
        words.append("--resume")
    # the key in its environment, not on its command line: the process table shows that
    env = credentials.child_environment_of(args.api_key, None, dict(os.environ, **(extra_env or {})))
    log = private_file(log_path, "w", encoding="utf-8")
    try:
        return subprocess.Popen(words, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    finally:
        log.close()


def run_sweep_live(args: argparse.Namespace) -> int:
    spec = load_sweep(
        args.sweep, slo_text=args.slo, output_dir=args.output_dir, repeats=args.repeats
    )  # a bad file: one line, no screen
    out_dir = Path(spec.output_dir)
    check_output_dir(out_dir, args.resume)
    state_path = out_dir / SWEEP_STATE
    with tempfile.NamedTemporaryFile(prefix="rampwatch-sweep-", suffix=".log", delete=False) as log:
        log_path = Path(log.name)
    child = spawn_headless(args, log_path)

    def source() -> dict | None:
        return read_state(state_path)

    def stop() -> None:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    app = SweepApp(source, on_quit=stop, log_tail=lambda: _tail(log_path))
    try:
        app.run()
    finally:
        stop()
        try:
            code = child.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            code = child.wait()
        sys.stdout.write(log_path.read_text(encoding="utf-8", errors="replace"))
        log_path.unlink(missing_ok=True)
    return code
