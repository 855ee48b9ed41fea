"""`rampwatch run --repeats N` without a server: its flags' errors, each repeat's
configuration, and the sequence around a stand-in run (a copied recording and result
JSON): the combined files, an interrupted or failed repeat, outputs that exist."""

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from rampwatch.app.cli import main as rampwatch_main
from rampwatch.app.repeats import repeat_config, run_repeats, server_queue, wait_for_idle
from rampwatch.app.run_config import RunConfig
from rampwatch.core.errors import UserError

SMALL = Path(__file__).parents[1] / "data" / "small.rwrec"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--repeats", "0"], "argument --repeats: '0' is not a whole number from 1 to 20"),
        (["--repeats", "abc"], "argument --repeats: 'abc' is not a whole number from 1 to 20"),
        (["--repeats", "21"], "argument --repeats: '21' is not a whole number from 1 to 20"),
        (["--cool-down", "-1", "--repeats", "2"], "argument --cool-down: '-1' is not a number ≥ 0"),
    ],
)
def test_a_bad_repeats_flag_is_one_line(capsys, flags, message):
    with pytest.raises(SystemExit) as exit_:
        rampwatch_main(["run", "chat", "--headless", *flags])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(message)


@pytest.mark.parametrize("flag", [["--cool-down", "5"], ["--same-prompts"]])
def test_a_repeats_flag_without_repeats_is_one_line(capsys, flag):
    assert rampwatch_main(["run", "chat", "--headless", *flag]) == 2
    assert capsys.readouterr().err.strip() == f"rampwatch run: error: {flag[0]}: needs --repeats N (N ≥ 2)"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--detach"], "--detach with --repeats: not supported"),
        (["--no-record"], "--no-record with --repeats:"),
    ],
)
def test_repeats_refuse_what_they_cannot_do_in_one_line(capsys, flags, message):
    assert rampwatch_main(["run", "chat", "--headless", "--repeats", "2", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rampwatch run: error: {message}") and err.count("\n") == 1


def test_each_repeat_has_its_own_files_and_seed():
    config = RunConfig("chat", repeats=3, result_json="all.json", server_log="s.log")
    first, third = (repeat_config(config, k, Path("out/a.rwrec"), 7) for k in (1, 3))
    assert (first.record, first.seed, first.repeat, first.result_json) == ("out/a-r1.rwrec", 7, 1, None)
    assert (third.record, third.seed, third.server_log) == ("out/a-r3.rwrec", 9, "s-r3.log")
    same = repeat_config(RunConfig("chat", repeats=3, same_prompts=True), 3, Path("a.rwrec"), 7)
    assert same.seed == 7


def test_a_repeat_before_the_last_serves_its_final_figures_no_longer_than_the_cool_down():
    config = RunConfig("chat", repeats=3, cool_down=5.0, prometheus_port=9400, prometheus_linger=30.0)
    lingers = [repeat_config(config, k, Path("a.rwrec"), 7).prometheus_linger for k in (1, 2, 3)]
    assert lingers == [5.0, 5.0, 30.0]


class StandIn:
    """A run that leaves a recording and a result JSON (``mean_ttft_ms`` 50, 52, 54 …),
    or ends with ``codes[k]``."""

    def __init__(self, codes: dict[int, int | type[BaseException]] | None = None) -> None:
        self.codes = codes or {}
        self.seen: list[RunConfig] = []

    def __call__(self, config: RunConfig) -> int:
        self.seen.append(config)
        k = config.repeat
        shutil.copy(SMALL, config.record)
        code = self.codes.get(k, 0)
        if isinstance(code, type):
            raise code()
        if code == 0:
            result = {
                "model_id": "m", "completed": 10 + k, "mean_ttft_ms": 48.0 + 2 * k, "request_rate": 5.0,
                "max_concurrent_requests": 20 + k, "rampwatch_cancelled": 300 - 10 * k,
            }  # fmt: skip
            Path(config.record).with_suffix(".json").write_text(json.dumps(result))
        return code


def test_repeats_write_a_recording_each_the_combined_result_and_the_set(tmp_path, capsys):
    run = StandIn()
    config = RunConfig("chat", repeats=3, cool_down=0, record=str(tmp_path / "a.rwrec"))
    assert run_repeats(config, run) == 0
    assert [c.seed for c in run.seen] == [0, 1, 2]  # chat's seed, moved on each repeat
    combined = json.loads((tmp_path / "a.json").read_text())
    assert (combined["mean_ttft_ms"], combined["completed"], combined["request_rate"]) == (52.0, 12.0, 5.0)
    figures = combined["rampwatch_repeats"]["figures"]
    assert figures["mean_ttft_ms"]["values"] == [50.0, 52.0, 54.0]
    assert all(figures["mean_ttft_ms"]["mean"] - figures["mean_ttft_ms"]["ci95_half_width"] < v for v in (50, 54))
    assert "max_goodput_rps" in figures
    written = json.loads((tmp_path / "a.repeats.json").read_text())
    assert written["recordings"] == ["a-r1.rwrec", "a-r2.rwrec", "a-r3.rwrec"]
    out = capsys.readouterr().out
    assert "repeat 2/3 (seed 1) recording to" in out and "Repeats: mean ± 95 % interval (3 of 3)" in out


def test_the_repeats_summary_json_and_report_show_the_cancelled_the_peak_concurrency_and_the_knee(tmp_path, capsys):
    """A drain that cancels most requests: the cancelled count (the result JSON's
    ``rampwatch_cancelled``) and the peak concurrency are in the combined table, JSON and
    a report of the set; a knee no repeat reached says so (review rv-user29)."""
    config = RunConfig("chat", repeats=3, cool_down=0, record=str(tmp_path / "a.rwrec"))
    assert run_repeats(config, StandIn()) == 0
    out = capsys.readouterr().out
    combined = json.loads((tmp_path / "a.json").read_text())["rampwatch_repeats"]
    assert combined["figures"]["cancelled"]["values"] == [290.0, 280.0, 270.0]
    assert combined["figures"]["max_concurrent_requests"]["values"] == [21.0, 22.0, 23.0]
    assert combined["knee_reached"] == 0 and "knee_rps" not in combined["figures"]  # small.rwrec: no knee
    assert rampwatch_main(["report", str(tmp_path / "a.repeats.json")]) == 0
    report = capsys.readouterr().out
    for text in (out, report):
        lines = text.splitlines()
        cancelled = next(x for x in lines if x.startswith("Cancelled requests"))
        assert "280.0 ± " in cancelled and cancelled.endswith("290.0, 280.0, 270.0")
        peak = next(x for x in lines if x.startswith("Peak concurrent requests"))
        assert "22.0 ± " in peak and peak.endswith("21.0, 22.0, 23.0")
        assert next(x for x in lines if x.startswith("Knee")).endswith("not reached in 3/3")
    assert rampwatch_main(["report", str(tmp_path / "a.repeats.json"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["figures"]["cancelled"]["mean"] == 280.0 and data["knee_reached"] == 0


@pytest.mark.parametrize(("fail", "code"), [(130, 130), (KeyboardInterrupt, 130), (1, 1)])
def test_a_repeat_that_fails_keeps_the_ones_before_and_their_combined_result(tmp_path, capsys, fail, code):
    run = StandIn({2: fail})
    config = RunConfig("chat", repeats=3, cool_down=0, record=str(tmp_path / "a.rwrec"))
    assert run_repeats(config, run) == code
    assert len(run.seen) == 2 and (tmp_path / "a-r1.rwrec").is_file() and (tmp_path / "a-r2.rwrec").is_file()
    combined = json.loads((tmp_path / "a.json").read_text())["rampwatch_repeats"]
    assert (combined["requested"], combined["completed"], combined["recordings"]) == (
        3,
        1,
        [str(tmp_path / "a-r1.rwrec")],
    )
    captured = capsys.readouterr()
    assert f"repeat 2/3 ended with exit {code}; its recording {tmp_path / 'a-r2.rwrec'} is kept" in captured.err
    assert "(1 of 3)" in captured.out


def test_a_first_repeat_that_fails_writes_no_combined_result(tmp_path):
    config = RunConfig("chat", repeats=2, cool_down=0, record=str(tmp_path / "a.rwrec"))
    assert run_repeats(config, StandIn({1: 1})) == 1
    assert not (tmp_path / "a.json").exists() and not (tmp_path / "a.repeats.json").exists()


def test_outputs_that_exist_stop_the_repeats_before_the_first(tmp_path):
    (tmp_path / "a-r2.rwrec").write_text("earlier")
    run = StandIn()
    config = RunConfig("chat", repeats=2, cool_down=0, record=str(tmp_path / "a.rwrec"))
    with pytest.raises(UserError, match=r"a-r2.rwrec: exists \(a repeat's output\); --force replaces it"):
        run_repeats(config, run)
    assert run.seen == []
    assert (
        run_repeats(RunConfig("chat", repeats=2, cool_down=0, record=str(tmp_path / "a.rwrec"), force=True), run) == 0
    )


def test_the_idle_wait_reads_the_servers_queue(tmp_path, monkeypatch):
    pages = iter(
        ['vllm:num_requests_running 2\nvllm:num_requests_waiting{model_name="m"} 1\n', "vllm:num_requests_running 0\n"]
    )
    seen = []

    def fake(url, config):
        seen.append(url)
        text = next(pages)
        import rampwatch.app.repeats as repeats

        return sum(float(m.group(3)) for m in repeats._QUEUE_METRIC.finditer(text))  # noqa: SLF001

    monkeypatch.setattr("rampwatch.app.repeats.server_queue", fake)
    monkeypatch.setattr("rampwatch.app.repeats.IDLE_POLL_S", 0.0)
    wait_for_idle(RunConfig("chat", target="http://h:8000/v1"), out=None)  # type: ignore[arg-type]
    assert seen == ["http://h:8000/metrics", "http://h:8000/metrics"]
    seen.clear()
    wait_for_idle(RunConfig("chat"), out=None)  # type: ignore[arg-type]  # the embedded simulator: started afresh
    assert seen == []


def test_an_unreachable_server_queue_is_none():
    assert server_queue("http://127.0.0.1:9/metrics", RunConfig("chat"), timeout_s=0.5) is None


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_three_repeats_of_a_short_ramp_on_the_simulator(tmp_path):
    """The issue's acceptance: `--repeats 3` of a short ramp gives three recordings (each
    its own seed), the combined result JSON and set file, and for each figure an interval
    centred on the mean of the three repeats' figures that contains each of them (~20 s)."""
    import subprocess
    import sys

    from rampwatch.record.reader import open_recording

    done = subprocess.run(
        [
            sys.executable, "-m", "rampwatch.app.cli", "run", "chat", "--headless", "--duration", "5",
            "--start-rps", "2", "--end-rps", "6", "--set", "workload.output_tokens.min=10",
            "--set", "workload.output_tokens.max=30", "--repeats", "3", "--cool-down", "0",
            "--record", str(tmp_path / "a.rwrec"), "--progress-interval", "100",
        ],
        capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seeds = []
    for k in (1, 2, 3):
        with open_recording(tmp_path / f"a-r{k}.rwrec") as rec:
            seeds.append(rec.header.scenario["seed"])
    assert seeds == [0, 1, 2]
    combined = json.loads((tmp_path / "a.json").read_text())
    figures = combined["rampwatch_repeats"]["figures"]
    assert {"completed", "request_throughput", "mean_ttft_ms", "p99_itl_ms", "max_goodput_rps"} <= set(figures)
    for key, figure in figures.items():
        values = figure["values"]
        assert figure["n"] == len(values) == 3, key
        assert figure["mean"] == pytest.approx(sum(values) / 3), key
        if key in combined:
            assert combined[key] == pytest.approx(figure["mean"]), key  # vLLM's key: the mean
        half = figure["ci95_half_width"]
        assert all(figure["mean"] - half - 1e-9 <= v <= figure["mean"] + half + 1e-9 for v in values), key
    assert json.loads((tmp_path / "a.repeats.json").read_text())["recordings"] == [f"a-r{k}.rwrec" for k in (1, 2, 3)]
    mean_ttft = figures["mean_ttft_ms"]
    assert f"{mean_ttft['mean']:.2f} ± {mean_ttft['ci95_half_width']:.2f}" in done.stdout


def test_an_interrupt_during_the_cool_down_combines_the_repeats_done(tmp_path, monkeypatch):
    def interrupted(_seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr("rampwatch.app.repeats.time.sleep", interrupted)
    config = RunConfig("chat", repeats=3, cool_down=5, record=str(tmp_path / "a.rwrec"))
    assert run_repeats(config, StandIn()) == 130
    assert json.loads((tmp_path / "a.json").read_text())["rampwatch_repeats"]["completed"] == 1


def test_the_live_screen_says_which_repeat_it_shows():
    from rampwatch.app.live import repeat_notice

    assert repeat_notice(RunConfig("chat", repeats=3, repeat=2, seed=5)) == (
        "repeat 2/3 (seed 5): once it is done the next follows (5 s on, or q); stopping it before then ends the repeats"
    )
    assert repeat_notice(RunConfig("chat", repeats=3, repeat=3, seed=6)) == "repeat 3/3 (seed 6), the last one"


def test_a_repeat_whose_figures_cannot_be_read_back_ends_the_repeats(tmp_path, capsys):
    def no_result(config: RunConfig) -> int:
        Path(config.record).write_bytes(b"not a recording")
        return 0

    config = RunConfig("chat", repeats=2, cool_down=0, record=str(tmp_path / "a.rwrec"))
    assert run_repeats(config, no_result) == 1
    assert f"repeat 1/2: cannot read its figures back from {tmp_path / 'a-r1.rwrec'}" in capsys.readouterr().err


class _Pages:
    """Two local HTTP servers in threads: ``front`` answers /metrics as ``behaviour``
    says; ``elsewhere`` (another origin) notes whatever reaches it."""

    def __init__(self, behaviour: str) -> None:
        import http.server
        import threading

        self.seen: list[dict[str, str]] = []
        seen = self.seen

        class Elsewhere(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                seen.append(dict(self.headers))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"vllm:num_requests_running 0\n")

            def log_message(self, *args: object) -> None:
                pass

        self.elsewhere = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
        target = f"http://127.0.0.1:{self.elsewhere.server_address[1]}/metrics"

        class Front(Elsewhere):
            def do_GET(self) -> None:  # noqa: N802
                seen.append(dict(self.headers))
                if behaviour == "redirect":
                    self.send_response(302)
                    self.send_header("Location", target)
                    self.end_headers()
                    return
                self.send_response(200)  # trickle: a byte a tenth of a second, for ever
                self.end_headers()
                try:
                    while True:
                        self.wfile.write(b"#")
                        self.wfile.flush()
                        time.sleep(0.1)
                except OSError:
                    pass

        self.front = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Front)
        self.front.daemon_threads = True
        for server in (self.front, self.elsewhere):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.front.server_address[1]}/metrics"

    def close(self) -> None:
        for server in (self.front, self.elsewhere):
            server.shutdown()
            server.server_close()


def test_the_idle_wait_follows_no_redirect_and_sends_no_api_key():
    pages = _Pages("redirect")
    try:
        config = RunConfig("chat", api_key="sk-SECRET", header=(("X-Gw", "HDRSECRET"),))
        assert server_queue(pages.url, config, timeout_s=2.0) is None
    finally:
        pages.close()
    assert len(pages.seen) == 1  # the redirect was not followed to the other origin
    assert pages.seen[0].get("X-Gw") == "HDRSECRET" and "Authorization" not in pages.seen[0]


def test_a_metrics_page_that_trickles_in_is_given_up_within_the_timeout():
    pages = _Pages("trickle")
    try:
        started = time.monotonic()
        assert server_queue(pages.url, RunConfig("chat"), timeout_s=0.5) is None
        assert time.monotonic() - started < 2.0
    finally:
        pages.close()


def test_sigterm_during_the_cool_down_combines_the_repeats_done(tmp_path, monkeypatch):
    def terminated(_seconds):
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr("rampwatch.app.repeats.time.sleep", terminated)
    before = signal.getsignal(signal.SIGTERM)
    config = RunConfig("chat", repeats=3, cool_down=5, record=str(tmp_path / "a.rwrec"))
    assert run_repeats(config, StandIn()) == 130  # was: killed by SIGTERM, nothing combined
    assert json.loads((tmp_path / "a.json").read_text())["rampwatch_repeats"]["completed"] == 1
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("combined", ["a-r1.rwrec", "a-r2.json", "a-r1.rwrec.server.log", "a.repeats.json"])
def test_a_combined_result_json_that_is_a_repeats_own_file_is_refused_before_the_first(tmp_path, combined):
    run = StandIn()
    config = RunConfig(
        "chat", repeats=2, cool_down=0, record=str(tmp_path / "a.rwrec"), result_json=str(tmp_path / combined)
    )
    with pytest.raises(UserError, match=r"is one of the repeats' own files"):
        run_repeats(config, run)
    assert run.seen == []


def test_a_combined_result_json_that_cannot_be_written_is_refused_before_the_first(tmp_path):
    (tmp_path / "file").write_text("")
    run = StandIn()
    config = RunConfig(
        "chat", repeats=2, cool_down=0, record=str(tmp_path / "a.rwrec"), result_json=str(tmp_path / "file" / "x.json")
    )
    with pytest.raises(UserError, match=r"a parent of it is not a directory"):
        run_repeats(config, run)
    assert run.seen == []


@pytest.mark.parametrize("record", ["dir", os.devnull])
def test_a_record_that_is_not_a_file_is_refused_before_the_first(tmp_path, record):
    (tmp_path / "dir").mkdir()
    run = StandIn()
    path = str(tmp_path / record) if record == "dir" else record
    with pytest.raises(UserError, match=r"not a file; --repeats names its files after it"):
        run_repeats(RunConfig("chat", repeats=2, cool_down=0, record=path), run)
    assert run.seen == []


def test_a_repeat_whose_start_fails_with_one_line_still_combines_the_ones_before(tmp_path, capsys):
    class Gone(UserError):
        exit_code = 3

    def gone_at_2(config: RunConfig) -> int:
        if config.repeat == 2:
            raise Gone("cannot reach http://127.0.0.1:9 : connection refused")
        return StandIn()(config)

    config = RunConfig("chat", repeats=3, cool_down=0, record=str(tmp_path / "a.rwrec"))
    assert run_repeats(config, gone_at_2) == 3  # was: the error escaped, nothing combined
    assert json.loads((tmp_path / "a.json").read_text())["rampwatch_repeats"]["completed"] == 1
    assert (tmp_path / "a.repeats.json").is_file()
    err = capsys.readouterr().err
    assert "rampwatch run: error: cannot reach http://127.0.0.1:9" in err and "repeat 2/3 ended with exit 3" in err
