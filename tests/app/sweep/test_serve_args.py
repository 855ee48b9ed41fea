"""A configuration's arguments in the serve command, its command line and its GPUs."""

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
