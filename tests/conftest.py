import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = (REPO / ".." / "shared").resolve()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """`shared/` beside the checkout: real vLLM captures and reference notes."""
    assert (SHARED / "fixtures").is_dir(), f"missing {SHARED}/fixtures (shared/ must sit beside the repo)"
    return SHARED


@pytest.fixture(scope="session")
def fixtures_dir(shared_dir: Path) -> Path:
    return shared_dir / "fixtures"


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
    server = harness.VllmServer(harness.ensure_setup())
    server.start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
