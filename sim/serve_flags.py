"""Which of `rampwatch sim`'s flags are `vllm serve`'s: the ones it models with vLLM's
meaning, the ones it takes and ignores, its own knobs, and its spelling of two of vLLM's;
and a simulator command translated into the ``vllm serve`` line it stands for (what a
simulator sweep prints beside its best configuration).

Every option of ``sim.cli``'s parser is in exactly one of these lists
(tests/sim/test_serve_flags.py), so a flag added there cannot go unclassified here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

# `vllm serve` flags the simulator models, with vLLM's spelling and meaning.
VLLM_FLAGS = (
    "--served-model-name",
    "--block-size",
    "--gpu-memory-utilization",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--max-model-len",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--enable-chunked-prefill",
    "--no-enable-chunked-prefill",
    "--kv-cache-dtype",
    "--tensor-parallel-size",
    "-tp",
    "--data-parallel-size",
    "-dp",
    "--api-server-count",
    "--enable-prompt-tokens-details",
    "--limit-mm-per-prompt",
    "--mm-processor-cache-gb",
    "--speculative-config",  # sim.speculation
    "-sc",
    "--reasoning-parser",
    "--pipeline-parallel-size",  # accepted at 1 only
    "-pp",
    "--enable-lora",
    "--max-loras",
    "--max-lora-rank",
    "--max-cpu-loras",
    "--lora-modules",
)

# `vllm serve` flags a tuning sweep commonly passes that change nothing the simulator
# models (logging, loading, tokenizer, API and compilation details). They are accepted
# and ignored so one serve line runs against vLLM or the simulator.
IGNORED_VLLM_FLAGS_WITH_VALUE = (
    "--dtype",
    "--quantization",
    "--load-format",
    "--download-dir",
    "--revision",
    "--tokenizer",
    "--tokenizer-mode",
    "--tokenizer-revision",
    "--chat-template",
    "--generation-config",
    "--override-generation-config",
    "--tool-call-parser",
    "--uvicorn-log-level",
    "--max-log-len",
    "--api-key",
    "--swap-space",
    "--cpu-offload-gb",
    "--distributed-executor-backend",
    "--compilation-config",
    "--max-seq-len-to-capture",
    "--scheduling-policy",
    "--max-logprobs",
)
IGNORED_VLLM_SWITCHES = (
    "--trust-remote-code",
    "--disable-log-requests",
    "--enable-log-requests",
    "--disable-log-stats",
    "--enforce-eager",
    "--async-scheduling",
    "--enable-auto-tool-choice",
    "--disable-frontend-multiprocessing",
    "--disable-fastapi-docs",
)

# Flags of `rampwatch sim` that vLLM does not have (dropped from the `vllm serve` line a
# simulator sweep prints).
SIM_ONLY_FLAGS = (
    "--hardware",
    "--model",
    "--host",
    "--port",
    "--seed",
    "--speed",
    "--eos-probability",
    "--step-overhead-ms",
    "--per-request-overhead-us",
    "--routing",
    "--gpu-telemetry",
    "--error-rate",
    "--abort-rate",
    "--metrics-error-rate",
    "--stall-at",
    "--stall-for",
    "--chunk-gaps-out",
    "--reasoning-tokens",
    "--reasoning-field",
    "--no-reasoning-usage",
)

# The simulator's spelling of a vLLM argument -> vLLM's.
SIM_RENAMED = {"--engines": "--data-parallel-size", "--num-gpu-blocks": "--num-gpu-blocks-override"}


def is_sim_command(argv: Sequence[str]) -> bool:
    return len(argv) >= 2 and Path(argv[0]).name == "rampwatch" and argv[1] == "sim"


def vllm_serve_argv(argv: Sequence[str], model: str | None) -> list[str]:
    """The ``vllm serve`` words of a serve command: itself when it is one; for a
    ``rampwatch sim`` command, ``vllm serve MODEL`` with the simulator's vLLM arguments
    (its own knobs dropped, ``SIM_RENAMED`` in vLLM's spelling)."""
    if not is_sim_command(argv):
        return list(argv)
    out = ["vllm", "serve", model or "MODEL"]
    rest = list(argv[2:])
    i = 0
    while i < len(rest):
        token = rest[i]
        flag = token.split("=", 1)[0]
        takes_value = "=" not in token and i + 1 < len(rest) and not rest[i + 1].startswith("--")
        words = rest[i : i + (2 if takes_value else 1)]
        i += len(words)
        if flag in SIM_ONLY_FLAGS:
            continue
        if flag in SIM_RENAMED:
            renamed = SIM_RENAMED[flag]
            words = [renamed, *words[1:]] if "=" not in token else [f"{renamed}={token.split('=', 1)[1]}"]
        out += words
    return out
