"""The client out of file descriptors (`ulimit -n` below what `--max-concurrency` needs):
the run raises its soft limit where the hard one allows, warns with the numbers where it
does not, and records the requests that could not get a socket as the client's own
failure (`client_limit`), never as the server's `connect` errors."""

from __future__ import annotations

import errno
import json
import re
import resource
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from rampwatch.app.session import serving_sim
from rampwatch.core.timeline import CLIENT_LIMIT, error_group
from rampwatch.loadgen.transport.open_files import out_of_files
from rampwatch.record.reader import open_recording
from rampwatch.sim.config import SimConfig

REPO = Path(__file__).resolve().parents[2]


def chained(outer: Exception, inner: BaseException) -> Exception:
    outer.__cause__ = inner
    return outer


def connector_error(os_error: OSError) -> aiohttp.ClientConnectorError:
    key = aiohttp.client_reqrep.ConnectionKey("h", 80, False, True, None, None, None)
    return aiohttp.ClientConnectorError(key, os_error)


@pytest.mark.parametrize(
    "exc, out",
    [
        (OSError(errno.EMFILE, "Too many open files"), True),
        (OSError(errno.ENFILE, "Too many open files in system"), True),
        (connector_error(OSError(errno.EMFILE, "Too many open files")), True),
        (chained(RuntimeError("wrapped"), OSError(errno.EMFILE, "Too many open files")), True),
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), False),
        (connector_error(ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")), False),
        (TimeoutError(), False),
    ],
)
def test_out_of_files_is_told_from_the_servers_failures(exc, out):
    assert out_of_files(exc) is out


def test_client_limit_is_in_no_server_error_group():
    assert error_group(CLIENT_LIMIT) is None  # never "connection": the header must not say SERVER DOWN
    assert error_group("connect") == "connection"


LIMITS_PROBE = """
import resource, sys
from rampwatch.loadgen.transport.open_files import raise_open_files_limit
cap = None if sys.argv[1] == "none" else int(sys.argv[1])
warning = raise_open_files_limit(cap)
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], warning)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "cap, soft_after, warning",
    [
        ("100", 164, None),  # raised to the cap plus the margin, within the hard limit
        ("none", 512, None),  # no cap: raised to the hard limit
        ("5000", 512, "--max-concurrency 5000 may hold about 5,064 open files, and this process may open 512 "
         "(ulimit -n; hard limit 512)"),
    ],
)  # fmt: skip
def test_the_soft_limit_is_raised_to_what_the_run_needs_or_one_warning_says_by_how_much(cap, soft_after, warning):
    proc = subprocess.run(
        [sys.executable, "-c", LIMITS_PROBE, cap],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 512)),
    )
    assert proc.returncode == 0, proc.stderr
    soft, said = proc.stdout.strip().split(" ", 1)
    assert int(soft) == soft_after
    if warning is None:
        assert said == "None"
    else:
        assert said.startswith(warning) and "client_limit" in said


@pytest.mark.slow
def test_a_run_out_of_open_files_blames_the_client_not_the_server(tmp_path):
    recording, result = tmp_path / "r.rwrec", tmp_path / "r.json"
    with serving_sim(SimConfig(hardware="l4", model="llama-3.1-8b-fp8")) as sim:
        proc = subprocess.run(
            [sys.executable, "-m", "rampwatch.app.cli", "run", "random", "--headless", "--target", sim.url,
             "--max-concurrency", "5000", "--duration", "1", "--start-rps", "300", "--end-rps", "300",
             "--set", "workload.output_tokens=32", "--set", "workload.input_tokens=32",
             "--record", str(recording), "--result-json", str(result)],
            cwd=REPO, capture_output=True, text=True, timeout=180,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (160, 160)),
        )  # fmt: skip
    assert proc.returncode == 1, proc.stderr  # the failed fraction is over --max-error-rate
    assert "Traceback" not in proc.stderr
    assert (
        "--max-concurrency 5000 may hold about 5,064 open files, and this process may open 160 (ulimit -n; "
        "hard limit 160)" in proc.stderr
    )
    with open_recording(recording) as rec:
        failed = [r for r in rec.requests if not r.ok]
    assert failed and {r.error_class for r in failed} == {CLIENT_LIMIT}
    assert all("out of open files" in (r.error or "") for r in failed)
    assert re.search(rf"client_limit \(the client's own\): +{len(failed)} *\n", proc.stdout), proc.stdout
    assert f"warning: {len(failed):,} requests failed in the client, not at the server" in proc.stdout
    assert "--max-concurrency slots" not in proc.stdout  # the lateness is not blamed on the slots
    assert json.loads(result.read_text())["rampwatch_errors_by_class"] == {CLIENT_LIMIT: len(failed)}
