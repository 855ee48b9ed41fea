"""Start and stop a real vLLM OpenAI-compatible server on the CPU, serving the tiny model.

Used by the `vllm`-marked tests (see tests/conftest.py) and by hand:

    python scripts/vllm_server.py --port 8011      # builds the venv/model if needed, serves until Ctrl-C

The vLLM venv and the tiny model are built (once, cached under ~/.cache/rampwatch) by
scripts/setup_vllm.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
SERVED_MODEL_NAME = "tiny"
MAX_MODEL_LEN = 2048
READY_TIMEOUT_S = 240.0


@dataclass
class VllmPaths:
    python: str
    model: str


def ensure_setup() -> VllmPaths:
    """Build or reuse the vLLM venv and tiny model; return their paths."""
    out = subprocess.run(["bash", str(SCRIPTS / "setup_vllm.sh")], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"scripts/setup_vllm.sh failed ({out.returncode}):\n{out.stderr[-4000:]}")
    values = dict(line.split("=", 1) for line in out.stdout.splitlines() if line.startswith("RAMPWATCH_"))
    return VllmPaths(python=values["RAMPWATCH_VLLM_PYTHON"], model=values["RAMPWATCH_TINY_MODEL"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmServer:
    """One vLLM api_server process in its own process group."""

    def __init__(
        self,
        paths: VllmPaths,
        port: int | None = None,
        log_path: Path | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.paths = paths
        self.port = port or free_port()
        self.log_path = log_path or Path(os.environ.get("TMPDIR", "/tmp")) / f"rampwatch-vllm-{self.port}.log"
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def command(self) -> list[str]:
        return [
            self.paths.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.paths.model,
            "--served-model-name",
            SERVED_MODEL_NAME,
            "--dtype",
            "float32",
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            # Per-request prefix-cache hits in usage.prompt_tokens_details.cached_tokens,
            # which rampwatch records per request (off by default in vLLM).
            "--enable-prompt-tokens-details",
            *self.extra_args,
        ]

    def start(self) -> None:
        env = dict(os.environ)
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"
        env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )
        log.close()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM exited with {self.proc.returncode} before it was ready; log tail:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=2) as resp:
                    models = json.load(resp)
                    if any(m.get("id") == SERVED_MODEL_NAME for m in models.get("data", [])):
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
                pass
            time.sleep(1.0)
        raise RuntimeError(f"vLLM not ready after {timeout_s:.0f}s; log tail:\n{self.log_tail()}")

    def stop(self, grace_s: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        except ProcessLookupError:
            pass

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8011)
    args = parser.parse_args(argv)
    server = VllmServer(ensure_setup(), port=args.port)
    server.start()
    try:
        server.wait_ready()
        print(
            f"vLLM serving '{SERVED_MODEL_NAME}' on {server.url} (pid {server.pid}, log {server.log_path})", flush=True
        )
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
