"""The simulator's HTTP front end (aiohttp) and its real-time engine driver.

``serve(config, host, port)`` runs everything in the current event loop::

    async with serve(SimConfig(hardware="instant", model="tiny"), port=0) as url:
        ...  # url == "http://127.0.0.1:<port>"

One driver task per engine steps it on a clock that runs ``speed`` times faster than wall
time: a step of simulated duration d is followed by a d/speed wall-clock wait, then its
tokens are handed to the waiting HTTP handlers. Streamed chunks are pre-built byte
templates (no per-token ``json.dumps``) and every handler writes whatever accumulated
since its last write in one call.
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
from itertools import repeat
from typing import Any

from aiohttp import web

from rampwatch.core.cache_salt import cache_salt_problem
from rampwatch.core.tokenizer import VOCAB_SIZE, SimTokenizer, apply_chat_template
from rampwatch.sim.chunk_gaps import ChunkGaps, text_key
from rampwatch.sim.config import SimConfig
from rampwatch.sim.engine import FINISHED, Engine, SimRequest
from rampwatch.sim.gpu_telemetry import DCGM_PATH, GpuTelemetry
from rampwatch.sim.metrics import make_registry, render
from rampwatch.sim.router import Router

VLLM_VERSION = "0.32.0"
SERVER_VERSION = VLLM_VERSION + "+sim"
SYSTEM_FINGERPRINT = f"vllm-{VLLM_VERSION}-sim"

_TOKENIZER = SimTokenizer()
_WORDS_FIRST: list[bytes] = []
_WORDS_REST: list[bytes] = []


def _word_tables() -> tuple[list[bytes], list[bytes]]:
    if not _WORDS_FIRST:
        for i in range(VOCAB_SIZE):
            # Vocabulary words are plain ASCII letters: safe inside a JSON string as is.
            _WORDS_FIRST.append(_TOKENIZER.token_text(i, True).encode())
            _WORDS_REST.append(_TOKENIZER.token_text(i, False).encode())
    return _WORDS_FIRST, _WORDS_REST


def generated_text(token_ids: list[int], continuation: bool = False) -> str:
    """The text of generated tokens. A completion continues its prompt's text, so its
    first word carries its leading space too (as a real tokenizer's first generated token,
    decoded after the prompt, usually does): prompt + answer re-encodes to the prompt's
    ids followed by the generated ids, and a conversation's next turn hits the answer's
    cached blocks. A chat answer is its own message and starts without one."""
    return "".join(_TOKENIZER.token_text(t, i == 0 and not continuation) for i, t in enumerate(token_ids))


def cache_created_tokens(req: SimRequest, config: SimConfig) -> int:
    """vLLM's ``created_cache_tokens``: prompt tokens this request computed and cached,
    the prompt's full blocks less those it found cached (none without prefix caching)."""
    if not config.enable_prefix_caching:
        return 0
    bs = config.block_size
    return max(0, req.num_prompt_tokens // bs * bs - req.num_cached_tokens)


# ---------------------------------------------------------------------------- errors


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.json_response(obj, status=status, dumps=_compact)


def error_body(message: str, err_type: str, status: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


class ApiError(Exception):
    def __init__(self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.body = error_body(message, err_type, status, param)

    def response(self) -> web.Response:
        return _json(self.body, self.status)


def _cache_salt(value: Any) -> str | None:
    """A request's ``cache_salt``, refused as vLLM refuses it."""
    if value is None:
        return None
    problem = cache_salt_problem(value)
    if problem is not None:
        raise _bad(problem, "cache_salt", value)
    return str(value)


def _bad(message: str, param: str | None = None, value: Any = None) -> ApiError:
    if param is not None:
        message = f"{message} (parameter={param}, value={value})"
    return ApiError(400, message, "BadRequestError", param)


# ---------------------------------------------------------------------------- streams


class _Stream:
    """One request's output path from the driver to its HTTP handler."""

    __slots__ = (
        "req",
        "chat",
        "stream",
        "head",
        "first_words",
        "tail",
        "final_tails",
        "pending",
        "waiter",
        "role_prefix",
        "continuous_usage",
        "prompt_tokens",
        "abort_after",
        "sent",
        "done",
    )

    def __init__(
        self,
        req: SimRequest,
        chat: bool,
        stream: bool,
        head: bytes,
        role_chunk: bytes | None,
        continuous_usage: bool,
        abort_after: int | None,
    ) -> None:
        self.req = req
        self.chat = chat
        self.stream = stream
        self.head = head
        # A completion's first word continues the prompt: it keeps its leading space.
        self.first_words = _WORDS_FIRST if chat else _WORDS_REST
        self.tail = _CHAT_TAIL if chat else _COMPLETION_TAIL
        self.final_tails = _CHAT_FINAL_TAILS if chat else _COMPLETION_FINAL_TAILS
        self.pending: list[bytes] = []
        self.waiter: asyncio.Future | None = None
        self.role_prefix = role_chunk
        self.continuous_usage = continuous_usage
        self.prompt_tokens = req.num_prompt_tokens
        self.abort_after = abort_after
        self.sent = 0
        self.done = False  # the final token has been handed over

    def push(self) -> None:
        """Called by the driver after a step that gave this request a token."""
        req = self.req
        if self.stream:
            out = req.output_token_ids
            n = len(out)
            words = self.first_words if n == 1 else _WORDS_REST
            if req.status == FINISHED:
                self.done = True
                reason = req.finish_reason
                assert reason is not None  # the engine sets it as it finishes a request
                tail = self.final_tails[reason]
            else:
                tail = self.tail
            if self.continuous_usage:
                tail = tail[:-3] + _usage_bytes(self.prompt_tokens, n) + b"}\n\n"
            if self.role_prefix is not None:
                self.pending.append(self.role_prefix)
                self.role_prefix = None
            self.pending.append(self.head + words[out[-1]] + tail)
        elif req.status == FINISHED:
            self.done = True
        self.wake()

    def wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def next_batch(self) -> list[bytes]:
        while not self.pending and not self.done:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
            self.waiter = None
        batch, self.pending = self.pending, []
        return batch


def _usage_bytes(prompt: int, completion: int) -> bytes:
    return b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (
        prompt,
        prompt + completion,
        completion,
    )


_COMPLETION_TAIL = (
    b'","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
)
_COMPLETION_FINAL_TAILS = {
    reason: b'","logprobs":null,"finish_reason":"%s","stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    % reason.encode()
    for reason in ("stop", "length", "abort")
}
_CHAT_TAIL = b'"},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
_CHAT_FINAL_TAILS = {
    reason: b'"},"logprobs":null,"finish_reason":"%s","stop_reason":null,"token_ids":null}]}\n\n' % reason.encode()
    for reason in ("stop", "length", "abort")
}
_DONE = b"data: [DONE]\n\n"


def _note_write(gaps: array[float], last_write: float, token_chunks: int) -> float:
    """Add the gaps of a write of ``token_chunks`` token chunks that has just returned to
    a stream's ``gaps`` (``last_write``: the time of its previous one, 0.0 before its
    first); returns this write's time."""
    now = time.monotonic()
    if token_chunks:
        if last_write:
            gaps.append(now - last_write)
        if token_chunks > 1:
            gaps.extend(repeat(0.0, token_chunks - 1))
        return now
    return last_write


# ---------------------------------------------------------------------------- server


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
        _word_tables()

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
        return _json({"version": SERVER_VERSION})

    async def models(self, request: web.Request) -> web.Response:
        name = self.model_name
        return _json(
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
                    }
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

    # -- request parsing

    def _parse(self, body: Any, chat: bool) -> tuple[list[int], int, dict[str, Any]]:
        if not isinstance(body, dict):
            raise _bad("The request body must be a JSON object.")
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _bad("'messages' must be a non-empty list of messages.", "messages", messages)
            try:
                prompt_ids = apply_chat_template(_TOKENIZER, messages)
            except ValueError as exc:
                raise _bad(str(exc)) from None
            max_tokens = body.get("max_completion_tokens")
            param = "max_completion_tokens"
            if max_tokens is None:
                max_tokens = body.get("max_tokens")
                param = "max_tokens"
        else:
            prompt_ids = self._prompt_ids(body.get("prompt"))
            max_tokens = body.get("max_tokens", 16)
            param = "max_tokens"
        max_len = self.capacity.max_model_len
        n_prompt = len(prompt_ids)
        if n_prompt >= max_len:
            raise _bad(
                f"The decoder prompt (length {n_prompt}) is longer than the maximum model length of "
                f"{max_len}. Make sure that `max_model_len` is no smaller than the number of text tokens "
                "plus multimodal tokens. For image inputs, the number of image tokens depends on the "
                "number of images, and possibly their aspect ratios as well.",
                "input_tokens",
                n_prompt,
            )
        if max_tokens is None:
            max_tokens = max_len - n_prompt
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise _bad(f"{param} must be at least 1, got {max_tokens}.", param, max_tokens)
        if max_tokens > max_len:
            raise _bad(
                f"{param}={max_tokens} cannot be greater than max_model_len={max_len}. "
                "Please request fewer output tokens.",
                param,
                max_tokens,
            )
        if n_prompt + max_tokens > max_len:
            raise _bad(
                f"This model's maximum context length is {max_len} tokens. However, you requested "
                f"{max_tokens} output tokens and your prompt contains {n_prompt} input tokens, for a "
                f"total of {n_prompt + max_tokens} tokens. Please reduce the length of the input prompt "
                "or the number of requested output tokens.",
                "input_tokens",
                n_prompt,
            )
        min_tokens = body.get("min_tokens", 0) or 0
        if not isinstance(min_tokens, int) or min_tokens < 0:
            raise _bad(f"min_tokens must be greater than or equal to 0, got {min_tokens}.", "min_tokens", min_tokens)
        if min_tokens > max_tokens:
            raise _bad(
                f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.",
                "min_tokens",
                min_tokens,
            )
        temperature = body.get("temperature")
        if temperature is not None and (not isinstance(temperature, (int, float)) or temperature < 0):
            raise _bad(f"temperature must be non-negative, got {temperature}.", "temperature", temperature)
        stream_options = body.get("stream_options") or {}
        if not isinstance(stream_options, dict):
            raise _bad("stream_options must be an object.", "stream_options", stream_options)
        seed = body.get("seed")
        cache_salt = _cache_salt(body.get("cache_salt"))
        options = {
            "max_tokens": max_tokens,
            "min_tokens": min_tokens,
            "ignore_eos": bool(body.get("ignore_eos", False)),
            "stream": bool(body.get("stream", False)),
            "include_usage": bool(stream_options.get("include_usage", False)),
            "continuous_usage": bool(stream_options.get("continuous_usage_stats", False)),
            "seed": seed if isinstance(seed, int) else None,
            "cache_salt": cache_salt,
        }
        return prompt_ids, max_tokens, options

    @staticmethod
    def _prompt_ids(prompt: Any) -> list[int]:
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            ids = _TOKENIZER.encode(prompt)
        elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = list(prompt)
            bad = next((t for t in ids if not 0 <= t < VOCAB_SIZE), None)
            if bad is not None:
                raise _bad(f"Token id {bad} is out of vocabulary", "prompt", bad)
        elif isinstance(prompt, list):
            raise _bad(
                "Batched prompts are not supported by the simulator; send one prompt per request.", "prompt", "<list>"
            )
        else:
            raise _bad("Either prompt or prompt_embeds must be provided and non-empty.", "prompt", prompt)
        if not ids:
            raise _bad("The prompt cannot be empty.", "prompt", "")
        return ids

    # -- generation

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _bad(f"JSON decode error: {exc}").response()
        try:
            prompt_ids, max_tokens, opts = self._parse(body, chat)
        except ApiError as err:
            return err.response()
        faults = self.config.faults
        if faults.error_rate and self.fault_rng.random() < faults.error_rate:
            return _json(error_body("Simulated internal server error", "InternalServerError", 500), 500)
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
            min_tokens=opts["min_tokens"],
            ignore_eos=opts["ignore_eos"],
            seed=opts["seed"],
            cache_salt=opts["cache_salt"],
        )
        prefix = b'data: {"id":"%s","object":"%s","created":%d,"model":%s,"choices":' % (
            request_id.encode(),
            b"chat.completion.chunk" if chat else b"text_completion",
            created,
            self.model_json,
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
        stream = _Stream(req, chat, opts["stream"], head, role_chunk, opts["continuous_usage"], abort_after)
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

    async def _stream_response(
        self, request: web.Request, stream: _Stream, prefix: bytes, include_usage: bool
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
                            % (p, p + n, n, self._streamed_details(stream), SYSTEM_FINGERPRINT.encode())
                        )
                    batch.append(_DONE)
                    await resp.write(b"".join(batch))
                    if gaps is not None and self.chunk_gaps is not None:
                        _note_write(gaps, last_write, token_chunks)
                        # Only completed streams: the client's ITLs are theirs. The key is
                        # the answer's text, which the client can keep too.
                        text = generated_text(req.output_token_ids, continuation=not stream.chat)
                        self.chunk_gaps.add_stream(gaps, text_key(text))
                    break
                if batch:
                    await resp.write(b"".join(batch))
                    if gaps is not None:
                        last_write = _note_write(gaps, last_write, token_chunks)
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

    def _streamed_details(self, stream: _Stream) -> bytes:
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

    async def _full_response(self, stream: _Stream, request_id: str, created: int, chat: bool) -> web.Response:
        req = stream.req
        while not stream.done:
            await stream.next_batch()
        text = generated_text(req.output_token_ids, continuation=not chat)
        n, p = len(req.output_token_ids), req.num_prompt_tokens
        usage = {
            "prompt_tokens": p,
            "total_tokens": p + n,
            "completion_tokens": n,
            "prompt_tokens_details": self._prompt_tokens_details(req, chat),
        }
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
                },
                "logprobs": None,
                "finish_reason": req.finish_reason,
                "stop_reason": None,
            }
            body = {
                "id": request_id,
                "object": "chat.completion",
                "created": created,
                "model": self.model_name,
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
                "model": self.model_name,
                "choices": [choice],
                "usage": usage,
                "kv_transfer_params": None,
            }
        return _json(body)


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
