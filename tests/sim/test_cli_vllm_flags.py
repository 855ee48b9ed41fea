"""`rampwatch sim` takes vLLM's spelling of the serve arguments, so one sweep line runs
against either server."""

import argparse
import shlex

import pytest

from rampwatch.app.cli import main as rampwatch_main
from rampwatch.sim.cli import (
    IGNORED_VLLM_FLAGS_WITH_VALUE,
    IGNORED_VLLM_SWITCHES,
    config_from_args,
    config_to_argv,
    configure,
)
from rampwatch.sim.config import SimConfig


def parse(line: str) -> SimConfig:
    parser = argparse.ArgumentParser()
    configure(parser)
    return config_from_args(parser.parse_args(shlex.split(line)))


def test_a_vllm_serve_line_configures_the_simulator():
    cfg = parse(
        "--hardware h100 --tensor-parallel-size 2 --data-parallel-size 3 --no-enable-chunked-prefill "
        "--kv-cache-dtype fp8 --max-num-seqs 64 --max-num-batched-tokens 16384 --max-model-len 16384 "
        "--gpu-memory-utilization 0.85 --no-enable-prefix-caching --dtype bfloat16 --trust-remote-code "
        "--disable-log-requests --api-key sk-secret --uvicorn-log-level warning --enforce-eager -pp 1"
    )
    assert cfg.tensor_parallel_size == 2 and cfg.engines == 3
    assert not cfg.enable_chunked_prefill and cfg.kv_cache_dtype == "fp8"
    assert cfg.max_num_seqs == 64 and cfg.max_num_batched_tokens == 16384 and cfg.max_model_len == 16384
    assert cfg.gpu_memory_utilization == 0.85 and not cfg.enable_prefix_caching
    assert not cfg.enable_prompt_tokens_details  # off unless asked, as in vLLM
    assert parse("--enable-prompt-tokens-details").enable_prompt_tokens_details


def test_short_spellings_and_the_old_engines_flag():
    assert parse("-tp 4 -dp 2").tensor_parallel_size == 4
    assert parse("-tp 4 -dp 2").engines == 2
    assert parse("--engines 3").engines == 3
    assert parse("--enable-chunked-prefill --enable-prefix-caching").enable_chunked_prefill


@pytest.mark.parametrize("flag", IGNORED_VLLM_FLAGS_WITH_VALUE)
def test_ignored_flags_with_a_value_are_accepted(flag):
    assert parse(f"{flag} something") == parse("")


@pytest.mark.parametrize("flag", IGNORED_VLLM_SWITCHES)
def test_ignored_switches_are_accepted(flag):
    assert parse(flag) == parse("")


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--pipeline-parallel-size", "2"], "--pipeline-parallel-size 2: the simulator models tensor and data"),
        (["--tensor-parallel-size", "3"], "--tensor-parallel-size 3: must divide"),
        (["--tensor-parallel-size", "0"], "--tensor-parallel-size 0: must be >= 1"),
        (["--data-parallel-size", "0"], "--data-parallel-size/--engines 0: must be >= 1"),
        (
            ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "2048", "--max-model-len", "4096"],
            "--max-num-batched-tokens 2048: without chunked prefill it must be >= --max-model-len 4096",
        ),
    ],
)
def test_bad_vllm_values_are_one_line_errors(capsys, args, expected):
    assert rampwatch_main(["sim", *args, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rampwatch sim: error: ") and expected in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_an_unknown_flag_still_fails_naming_it(capsys):
    with pytest.raises(SystemExit) as exc:
        rampwatch_main(["sim", "--kv-transfer-config", "{}", "--port", "0"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --kv-transfer-config" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("{}", "give a method"),
        ("not json", "not valid JSON"),
        ('{"method": "ngram"}', "num_speculative_tokens must be an integer >= 1"),
        ('{"method": "ngram", "num_speculative_tokens": 1000000000}', "num_speculative_tokens must be at most 64"),
        ('{"method": "medusa", "num_speculative_tokens": 2}', "method 'medusa'"),
        ('{"method": "ngram", "num_speculative_tokens": 2, "bogus": 1}', "unknown key 'bogus'"),
    ],
)
def test_a_bad_speculative_config_is_one_line_naming_the_flag(capsys, value, said):
    assert rampwatch_main(["sim", "--speculative-config", value, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "--speculative-config" in err and said in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_api_key_is_never_echoed(capsys):
    assert rampwatch_main(["sim", "--api-key", "sk-topsecret", "--pipeline-parallel-size", "2", "--port", "0"]) == 2
    assert "sk-topsecret" not in capsys.readouterr().err


def test_embedded_argv_reproduces_the_new_settings():
    cfg = SimConfig(
        hardware="h100",
        tensor_parallel_size=2,
        engines=2,
        enable_chunked_prefill=False,
        kv_cache_dtype="fp8",
        max_model_len=8192,
        step_overhead_s=0.002,
        per_request_overhead_s=5e-5,
    ).resolved()
    again = parse(shlex.join(config_to_argv(cfg)))
    assert again == cfg


@pytest.mark.parametrize(
    "tag, preset",
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8", "llama-3.1-8b-fp8"),
        ("mistralai/mistral-7b-instruct-v0.3", "mistral-7b"),  # Hugging Face ids are case-insensitive
        ("tiny", "tiny"),
    ],
)
def test_the_model_comes_first_as_in_vllm_serve(tag, preset):
    cfg = parse(f"{tag} --max-num-seqs 8 --hardware h100")
    assert cfg.model == preset and cfg.served_model_name == tag
    assert parse(f"{tag} --served-model-name demo").served_model_name == "demo"


@pytest.mark.parametrize(
    "args, expected",
    [
        (["Qwen/Qwen3-8B"], "model 'Qwen/Qwen3-8B': the simulator has no preset for it"),
        (["meta-llama/Llama-3.1-8B-Instruct", "--model", "tiny"], "give one of them"),
    ],
)
def test_a_model_it_cannot_simulate_is_one_line(capsys, args, expected):
    assert rampwatch_main(["sim", *args, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rampwatch sim: error: ") and expected in err and err.count("\n") == 1
