"""``rampwatch sim``: serve the simulated vLLM server until Ctrl-C / SIGTERM.

Also runnable as ``python -m rampwatch.sim.cli``. `rampwatch run` starts it as any other
``--serve`` command (``loadgen.managed``), which also stops it.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import TYPE_CHECKING

from rampwatch.sim.config import HARDWARE_PRESETS, MODEL_PRESETS, ROUTING_CHOICES

if TYPE_CHECKING:
    from rampwatch.sim.config import SimConfig


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hardware", default="h100", help=f"hardware preset: {', '.join(HARDWARE_PRESETS)} (default h100)"
    )
    parser.add_argument(
        "--model", default="llama-3.1-8b", help=f"model preset: {', '.join(MODEL_PRESETS)} (default llama-3.1-8b)"
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
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192, help="token budget per step (default 8192)")
    parser.add_argument(
        "--max-model-len", type=int, default=None, help="context length (default: model's, capped by KV size)"
    )
    parser.add_argument(
        "--no-enable-prefix-caching", dest="enable_prefix_caching", action="store_false", help="disable prefix caching"
    )
    parser.add_argument(
        "--eos-probability",
        type=float,
        default=0.002,
        help="per-token early-stop chance when a request does not set ignore_eos (default 0.002)",
    )
    parser.add_argument("--engines", type=int, default=1, help="data-parallel engines behind the port (default 1)")
    parser.add_argument(
        "--routing", default="least-loaded", help=f"data-parallel routing: {', '.join(ROUTING_CHOICES)}"
    )
    faults = parser.add_argument_group("fault injection (seeded)")
    faults.add_argument("--error-rate", type=float, default=0.0, help="fraction of requests answered with HTTP 500")
    faults.add_argument("--abort-rate", type=float, default=0.0, help="fraction of streams cut mid-way")
    faults.add_argument("--metrics-error-rate", type=float, default=0.0, help="fraction of /metrics scrapes failing")
    faults.add_argument("--stall-at", type=float, default=None, help="simulated second at which the engines stall")
    faults.add_argument("--stall-for", type=float, default=0.0, help="stall length in simulated seconds")


def config_from_args(args: argparse.Namespace):
    """The ``SimConfig`` the flags describe (validated; raises ``UserError``)."""
    from rampwatch.sim.config import FaultConfig, SimConfig

    config = SimConfig(
        hardware=args.hardware,
        model=args.model,
        seed=args.seed,
        speed=args.speed,
        block_size=args.block_size,
        num_gpu_blocks=args.num_gpu_blocks,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        served_model_name=args.served_model_name,
        enable_prefix_caching=args.enable_prefix_caching,
        eos_probability=args.eos_probability,
        engines=args.engines,
        routing=args.routing,
        faults=FaultConfig(
            error_rate=args.error_rate,
            abort_rate=args.abort_rate,
            metrics_error_rate=args.metrics_error_rate,
            stall_at=args.stall_at,
            stall_for=args.stall_for,
        ),
    )
    return config.resolved()


def main(args: argparse.Namespace) -> int:
    import asyncio

    from rampwatch.core.errors import UserError
    from rampwatch.sim.server import serve_forever

    config = config_from_args(args)
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port}: must be between 0 and 65535")

    def ready(url: str) -> None:
        blocks = config.num_gpu_blocks * config.engines
        print(
            f"rampwatch sim: serving {config.served_model_name} on {url} "
            f"(hardware {config.hardware}, {blocks} KV blocks)",
            flush=True,
        )

    async def run() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await serve_forever(config, args.host, args.port, stop, on_ready=ready)
        except OSError as exc:
            raise UserError(f"--host {args.host} --port {args.port}: cannot listen: {exc.strerror or exc}") from None

    asyncio.run(run())
    return 0


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
        "--max-num-batched-tokens",
        str(config.max_num_batched_tokens),
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
    return argv


def run(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m sim.cli`` (same flags as ``rampwatch sim``)."""
    from rampwatch.core.errors import UserError

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
