"""Talking HTTP to the server: streaming requests, SSE, the connection settings, redirects, open files."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rampwatch.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from rampwatch.loadgen.transport.client import RequestCancelled, StreamingClient
    from rampwatch.loadgen.transport.connection import HEADERS_ENV, Connection, ca_context, parse_header
    from rampwatch.loadgen.transport.open_files import raise_open_files_limit
    from rampwatch.loadgen.transport.redirects import REDIRECT_STATUSES
    from rampwatch.loadgen.transport.server_probe import ModelsAnswer, first_model_of, normalize_base_url, probe_models

# module -> the public names it defines, loaded on first use
_MODULES: dict[str, tuple[str, ...]] = {
    "client": (
        "RequestCancelled",
        "StreamingClient",
    ),
    "connection": (
        "Connection",
        "HEADERS_ENV",
        "ca_context",
        "parse_header",
    ),
    "open_files": ("raise_open_files_limit",),
    "redirects": ("REDIRECT_STATUSES",),
    "server_probe": (
        "ModelsAnswer",
        "first_model_of",
        "normalize_base_url",
        "probe_models",
    ),
}
__all__ = [
    "Connection",
    "HEADERS_ENV",
    "ModelsAnswer",
    "REDIRECT_STATUSES",
    "RequestCancelled",
    "StreamingClient",
    "ca_context",
    "first_model_of",
    "normalize_base_url",
    "parse_header",
    "probe_models",
    "raise_open_files_limit",
]
__getattr__ = lazy_attributes(__name__, _MODULES)
