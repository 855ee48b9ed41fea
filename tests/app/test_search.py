"""`rampwatch search`: bad inputs are one line before anything starts; on the simulator a
search finds a max rate whose confirming hold meets the SLO and whose next step up does not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rampwatch.app.cli import main
from rampwatch.core.figures.search import search_holds, search_result
from rampwatch.record.reader import open_recording
from tests.processes import free_port

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--slo", "ttft_p99<fast"], "--slo 'ttft_p99<fast'"),
        (["--slo", "ttft_p99<500ms", "--tolerance", "0"], "--tolerance '0'"),
        (["--slo", "ttft_p99<500ms", "--tolerance", "fast"], "--tolerance 'fast'"),
        (["--slo", "ttft_p99<500ms", "--by", "concurrency"], "--by concurrency: the scenario's schedule (kind linear)"),
        (["--slo", "ttft_p99<500ms", "--set", "schedule.num_requests=100"], "schedule.num_requests: a search ends"),
        (["--slo", "ttft_p99<500ms", "--set", "schedule.kind=poisson", "--set", "schedule.rate=3"], "(kind poisson)"),
        (["--slo", "ttft_p99<500ms", "--repeats", "3"], "--repeats 3: not with rampwatch search"),
    ],
)
def test_bad_search_input_is_one_line(tmp_path, capsys, extra, message):
    code = main(["search", "chat", "--headless", "--record", str(tmp_path / "r.rwrec"), *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("rampwatch search: error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "r.rwrec").exists()


@pytest.mark.parametrize("hold", ["0", "-2", "nan", "x"])
def test_bad_hold_is_refused_by_the_parser(capsys, hold):
    with pytest.raises(SystemExit) as exc:
        main(["search", "chat", "--headless", "--slo", "ttft_p99<500ms", "--hold", hold])
    assert exc.value.code == 2
    assert "--hold" in capsys.readouterr().err


def test_help_lists_the_search_flags(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["search", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert all(flag in out for flag in ("--slo", "--by", "--tolerance", "--hold", "(default 5%)"))


def test_search_needs_an_slo(capsys):
    with pytest.raises(SystemExit):
        main(["search", "chat", "--headless"])
    assert "--slo" in capsys.readouterr().err


def search(tmp_path: Path, slo: str, *extra: str) -> subprocess.CompletedProcess:
    port = free_port()
    # ~30 ms a decode step and 4 sequences at a time: short answers saturate it near 5 req/s.
    serve = f"rampwatch sim --hardware l4 --model llama-3.1-8b-fp8 --max-num-seqs 4 --port {port}"
    argv = [
        *("search", "chat", "--headless", "--progress-interval", "100", "--serve", serve),
        *("--target", f"http://127.0.0.1:{port}", "--record", str(tmp_path / "s.rwrec")),
        *("--result-json", str(tmp_path / "s.json"), "--drain", "cancel"),
        *("--set", "workload.output_tokens=20", "--set", "workload.input_tokens=50"),
        *("--slo", slo, "--hold", "2", *extra),
    ]
    return subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", *argv], cwd=REPO, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_search_on_the_simulator_confirms_the_max(tmp_path, capsys):
    out = search(
        tmp_path, "ttft_p90<300ms", "--start-rps", "1", "--end-rps", "20", "--duration", "10", "--tolerance", "1"
    )
    assert out.returncode == 0, out.stderr
    result = json.loads((tmp_path / "s.json").read_text())["rampwatch_search"]
    assert result["failure"] is None and result["next_step_up"] - result["max"] <= 1.0 + 1e-9
    holds = result["holds"]
    confirm = [h for h in holds if h["level"] == result["max"]][-1]
    step_up = [h for h in holds if h["level"] == result["next_step_up"]][-1]
    assert confirm["passed"] and confirm["figures"]["ttft_p90"] <= 300
    assert step_up["passed"] is False and step_up["figures"]["ttft_p90"] > 300
    line = f"max {result['max']:.3g} req/s (± {result['plus_minus']:.3g}) under SLO ttft_p90<300ms, confirmed by a 2-second hold at {result['max']:.3g}"
    assert line in out.stdout
    # headless, each step shows as it happens: the bracket, each hold and its verdict
    steps = [ln.split("] search: ", 1)[1] for ln in out.stdout.splitlines() if "] search: " in ln]
    assert any(step.startswith("bracket: ") for step in steps)
    assert sum(step.startswith("hold at ") and " s, " in step for step in steps) == len(holds)
    # recorded: a replay (and report) reads the same holds back
    with open_recording(tmp_path / "s.rwrec") as recording:
        assert search_result(recording.events) == result
        assert [h["level"] for h in search_holds(recording.events)] == [h["level"] for h in holds]
    # rampwatch report and its HTML say the answer and list the holds
    capsys.readouterr()
    assert main(["report", str(tmp_path / "s.rwrec")]) == 0
    report = capsys.readouterr().out
    assert line in report and f"hold {len(holds)}: " in report
    html_page = tmp_path / "s.html"
    assert main(["export", str(tmp_path / "s.rwrec"), "--format", "html", "-o", str(html_page)]) == 0
    assert "<h2>Search</h2>" in html_page.read_text()


@pytest.mark.slow
def test_a_search_that_cannot_bracket_says_so_and_keeps_its_files(tmp_path):
    out = search(tmp_path, "ttft_p90<1ms", "--start-rps", "1", "--end-rps", "4", "--duration", "4")
    assert out.returncode == 1
    assert "rampwatch search: no maximum under SLO ttft_p90<1ms: the SLO was already broken at the start" in out.stderr
    assert "Traceback" not in out.stderr
    assert (tmp_path / "s.rwrec").exists() and "rampwatch_search" in (tmp_path / "s.json").read_text()
    assert "Successful requests" in out.stdout  # the summary is kept
