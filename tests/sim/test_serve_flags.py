"""`rampwatch sim`'s flags in vLLM's spelling: every option of its parser classified, and a
simulator command translated into the `vllm serve` line it stands for."""

import argparse
import shlex

import pytest

from rampwatch.sim import serve_flags
from rampwatch.sim.cli import configure
from rampwatch.sim.serve_flags import vllm_serve_argv


@pytest.mark.parametrize(
    ("command", "model", "expected"),
    [
        (
            "rampwatch sim --hardware h100 --model llama-3.1-8b --port 8311 --speed 2 --gpu-telemetry --max-num-seqs 64 --engines 2",
            "meta-llama/Llama-3.1-8B-Instruct",
            "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 64 --data-parallel-size 2",
        ),
        (
            "rampwatch sim --num-gpu-blocks=300 --block-size 32",
            None,
            "vllm serve MODEL --num-gpu-blocks-override=300 --block-size 32",
        ),
        (  # --api-server-count is vLLM's too; the gaps file is the simulator's own
            "rampwatch sim -dp 2 --api-server-count 2 --chunk-gaps-out /tmp/g.npy",
            "m",
            "vllm serve m -dp 2 --api-server-count 2",
        ),
        ("vllm serve m --chat-template 'a b'", None, "vllm serve m --chat-template 'a b'"),  # already vllm: as is
    ],
)
def test_vllm_serve_line(command, model, expected):
    assert shlex.join(vllm_serve_argv(shlex.split(command), model)) == expected


def sim_options() -> set[str]:
    """Every option string `rampwatch sim`'s parser takes (its help aside)."""
    parser = argparse.ArgumentParser()
    configure(parser)
    return {o for action in parser._actions for o in action.option_strings} - {"-h", "--help"}  # noqa: SLF001


CLASSES = {
    "vLLM's": serve_flags.VLLM_FLAGS,
    "ignored vLLM flags with a value": serve_flags.IGNORED_VLLM_FLAGS_WITH_VALUE,
    "ignored vLLM switches": serve_flags.IGNORED_VLLM_SWITCHES,
    "simulator-only": serve_flags.SIM_ONLY_FLAGS,
    "renamed": tuple(serve_flags.SIM_RENAMED),
}


def test_every_option_of_the_simulator_is_classified_once():
    """A flag added to sim.cli must be named in sim.serve_flags: otherwise the `vllm serve`
    line a simulator sweep prints would carry a knob vLLM does not have."""
    options = sim_options()
    named = [flag for flags in CLASSES.values() for flag in flags]
    assert sorted(options - set(named)) == [], "unclassified: add them to sim/serve_flags.py"
    assert sorted(set(named) - options) == [], "not options of `rampwatch sim` (any more)"
    assert len(named) == len(set(named)), "a flag in two classes"


def test_a_renamed_flag_is_vllms_spelling_of_the_same_option():
    """``--engines`` is the simulator's ``--data-parallel-size`` (one option, vLLM's name
    among its spellings); ``--num-gpu-blocks`` has no vLLM spelling in the simulator."""
    parser = argparse.ArgumentParser()
    configure(parser)
    by_flag = {o: action for action in parser._actions for o in action.option_strings}  # noqa: SLF001
    for sim_flag, vllm_flag in serve_flags.SIM_RENAMED.items():
        assert vllm_flag not in by_flag or by_flag[vllm_flag] is by_flag[sim_flag]


def test_the_vllm_line_of_a_simulator_command_keeps_no_simulator_only_flag():
    every = []
    for flag in serve_flags.SIM_ONLY_FLAGS:
        every += [flag, "1"]
    line = vllm_serve_argv(["rampwatch", "sim", *every, "--max-num-seqs", "8", "--engines", "2"], "m")
    assert line == ["vllm", "serve", "m", "--max-num-seqs", "8", "--data-parallel-size", "2"]
