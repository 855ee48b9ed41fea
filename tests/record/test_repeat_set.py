"""A set of repeated runs: figures combined as mean ± 95 % interval, the combined result
JSON (vLLM's keys the means), the set file written and read back, its bad forms one line."""

import json
import math
import shutil
from pathlib import Path

import pytest

from rampwatch.core.errors import UserError
from rampwatch.record.reader import open_recording
from rampwatch.record.repeat_set import (
    combine_figures,
    combined_result,
    format_set_summary,
    numeric_figures,
    read_set,
    recording_extras,
    repeat_recording,
    report_set,
    set_file,
    write_set,
)

SMALL = Path(__file__).parents[1] / "data" / "small.rwrec"


def test_repeat_files_sit_beside_the_base_recording():
    assert repeat_recording(Path("out/a.rwrec"), 2) == Path("out/a-r2.rwrec")
    assert set_file(Path("out/a.rwrec")) == Path("out/a.repeats.json")


def test_numeric_figures_leave_out_settings_lists_text_and_additions():
    result = {
        "completed": 10, "mean_ttft_ms": 52.5, "request_rate": 5.0, "ramp_up_end_rps": 9.0, "model_id": "m",
        "ttfts": [0.1], "rampwatch_server": {"x": 1}, "rampwatch_x": 3.0, "p99_ttft_ms": float("nan"), "ok": True,
    }  # fmt: skip
    assert numeric_figures(result) == {"completed": 10.0, "mean_ttft_ms": 52.5}


def test_a_repeat_that_completed_no_request_has_no_latency_figures():
    # vLLM writes 0 ms for the latencies of no request: a mean over repeats must not read it
    result = {"completed": 0, "request_throughput": 0.0, "mean_ttft_ms": 0.0, "p99_itl_ms": 0.0, "failed": 12}
    assert numeric_figures(result) == {"completed": 0.0, "request_throughput": 0.0, "failed": 12.0}
    both = combine_figures([numeric_figures(result), {"completed": 5.0, "mean_ttft_ms": 71.83}])
    assert both["mean_ttft_ms"].mean == 71.83 and both["mean_ttft_ms"].n == 1


@pytest.mark.parametrize(
    ("result", "cancelled"),
    [({"rampwatch_cancelled": 275}, 275.0), ({"rampwatch_cancelled": 0}, 0.0), ({}, None),
     ({"rampwatch_cancelled": None}, None), ({"rampwatch_cancelled": True}, None)],
)  # fmt: skip
def test_the_cancelled_count_is_a_figure_of_a_repeat(result, cancelled):
    """A drain that cancels shrinks ``completed``: the cancelled count is combined too
    (a result JSON from before it had none: no figure)."""
    assert numeric_figures({"completed": 10, **result}).get("cancelled") == cancelled


@pytest.mark.parametrize(
    ("knees", "row_end"),
    [
        ([None, None, None], "not reached in 3/3"),
        ([7.0, None, 9.0], "7.00, 9.00 (reached in 2/3: the mean is over those)"),
        ([7.0, 8.0, 9.0], "7.00, 8.00, 9.00"),
    ],
)
def test_the_summary_always_answers_the_knee(knees, row_end):
    figures = [{"completed": 10.0, "knee_rps": k} for k in knees]
    combined = combine_figures(figures)
    summary = format_set_summary(combined, 3)
    knee = next(x for x in summary.splitlines() if x.startswith("Knee (req/s offered)"))
    assert knee.endswith(row_end)
    reached = sum(k is not None for k in knees)
    assert (
        combined_result([{"completed": 10}] * 3, combined, ["a", "b", "c"], 3)["rampwatch_repeats"]["knee_reached"]
        == reached
    )


def test_combined_result_keeps_vllm_keys_as_the_means_and_adds_the_intervals():
    results = [
        {
            "model_id": "m",
            "completed": 10,
            "mean_ttft_ms": 50.0,
            "request_rate": 5.0,
            "ttfts": [1.0],
            "rampwatch_server": {"kv": 3.0},
        },  # fmt: skip
        {"model_id": "m", "completed": 12, "mean_ttft_ms": 54.0, "request_rate": 5.0, "ttfts": [1.0]},
        {"model_id": "m", "completed": 14, "mean_ttft_ms": 58.0, "request_rate": 5.0, "ttfts": [1.0]},
    ]
    figures = [{**numeric_figures(r), "knee_rps": k} for r, k in zip(results, (7.0, 8.0, 9.0), strict=True)]
    combined = combine_figures(figures)
    out = combined_result(results, combined, ["a-r1.rwrec", "a-r2.rwrec", "a-r3.rwrec"], 3)
    assert (out["completed"], out["mean_ttft_ms"], out["request_rate"], out["model_id"]) == (12.0, 54.0, 5.0, "m")
    assert "ttfts" not in out and "knee_rps" not in out  # knee only under rampwatch_repeats
    assert "rampwatch_server" not in out  # the first repeat's own, not the set's
    repeats = out["rampwatch_repeats"]
    assert (repeats["requested"], repeats["completed"], repeats["confidence"]) == (3, 3, 0.95)
    ttft = repeats["figures"]["mean_ttft_ms"]
    assert ttft["values"] == [50.0, 54.0, 58.0] and ttft["n"] == 3
    assert ttft["ci95_half_width"] == pytest.approx(4.303 * 4 / math.sqrt(3), rel=1e-4)
    assert repeats["figures"]["knee_rps"]["mean"] == 8.0
    summary = format_set_summary(combined, 3)
    assert "Mean TTFT (ms)" in summary and "54.00 ± 9.94" in summary and "50.00, 54.00, 58.00" in summary
    assert "Knee (req/s offered)" in summary and "(3 of 3)" in summary


def test_a_figure_one_repeat_lacks_is_combined_over_the_others():
    combined = combine_figures([{"knee_rps": 7.0}, {}, {"knee_rps": 9.0}])
    assert combined["knee_rps"].n == 2 and combined["knee_rps"].mean == 8.0


def test_recording_extras_give_the_knee_and_the_max_good_put():
    with open_recording(SMALL) as rec:
        plain = recording_extras(rec, None)
        strict = recording_extras(rec, {"ttft_ms": 0.001})
    assert plain["max_goodput_rps"] > 0 and strict["max_goodput_rps"] == 0.0


def make_set(tmp_path: Path, name: str, values: list[float]) -> Path:
    recordings = []
    for k in range(1, len(values) + 1):
        rec = tmp_path / f"{name}-r{k}.rwrec"
        shutil.copy(SMALL, rec)
        recordings.append(rec)
    combined = combine_figures([{"mean_ttft_ms": v, "completed": 10.0, "failed": 0.0} for v in values])
    path = tmp_path / f"{name}.repeats.json"
    write_set(path, "chat", len(values), recordings, combined)
    return path


def test_a_set_file_round_trips(tmp_path):
    path = make_set(tmp_path, "a", [50.0, 52.0, 54.0])
    assert json.loads(path.read_text())["recordings"] == ["a-r1.rwrec", "a-r2.rwrec", "a-r3.rwrec"]
    got = read_set(path)
    assert got.recordings == tuple(tmp_path / f"a-r{k}.rwrec" for k in (1, 2, 3))
    assert got.values["mean_ttft_ms"] == (50.0, 52.0, 54.0)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.write_text("{not json"), r"not a repeats file \(damaged JSON"),
        (lambda p: p.write_text('{"format": "other"}'), r'not a repeats file \(no "format": "rampwatch-repeats"\)'),
        (lambda p: p.write_text('{"format": "rampwatch-repeats", "recordings": [], "figures": {}}'), "is not a list"),
        (lambda p: (p.parent / "a-r2.rwrec").unlink(), r"names recording\(s\) that are missing: .*a-r2.rwrec"),
        (
            lambda p: p.write_text(p.read_text().replace('"values": [\n        50.0', '"values": [\n        "x"')),
            r"figures.mean_ttft_ms.values is not a list of finite numbers",
        ),
        (lambda p: p.write_bytes(b"\xff\xfe"), "damaged JSON"),
        # hand-edited: each was a traceback (RecursionError, OverflowError) or "nan" in compare
        (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), r"damaged JSON: nested too deep"),
        (lambda p: p.write_text(p.read_text().replace("50.0", "1" + "0" * 400)), "not a list of finite numbers"),
        (lambda p: p.write_text(p.read_text().replace("50.0", "NaN")), "not a list of finite numbers"),
        (lambda p: p.write_text(p.read_text().replace("50.0", "-Infinity")), "not a list of finite numbers"),
        # a set that lies: a recording elsewhere, more values than repeats
        (
            lambda p: p.write_text(p.read_text().replace('"a-r2.rwrec"', '"../../../../etc/passwd"')),
            r"names a file outside its folder: \.\./\.\./\.\./\.\./etc/passwd",
        ),
        (
            lambda p: p.write_text(
                p.read_text().replace('"values": [\n        50.0', '"values": [\n 1.0, 2.0, 3.0, 50.0')
            ),
            r"figures.mean_ttft_ms.values has 5 values for 2 recordings",
        ),
    ],
)
def test_a_bad_set_file_is_one_line_naming_it(tmp_path, damage, message):
    path = make_set(tmp_path, "a", [50.0, 52.0])
    damage(path)
    with pytest.raises(UserError, match=message) as err:
        read_set(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_missing_set_file_is_one_line(tmp_path):
    with pytest.raises(UserError, match="cannot read"):
        read_set(tmp_path / "none.repeats.json")


def test_report_of_a_set_prints_its_summary_and_recordings(tmp_path, capsys):
    from rampwatch.app.cli import main as rampwatch_main

    path = make_set(tmp_path, "a", [50.0, 52.0, 54.0])
    assert rampwatch_main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Repeats: mean ± 95 % interval (3 of 3)" in out and "50.00, 52.00, 54.00" in out
    assert f"recordings: {tmp_path / 'a-r1.rwrec'}, " in out
    assert rampwatch_main(["report", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["figures"]["mean_ttft_ms"]["mean"] == 52.0
    (tmp_path / "a-r3.rwrec").unlink()
    assert rampwatch_main(["report", str(path)]) == 2
    assert "names recording(s) that are missing" in capsys.readouterr().err


@pytest.mark.parametrize("key", ["p90_queue_time_ms", "p9.9.9_a_ms", "p90_x\u001b[31m_ms"])
def test_report_of_a_set_with_an_odd_percentile_key_names_it_in_one_row(tmp_path, capsys, key):
    path = make_set(tmp_path, "a", [50.0, 52.0])
    data = json.loads(path.read_text())
    data["figures"][key] = {"values": [1.0, 2.0]}
    path.write_text(json.dumps(data))
    assert report_set(path) == 0  # was: ValueError (too many values to unpack) for p90_queue_time_ms
    out = capsys.readouterr().out
    assert "\x1b" not in out


def test_figures_past_floats_range_give_no_traceback(tmp_path, capsys):
    path = make_set(tmp_path, "a", [1e200, -1e200])
    assert report_set(path) == 0  # was: OverflowError squaring 1e200
