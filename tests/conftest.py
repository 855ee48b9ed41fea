import os
import sys
from pathlib import Path

import pytest

from tests import tiers

REPO = Path(__file__).resolve().parent.parent
VLLM_CAPTURES = REPO / "tests" / "data" / "vllm-0.32.0-cpu"


@pytest.fixture(scope="session", autouse=True)
def private_runs_directory(tmp_path_factory):
    """Runs the tests start register (`rampwatch ps`, `app.runs`) in a directory of the
    test session's, never among the user's own runs; processes the tests start inherit it."""
    runtime = tmp_path_factory.mktemp("runtime")
    runtime.chmod(0o700)
    before = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    yield runtime
    if before is None:
        del os.environ["XDG_RUNTIME_DIR"]
    else:
        os.environ["XDG_RUNTIME_DIR"] = before


@pytest.fixture(scope="session")
def vllm_captures() -> Path:
    """Captures from a real vLLM 0.32.0 CPU server (tests/data/vllm-0.32.0-cpu/README.md)."""
    return VLLM_CAPTURES


def _load_vllm_harness():
    import importlib.util

    spec = importlib.util.spec_from_file_location("vllm_server", REPO / "scripts" / "vllm_server.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["vllm_server"] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def vllm_server():
    """A real vLLM CPU server serving the tiny model, shared by all `vllm`-marked tests.

    Builds the cached venv and model on first use (scripts/setup_vllm.sh), starts the
    server in its own process group, and stops it when the test session ends.
    """
    harness = _load_vllm_harness()
    # --enforce-eager: vLLM's CPU build otherwise compiles the model with inductor at each
    # start (its compile cache fails to load), 8-40 s of CPU the other workers wait for
    server = harness.VllmServer(harness.ensure_setup(), extra_args=["--enforce-eager"])
    server.start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def pytest_configure(config):
    tiers.install()


def declared_timeout(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    return float(marker.args[0]) if marker and marker.args else 0.0


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items):
    """Under xdist workers (`-n`, `--dist loadgroup` from pyproject.toml): the tests on
    the session's real vLLM server share one worker, so one server starts, not one per
    worker; and tests that declare a long timeout (the sweeps) start first, so that
    they run beside the short ones rather than alone at the end."""
    for item in items:
        if "vllm_server" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("vllm_server"))
    items.sort(key=declared_timeout, reverse=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from tiers.guard(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from tiers.guard(item))
