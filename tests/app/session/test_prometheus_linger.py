"""`--prometheus-linger`: after the run, the port serves on until a scrape reads the final
figures (or the bound passes), said in one line; Ctrl-C skips the wait."""

from __future__ import annotations

import io
import time

import pytest

from rampwatch.app.session import prometheus_linger
from rampwatch.app.session.prometheus_linger import linger_targets, note_run_process, wait_run_processes, waiting_line


class FakeTarget:
    host = "127.0.0.1"

    def __init__(self, awaits: bool = True, interrupt: bool = False) -> None:
        self.finished_at: float | None = time.monotonic()
        self.awaits = awaits
        self.interrupt = interrupt
        self.lingered: list[float] = []
        self.closed = False

    @property
    def address(self) -> tuple[str, int]:
        return self.host, 9400

    def awaits_final_read(self) -> bool:
        return self.awaits

    def linger(self, bound_s: float) -> bool:
        self.lingered.append(bound_s)
        if self.interrupt:
            raise KeyboardInterrupt
        return True

    def close(self) -> None:
        self.closed = True


def test_a_target_awaiting_its_final_scrape_is_said_in_one_line():
    target, err = FakeTarget(), io.StringIO()
    linger_targets([target], 30.0, err)
    assert err.getvalue() == waiting_line("127.0.0.1:9400", 30.0) + "\n"
    assert "--prometheus-linger" in err.getvalue() and "Ctrl-C skips" in err.getvalue()
    assert target.lingered == [30.0] and target.closed


@pytest.mark.parametrize("awaits", [False, True])
def test_nothing_is_said_when_nothing_is_awaited_or_the_bound_is_zero(awaits):
    target, err = FakeTarget(awaits=awaits), io.StringIO()
    linger_targets([target], 0.0 if awaits else 30.0, err)
    assert err.getvalue() == "" and target.closed


def test_ctrl_c_skips_the_wait_and_closes_every_port():
    first, second = FakeTarget(interrupt=True), FakeTarget()
    linger_targets([first, second], 30.0, io.StringIO())  # no KeyboardInterrupt out of it
    assert first.closed and second.closed and second.lingered == []


class FakeProcess:
    def __init__(self, alive: bool) -> None:
        self.alive = alive
        self.waited: list[float | None] = []

    def process_alive(self) -> bool:
        return self.alive

    def wait_process(self, timeout: float | None, terminate: bool = True) -> bool:
        if not terminate:  # the short look first: still serving
            return False
        self.waited.append(timeout)
        return True


def test_a_live_runs_process_still_serving_is_waited_for_and_said():
    serving, ended, err = FakeProcess(True), FakeProcess(False), io.StringIO()
    note_run_process(serving, "127.0.0.1:9400")
    note_run_process(ended, "127.0.0.1:9401")
    wait_run_processes(20.0, err)
    assert err.getvalue().splitlines() == [waiting_line("127.0.0.1:9400", 20.0)]
    assert serving.waited == [20.0 + prometheus_linger.PROCESS_MARGIN_S] and ended.waited == []
    wait_run_processes(20.0, err)  # noted once: the list was emptied
    assert serving.waited == [20.0 + prometheus_linger.PROCESS_MARGIN_S]
