"""``rampwatch sim``: serve the simulated vLLM server until Ctrl-C / SIGTERM.

Also runnable as ``python -m rampwatch.sim.cli``. `rampwatch run` starts it as any other
``--serve`` command (``loadgen.server.managed``), which also stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path

from rampwatch.core.errors import UserError
from rampwatch.sim.api_servers import listening_sockets, serve_processes, stale_parts
from rampwatch.sim.chunk_gaps import check_writable
from rampwatch.sim.config import (
    HARDWARE_PRESETS,
    KV_CACHE_DTYPES,
    MODEL_ALIASES,
    MODEL_PRESETS,
    ROUTING_CHOICES,
    FaultConfig,
    SimConfig,
    model_preset_for,
)
from rampwatch.sim.gpu_telemetry import DCGM_PATH
from rampwatch.sim.lora import LoraConfig, lora_argv, parse_lora_modules
from rampwatch.sim.multimodal import DEFAULT_CACHE_GB, DEFAULT_IMAGE_LIMIT, image_limit_of
from rampwatch.sim.reasoning import DEFAULT_REASONING_TOKENS, REASONING_FIELDS, ReasoningConfig
from rampwatch.sim.serve_flags import IGNORED_VLLM_FLAGS_WITH_VALUE, IGNORED_VLLM_SWITCHES
from rampwatch.sim.server import SimServer, serve_until

# More processes than this only fight over the CPUs (each is a whole server with its
# engines' loop); vLLM's own API servers are a few per node.
MAX_API_SERVER_COUNT = 64


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "model_tag",
        nargs="?",
        metavar="MODEL",
        help="as `vllm serve MODEL`: a model preset or a Hugging Face id the simulator knows "
        f"({', '.join(MODEL_ALIASES)}); served under that name",
    )
    parser.add_argument(
        "--hardware", default="h100", help=f"hardware preset: {', '.join(HARDWARE_PRESETS)} (default h100)"
    )
    parser.add_argument(
        "--model", default=None, help=f"model preset: {', '.join(MODEL_PRESETS)} (default llama-3.1-8b)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument("--seed", type=int, default=0, help="seed for generated tokens, early EOS and faults")
    parser.add_argument("--speed", type=float, default=1.0, help="simulated seconds per wall-clock second")
    parser.add_argument("--served-model-name", default=None, help="model name served (default: the model preset name)")
    parser.add_argument("--block-size", type=int, default=16, help="KV block size in tokens (default 16)")
    parser.add_argument("--num-gpu-blocks", type=int, default=None, help="override the derived number of KV blocks")
    parser.add_argument(
        "--gpu-memory-utilization", type=float, default=0.9, help="fraction of HBM vLLM may use (default 0.9)"
    )
    parser.add_argument("--max-num-seqs", type=int, default=256, help="max running requests per engine (default 256)")
    parser.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="token budget per step (default 8192; without chunked prefill max(8192, --max-model-len))",
    )
    parser.add_argument(
        "--max-model-len", type=int, default=None, help="context length (default: model's, capped by KV size)"
    )
    parser.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="reuse cached prompt blocks across requests (default on)",
    )
    parser.add_argument(
        "--enable-chunked-prefill",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="split prefills across steps under the token budget (default on, as in vLLM v1); "
        "--no-enable-chunked-prefill admits a prompt only when its whole prefill fits one step",
    )
    parser.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=KV_CACHE_DTYPES,
        help="KV cache element type: auto (the model's) or fp8 (1 byte: twice the tokens per GB, half the KV reads)",
    )
    parser.add_argument(
        "--tensor-parallel-size",
        "-tp",
        type=int,
        metavar="N",
        default=1,
        help="GPUs per engine: weights and KV split across them, 2 all-reduces per layer per step (default 1)",
    )
    parser.add_argument(
        "--eos-probability",
        type=float,
        default=0.002,
        help="per-token early-stop chance when a request does not set ignore_eos (default 0.002)",
    )
    parser.add_argument(
        "--step-overhead-ms",
        type=float,
        default=None,
        help="host time per engine step (default: the hardware preset's)",
    )
    parser.add_argument(
        "--per-request-overhead-us",
        type=float,
        default=None,
        help="host time per request in a step: sampling, output processing, streaming (default: the preset's)",
    )
    parser.add_argument(
        "--data-parallel-size",
        "-dp",
        "--engines",
        dest="engines",
        type=int,
        metavar="N",
        default=1,
        help="data-parallel engines behind the port, each on its own GPUs (default 1)",
    )
    parser.add_argument(
        "--routing", default="least-loaded", help=f"data-parallel routing: {', '.join(ROUTING_CHOICES)}"
    )
    parser.add_argument(
        "--api-server-count",
        type=int,
        metavar="N",
        default=1,
        help="serve the port from N processes (SO_REUSEPORT), for clients faster than one process; "
        "vLLM's API servers share every engine, these cannot, so each runs its share of the "
        "data-parallel engines: N must divide --data-parallel-size, and be at most "
        f"{MAX_API_SERVER_COUNT}. A connection stays with one process, and a /metrics scrape "
        "reaches one process and shows its engines only (default 1)",
    )
    parser.add_argument(
        "--chunk-gaps-out",
        type=Path,
        metavar="FILE",
        default=None,
        help="keep, for every completed stream, the gaps between the writes of its successive token "
        "chunks (the server's side of the client's ITLs) and write them in seconds to FILE (float64 "
        ".npy) on a clean stop (SIGINT/SIGTERM), with FILE.streams.npy: per stream, its number of gaps "
        "and its answer text's key (sim.chunk_gaps); with --api-server-count N the processes' files "
        "are merged. Without it nothing is kept",
    )
    parser.add_argument(
        "--gpu-telemetry",
        action="store_true",
        help="also serve simulated DCGM-exporter GPU gauges (utilisation, memory, power, SM clock) "
        "on /dcgm/metrics, for rampwatch run --gpu-metrics-url",
    )
    parser.add_argument(
        "--enable-prompt-tokens-details",
        action="store_true",
        help="as vLLM: report each request's prefix-cache hit in usage.prompt_tokens_details.cached_tokens",
    )
    parser.add_argument(
        "--limit-mm-per-prompt",
        metavar="JSON",
        default=None,
        help="as vLLM: the most images a prompt may carry, e.g. '{\"image\": 2}' (default 999); past it a "
        "request is refused with vLLM's message (images: --model qwen2-vl-7b, sim.multimodal)",
    )
    parser.add_argument(
        "--mm-processor-cache-gb",
        type=float,
        default=DEFAULT_CACHE_GB,
        help="as vLLM: the multimodal processor cache's size in GiB (0: none); a hit skips an image's processing",
    )
    lora = parser.add_argument_group("LoRA adapters (as vLLM; sim.lora)")
    lora.add_argument("--enable-lora", action="store_true", help="serve LoRA adapters (--lora-modules)")
    lora.add_argument("--max-loras", type=int, default=1, help="most distinct adapters in one batch (default 1)")
    lora.add_argument(
        "--max-lora-rank", type=int, default=16, help="the adapters' rank: load time and step cost grow with it"
    )
    lora.add_argument(
        "--max-cpu-loras",
        type=int,
        default=None,
        help="adapters kept in CPU memory, least recently used dropped (default --max-loras): "
        "loading one from there is faster than from disk",
    )
    lora.add_argument(
        "--lora-modules",
        nargs="+",
        default=None,
        metavar="NAME=PATH",
        help="the adapters served, each under its name in /v1/models (NAME=PATH, or vLLM's JSON form)",
    )
    parser.add_argument(
        "--speculative-config",
        "-sc",
        default=None,
        metavar="JSON",
        help='as vLLM: speculative decoding, e.g. \'{"method": "ngram", "num_speculative_tokens": 3}\' '
        "(methods ngram, suffix, eagle, eagle3, mtp, draft_model; num_speculative_tokens_per_batch_size; "
        "acceptance per position from the method's preset, vLLM's synthetic_acceptance_rates, or the "
        'simulator\'s own "acceptance": see docs/sim-presets.md)',
    )
    reasoning = parser.add_argument_group("a reasoning model (sim.reasoning)")
    reasoning.add_argument(
        "--reasoning-parser",
        metavar="NAME",
        default=None,
        help="as vLLM: chat answers stream their thinking as delta.reasoning before the answer, and usage "
        "counts it in completion_tokens_details.reasoning_tokens (any NAME: the simulator has one model of thinking)",
    )
    reasoning.add_argument(
        "--reasoning-tokens",
        type=int,
        metavar="N",
        default=DEFAULT_REASONING_TOKENS,
        help="mean thinking tokens at reasoning_effort medium, the default; low is N/4, high 4N; each "
        f"request draws ±50 %% around its mean, seeded (default {DEFAULT_REASONING_TOKENS})",
    )
    reasoning.add_argument(
        "--reasoning-field",
        choices=REASONING_FIELDS,
        default="reasoning",
        help="the delta field of the thinking: reasoning (vLLM now) or reasoning_content (older vLLM, other servers)",
    )
    reasoning.add_argument(
        "--no-reasoning-usage",
        action="store_true",
        help="leave completion_tokens_details out of usage (a server that does not report thinking tokens)",
    )
    faults = parser.add_argument_group("fault injection (seeded)")
    faults.add_argument("--error-rate", type=float, default=0.0, help="fraction of requests answered with HTTP 500")
    faults.add_argument("--abort-rate", type=float, default=0.0, help="fraction of streams cut mid-way")
    faults.add_argument("--metrics-error-rate", type=float, default=0.0, help="fraction of /metrics scrapes failing")
    faults.add_argument("--stall-at", type=float, default=None, help="simulated second at which the engines stall")
    faults.add_argument("--stall-for", type=float, default=0.0, help="stall length in simulated seconds")
    ignored = parser.add_argument_group(
        "vLLM flags accepted and ignored",
        "Taken so that a `vllm serve` line runs unchanged; they change nothing the simulator models: "
        + ", ".join(IGNORED_VLLM_FLAGS_WITH_VALUE)
        + " (each with a value); "
        + ", ".join(IGNORED_VLLM_SWITCHES)
        + ". --pipeline-parallel-size is accepted at 1 only. Any other unknown flag is an error.",
    )
    for flag in IGNORED_VLLM_FLAGS_WITH_VALUE:
        ignored.add_argument(flag, dest=_ignored_dest(flag), metavar="VALUE", help=argparse.SUPPRESS)
    for flag in IGNORED_VLLM_SWITCHES:
        ignored.add_argument(flag, dest=_ignored_dest(flag), action="store_true", help=argparse.SUPPRESS)
    ignored.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1, help=argparse.SUPPRESS)


def _ignored_dest(flag: str) -> str:
    return "ignored_" + flag.lstrip("-").replace("-", "_")


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """The ``SimConfig`` the flags describe (validated; raises ``UserError``)."""
    model, served_name = args.model or "llama-3.1-8b", args.served_model_name
    if args.model_tag is not None:
        preset = model_preset_for(args.model_tag)
        if preset is None:
            raise UserError(
                f"model {args.model_tag!r}: the simulator has no preset for it; use --model with one of "
                f"{', '.join(MODEL_PRESETS)}, or one of the Hugging Face ids listed in --help"
            )
        if args.model is not None and args.model != preset:
            raise UserError(f"model {args.model_tag!r} and --model {args.model}: give one of them")
        model, served_name = preset, served_name or args.model_tag
    if args.pipeline_parallel_size != 1:
        raise UserError(
            f"--pipeline-parallel-size {args.pipeline_parallel_size}: the simulator models tensor and data "
            "parallelism only; use --tensor-parallel-size or --data-parallel-size"
        )
    config = SimConfig(
        hardware=args.hardware,
        model=model,
        seed=args.seed,
        speed=args.speed,
        block_size=args.block_size,
        num_gpu_blocks=args.num_gpu_blocks,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        served_model_name=served_name,
        enable_prefix_caching=args.enable_prefix_caching,
        eos_probability=args.eos_probability,
        engines=args.engines,
        tensor_parallel_size=args.tensor_parallel_size,
        step_overhead_s=None if args.step_overhead_ms is None else args.step_overhead_ms / 1e3,
        per_request_overhead_s=None if args.per_request_overhead_us is None else args.per_request_overhead_us / 1e6,
        enable_chunked_prefill=args.enable_chunked_prefill,
        kv_cache_dtype=args.kv_cache_dtype,
        routing=args.routing,
        gpu_telemetry=args.gpu_telemetry,
        enable_prompt_tokens_details=args.enable_prompt_tokens_details,
        limit_mm_images=DEFAULT_IMAGE_LIMIT
        if args.limit_mm_per_prompt is None
        else image_limit_of(args.limit_mm_per_prompt),
        mm_processor_cache_gb=args.mm_processor_cache_gb,
        lora=LoraConfig(
            enable_lora=args.enable_lora,
            modules=parse_lora_modules(args.lora_modules),
            max_loras=args.max_loras,
            max_lora_rank=args.max_lora_rank,
            max_cpu_loras=args.max_cpu_loras,
        ),
        speculative_config=args.speculative_config,
        reasoning=reasoning_from_args(args),
        faults=FaultConfig(
            error_rate=args.error_rate,
            abort_rate=args.abort_rate,
            metrics_error_rate=args.metrics_error_rate,
            stall_at=args.stall_at,
            stall_for=args.stall_for,
        ),
    )
    return config.resolved()


def reasoning_from_args(args: argparse.Namespace) -> ReasoningConfig | None:
    if args.reasoning_parser is None:
        given = [
            flag
            for flag, value, default in (
                ("--reasoning-tokens", args.reasoning_tokens, DEFAULT_REASONING_TOKENS),
                ("--reasoning-field", args.reasoning_field, "reasoning"),
                ("--no-reasoning-usage", args.no_reasoning_usage, False),
            )
            if value != default
        ]
        if given:
            raise UserError(f"{given[0]}: shapes a reasoning model's answers; add --reasoning-parser NAME")
        return None
    return ReasoningConfig(
        args.reasoning_parser, args.reasoning_tokens, args.reasoning_field, usage_details=not args.no_reasoning_usage
    )


def main(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port}: must be between 0 and 65535")
    count = args.api_server_count
    if count < 1:
        raise UserError(f"--api-server-count {count}: must be at least 1")
    if count > MAX_API_SERVER_COUNT:
        raise UserError(
            f"--api-server-count {count}: at most {MAX_API_SERVER_COUNT} processes (each is a whole server; "
            "more only contend for the CPUs)"
        )
    if config.engines % count:
        raise UserError(
            f"--api-server-count {count}: each process runs its share of the engines, so it must divide "
            f"--data-parallel-size ({config.engines}); set --data-parallel-size to a multiple of {count}, "
            f"or --api-server-count to a divisor of {config.engines}"
        )
    gaps_out = args.chunk_gaps_out
    if gaps_out is not None:
        problem = check_writable(gaps_out)
        if problem is not None:
            raise UserError(f"--chunk-gaps-out {gaps_out}: cannot be written: {problem}")
        stale = stale_parts(gaps_out) if count > 1 else []
        if stale:
            raise UserError(
                f"--chunk-gaps-out {gaps_out}: {', '.join(p.name for p in stale)} in {gaps_out.parent} were left "
                "by a run stopped before it merged them; move or remove them (this run would merge them as its own)"
            )

    def ready(url: str) -> None:
        blocks = config.capacity().num_gpu_blocks * config.engines
        processes = f", {count} API server processes" if count > 1 else ""
        print(
            f"rampwatch sim: serving {config.served_model_name} on {url} "
            f"(hardware {config.hardware}, {blocks} KV blocks{processes})",
            flush=True,
        )
        if config.gpu_telemetry:
            print(f"rampwatch sim: simulated DCGM GPU gauges on {url}{DCGM_PATH}", flush=True)

    def cannot_listen(exc: OSError) -> UserError:
        return UserError(f"--host {args.host} --port {args.port}: cannot listen: {exc.strerror or exc}")

    if count > 1:
        try:
            sockets = listening_sockets(args.host, args.port, count)
        except OSError as exc:
            raise cannot_listen(exc) from None
        try:
            return serve_processes(config, args.host, sockets, ready, gaps_out)
        except OSError as exc:  # a fork or a pipe refused: not the address's fault
            raise UserError(f"--api-server-count {count}: cannot start the processes: {exc.strerror or exc}") from None

    async def run() -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        server = SimServer(config, keep_chunk_gaps=gaps_out is not None)
        try:
            await serve_until(server, args.host, args.port, stop, on_ready=ready)
        except OSError as exc:
            raise cannot_listen(exc) from None
        if gaps_out is not None and server.chunk_gaps is not None:
            try:
                server.chunk_gaps.write(gaps_out)
            except OSError as exc:
                streams = len(server.chunk_gaps.counts)
                print(
                    f"rampwatch sim: error: --chunk-gaps-out {gaps_out}: cannot write: {exc.strerror or exc}; "
                    f"the gaps of {streams} stream{'' if streams == 1 else 's'} are lost",
                    file=sys.stderr,
                )
                return 1
        return 0

    return asyncio.run(run())


def config_to_argv(config: SimConfig) -> list[str]:
    """The ``rampwatch sim`` flags that reproduce ``config``."""
    argv = [
        "--hardware",
        config.hardware,
        "--model",
        config.model,
        "--seed",
        str(config.seed),
        "--speed",
        repr(config.speed),
        "--block-size",
        str(config.block_size),
        "--gpu-memory-utilization",
        repr(config.gpu_memory_utilization),
        "--max-num-seqs",
        str(config.max_num_seqs),
        "--eos-probability",
        repr(config.eos_probability),
        "--engines",
        str(config.engines),
        "--routing",
        config.routing,
        "--error-rate",
        repr(config.faults.error_rate),
        "--abort-rate",
        repr(config.faults.abort_rate),
        "--metrics-error-rate",
        repr(config.faults.metrics_error_rate),
        "--stall-for",
        repr(config.faults.stall_for),
    ]
    if config.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(config.max_num_batched_tokens)]
    if config.tensor_parallel_size != 1:
        argv += ["--tensor-parallel-size", str(config.tensor_parallel_size)]
    if not config.enable_chunked_prefill:
        argv.append("--no-enable-chunked-prefill")
    if config.step_overhead_s is not None:
        argv += ["--step-overhead-ms", repr(config.step_overhead_s * 1e3)]
    if config.per_request_overhead_s is not None:
        argv += ["--per-request-overhead-us", repr(config.per_request_overhead_s * 1e6)]
    if config.kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", config.kv_cache_dtype]
    if config.num_gpu_blocks is not None:
        argv += ["--num-gpu-blocks", str(config.num_gpu_blocks)]
    if config.max_model_len is not None:
        argv += ["--max-model-len", str(config.max_model_len)]
    if config.served_model_name is not None:
        argv += ["--served-model-name", config.served_model_name]
    if config.faults.stall_at is not None:
        argv += ["--stall-at", repr(config.faults.stall_at)]
    if not config.enable_prefix_caching:
        argv.append("--no-enable-prefix-caching")
    if config.gpu_telemetry:
        argv.append("--gpu-telemetry")
    if config.enable_prompt_tokens_details:
        argv.append("--enable-prompt-tokens-details")
    if config.limit_mm_images != DEFAULT_IMAGE_LIMIT:
        argv += ["--limit-mm-per-prompt", json.dumps({"image": config.limit_mm_images})]
    if config.mm_processor_cache_gb != DEFAULT_CACHE_GB:
        argv += ["--mm-processor-cache-gb", repr(config.mm_processor_cache_gb)]
    if config.speculative_config is not None:
        argv += ["--speculative-config", config.speculative_config]
    if config.reasoning is not None:
        argv += config.reasoning.argv()
    return argv + lora_argv(config.lora)


def run(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m sim.cli`` (same flags as ``rampwatch sim``)."""
    parser = argparse.ArgumentParser(prog="rampwatch sim", description="serve the simulated vLLM server")
    configure(parser)
    args = parser.parse_args(argv)
    try:
        return main(args)
    except UserError as exc:
        print(f"rampwatch sim: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(run())
