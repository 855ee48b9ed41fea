import time

import pytest


@pytest.fixture(autouse=True)
def utc_clock(monkeypatch):
    """The header shows the ETA as a wall-clock time: screens are drawn in UTC so that a
    snapshot does not depend on the machine's time zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
