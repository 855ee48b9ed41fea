"""Where a request's TTFT went on the client's side: the phase times of a ``RequestRecord``
(``slot_at``, ``dns_at``, ``connected_at``, ``request_sent_at``, ``headers_at``; their
meaning and figures: ``core.figures.phases``), taken from the run's clock at the same
points on both transports.

- aiohttp: its tracing hooks (``aiohttp.TraceConfig``), one config per session; the
  request's record travels as ``trace_request_ctx``. Only per-request hooks are used (no
  per-chunk one): a streamed chunk costs what it did. aiohttp reports no TLS handshake of
  its own, so ``connected_at`` is the end of TCP and TLS together.
- ``http_stream``: the pool says when a waiting request got its slot and when a new
  connection was ready (``ConnectionPool.acquire``'s ``on_phase``); the client marks the
  write and the stream's exchange the head. It resolves the name inside the connect
  (``loop.create_connection``), so its ``dns_at`` stays None and the lookup counts as
  connect time.

A hop that repeats a phase (a redirect followed, a stale keep-alive connection retried)
overwrites it: the times are those of the hop that answered.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import aiohttp

from rampwatch.core.timeline import RequestRecord

# What ``ConnectionPool.acquire`` reports to ``on_phase``, and the record field each sets.
SLOT = "slot_at"
CONNECTED = "connected_at"


def marker(rec: RequestRecord, clock: Callable[[], float]) -> Callable[[str], None]:
    """``on_phase`` for ``http_stream``: sets the named phase field of ``rec`` to now."""

    def mark(field: str) -> None:
        setattr(rec, field, clock())

    return mark


def trace_config(clock: Callable[[], float]) -> aiohttp.TraceConfig:
    """A ``TraceConfig`` that writes the phase times of the request whose
    ``trace_request_ctx`` is its ``RequestRecord`` (other requests are left alone)."""

    def setter(field: str) -> Any:
        async def hook(_session: aiohttp.ClientSession, ctx: SimpleNamespace, _params: Any) -> None:
            rec = ctx.trace_request_ctx
            if isinstance(rec, RequestRecord):
                setattr(rec, field, clock())

        return hook

    config = aiohttp.TraceConfig()
    config.on_connection_queued_end.append(setter(SLOT))
    config.on_dns_resolvehost_end.append(setter("dns_at"))
    config.on_connection_create_end.append(setter(CONNECTED))
    # the body's chunks follow the headers: the last written is when the request was sent
    config.on_request_headers_sent.append(setter("request_sent_at"))
    config.on_request_chunk_sent.append(setter("request_sent_at"))
    # fired once the response's head is read (aiohttp's ``resp.start``)
    config.on_request_end.append(setter("headers_at"))
    return config
