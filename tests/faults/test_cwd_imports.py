"""The interpreters rampwatch starts (load workers, the requests' builder, the server's
guard, the embedded simulator, detached runs, sweeps) import nothing from the current
directory: a ``rampwatch.py`` or ``uvloop.py`` lying there is never run (they start with
``-P``; the editable install's import hook is in site-packages, which ``-P`` leaves be)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.requests_ahead import RequestsAhead
from rampwatch.loadgen.workload.scenario import load_scenario

# Modules the children import (rampwatch itself, the loop, the client's HTTP library).
SHADOWS = ("rampwatch", "uvloop", "aiohttp")


def plant(directory: Path) -> Path:
    """Modules in ``directory`` that, imported, write their name to the returned marker."""
    marker = directory / "imported-from-the-current-directory"
    for name in SHADOWS:
        (directory / f"{name}.py").write_text(f"with open({str(marker)!r}, 'a') as f:\n    f.write({name!r} + '\\n')\n")
    return marker


@pytest.mark.slow
def test_a_run_with_workers_imports_nothing_from_the_current_directory(tmp_path):
    marker = plant(tmp_path)
    # The run itself is started with -P too (as the `rampwatch` script is): what is
    # checked is what it starts: 2 load workers, the embedded simulator under its
    # guard, and the requests' builder (8,000-token prompts cost milliseconds each).
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "rampwatch.app.cli", "run", "random", "--headless", "--duration", "2",
         "--sim-hardware", "instant", "--workers", "2", "--no-record", "--set", "workload.input_tokens=8000"],
        cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert not marker.exists(), f"imported from {tmp_path}: {marker.read_text().split()}"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
async def test_the_requests_builder_imports_nothing_from_the_current_directory(tmp_path, monkeypatch):
    marker = plant(tmp_path)
    monkeypatch.chdir(tmp_path)
    sets = [("workload.input_tokens", "64"), ("workload.output_tokens", "8")]
    ahead = RequestsAhead(RequestFactory(load_scenario("random", overrides=sets)), ahead_above_s=0.0)
    await ahead.start()
    try:
        assert ahead.in_process_of_its_own
        got = []
        for _ in range(100):  # past the probe's: these come from the builder
            await ahead.wait_ready()
            got.append(ahead.take())
    finally:
        await ahead.close()
    assert not marker.exists(), f"imported from {tmp_path}: {marker.read_text().split()}"
    reference = RequestFactory(load_scenario("random", overrides=sets))
    assert [r.payload for r in got] == [reference.next_request().payload for _ in range(100)]


@pytest.mark.parametrize(
    "module, build",
    [
        ("rampwatch.app.detach", lambda m: m.child_argv(["run", "chat"], "abcd0000", Path("l"), None)),
        ("rampwatch.loadgen.server.managed", lambda m: list(m.ServeCommand.parse("rampwatch sim").argv)),
    ],
)
def test_the_command_lines_start_python_with_safe_path(module, build):
    import importlib

    argv = build(importlib.import_module(module))
    assert argv[:3] == [sys.executable, "-P", "-m"]


@pytest.mark.slow
def test_the_sweeps_headless_child_imports_nothing_from_the_current_directory(tmp_path, monkeypatch):
    from argparse import Namespace

    from rampwatch.app.sweep.live import spawn_headless

    marker = plant(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = Namespace(
        sweep="no-such-sweep.yaml", slo=None, output_dir=None, startup_timeout=None, stop_grace=None, resume=False,
        api_key=None, repeats=None,
    )  # fmt: skip
    child = spawn_headless(args, tmp_path / "sweep.log")
    assert child.wait(timeout=120) == 2  # the sweep file is missing: its one line, from rampwatch
    assert not marker.exists(), f"imported from {tmp_path}: {marker.read_text().split()}"
    assert "no-such-sweep.yaml" in (tmp_path / "sweep.log").read_text()
