"""`rampwatch compare` of two sets of repeats: Welch's interval per figure over the
repeats, the verdict, and the CLI's table, JSON and one-line errors."""

import json

import pytest

from rampwatch.app.cli import main as rampwatch_main
from rampwatch.record.compare_sets import compare_set_rows, set_verdict
from rampwatch.record.repeat_set import RepeatSet
from tests.record.test_repeat_set import SMALL, make_set


@pytest.mark.parametrize(
    ("low", "high", "change", "higher_better", "verdict"),
    [
        (1.0, 3.0, 10.0, True, "better"),
        (1.0, 3.0, 10.0, False, "worse"),
        (-3.0, -1.0, -10.0, False, "better"),
        (-1.0, 3.0, 10.0, True, "within noise"),
        (0.01, 0.02, 0.5, True, "negligible"),
        (None, None, 10.0, True, "too few repeats"),
        (1.0, 3.0, 10.0, None, "-"),
    ],
)
def test_set_verdict(low, high, change, higher_better, verdict):
    assert set_verdict(low, high, change, higher_better) == verdict


def repeat_set(values: dict[str, tuple[float, ...]]) -> RepeatSet:
    return RepeatSet(SMALL, (SMALL,), values)


def test_rows_use_the_per_repeat_figures():
    a = repeat_set({"mean_ttft_ms": (50.0, 52.0, 54.0), "completed": (10.0, 10.0, 10.0), "failed": (0.0, 1.0, 0.0)})
    b = repeat_set({"mean_ttft_ms": (70.0, 72.0, 74.0), "completed": (10.0, 10.0, 10.0), "failed": (0.0, 0.0, 1.0)})
    rows = {r["key"]: r for r in compare_set_rows(a, b)}
    ttft = rows["mean_ttft_ms"]
    assert (ttft["a"], ttft["b"], ttft["delta"], ttft["verdict"], ttft["better"]) == (52.0, 72.0, 20.0, "worse", "A")
    assert ttft["low"] < 20.0 < ttft["high"] and ttft["low"] > 0
    assert rows["error_rate_pct"]["verdict"] == "within noise"
    assert "knee_rps" not in rows  # neither set has it


def test_request_counts_keep_their_interval_but_have_no_verdict():
    """As in a compare of two recordings, a count of requests follows the load's length
    and drain, not only the server: shown with its interval, not judged (review rv-user29)."""
    a = repeat_set({"completed": (105.0, 43.0, 80.0), "failed": (0.0, 0.0, 0.0), "cancelled": (275.0, 383.0, 300.0)})
    b = repeat_set({"completed": (500.0, 510.0, 505.0), "failed": (9.0, 8.0, 9.0), "cancelled": (0.0, 1.0, 0.0)})
    rows = {r["key"]: r for r in compare_set_rows(a, b)}
    for key in ("completed", "failed", "cancelled"):
        assert rows[key]["verdict"] == "-" and rows[key]["better"] is None, key
        assert rows[key]["low"] is not None and rows[key]["low"] < rows[key]["delta"] < rows[key]["high"], key
    assert rows["error_rate_pct"]["verdict"] == "worse"  # a rate, not a count: still judged


def test_a_set_of_one_repeat_has_no_interval():
    rows = compare_set_rows(repeat_set({"mean_ttft_ms": (50.0,)}), repeat_set({"mean_ttft_ms": (70.0, 71.0)}))
    assert (
        rows[0]["verdict"] == "too few repeats" and rows[0]["low"] is None and rows[0]["delta"] == pytest.approx(20.5)
    )


def test_compare_of_two_sets_prints_the_welch_table(tmp_path, capsys):
    a = make_set(tmp_path, "a", [50.0, 52.0, 54.0])
    b = make_set(tmp_path, "b", [70.0, 72.0, 74.0])
    assert rampwatch_main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("Mean TTFT (ms)"))
    assert "+20.00 [+" in line and line.endswith("B worse (↓ better)")
    assert f"A: {a} (3 repeats)" in out and "Welch's 95% interval of B − A over the repeats' figures" in out
    assert "request counts are not judged" in out
    assert next(x for x in out.splitlines() if x.startswith("Successful requests")).endswith("  - (↑ better)")
    assert rampwatch_main(["compare", str(a), str(b), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sets"]["a"] == [str(tmp_path / f"a-r{k}.rwrec") for k in (1, 2, 3)]
    assert {r["key"]: r["verdict"] for r in data["rows"]}["mean_ttft_ms"] == "worse"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda t: (t / "b-r1.rwrec").unlink(), "names recording(s) that are missing"),
        (lambda t: (t / "b.repeats.json").write_text("{"), "not a repeats file (damaged JSON"),
    ],
)
def test_a_bad_set_in_compare_is_one_line(tmp_path, capsys, damage, message):
    a = make_set(tmp_path, "a", [50.0, 52.0])
    b = make_set(tmp_path, "b", [50.0, 52.0])
    damage(tmp_path)
    assert rampwatch_main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rampwatch compare: error: {b}: ") and message in err and err.count("\n") == 1


def test_a_set_beside_a_recording_is_one_line(tmp_path, capsys):
    a = make_set(tmp_path, "a", [50.0, 52.0])
    assert rampwatch_main(["compare", str(a), str(SMALL)]) == 2
    err = capsys.readouterr().err
    assert "not a repeats file (*.repeats.json), and the other is" in err and err.count("\n") == 1
