"""Reading an OpenAI completion or chat request as vLLM reads it, and its errors.

``parse_request`` checks a request body against the served model and its context length
and refuses what vLLM refuses, with vLLM's messages (``ApiError``, a JSON error body).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from aiohttp import web

from rampwatch.core.cache_salt import cache_salt_problem
from rampwatch.core.tokenizer import VOCAB_SIZE, SimTokenizer
from rampwatch.sim.multimodal import DEFAULT_IMAGE_LIMIT, ImageError, chat_prompt

# The simulator's one tokenizer: prompts are encoded and answers written with it.
TOKENIZER = SimTokenizer()


def compact_json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.json_response(obj, status=status, dumps=compact_json)


def error_body(message: str, err_type: str, status: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


class ApiError(Exception):
    def __init__(self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.body = error_body(message, err_type, status, param)

    def response(self) -> web.Response:
        return json_response(self.body, self.status)


def request_cache_salt(value: Any) -> str | None:
    """A request's ``cache_salt``, refused as vLLM refuses it."""
    if value is None:
        return None
    problem = cache_salt_problem(value)
    if problem is not None:
        raise bad_request(problem, "cache_salt", value)
    return str(value)


def bad_request(message: str, param: str | None = None, value: Any = None) -> ApiError:
    if param is not None:
        message = f"{message} (parameter={param}, value={value})"
    return ApiError(400, message, "BadRequestError", param)


def parse_request(
    body: Any,
    chat: bool,
    model_name: str,
    max_model_len: int,
    takes_images: bool = False,
    image_limit: int = DEFAULT_IMAGE_LIMIT,
    adapters: Collection[str] = (),
) -> tuple[list[int], int, dict[str, Any]]:
    """A completion or chat request's prompt ids, max_tokens and options, checked as vLLM
    checks them; raises ``ApiError`` with vLLM's message. A chat request's images
    (``sim.multimodal``) are in its prompt ids as placeholder tokens, and in
    ``options["images"]`` / ``options["mm_inputs"]``. ``adapters``: the LoRA adapters
    served (``sim.lora``); a request naming one runs on it (``options["lora"]``)."""
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    model = body.get("model")
    if model is not None and model != model_name and not (isinstance(model, str) and model in adapters):
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise bad_request("'messages' must be a non-empty list of messages.", "messages", messages)
        try:
            prompt_ids, images, mm_inputs = chat_prompt(TOKENIZER, messages, takes_images, image_limit)
        except ImageError as exc:
            raise ApiError(400, f"{exc} (parameter={exc.param})", "BadRequestError", exc.param) from None
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        max_tokens = body.get("max_completion_tokens")
        param = "max_completion_tokens"
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
            param = "max_tokens"
    else:
        images, mm_inputs = [], []
        prompt_ids = prompt_ids_of(body.get("prompt"))
        max_tokens = body.get("max_tokens", 16)
        param = "max_tokens"
    max_len = max_model_len
    n_prompt = len(prompt_ids)
    if n_prompt >= max_len:
        raise bad_request(
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
        raise bad_request(f"{param} must be at least 1, got {max_tokens}.", param, max_tokens)
    if max_tokens > max_len:
        raise bad_request(
            f"{param}={max_tokens} cannot be greater than max_model_len={max_len}. Please request fewer output tokens.",
            param,
            max_tokens,
        )
    if n_prompt + max_tokens > max_len:
        raise bad_request(
            f"This model's maximum context length is {max_len} tokens. However, you requested "
            f"{max_tokens} output tokens and your prompt contains {n_prompt} input tokens, for a "
            f"total of {n_prompt + max_tokens} tokens. Please reduce the length of the input prompt "
            "or the number of requested output tokens.",
            "input_tokens",
            n_prompt,
        )
    min_tokens = body.get("min_tokens", 0) or 0
    if not isinstance(min_tokens, int) or min_tokens < 0:
        raise bad_request(f"min_tokens must be greater than or equal to 0, got {min_tokens}.", "min_tokens", min_tokens)
    if min_tokens > max_tokens:
        raise bad_request(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.",
            "min_tokens",
            min_tokens,
        )
    temperature = body.get("temperature")
    if temperature is not None and (not isinstance(temperature, (int, float)) or temperature < 0):
        raise bad_request(f"temperature must be non-negative, got {temperature}.", "temperature", temperature)
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise bad_request("stream_options must be an object.", "stream_options", stream_options)
    seed = body.get("seed")
    cache_salt = request_cache_salt(body.get("cache_salt"))
    options = {
        "max_tokens": max_tokens,
        "min_tokens": min_tokens,
        "ignore_eos": bool(body.get("ignore_eos", False)),
        "stream": bool(body.get("stream", False)),
        "include_usage": bool(stream_options.get("include_usage", False)),
        "continuous_usage": bool(stream_options.get("continuous_usage_stats", False)),
        "seed": seed if isinstance(seed, int) else None,
        "cache_salt": cache_salt,
        "images": images,
        "mm_inputs": mm_inputs,
        "lora": model if model is not None and model != model_name else None,
    }
    return prompt_ids, max_tokens, options


def prompt_ids_of(prompt: Any) -> list[int]:
    """A completion prompt's token ids (text is encoded; a batch of one is its prompt)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        ids = TOKENIZER.encode(prompt)
    elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        ids = list(prompt)
        bad = next((t for t in ids if not 0 <= t < VOCAB_SIZE), None)
        if bad is not None:
            raise bad_request(f"Token id {bad} is out of vocabulary", "prompt", bad)
    elif isinstance(prompt, list):
        raise bad_request(
            "Batched prompts are not supported by the simulator; send one prompt per request.", "prompt", "<list>"
        )
    else:
        raise bad_request("Either prompt or prompt_embeds must be provided and non-empty.", "prompt", prompt)
    if not ids:
        raise bad_request("The prompt cannot be empty.", "prompt", "")
    return ids
