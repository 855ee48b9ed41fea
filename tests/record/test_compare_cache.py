"""`rampwatch compare` warns when the later run could have read the earlier one's
prompts from the server's prefix cache, and shows each run's seed and cache policy."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from rampwatch.core.timeline import RunHeader
from rampwatch.record import format as fmt
from rampwatch.record.cli_compare import cache_policy, shared_cache_warning

REPO = Path(__file__).resolve().parents[2]


def header(
    *,
    started: float = 1000.0,
    target: str = "http://gpu-1:8000",
    seed: int = 0,
    policy: str | None = "none",
    salt: str | None = None,
    managed: bool = False,
    extra_body: dict | None = None,
) -> RunHeader:
    workload = {"input_tokens": 256, **({"extra_body": extra_body} if extra_body else {})}
    return RunHeader(
        rampwatch_version="0",
        started_at_unix=started,
        target=target,
        model="m",
        scenario_name="random",
        scenario={"seed": seed, "workload": workload},
        server_info={"managed_server": {"command": "vllm serve m"}} if managed else {},
        cache_salt_policy=policy,
        cache_salt=salt,
    )


A = header(started=1000.0)
LATER = 2000.0


@pytest.mark.parametrize(
    "b, warns",
    [
        (header(started=LATER), True),  # same server, same seed, no salt: B can read A's prompts
        (header(started=LATER, target="http://gpu-1:8000/v1"), True),  # the same origin
        (header(started=LATER, policy="auto", salt="rampwatch-b"), False),  # B's own fresh salt
        (header(started=LATER, policy="fixed", salt="x"), False),  # salted and unsalted never share
        (header(started=LATER, seed=1), False),  # other prompts
        (header(started=LATER, target="http://gpu-2:8000"), False),  # another server
        (header(started=LATER, target="http://gpu-1:8001"), False),
        (header(started=LATER, target="https://gpu-1:8000"), False),
        (header(started=LATER, managed=True), False),  # B started its server: it began empty
        (header(started=LATER, policy=None), True),  # an old recording: unknown, and the seeds match
        (header(started=LATER, policy=None, seed=4), False),
        (header(started=LATER, policy=None, extra_body={"cache_salt": "s"}), False),  # its own salt
        (header(started=1000.0), False),  # A itself: neither ran after the other
    ],
)
def test_the_later_run_is_warned_of_only_when_it_could_share_the_earlier_ones_cache(b, warns):
    warning = shared_cache_warning(A, b)
    assert (warning is not None) == warns
    if warns:
        assert warning.startswith("warning: B ran after A") and "\n" not in warning


@pytest.mark.parametrize(
    "a, b, warns",
    [
        (header(policy="fixed", salt="k"), header(started=LATER, policy="fixed", salt="k"), True),
        (header(policy="fixed", salt="k"), header(started=LATER, policy="fixed", salt="j"), False),
        (header(policy="auto", salt="rampwatch-a"), header(started=LATER, policy="auto", salt="rampwatch-b"), False),
    ],
)
def test_equal_salts_share_like_no_salts(a, b, warns):
    warning = shared_cache_warning(a, b)
    assert (warning is not None) == warns
    if warns:
        assert "the same cache salt k" in warning


def test_a_default_port_is_the_same_server_written_either_way():
    a, b = header(target="http://gpu-1"), header(started=LATER, target="http://gpu-1:80/v1")
    assert shared_cache_warning(a, b) is not None


def test_the_warning_names_whichever_ran_later():
    warning = shared_cache_warning(header(started=LATER), header(started=1000.0))
    assert warning is not None and warning.startswith("warning: A ran after B")
    assert shared_cache_warning(header(started=LATER, managed=True), header(started=1000.0)) is None


def test_old_recordings_read_with_an_unknown_policy():
    old = {k: v for k, v in A.to_dict().items() if not k.startswith("cache_salt")}
    decoded = fmt.decode_header(zlib.compress(json.dumps(old).encode()))
    assert decoded.cache_salt_policy is None and decoded.cache_salt is None
    assert cache_policy(decoded) == {"seed": 0, "cache_salt_policy": "unknown", "cache_salt": None}
    fresh = replace(A, cache_salt_policy="auto", cache_salt="rampwatch-1")
    assert fmt.decode_header(fmt.encode_header(fresh)) == fresh


def rampwatch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_repeat_runs_against_one_server_record_their_salts_and_compare_warns_only_without_them(tmp_path):
    from rampwatch.app.session import serving_sim
    from rampwatch.sim.config import SimConfig

    def run(name: str, *flags: str) -> tuple[str, subprocess.CompletedProcess]:
        path = str(tmp_path / f"{name}.rwrec")
        load = ("--duration", "2", "--start-rps", "6", "--end-rps", "6", "--seed", "9")
        proc = rampwatch("run", "random", "--headless", "--target", url, *load, "--record", path, *flags)
        assert proc.returncode == 0, proc.stderr
        return path, proc

    with serving_sim(SimConfig(hardware="instant", model="tiny")) as sim:
        url = sim.url
        auto, auto_run = run("auto")  # the default
        plain_1, _ = run("plain-1", "--cache-salt", "none")
        plain_2, _ = run("plain-2", "--cache-salt", "none")
    assert "; seed 9, cache salt rampwatch-" in auto_run.stdout and "(fresh for this run)" in auto_run.stdout

    shared = json.loads(rampwatch("compare", plain_1, plain_2, "--json").stdout)
    assert shared["cache_warning"].startswith("warning: B ran after A against the same server with the same seed (9)")
    assert shared["cache"]["b"] == {"seed": 9, "cache_salt_policy": "none", "cache_salt": None}

    isolated = json.loads(rampwatch("compare", auto, plain_1, "--json").stdout)
    assert isolated["cache_warning"] is None
    assert isolated["cache"]["a"]["cache_salt_policy"] == "auto"
    assert isolated["cache"]["a"]["cache_salt"].startswith("rampwatch-")

    text = rampwatch("compare", plain_1, plain_2).stdout.splitlines()
    assert text[0] == f"A: {plain_1} (seed 9, no cache salt (shares the server's prefix cache))"
    assert text[2].startswith("warning: B ran after A")
    report = rampwatch("report", auto).stdout.splitlines()
    assert report[1].startswith("seed 9, cache salt rampwatch-") and report[1].endswith("(fresh for this run)")
    report_json = json.loads(rampwatch("report", plain_1, "--json").stdout)
    assert report_json["cache"] == {"seed": 9, "cache_salt_policy": "none", "cache_salt": None}

    from rampwatch.app.replay import comparison_of

    _rows, panel_warning = comparison_of(plain_1, plain_2)()  # replay --compare's B-vs-A panel
    assert panel_warning == shared["cache_warning"]
