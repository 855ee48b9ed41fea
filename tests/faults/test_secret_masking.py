"""Secrets in the managed server's log and in the `--serve` line: the common secret names
and every value given to rampwatch or to the server are masked wherever it is shown or
written (issue 26, item 3)."""

from __future__ import annotations

import sys
import textwrap

import pytest

from rampwatch.core.redact import REDACTED, is_secret_key, redact_options, secret_values
from rampwatch.loadgen.server.managed import ManagedServer, ServeCommand
from rampwatch.loadgen.transport.connection import Connection
from tests.processes import free_port


@pytest.mark.parametrize(
    "name, secret",
    [
        ("HF_TOKEN", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("AWS_SESSION_TOKEN", True),
        ("GITHUB_TOKEN", True),
        ("OPENAI_API_KEY", True),
        ("AZURE_OPENAI_KEY", True),
        ("AZURE_OPENAI_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("AWS_ACCESS_KEY_ID", False),  # an identifier, as a user name is
        ("DB_PASSWORD", True),
        ("PGPASSWD", True),
        ("AZURE_CLIENT_CREDENTIAL", True),
        ("WANDB_API_KEY", True),
        ("VLLM_API_KEY", True),
        ("--api-key", True),
        ("--hf-token", True),
        ("x-api-key", True),
        ("X-Auth-Token", True),
        ("Proxy-Authorization", True),
        ("Cookie", True),
        ("apiKey", True),
        ("hftoken", True),
        ("client_secret", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", False),  # the path of a file, never its content
        ("AWS_SHARED_CREDENTIALS_FILE", False),
        ("--ssl-keyfile", False),
        ("max_tokens", False),
        ("--max-num-batched-tokens", False),
        ("--return-tokens-as-token-ids", False),
        ("--tokenizer", False),
        ("PWD", False),
        ("CUDA_VISIBLE_DEVICES", False),
        ("model", False),
    ],
)
def test_the_secret_name_rule(name, secret):
    assert is_secret_key(name) is secret


def test_a_secret_flag_without_a_value_hides_no_other_flag():
    argv = ["vllm", "serve", "m", "--enable-auth", "--port", "8001", "--api-key", "sk-abcdef123"]
    assert redact_options({"argv": argv})["argv"] == [*argv[:6], "--api-key", REDACTED]
    assert secret_values(argv) == {"sk-abcdef123"}


# Prints what a careless server prints: its environment's secrets and its arguments.
LEAKY_SERVER = textwrap.dedent(
    """
    import http.server, json, os, sys
    port = int(sys.argv[sys.argv.index("--port") + 1])
    for name in ("OPENAI_API_KEY", "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "MY_GATEWAY_TOKEN"):
        print(f"env {name}={os.environ.get(name)}", flush=True)
    print("args " + " ".join(sys.argv[1:]), flush=True)
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"data": [{"id": "leaky"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
    """
)

SECRETS = {
    "OPENAI_API_KEY": "sk-env-openai-0001",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-0002",
    "MY_GATEWAY_TOKEN": "gw-token-0003",
}


@pytest.mark.slow
def test_the_server_log_masks_the_environment_the_serve_line_and_the_connection(tmp_path, monkeypatch):
    script = tmp_path / "leaky.py"
    script.write_text(LEAKY_SERVER)
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    port = free_port()
    command = ServeCommand.parse(
        f"HUGGING_FACE_HUB_TOKEN=hf-prefix-0004 {sys.executable} {script} --port {port} --api-key vllm-key-0005"
    )
    log_path = tmp_path / "server.log"
    connection = Connection(api_key="cli-key-0006", headers=(("X-Gateway", "hdr-value-0007"),))
    with ManagedServer(command, log_path=log_path, connection=connection) as server:
        server.start(timeout_s=30)
        tail = "\n".join(server.tail)
    written = log_path.read_text()
    assert f"HUGGING_FACE_HUB_TOKEN='{REDACTED}'" in command.shown
    for text in (tail, written, command.shown):
        for value in [*SECRETS.values(), "hf-prefix-0004", "vllm-key-0005"]:
            assert value not in text
    assert f"env OPENAI_API_KEY={REDACTED}" in tail
    assert f"env HUGGING_FACE_HUB_TOKEN={REDACTED}" in tail
    assert f"--api-key {REDACTED}" in tail


def test_a_sweeps_serve_line_masks_its_environment_prefix():
    from rampwatch.app.sweep.serve_args import shown_command

    argv = ["HF_TOKEN=hf-abcdef123", "CUDA_VISIBLE_DEVICES=0", "vllm", "serve", "m", "--api-key", "sk-abcdef123"]
    assert shown_command(argv) == f"'HF_TOKEN={REDACTED}' CUDA_VISIBLE_DEVICES=0 vllm serve m --api-key '{REDACTED}'"
    assert secret_values(argv) == {"hf-abcdef123", "sk-abcdef123"}


@pytest.mark.slow
def test_a_model_id_that_echoes_a_header_value_is_masked_on_every_line(tmp_path):
    """A server may name its model after what it was sent: the model id is the server's
    text, masked with the run's secrets before the first line, the live header or the
    recording show it."""
    import subprocess

    from rampwatch.app.session import serving_sim
    from rampwatch.record.reader import open_recording
    from rampwatch.sim.config import SimConfig

    secret = "s3cretHeaderValue"
    with serving_sim(SimConfig(hardware="instant", model="tiny", served_model_name=f"model-{secret}")) as sim:
        proc = subprocess.run(
            [sys.executable, "-m", "rampwatch.app.cli", "run", "random", "--headless", "--target", sim.url]
            + ["--duration", "1", "--start-rps", "4", "--end-rps", "4", "--set", "workload.output_tokens=4"]
            + ["--record", str(tmp_path / "r.rwrec")],
            capture_output=True,
            text=True,
            timeout=60,
            env={**__import__("os").environ, "RAMPWATCH_HEADERS": f"X-Api-Key: {secret}"},
        )
    assert proc.returncode == 0, proc.stderr
    assert secret not in proc.stdout + proc.stderr
    assert f"(model model-{REDACTED})" in proc.stdout.splitlines()[0]
    with open_recording(tmp_path / "r.rwrec") as rec:
        assert rec.header.model == f"model-{REDACTED}"


def test_the_run_configuration_and_the_connection_never_print_a_secret():
    """Their reprs reach logs and tracebacks (a dataclass's own repr would print every field)."""
    from rampwatch.app.run_config import RunConfig
    from rampwatch.loadgen.transport.connection import Connection

    secrets = ("sk-live-77aa", "pw-9911zz", "tok-hdr-5566", "pass-metrics-42")
    config = RunConfig(
        scenario="chat",
        target=f"http://user:{secrets[1]}@host:8000",
        api_key=secrets[0],
        header=(("X-Tenant-Token", secrets[2]),),
        serve=f"vllm serve m --api-key {secrets[0]} --port 9",
        argv=("run", "chat", "--api-key", secrets[0]),
        metrics_url=(f"http://m:{secrets[3]}@host/metrics",),
    )
    connection = Connection(api_key=secrets[0], headers=(("X-Tenant-Token", secrets[2]),))
    for shown in (repr(config), str(config), repr(connection), str(connection)):
        assert not [s for s in secrets if s in shown], shown
    assert "X-Tenant-Token" in repr(config) and "--port 9" in repr(config)  # the rest is still there
