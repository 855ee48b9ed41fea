"""Asking the server what it is before a run: ``GET /v1/models`` (is it there, what does it
serve, ``first_model`` for a run without ``--model``, ``check_model_served``), and the
server information a recording's header keeps (``fetch_server_info``: the models,
``/version``, the cache config from ``/metrics``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp

from rampwatch.core.errors import ModelNotServed, TargetUnreachable, UserError
from rampwatch.core.redact import redact_text, scrub
from rampwatch.core.text import printable, server_text
from rampwatch.loadgen.transport import redirects
from rampwatch.loadgen.transport.connection import Connection


def normalize_base_url(base_url: str) -> str:
    """``http://h:8000/``, ``http://h:8000/v1`` -> ``http://h:8000`` (paths add ``/v1/...``)."""
    url = base_url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    return url


def describe_error(exc: BaseException) -> str:
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


@dataclass(frozen=True)
class ModelsAnswer:
    """What ``GET /v1/models`` answered."""

    url: str
    status: int
    models: list[dict[str, Any]] | None  # the ``data`` list; None unless a 200 with an OpenAI models list


async def probe_models(
    base_url: str, api_key: str | None = None, timeout_s: float = 5.0, connection: Connection | None = None
) -> ModelsAnswer:
    """``GET /v1/models``: the one request that asks a server whether it is there and
    what it serves. Any HTTP answer (even 401/404) is returned; raises
    ``TargetUnreachable("cannot reach <url> : <reason>")`` when nothing answers within
    ``timeout_s``. ``connection`` (headers, TLS) wins over ``api_key``."""
    connection = connection if connection is not None else Connection(api_key=api_key)
    base = normalize_base_url(base_url)
    url = base + "/v1/models"
    shown = redact_text(url)  # what messages and the answer name: credentials masked
    try:
        connector = aiohttp.TCPConnector(ssl=connection.ssl())
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout_s), connector=connector
        ) as session:
            async with redirects.request(session, "GET", url, headers=connection.request_headers()) as resp:
                models = None
                if resp.status == 200:
                    try:
                        body = await resp.json(content_type=None)
                    except ValueError:
                        body = None
                    if isinstance(body, dict) and isinstance(body.get("data") or [], list):
                        models = body.get("data") or []
                return ModelsAnswer(shown, resp.status, models)
    except TimeoutError:
        raise TargetUnreachable(f"cannot reach {redact_text(base)} : no answer within {timeout_s:g} s") from None
    except redirects.RedirectRefused as exc:  # it answered: not "cannot reach"
        raise UserError(f"{shown}: {exc}") from None
    except aiohttp.ClientError as exc:
        raise TargetUnreachable(
            f"cannot reach {redact_text(base)} : "
            f"{server_text(str(exc), connection.secrets()) or type(exc).__name__}{_tls_hint(exc)}"
        ) from None


def _tls_hint(exc: BaseException) -> str:
    """What to do about a certificate the client could not verify."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return " (pass --ca-cert PEM with the server's CA, or --insecure to skip verification)"
    return ""


async def check_reachable(base_url: str, timeout_s: float = 5.0, api_key: str | None = None) -> int:
    """The HTTP status of ``/v1/models`` (``probe_models``); raises ``TargetUnreachable``
    when nothing answers."""
    return (await probe_models(base_url, api_key, timeout_s)).status


async def first_model(
    base_url: str, api_key: str | None = None, timeout_s: float = 10.0, connection: Connection | None = None
) -> str:
    """The id of the first model the server lists, for a run without ``--model``; any
    failure is a one-line ``TargetUnreachable`` naming the URL."""
    return first_model_of(await probe_models(base_url, api_key, timeout_s, connection))


def first_model_of(answer: ModelsAnswer, key_from: str | None = None) -> str:
    """``first_model`` of an answer already at hand. The server answered, so a failure
    here is not "unreachable": a refusal (401/403) names the credentials (``key_from``:
    where the key sent came from, None when none was), any other answer without a models
    list (a gateway without the route: 404) asks for ``--model``."""
    if answer.status in (401, 403):
        why = (
            f"the server refused the API key sent (from {key_from})"
            if key_from
            else "the server refused the request (does it expect --api-key or a --header?)"
        )
        raise UserError(f"{answer.url}: HTTP {answer.status}: {why}")
    if answer.status != 200:
        raise ModelNotServed(
            f"{answer.url}: HTTP {answer.status}: the server answered without its models; pass --model"
        )
    if answer.models is None:
        raise ModelNotServed(f"{answer.url}: not an OpenAI-compatible models list; pass --model")
    if not answer.models:
        raise ModelNotServed(f"{answer.url}: the server lists no models; pass --model")
    return answer.models[0]["id"]


# At most this many served models are named when --model is not among them.
MAX_MODELS_NAMED = 10


def served_model_ids(models: list[Any]) -> list[str]:
    return [str(m["id"]) for m in models if isinstance(m, dict) and m.get("id") is not None]


def named_models(ids: list[str], secrets: Iterable[str] = ()) -> str:
    """The first ``MAX_MODELS_NAMED`` served ids as an error names them: each printable,
    cut to 100 characters, and masked of ``secrets`` first (a hostile server may list the
    API key or a header's value it was sent as a model's id)."""
    kept = set(secrets)
    return ", ".join(printable(repr(scrub(i, kept)[:100]), one_line=True) for i in ids[:MAX_MODELS_NAMED])


def check_model_served(model: str, answer: ModelsAnswer, secrets: Iterable[str] = ()) -> None:
    """Raise ``ModelNotServed`` when the server lists its models and ``model`` is not one
    of them (matched as vLLM does, by id, exactly). A server without a usable list
    (404, not OpenAI's shape) proves nothing: no error. ``secrets``: masked in the ids named."""
    if answer.status != 200 or answer.models is None:
        return
    ids = served_model_ids(answer.models)
    if model in ids:
        return
    named = named_models(ids, secrets)
    more = f" and {len(ids) - MAX_MODELS_NAMED} more" if len(ids) > MAX_MODELS_NAMED else ""
    served = f"it serves {named}{more}" if ids else "it lists no models"
    raise ModelNotServed(f"--model {printable(repr(model), one_line=True)} is not served by {answer.url}: {served}")


def check_adapters_served(
    adapters: list[str], server_info: dict[str, Any], url: str, secrets: Iterable[str] = ()
) -> None:
    """Raise ``ModelNotServed`` naming the first of the scenario's LoRA adapters
    (``workload.adapters``) that the server's ``/v1/models`` list (``fetch_server_info``'s
    ``models``) lacks; vLLM lists each ``--lora-modules NAME=PATH`` under its name. A
    server without a usable list proves nothing: no error. ``secrets``: masked in the ids
    named."""
    if not adapters or "/v1/models" in server_info.get("errors", {}):
        return
    ids = served_model_ids(server_info.get("models") or [])
    for name in adapters:
        if name not in ids:
            named = named_models(ids, secrets)
            more = f" and {len(ids) - MAX_MODELS_NAMED} more" if len(ids) > MAX_MODELS_NAMED else ""
            raise ModelNotServed(
                f"workload.adapters: adapter {printable(repr(name), one_line=True)} is not served by "
                f"{url}/v1/models (it serves {named or 'no models'}{more}); "
                f"vLLM serves one with --enable-lora --lora-modules {printable(name, one_line=True)}=PATH"
            )


async def fetch_server_info(
    base_url: str,
    api_key: str | None = None,
    timeout_s: float = 5.0,
    *,
    connection: Connection | None = None,
    model: str | None = None,
    answer: ModelsAnswer | None = None,
    extras_timeout_s: float | None = None,
) -> dict[str, Any]:
    """What the recording's header keeps about the server, from one ``/v1/models`` probe
    (``probe_models``) and ``/version`` and ``/metrics`` (asked together, each given
    ``extras_timeout_s``, default ``timeout_s``).

    Keys: ``models`` (the ``/v1/models`` data list), ``version`` (``/version``'s value),
    ``cache_config`` (labels of ``vllm:cache_config_info`` from ``/metrics``) and
    ``errors`` ({path: reason} for whatever failed). With ``model``, the probe is also
    the run's start check: raises ``TargetUnreachable`` when nothing answers and
    ``ModelNotServed`` when the list lacks ``model``; without, it never raises. ``answer``:
    a ``/v1/models`` answer the caller already has (it asked for the model's name), used
    instead of asking again.
    """
    from rampwatch.loadgen.server.scrape import cache_config_from_metrics

    connection = connection if connection is not None else Connection(api_key=api_key)
    secrets = connection.secrets()
    base = normalize_base_url(base_url)
    headers = connection.request_headers()
    info: dict[str, Any] = {"models": [], "version": None, "cache_config": {}, "errors": {}}
    try:
        if answer is None:
            answer = await probe_models(base, timeout_s=timeout_s, connection=connection)
        if answer.status != 200:
            info["errors"]["/v1/models"] = f"HTTP {answer.status}"
        elif answer.models is None:
            info["errors"]["/v1/models"] = "not an OpenAI-compatible models list"
        else:
            info["models"] = answer.models
        if model is not None:
            check_model_served(model, answer, secrets)
    except TargetUnreachable as exc:
        if model is not None:
            raise
        info["errors"]["/v1/models"] = str(exc)

    async def read(session: aiohttp.ClientSession, path: str) -> None:
        try:
            async with redirects.request(session, "GET", base + path, headers=headers) as resp:
                if resp.status != 200:
                    info["errors"][path] = f"HTTP {resp.status}"
                    return
                if path == "/metrics":
                    info["cache_config"] = cache_config_from_metrics(await resp.text())
                    return
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            info["errors"][path] = server_text(describe_error(exc), secrets)
            return
        info["version"] = body.get("version") if isinstance(body, dict) else body

    try:
        connector = aiohttp.TCPConnector(ssl=connection.ssl())
        # Both asked at once, each for at most extras_timeout_s: a /metrics that hangs
        # delays the run's start by that, not by the sum of the waits.
        timeout = aiohttp.ClientTimeout(total=extras_timeout_s if extras_timeout_s is not None else timeout_s)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            await asyncio.gather(read(session, "/version"), read(session, "/metrics"))
    except Exception as exc:  # the header must be written whatever the server does
        info["errors"]["session"] = type(exc).__name__
    return info
