"""A sweep file read and checked: defaults, the load, flags over the file's keys, errors
naming the file, line and key, and the matrix expanded into configurations."""

import pytest

from rampwatch.app.sweep.spec import EarlyStop, expand_matrix, load_sweep
from rampwatch.core.errors import UserError
from tests.app.sweep.sweep_files import GOOD_SWEEP, write


def test_a_minimal_sweep_has_defaults(tmp_path):
    spec = load_sweep(write(tmp_path, GOOD_SWEEP))
    assert spec.configs == [{"--max-num-seqs": 8}, {"--max-num-seqs": 64}]
    assert spec.schedule == {
        "kind": "linear",
        "start_rps": 1.0,
        "end_rps": 20.0,
        "duration_s": 30.0,
        "arrival": "poisson",
    }
    assert spec.slo.text == "ttft_p99<500ms,itl_p99<50ms"
    assert spec.early_stop == EarlyStop()
    assert spec.output_dir == "sweeps/s"


def test_rates_become_a_steps_schedule_and_flags_override_the_file(tmp_path):
    text = GOOD_SWEEP.replace("  ramp: {start_rps: 1, end_rps: 20, duration_s: 30}", "  rates: [2, 4]\n  hold_s: 5")
    spec = load_sweep(write(tmp_path, text + "slo: ttft_p99<1s\n"), slo_text="itl_p99<20ms", output_dir="out")
    assert spec.schedule["steps"] == [{"rate": 2.0, "duration_s": 5.0}, {"rate": 4.0, "duration_s": 5.0}]
    assert spec.slo.text == "itl_p99<20ms" and spec.output_dir == "out"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (("matrix:", "matrixx: {}\nmatrix:"), "s.yaml:3: matrixx: unknown key; did you mean 'matrix'?"),
        (
            ("max_num_seqs: [8, 64]", "max_num_seqs: []"),
            "s.yaml:5: matrix.product.max_num_seqs: expected a non-empty list",
        ),
        (
            ("max_num_seqs: [8, 64]", "max_num_seqs: [8, null]"),
            "s.yaml:5: matrix.product.max_num_seqs[1]: expected a number",
        ),
        (("end_rps: 20", "end_rps: fast"), "s.yaml:7: load.ramp.end_rps: expected a number > 0, got 'fast'"),
        (("scenario: chat", "scenario: nope"), "s.yaml:1: scenario: scenario 'nope': no such file"),
        (("serve: vllm serve Qwen/Qwen2.5-0.5B --port 8311", "serve: 'vllm \"serve'"), "s.yaml:2: serve: cannot split"),
        (("load:", "slo: ttft<5\nload:"), "s.yaml:6: slo 'ttft<5': 'ttft<5': name a percentile"),
        (("  ramp:", "  hold_s: 3\n  ramp:"), "s.yaml:7: load.hold_s: belongs to rates:"),
    ],
)
def test_errors_name_the_file_line_and_key(tmp_path, change, says):
    path = write(tmp_path, GOOD_SWEEP.replace(*change))
    with pytest.raises(UserError) as err:
        load_sweep(path)
    assert str(err.value).startswith(str(path).replace("s.yaml", "")) and says in str(err.value), str(err.value)


@pytest.mark.parametrize(
    ("line", "given", "repeats"),
    [("", None, 1), ("repeats: 3\n", None, 3), ("repeats: 3\n", 2, 2)],
)
def test_repeats_from_the_file_or_the_flag(tmp_path, line, given, repeats):
    assert load_sweep(write(tmp_path, GOOD_SWEEP + line), repeats=given).repeats == repeats


@pytest.mark.parametrize("value", ["0", "2.5", "yes", "21"])
def test_a_bad_repeats_names_its_line(tmp_path, value):
    with pytest.raises(UserError, match=r"s.yaml:8: repeats: expected a whole number from 1 to 20"):
        load_sweep(write(tmp_path, GOOD_SWEEP + f"repeats: {value}\n"))


def test_a_missing_file_and_a_bad_flag_slo(tmp_path):
    with pytest.raises(UserError, match="no such sweep file"):
        load_sweep(tmp_path / "missing.yaml")
    with pytest.raises(UserError, match=r"^--slo 'ttft_p99<5%'"):
        load_sweep(write(tmp_path, GOOD_SWEEP), slo_text="ttft_p99<5%")


@pytest.mark.parametrize(
    ("product", "sets", "expected"),
    [
        (
            {"a": [1, 2], "--b": ["x", "y"]},
            None,
            [{"--a": 1, "--b": "x"}, {"--a": 1, "--b": "y"}, {"--a": 2, "--b": "x"}, {"--a": 2, "--b": "y"}],
        ),
        (None, [{"max_num_seqs": 8}, {"max-num-seqs": 8}], [{"--max-num-seqs": 8}]),  # the same configuration once
        ({"a": [1]}, [{"a": 1}, {"a": 2, "c": True}], [{"--a": 1}, {"--a": 2, "--c": True}]),
    ],
)
def test_expand_matrix(product, sets, expected):
    assert expand_matrix(product, sets) == expected


def test_a_sweep_compares_with_and_without_speculation(tmp_path):
    text = GOOD_SWEEP.replace(
        "  product:\n    max_num_seqs: [8, 64]\n",
        "  sets:\n"
        "    - {}\n"
        "    - {speculative-config: {method: ngram, num_speculative_tokens: 3}}\n"
        '    - {speculative_config: \'{"method": "eagle3", "num_speculative_tokens": 4}\'}\n',
    )
    spec = load_sweep(write(tmp_path, text))
    assert spec.configs == [
        {},
        {"--speculative-config": {"method": "ngram", "num_speculative_tokens": 3}},
        {"--speculative-config": '{"method": "eagle3", "num_speculative_tokens": 4}'},
    ]


def test_an_empty_mapping_is_no_flag_value(tmp_path):
    text = GOOD_SWEEP.replace("max_num_seqs: [8, 64]", "speculative-config: [{}]")
    with pytest.raises(UserError) as err:
        load_sweep(write(tmp_path, text))
    assert "matrix.product.speculative-config[0]: expected a number, a string, true/false or a mapping" in str(
        err.value
    )
