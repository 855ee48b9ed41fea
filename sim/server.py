"""The simulator's HTTP front end (aiohttp) and its real-time engine driver.

``serve(config, host, port)`` runs everything in the current event loop::

    async with serve(SimConfig(hardware="instant", model="tiny"), port=0) as url:
        ...  # url == "http://127.0.0.1:<port>"

One driver task per engine steps it on a clock that runs ``speed`` times faster than wall
time: a step of simulated duration d is followed by a d/speed wall-clock wait, then its
tokens are handed to the waiting HTTP handlers (``sim.streams``). Requests are read and
refused as vLLM does in ``sim.api_requests``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import time
from array import array
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from rampwatch.sim.api_requests import ApiError, bad_request, error_body, json_response, parse_request
from rampwatch.sim.chunk_gaps import ChunkGaps, text_key
from rampwatch.sim.config import SimConfig
from rampwatch.sim.engine import FINISHED, Engine, SimRequest
from rampwatch.sim.gpu_telemetry import DCGM_PATH, GpuTelemetry
from rampwatch.sim.lora import lora_model_cards
from rampwatch.sim.metrics import make_registry, render
from rampwatch.sim.multimodal import IMAGE_MODELS, Processor
from rampwatch.sim.reasoning import RequestProblem, Thinking, thinking_head, thinking_of, usage_details
from rampwatch.sim.router import Router
from rampwatch.sim.streams import (
    DONE_EVENT,
    OutputStream,
    cache_created_tokens,
    generated_text,
    note_write,
    word_tables,
)

VLLM_VERSION = "0.32.0"
SERVER_VERSION = VLLM_VERSION + "+sim"
SYSTEM_FINGERPRINT = f"vllm-{VLLM_VERSION}-sim"


class SimServer:
    """Engines, their drivers and the aiohttp application.

    With ``api_server_count`` N > 1 this is process ``rank`` of N serving one port
    (``sim.api_servers``): it runs its share of the data-parallel engines, engines
    ``rank × engines/N`` … ``(rank + 1) × engines/N − 1`` under their global indices.
    ``keep_chunk_gaps`` keeps the gaps between the token chunks it wrote (``chunk_gaps``).
    """

    def __init__(
        self, config: SimConfig, rank: int = 0, api_server_count: int = 1, keep_chunk_gaps: bool = False
    ) -> None:
        self.config = config.resolved()
        self.capacity = self.config.capacity()
        cfg = self.config
        created = time.time()
        share = cfg.engines // api_server_count
        first = rank * share
        self.engines = [Engine(cfg, i, created=created) for i in range(first, first + share)]
        self.model_name: str = cfg.served_model_name  # type: ignore[assignment]
        self.model_json = json.dumps(self.model_name).encode()
        self.registry = make_registry(self.engines, self.model_name)
        # Rank 0 keeps the one-process sequence; the others draw their own faults.
        self.fault_rng = random.Random(cfg.seed if rank == 0 else f"{cfg.seed}/{rank}")
        self.reasoning_rng = random.Random(f"reasoning/{cfg.seed}/{rank}")  # its own: faults' draws stay
        self.rank = rank
        # Ground truth for the client's ITL: per completed stream, the gaps between the
        # writes of its successive token chunks (see _stream_response); None: nothing kept.
        self.chunk_gaps = ChunkGaps() if keep_chunk_gaps else None
        self.created_unix = int(created)
        self._wake = [asyncio.Event() for _ in self.engines]
        self._tasks: list[asyncio.Task] = []
        self.router = Router(self.engines, cfg.routing)
        self._counter = 0
        self._t0_wall = 0.0
        self.gpu_telemetry = GpuTelemetry(cfg, len(self.engines), first) if cfg.gpu_telemetry else None
        # Images: this API server's processing and its processor cache (sim.multimodal).
        self.mm_processor = Processor(cfg.mm_processor_cache_gb)
        word_tables()

    # -- clock

    def sim_now(self) -> float:
        return (time.monotonic() - self._t0_wall) * self.config.speed

    def start_drivers(self) -> None:
        self._t0_wall = time.monotonic()
        self._tasks = [asyncio.create_task(self._drive(i)) for i in range(len(self.engines))]

    async def stop_drivers(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _drive(self, index: int) -> None:
        engine = self.engines[index]
        wake = self._wake[index]
        speed = self.config.speed
        faults = self.config.faults
        stall_start = faults.stall_at
        stall_end = 0.0 if stall_start is None else stall_start + faults.stall_for  # read only with a start
        while True:
            if not engine.has_work():
                wake.clear()
                await wake.wait()
                continue
            now = self.sim_now()
            if stall_start is not None and stall_start <= now < stall_end:
                await asyncio.sleep((stall_end - now) / speed)
                continue
            result = engine.step(now)
            if self.gpu_telemetry is not None:
                self.gpu_telemetry.on_step(index, now, result.cost.gpu)
            if result.duration > 0:
                delay = self._t0_wall + (now + result.duration) / speed - time.monotonic()
                await asyncio.sleep(delay if delay > 0 else 0)
            elif result.num_scheduled_tokens:
                await asyncio.sleep(0)
            else:
                await asyncio.sleep(0.001)  # nothing fits right now: do not spin
            for req in result.emitted:
                stream = req.client
                if stream is not None:
                    stream.push()

    def _new_id(self) -> str:
        self._counter += 1
        # The rank keeps the ids of several processes serving one port apart.
        return f"{hash((self.config.seed, self.rank, self._counter)) & 0xFFFFFFFFFFFFFFFF:016x}"

    # -- app

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        if self.gpu_telemetry is not None:
            app.router.add_get(DCGM_PATH, self.dcgm_metrics)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return json_response({"version": SERVER_VERSION})

    async def models(self, request: web.Request) -> web.Response:
        name = self.model_name
        return json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": self.created_unix,
                        "owned_by": "vllm",
                        "root": name,
                        "parent": None,
                        "max_model_len": self.config.max_model_len,
                        "permission": [],
                    },
                    *lora_model_cards(self.config.lora, name, self.created_unix),
                ],
            }
        )

    async def metrics(self, request: web.Request) -> web.Response:
        rate = self.config.faults.metrics_error_rate
        if rate and self.fault_rng.random() < rate:
            return web.Response(status=500, text="Internal Server Error (simulated /metrics failure)")
        return web.Response(
            body=render(self.registry),
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Content-Type-Options": "nosniff"},
        )

    async def dcgm_metrics(self, request: web.Request) -> web.Response:
        """The simulated DCGM exporter's page (``sim.gpu_telemetry``)."""
        assert self.gpu_telemetry is not None  # routed only with --gpu-telemetry
        return web.Response(body=self.gpu_telemetry.render(self.sim_now()), content_type="text/plain", charset="utf-8")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    # -- generation

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return bad_request(f"JSON decode error: {exc}").response()
        try:
            prompt_ids, max_tokens, opts = parse_request(
                body,
                chat,
                self.model_name,
                self.capacity.max_model_len,
                self.config.model in IMAGE_MODELS,
                self.config.limit_mm_images,
                self.config.lora.names,
            )
        except ApiError as err:
            return err.response()
        thinking = Thinking(0)
        if chat and self.config.reasoning is not None:
            try:
                thinking = thinking_of(self.config.reasoning, body, self.reasoning_rng)
            except RequestProblem as exc:
                return bad_request(str(exc), exc.param, exc.value).response()
        faults = self.config.faults
        if faults.error_rate and self.fault_rng.random() < faults.error_rate:
            return json_response(error_body("Simulated internal server error", "InternalServerError", 500), 500)
        abort_after = None
        if opts["stream"] and faults.abort_rate and self.fault_rng.random() < faults.abort_rate:
            abort_after = self.fault_rng.randint(1, max(1, max_tokens - 1)) if max_tokens > 1 else 0

        request_id = ("chatcmpl-" if chat else "cmpl-") + self._new_id()
        created = int(time.time())
        index = self.router.pick()
        engine = self.engines[index]
        req = SimRequest(
            request_id,
            prompt_ids,
            max_tokens,
            # no end of sequence while thinking: a reasoning model answers after it
            min_tokens=max(opts["min_tokens"], min(thinking.tokens + 1, max_tokens))
            if thinking.tokens
            else opts["min_tokens"],
            ignore_eos=opts["ignore_eos"],
            seed=opts["seed"],
            cache_salt=opts["cache_salt"],
            mm_inputs=opts["mm_inputs"],
            lora=opts["lora"],
        )
        if opts["images"]:
            await self._process_images(opts["images"], engine)
        prefix = b'data: {"id":"%s","object":"%s","created":%d,"model":%s,"choices":' % (
            request_id.encode(),
            b"chat.completion.chunk" if chat else b"text_completion",
            created,
            self.model_json if opts["lora"] is None else json.dumps(opts["lora"]).encode(),  # vLLM: the adapter's name
        )
        if chat:
            head = prefix + b'[{"index":0,"delta":{"content":"'
            role_chunk = prefix + (
                b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],'
                b'"prompt_token_ids":null,"prompt_text":null}\n\n'
            )
        else:
            head = prefix + b'[{"index":0,"text":"'
            role_chunk = None
        stream = OutputStream(req, chat, opts["stream"], head, role_chunk, opts["continuous_usage"], abort_after)
        stream.reasoning_usage = chat and self.config.reasoning is not None and self.config.reasoning.usage_details
        if thinking.tokens:
            stream.thinking = thinking.tokens
            stream.thinking_head = thinking_head(self.config.reasoning, prefix) if thinking.shown else None  # type: ignore[arg-type]
        req.client = stream
        engine.add_request(req, self.sim_now())
        self._wake[index].set()
        try:
            if opts["stream"]:
                return await self._stream_response(request, stream, prefix, opts["include_usage"])
            return await self._full_response(stream, request_id, created, chat)
        finally:
            if req.status != FINISHED:
                engine.abort(request_id, self.sim_now())

    async def _process_images(self, images: list, engine: Engine) -> None:
        """The API server's processing of a request's images before the engine sees it
        (a processor-cache hit skips it), counted on the engine it goes to, as vLLM does."""
        delay, queries, hits = self.mm_processor.process(images, self.sim_now())
        engine.stats.mm_cache_queries += queries
        engine.stats.mm_cache_hits += hits
        if delay > 0:
            await asyncio.sleep(delay / self.config.speed)

    async def _stream_response(
        self, request: web.Request, stream: OutputStream, prefix: bytes, include_usage: bool
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        req = stream.req
        abort_after = stream.abort_after
        # The client's ITLs are the gaps between successive events with a non-empty
        # `choices` (loadgen.transport.client): every chunk in `batch` before the usage chunk and
        # [DONE] (chat's role chunk too). Each write's time is read once it has returned,
        # i.e. once its bytes are with the transport (written to the socket, or buffered
        # when the socket is full); chunks of one write are 0 apart.
        gaps = array("d") if self.chunk_gaps is not None else None
        last_write = 0.0
        try:
            while True:
                batch = await stream.next_batch()
                if abort_after is not None and stream.sent + len(batch) >= abort_after:
                    keep = max(0, abort_after - stream.sent)
                    if keep:
                        await resp.write(b"".join(batch[:keep]))
                    if request.transport is not None:
                        request.transport.abort()  # mid-stream abort: no [DONE], no final chunk
                    return resp
                stream.sent += len(batch)
                token_chunks = len(batch)
                if stream.done and not stream.pending:
                    if include_usage:
                        n = len(req.output_token_ids)
                        p = req.num_prompt_tokens
                        batch.append(
                            prefix + b'[],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d%s},'
                            b'"system_fingerprint":"%s"}\n\n'
                            % (
                                p,
                                p + n,
                                n,
                                self._streamed_details(stream) + self._reasoning_details(stream),
                                SYSTEM_FINGERPRINT.encode(),
                            )
                        )
                    batch.append(DONE_EVENT)
                    await resp.write(b"".join(batch))
                    if gaps is not None and self.chunk_gaps is not None:
                        note_write(gaps, last_write, token_chunks)
                        # Only completed streams: the client's ITLs are theirs. The key is
                        # the answer's text, which the client can keep too.
                        text = generated_text(req.output_token_ids, continuation=not stream.chat)
                        self.chunk_gaps.add_stream(gaps, text_key(text))
                    break
                if batch:
                    await resp.write(b"".join(batch))
                    if gaps is not None:
                        last_write = note_write(gaps, last_write, token_chunks)
        except (ConnectionResetError, ConnectionError):
            return resp
        await resp.write_eof()
        return resp

    def _prompt_tokens_details(self, req: SimRequest, chat: bool) -> dict[str, Any] | None:
        """``usage.prompt_tokens_details`` of a whole (non-streamed) answer, as vLLM 0.32
        writes it with --enable-prompt-tokens-details (chat also counts the tokens it
        cached, completions leave that null)."""
        if not self.config.enable_prompt_tokens_details:
            return None
        created = cache_created_tokens(req, self.config) if chat else None
        return {"cached_tokens": req.num_cached_tokens, "created_cache_tokens": created, "multimodal_tokens": None}

    def _streamed_details(self, stream: OutputStream) -> bytes:
        """The same in the streamed usage chunk, where vLLM leaves out the null fields."""
        if not self.config.enable_prompt_tokens_details:
            return b""
        req = stream.req
        if not stream.chat:
            return b',"prompt_tokens_details":{"cached_tokens":%d}' % req.num_cached_tokens
        created = cache_created_tokens(req, self.config)
        return b',"prompt_tokens_details":{"cached_tokens":%d,"created_cache_tokens":%d}' % (
            req.num_cached_tokens,
            created,
        )

    def _reasoning_details(self, stream: OutputStream) -> bytes:
        """``completion_tokens_details`` of a chat answer when the server runs a reasoning
        parser (sim.reasoning): the thinking tokens generated."""
        if not stream.chat:
            return b""
        return usage_details(self.config.reasoning, min(stream.thinking, len(stream.req.output_token_ids)))

    async def _full_response(self, stream: OutputStream, request_id: str, created: int, chat: bool) -> web.Response:
        req = stream.req
        while not stream.done:
            await stream.next_batch()
        thought = min(stream.thinking, len(req.output_token_ids))
        text = generated_text(req.output_token_ids[thought:], continuation=not chat)
        n, p = len(req.output_token_ids), req.num_prompt_tokens
        usage = {
            "prompt_tokens": p,
            "total_tokens": p + n,
            "completion_tokens": n,
            "prompt_tokens_details": self._prompt_tokens_details(req, chat),
        }
        if chat and self.config.reasoning is not None:
            usage["completion_tokens_details"] = (
                {"reasoning_tokens": thought} if self.config.reasoning.usage_details else None
            )
        if chat:
            choice = {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "tool_calls": [],
                    "reasoning_content": None,
                    **(
                        {"reasoning": generated_text(req.output_token_ids[:thought])}
                        if stream.thinking_head and thought
                        else {}
                    ),
                },
                "logprobs": None,
                "finish_reason": req.finish_reason,
                "stop_reason": None,
            }
            body = {
                "id": request_id,
                "object": "chat.completion",
                "created": created,
                "model": req.lora or self.model_name,  # vLLM: the adapter's name
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": usage,
                "prompt_logprobs": None,
                "kv_transfer_params": None,
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": req.finish_reason,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
            body = {
                "id": request_id,
                "object": "text_completion",
                "created": created,
                "model": req.lora or self.model_name,  # vLLM: the adapter's name
                "choices": [choice],
                "usage": usage,
                "kv_transfer_params": None,
            }
        return json_response(body)


@contextlib.asynccontextmanager
async def serve(config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Run the simulator in the current event loop; yields its base URL (real port shown).

    ``async with serve(SimConfig(...), port=0) as url:`` — the server and its engine
    drivers stop when the block exits.
    """
    async with run_server(SimServer(config), host, port) as url:
        yield url


@contextlib.asynccontextmanager
async def run_server(
    server: SimServer, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None
) -> AsyncIterator[str]:
    """Like ``serve`` for an already built ``SimServer`` (tests inspect its engines);
    ``sock``: serve on this listening socket instead of binding ``host``:``port``."""
    # handler_cancellation: a client that disconnects cancels its handler, whose `finally`
    # aborts the request in the engine, as vLLM aborts a request whose client went away.
    # Without it the handler keeps waiting for tokens after the client left, the engine
    # keeps decoding for nobody, and shutdown waits (60 s) for handlers whose drivers it
    # has already stopped.
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False, handler_cancellation=True)
    await runner.setup()
    site: web.BaseSite
    if sock is not None:
        site = web.SockSite(runner, sock)
        real_port = sock.getsockname()[1]
    else:
        site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    if sock is None:
        # The runner has this one site: its addresses are the sockets the site bound.
        addresses = runner.addresses
        real_port = addresses[0][1] if addresses else port
    server.start_drivers()
    url_host = f"[{host}]" if ":" in host else host
    try:
        yield f"http://{url_host}:{real_port}"
    finally:
        await server.stop_drivers()
        await runner.cleanup()


async def serve_until(
    server: SimServer, host: str, port: int, stop: asyncio.Event, on_ready=None, sock: socket.socket | None = None
) -> None:
    """Serve ``server`` until ``stop`` is set; ``on_ready(url)`` runs once listening."""
    async with run_server(server, host, port, sock) as url:
        if on_ready is not None:
            on_ready(url)
        await stop.wait()
