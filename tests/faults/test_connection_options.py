"""Servers behind gateways: `--header` on every request and scrape (values never shown or
recorded), TLS with `--ca-cert` or `--insecure`, and the one `/v1/models` probe that stops
a run whose `--model` the server does not serve. `rampwatch run` as a user runs it, against
the simulator behind a small gateway (a token header, optionally HTTPS with a
self-signed certificate made by the openssl command)."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest
from aiohttp import web

from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import SimServer

REPO = Path(__file__).resolve().parents[2]
TOKEN = "gw-7f3a9c1e5b-secret"
HEADER = f"X-Gateway-Token: {TOKEN}"
API_KEY = "sk-conn-4b3c2d1e"


def make_cert(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


class Gateway:
    """The simulator behind a gateway in a thread of its own: every route wants the token
    header (401 without); it counts the requests per path and may hide `/v1/models`."""

    def __init__(self, *, tls: ssl.SSLContext | None = None, models_route: bool = True) -> None:
        self.tls = tls
        self.models_route = models_route
        self.hits: Counter[str] = Counter()
        self.unauthorised: Counter[str] = Counter()
        self.url = ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        server = SimServer(SimConfig(hardware="instant", model="tiny"))
        app = server.app()

        @web.middleware
        async def gate(request: web.Request, handler):
            if request.headers.get("X-Gateway-Token") != TOKEN:
                self.unauthorised[request.path] += 1
                return web.json_response({"error": "missing gateway token"}, status=401)
            self.hits[request.path] += 1
            if request.path == "/v1/models" and not self.models_route:
                return web.json_response({"error": "not found"}, status=404)
            return await handler(request)

        app.middlewares.append(gate)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self.tls)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"
        server.start_drivers()
        self._ready.set()
        await self._stop.wait()
        await server.stop_drivers()
        await runner.cleanup()

    def __enter__(self) -> Gateway:
        self._thread.start()
        assert self._ready.wait(10), "the gateway did not start"
        return self

    def __exit__(self, *exc) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return make_cert(tmp_path_factory.mktemp("tls"))


def tls_context(cert) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


def rampwatch(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "run", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def short_run(url: str, *extra: str) -> tuple[str, ...]:
    return ("random", "--headless", "--target", url, "--duration", "2", "--start-rps", "4", "--end-rps", "4", *extra)


def outputs(proc: subprocess.CompletedProcess, *files: Path) -> str:
    return proc.stdout + proc.stderr + "".join(f.read_bytes().decode("latin-1") for f in files if f.exists())


def assert_one_line(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, proc.stderr
    # the warning that a secret --header on the command line is visible in ps is not the error
    lines = [
        line for line in proc.stderr.strip().splitlines() if not line.startswith("rampwatch run: warning: --header")
    ]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.slow
def test_headers_reach_requests_and_scrapes_over_plain_http_and_are_never_recorded(tmp_path):
    recording, result = tmp_path / "run.rwrec", tmp_path / "run.json"
    with Gateway() as gw:
        proc = rampwatch(
            *short_run(gw.url, "--header", HEADER, "--header", "X-Team:tuning", "--api-key", API_KEY),
            "--model",
            "tiny",
            "--record",
            str(recording),
            "--result-json",
            str(result),
        )
    assert proc.returncode == 0, proc.stderr
    assert gw.unauthorised == Counter()  # every request and scrape carried the header
    assert gw.hits["/v1/completions"] >= 4 and gw.hits["/metrics"] >= 2
    assert gw.hits["/v1/models"] == 1  # one probe: reachable, model served, server info
    text = outputs(proc, recording, result)
    assert TOKEN not in text and "tuning" not in text and API_KEY not in text

    from rampwatch.record.reader import open_recording

    rec = open_recording(recording)
    assert rec.header.options["header"] == ["X-Gateway-Token", "X-Team"]  # names only
    samples = rec.samples
    assert samples and all(s.ok for s in samples)  # the scrapes carried the header too
    decoded = repr(rec.header.to_dict()) + repr(rec.events) + repr(samples) + repr(rec.requests)
    assert TOKEN not in decoded and "tuning" not in decoded and API_KEY not in decoded
    rec.close()


@pytest.mark.slow
def test_tls_with_the_servers_ca_and_headers_on_the_aiohttp_transport(tmp_path, cert):
    recording = tmp_path / "tls.rwrec"
    with Gateway(tls=tls_context(cert)) as gw:
        proc = rampwatch(*short_run(gw.url, "--header", HEADER, "--ca-cert", str(cert[0])), "--record", str(recording))
    assert proc.returncode == 0, proc.stderr
    assert gw.unauthorised == Counter() and gw.hits["/v1/completions"] >= 4 and gw.hits["/metrics"] >= 2
    assert TOKEN not in outputs(proc, recording)
    # without --model: the one /v1/models answer names the model and serves the start check
    assert gw.hits["/v1/models"] == 1


@pytest.mark.slow
def test_an_unverifiable_certificate_is_one_line_that_says_what_to_do(cert):
    with Gateway(tls=tls_context(cert)) as gw:
        proc = rampwatch(*short_run(gw.url, "--header", HEADER, "--no-record"))
    line = assert_one_line(proc, 3)
    assert gw.url in line and "--ca-cert" in line and "--insecure" in line
    assert gw.hits["/v1/completions"] == 0


@pytest.mark.slow
def test_insecure_skips_verification(cert):
    with Gateway(tls=tls_context(cert)) as gw:
        proc = rampwatch(*short_run(gw.url, "--header", HEADER, "--insecure", "--no-record"))
    assert proc.returncode == 0, proc.stderr
    assert gw.hits["/v1/completions"] >= 4 and gw.hits["/metrics"] >= 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda d: d / "missing.pem", "no such file"),
        (lambda d: d, "is a directory"),
        (lambda d: (d / "junk.pem").write_text("not a certificate") and d / "junk.pem", "not a PEM certificate"),
    ],
)
def test_a_bad_ca_cert_is_one_line_before_the_run(tmp_path, make, problem):
    path = make(tmp_path)
    with Gateway() as gw:
        proc = rampwatch(*short_run(gw.url, "--ca-cert", str(path), "--header", HEADER, "--no-record"))
    line = assert_one_line(proc, 2)
    assert f"--ca-cert {path}: {problem}" in line
    assert sum(gw.hits.values()) == 0  # nothing was asked of the server


def argparse_error(capsys, *argv: str) -> str:
    """The one error line `rampwatch run` prints for these flags (after argparse's usage)."""
    import argparse

    from rampwatch.app import run

    parser = argparse.ArgumentParser(prog="rampwatch run")
    run.configure(parser)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["chat", *argv])
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert TOKEN not in out + err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    return line


def test_insecure_and_ca_cert_together_are_refused(capsys):
    line = argparse_error(capsys, "--insecure", "--ca-cert", "x.pem")
    assert "argument --ca-cert: not allowed with argument --insecure" in line


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (f"X-Gateway-Token {TOKEN}", "expected NAME:VALUE"),
        (f": {TOKEN}", "expected NAME:VALUE"),
        (f"X Token: {TOKEN}", "the header name may hold only"),
        (f"Host: {TOKEN}", "Host is set by rampwatch itself"),
        (f"X-Token: {TOKEN}\r\nX-Evil: 1", "the value of X-Token holds a line break"),
    ],
)
def test_a_bad_header_names_the_flag_and_never_shows_the_value(capsys, value, problem):
    line = argparse_error(capsys, "--header", value)
    assert f"argument --header: {problem}" in line


def test_good_headers_parse_in_order():
    from rampwatch.app.credentials import header_pair

    assert header_pair("X-A:1") == ("X-A", "1")
    assert header_pair("Authorization: Bearer abc:def") == ("Authorization", "Bearer abc:def")  # value keeps its ':'
    assert header_pair("X-Empty:") == ("X-Empty", "")


@pytest.mark.slow
def test_a_model_the_server_does_not_serve_stops_the_run_before_any_request(tmp_path):
    recording = tmp_path / "never.rwrec"
    with Gateway() as gw:
        proc = rampwatch(*short_run(gw.url, "--header", HEADER, "--model", "llama-70b"), "--record", str(recording))
    line = assert_one_line(proc, 4)
    assert line == (f"rampwatch run: error: --model 'llama-70b' is not served by {gw.url}/v1/models: it serves 'tiny'")
    assert gw.hits["/v1/models"] == 1 and gw.hits["/v1/completions"] == 0
    assert not recording.exists()


@pytest.mark.slow
def test_a_server_without_v1_models_runs_with_a_warning(tmp_path):
    recording = tmp_path / "unchecked.rwrec"
    with Gateway(models_route=False) as gw:
        proc = rampwatch(*short_run(gw.url, "--header", HEADER, "--model", "tiny"), "--record", str(recording))
    assert proc.returncode == 0, proc.stderr
    assert gw.hits["/v1/completions"] >= 4

    from rampwatch.record.reader import open_recording

    rec = open_recording(recording)
    infos = [e.message for e in rec.events if e.kind == "info"]
    rec.close()
    assert "--model 'tiny' not checked: /v1/models: HTTP 404" in infos


def test_check_model_served_names_at_most_ten_models():
    from rampwatch.core.errors import ModelNotServed
    from rampwatch.loadgen.transport.server_probe import ModelsAnswer, check_model_served

    models = [{"id": f"m{i}"} for i in range(13)] + [{"id": "evil\x1b[2J"}]
    check_model_served("m3", ModelsAnswer("http://h/v1/models", 200, models))  # served: no error
    check_model_served("x", ModelsAnswer("http://h/v1/models", 404, None))  # no list: no check
    check_model_served("x", ModelsAnswer("http://h/v1/models", 200, None))
    with pytest.raises(ModelNotServed) as caught:
        check_model_served("x", ModelsAnswer("http://h/v1/models", 200, models))
    message = str(caught.value)
    assert "'m0', 'm1'" in message and "'m9'" in message and "'m10'" not in message
    assert message.endswith("and 4 more") and caught.value.exit_code == 4
    with pytest.raises(ModelNotServed, match="it lists no models"):
        check_model_served("x", ModelsAnswer("http://h/v1/models", 200, []))
    with pytest.raises(ModelNotServed) as escaped:
        check_model_served("x", ModelsAnswer("http://h/v1/models", 200, [{"id": "evil\x1b[2J"}]))
    assert "\x1b" not in str(escaped.value) and "\\x1b" in str(escaped.value)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "code", "says"),
    [
        # reachable, but no models list to take the model from: --model, not "unreachable"
        (("--header", HEADER), 4, "/v1/models: HTTP 404: the server answered without its models; pass --model"),
        # refused: the credentials are named
        ((), 2, "/v1/models: HTTP 401: the server refused the request (does it expect --api-key or a --header?)"),
    ],
)
def test_an_answering_server_without_a_models_list_is_not_called_unreachable(extra, code, says):
    with Gateway(models_route=False) as gw:
        proc = rampwatch(*short_run(gw.url, *extra), "--no-record")  # no --model: the server's first
    line = assert_one_line(proc, code)
    assert line == f"rampwatch run: error: {gw.url}{says}"
    assert gw.hits["/v1/completions"] == 0


@pytest.mark.slow
def test_a_refused_key_from_the_environment_is_named_as_such():
    """A key taken silently from $OPENAI_API_KEY may be one meant for another service: a
    refusal says a key was sent and where it came from, not 'does it expect --api-key?'."""
    import os

    with Gateway(models_route=False) as gw:
        proc = subprocess.run(
            [sys.executable, "-m", "rampwatch.app.cli", "run", *short_run(gw.url), "--no-record"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "OPENAI_API_KEY": "sk-not-this-one-12345"},
        )
    line = assert_one_line(proc, 2)
    assert (
        line
        == f"rampwatch run: error: {gw.url}/v1/models: HTTP 401: the server refused the API key sent (from $OPENAI_API_KEY)"
    )
    assert "sk-not-this-one" not in proc.stdout + proc.stderr
