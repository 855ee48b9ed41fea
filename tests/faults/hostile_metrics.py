"""A `/metrics` endpoint for whole-run fault tests (`rampwatch run` in a subprocess): an
HTTP server on a thread of the test process answering each GET with what ``page()`` gives,
or holding it until ``release`` is set."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def serve_metrics(page: Callable[[], str], release: threading.Event | None = None) -> Iterator[str]:
    """The URL of a /metrics answering ``page()``; with ``release``, each request waits for
    it to be set first (a server whose /metrics hangs)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if release is not None:
                release.wait()
            body = page().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # not on the test's output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        if release is not None:
            release.set()
        server.shutdown()
        server.server_close()
