"""rampwatch's redirect policy, for every HTTP request of a run (the load, the
``/v1/models`` probe, ``/version``, ``/metrics`` and GPU scrapes, the managed server's
readiness): a redirect is followed only within the origin it came from (same scheme,
host and port), at most ``MAX_REDIRECTS`` times; one to another origin is refused.

aiohttp, left to itself, follows a redirect anywhere and drops only ``Authorization``
and cookies on the way: a ``--header`` value (a gateway token) and the request body (the
prompts) would reach whatever host the server names. Refused, the request fails with
``RedirectRefused``, whose message names the URL it was sent to; a load request is then
recorded as ``http_<status>`` and the run goes on.

::

    async with redirects.request(session, "GET", url, headers=headers) as resp:
        ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from yarl import URL

from rampwatch.core.redact import redact_text
from rampwatch.core.text import server_text

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5


class RedirectRefused(aiohttp.ClientError):
    """A redirect rampwatch does not follow: to another origin, not a URL, or one too many.
    ``status`` is the redirect's HTTP status; ``str()`` is one line, safe to show."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def origin(url: str | URL) -> tuple[str, str, int | None]:
    """``(scheme, host, port)``: what a redirect must keep to be followed."""
    u = URL(url) if isinstance(url, str) else url
    return (u.scheme.lower(), (u.host or "").lower(), u.port)


def redirect_target(url: str | URL, location: str) -> URL | None:
    """Where a ``Location`` sends a request made to ``url``; None when it is not a URL."""
    base = URL(url) if isinstance(url, str) else url
    try:
        return base.join(URL(location))
    except ValueError:
        return None


def refusal(status: int, url: str | URL, location: str) -> RedirectRefused | None:
    """Why a redirect from ``url`` to ``location`` is not followed, or None when it is
    within ``url``'s origin."""
    target = redirect_target(url, location)
    if target is None:
        return RedirectRefused(status, f"HTTP {status}: redirect to {_shown(location)!r}, not a URL: not followed")
    if origin(target) == origin(url):
        return None
    base = URL(url) if isinstance(url, str) else url
    return RedirectRefused(
        status,
        f"HTTP {status}: redirect to another origin not followed: {_shown(str(target))} "
        f"(only redirects within {_shown(str(base.origin()))} are: no header, key or prompt leaves it)",
    )


def _shown(url: str) -> str:
    return server_text(redact_text(url))[:300]


@asynccontextmanager
async def request(
    session: aiohttp.ClientSession, method: str, url: str, **kwargs: Any
) -> AsyncIterator[aiohttp.ClientResponse]:
    """``session.request(method, url, **kwargs)`` under the policy: same-origin redirects
    followed as aiohttp follows them (a 303, or a 301/302 to a POST, becomes a GET
    without its body), others raise ``RedirectRefused``. Credentials in ``url`` go with
    the same-origin hops."""
    current = URL(url)
    userinfo = (current.user, current.password)
    for hop in range(MAX_REDIRECTS + 1):
        resp = await session.request(method, current, allow_redirects=False, **kwargs)
        location = resp.headers.get("Location")
        if resp.status not in REDIRECT_STATUSES or location is None:
            break
        resp.release()
        refused = refusal(resp.status, current, location)
        if refused is not None:
            raise refused
        if hop == MAX_REDIRECTS:
            raise RedirectRefused(
                resp.status, f"HTTP {resp.status}: more than {MAX_REDIRECTS} redirects from {_shown(url)}: not followed"
            )
        target = redirect_target(current, location)
        assert target is not None  # refusal() said it is a URL
        if target.user is None and userinfo[0] is not None:
            target = target.with_user(userinfo[0]).with_password(userinfo[1])
        current = target
        if resp.status == 303 and method != "HEAD" or resp.status in (301, 302) and method == "POST":
            method = "GET"
            kwargs.pop("json", None)
            kwargs.pop("data", None)
    try:
        yield resp
    finally:
        resp.release()
