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
