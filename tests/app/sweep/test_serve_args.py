"""A configuration's arguments in the serve command, its command line and its GPUs."""

import json
import shlex

import pytest

from rampwatch.app.sweep.serve_args import apply_args, command_line, gpu_count


@pytest.mark.parametrize(
    ("base", "args", "expected"),
    [
        ("vllm serve m --max-num-seqs 4", {"--max-num-seqs": 64}, "vllm serve m --max-num-seqs 64"),
        ("vllm serve m --max-num-seqs=4 --port 1", {"--max-num-seqs": 8}, "vllm serve m --port 1 --max-num-seqs 8"),
        (
            "vllm serve m --enable-chunked-prefill",
            {"--enable-chunked-prefill": False},
            "vllm serve m --no-enable-chunked-prefill",
        ),
        (
            "vllm serve m --no-enable-prefix-caching",
            {"--enable-prefix-caching": True},
            "vllm serve m --enable-prefix-caching",
        ),
        ("vllm serve m", {"--gpu-memory-utilization": 0.5}, "vllm serve m --gpu-memory-utilization 0.5"),
    ],
)
def test_apply_args(base, args, expected):
    assert apply_args(shlex.split(base), args) == shlex.split(expected)


def test_command_line_quotes_what_a_shell_would_split():
    argv = ["vllm", "serve", "m", "--override-generation-config", '{"temperature": 0.5}']
    line = command_line(argv)
    assert line == "vllm serve m --override-generation-config '{\"temperature\": 0.5}'"
    assert shlex.split(line) == argv


@pytest.mark.parametrize(
    ("command", "gpus"),
    [
        ("vllm serve m", 1),
        ("vllm serve m -tp 2", 2),
        ("vllm serve m --tensor-parallel-size 2 --data-parallel-size=4", 8),
        ("vllm serve m -tp 2 -pp 2 -dp 2", 8),
        ("rampwatch sim --engines 3", 3),
    ],
)
def test_gpu_count(command, gpus):
    assert gpu_count(shlex.split(command)) == gpus


SPEC = {"method": "ngram", "num_speculative_tokens": 3}


@pytest.mark.parametrize(
    "value",
    [SPEC, '{"method": "ngram", "num_speculative_tokens": 3}'],
    ids=["mapping", "json-text"],
)
def test_a_json_valued_flag_is_one_word_of_json_and_replaces_the_base_ones(value):
    base = shlex.split(
        """rampwatch sim --speculative-config '{"method": "eagle", "num_speculative_tokens": 5}' --port 1"""
    )
    argv = apply_args(base, {"--speculative-config": value})
    assert argv == ["rampwatch", "sim", "--port", "1", "--speculative-config", json.dumps(SPEC)]
    line = command_line(argv)  # the command kept and run: a shell splits it back to the same words
    assert shlex.split(line) == argv
    assert json.loads(shlex.split(line)[-1]) == SPEC
