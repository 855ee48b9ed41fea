"""The Ray transport's pure parts (no cluster): the clock-offset estimate and its bound,
the --ray address, an unreachable cluster, and the line a missing extra gives."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rampwatch.core.errors import UserError
from rampwatch.loadgen.run.ray_workers import (
    RAY_MISSING,
    ClockEstimate,
    RayUnreachable,
    address_endpoint,
    check_clock_offsets,
    check_reachable,
    estimate_offset,
)
from tests.processes import free_port


@pytest.mark.parametrize(
    ("pings", "offset", "rtt"),
    [
        # one symmetric ping: the remote read at the middle of the round trip
        ([(100.0, 100.5, 101.0)], 0.0, 1.0),
        # a remote clock 2 s ahead, 10 ms round trip
        ([(10.0, 12.005, 10.010)], 2.0, 0.010),
        # a remote clock 3 ms behind
        ([(50.0, 49.998, 50.002)], -0.003, 0.002),
        # the smallest round trip wins: the slow, lopsided pings would say +40 ms
        ([(0.0, 0.090, 0.100), (1.0, 1.0005, 1.001), (2.0, 2.080, 2.100)], 0.0, 0.001),
    ],
)
def test_offset_is_read_at_the_smallest_round_trip(pings, offset, rtt):
    estimate = estimate_offset(pings)
    assert estimate.offset_s == pytest.approx(offset, abs=1e-9)
    assert estimate.rtt_s == pytest.approx(rtt, abs=1e-9)


def test_offset_needs_a_ping():
    with pytest.raises(ValueError):
        estimate_offset([])


@pytest.mark.parametrize(
    ("offsets_ms", "bound_ms", "at_fault"),
    [
        ({"a": 0.2, "b": -3.0}, 10.0, None),
        ({"a": 9.99}, 10.0, None),
        ({"a": 0.2, "b": -10.5}, 10.0, "b"),
        ({"a": 25.0}, 10.0, "a"),
        ({"a": 25.0}, 30.0, None),
    ],
)
def test_clock_offset_bound(offsets_ms, bound_ms, at_fault):
    offsets = {node: ClockEstimate(ms / 1000, 0.0005) for node, ms in offsets_ms.items()}
    if at_fault is None:
        check_clock_offsets(offsets, bound_ms / 1000)
        return
    with pytest.raises(UserError) as caught:
        check_clock_offsets(offsets, bound_ms / 1000)
    line = str(caught.value)
    assert "\n" not in line and f"node {at_fault}'s clock" in line and f"--max-clock-offset {bound_ms:g}" in line


@pytest.mark.parametrize(
    ("address", "endpoint"),
    [
        ("auto", None),
        ("10.0.0.5:6379", ("10.0.0.5", 6379)),
        ("ray://head.example:10001", ("head.example", 10001)),
        ("ray://head.example", ("head.example", 10001)),
    ],
)
def test_address_endpoint(address, endpoint):
    assert address_endpoint(address) == endpoint


@pytest.mark.parametrize("address", ["head.example", "http://head:6379", "head:port", "ray://"])
def test_bad_address_is_one_line_naming_it(address):
    with pytest.raises(UserError) as caught:
        address_endpoint(address)
    assert str(caught.value).startswith(f"--ray {address!r}: ") and caught.value.exit_code == 2


def test_unreachable_cluster_names_the_address_and_exits_3():
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(RayUnreachable) as caught:
        check_reachable(address, timeout_s=2.0)
    assert str(caught.value).startswith(f"--ray {address}: no Ray cluster answers there")
    assert caught.value.exit_code == 3


def _cli(argv: list[str], hide_ray: bool) -> subprocess.CompletedProcess:
    code = (
        "import sys\n"
        + ("sys.modules['ray'] = None  # as if the extra were not installed\n" if hide_ray else "")
        + "from rampwatch.app.cli import main\n"
        + f"code = main({argv!r})\n"
        + "print('ray imported' if sys.modules.get('ray') else 'ray not imported')\n"
        + "sys.exit(code)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_ray_without_the_extra_is_one_line_before_anything_starts(tmp_path):
    out = _cli(["run", "chat", "--ray", "auto", "--headless", "--record", str(tmp_path / "r.rwrec")], hide_ray=True)
    assert out.returncode == 2
    assert out.stderr.strip() == f"rampwatch run: error: {RAY_MISSING}"
    assert "server:" not in out.stdout and not (tmp_path / "r.rwrec").exists()


@pytest.mark.slow
def test_a_run_without_ray_never_imports_it(tmp_path):
    out = _cli(
        [
            "run",
            "chat",
            "--headless",
            "--duration",
            "1",
            "--sim-hardware",
            "instant",
            "--sim-model",
            "tiny",
            "--no-record",
            "--result-json",
            str(tmp_path / "r.json"),
        ],
        hide_ray=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ray not imported")


def test_connecting_keeps_the_runs_sigterm_handler():
    """Ray's driver replaces SIGTERM's handler with an immediate exit; the run's graceful
    stop must still be the one a SIGTERM reaches."""
    import signal

    from rampwatch.loadgen.run.ray_workers import RayPool

    class RayInitSettingItsHandler:
        def init(self, **options):
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))

    def graceful_stop(signum, frame):
        pass

    before = signal.signal(signal.SIGTERM, graceful_stop)
    try:
        RayPool("auto")._connect(RayInitSettingItsHandler())
        assert signal.getsignal(signal.SIGTERM) is graceful_stop
    finally:
        signal.signal(signal.SIGTERM, before)
