"""``--prometheus-port``'s address checked in the plan: a port in use is one line naming
the flag before any server starts or the recording is created (review rv-user29: it was
found only after ``--serve``'s server had started); an address this process already
serves (a sweep's previous configuration) is left to the run, which replaces it."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from rampwatch.app.run_config import RunConfig
from rampwatch.app.session import plan as plan_module
from rampwatch.app.session.plan import plan_run
from rampwatch.app.session.prometheus_port import SERVING, check_prometheus_port
from rampwatch.core.errors import UserError
from tests.processes import free_port


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_a_port_in_use_stops_the_plan_before_any_server_or_file(tmp_path, taken_port, monkeypatch):
    served = []
    monkeypatch.setattr(plan_module, "ManagedServer", lambda *a, **k: served.append(a))
    config = RunConfig(
        "random", record=str(tmp_path / "a.rwrec"), serve="vllm serve m --port 1", prometheus_port=taken_port
    )
    with pytest.raises(UserError) as err:
        plan_run(config)
    assert str(err.value).startswith(f"--prometheus-port {taken_port}: cannot serve on 127.0.0.1:{taken_port} (")
    assert "\n" not in str(err.value)
    assert served == [] and list(tmp_path.iterdir()) == []  # no server, no recording, no .server.log


def test_a_free_port_is_let_go_after_the_check():
    port = free_port()
    check_prometheus_port(RunConfig("random", prometheus_port=port))
    with socket.socket() as again:  # the check does not keep it: the run binds it
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))


def test_an_address_this_process_serves_is_not_tried(taken_port, monkeypatch):
    monkeypatch.setitem(SERVING, ("127.0.0.1", taken_port), object())
    check_prometheus_port(RunConfig("random", prometheus_port=taken_port))  # the run replaces its own target


def test_no_port_no_check():
    check_prometheus_port(RunConfig("random"))
