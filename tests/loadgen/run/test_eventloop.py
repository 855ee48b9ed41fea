import asyncio

import pytest

from rampwatch.loadgen.run import eventloop


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_uvloop_by_default(monkeypatch):
    monkeypatch.delenv(eventloop.ENV, raising=False)
    assert eventloop.loop_name() == "uvloop"
    assert eventloop.run(_loop_module()).startswith("uvloop")


def test_env_forces_asyncio(monkeypatch):
    monkeypatch.setenv(eventloop.ENV, "asyncio")
    assert eventloop.loop_name() == "asyncio"
    assert eventloop.run(_loop_module()).startswith("asyncio")


def test_run_returns_and_raises(monkeypatch):
    async def boom():
        raise ValueError("x")

    for name in ("asyncio", ""):
        monkeypatch.setenv(eventloop.ENV, name)
        assert eventloop.run(asyncio.sleep(0, result=5)) == 5
        with pytest.raises(ValueError):
            eventloop.run(boom())
