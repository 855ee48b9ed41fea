"""Keeping secrets out of run headers, recordings, logs and screens: API keys, tokens,
Authorization headers and the credentials of URLs (``http://user:password@host``).

This is the one place that knows what a secret looks like; every output goes through it."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

REDACTED = "<redacted>"

# Compared after lower-casing and dropping "-" / "_", so "api-key", "API_KEY" and
# "apiKey" all match. "token" alone is deliberately absent: "max_tokens" is not a secret.
_SECRET_KEYS = {
    "apikey",
    "authorization",
    "auth",
    "password",
    "passwd",
    "secret",
    "token",
    "accesstoken",
    "authtoken",
    "bearertoken",
    "hftoken",
    "hfapitoken",
    "cookie",
    "proxyauthorization",
}
_SECRET_SUFFIXES = ("apikey", "secret", "password", "accesstoken", "authtoken", "bearertoken", "hftoken")
_BEARER = re.compile(r"\b(Bearer|Basic)\s+\S+", re.IGNORECASE)
# scheme://userinfo@ — userinfo is everything up to the last "@" before the host
_URL_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)([^\s/?#]*)@")


def _normalise(key: str) -> str:
    return key.lower().replace("-", "").replace("_", "")


def is_secret_key(key: str) -> bool:
    k = _normalise(str(key)).lstrip("-")
    return k in _SECRET_KEYS or k.endswith(_SECRET_SUFFIXES)


def _redact_argv(items: list[Any]) -> list[Any]:
    """Command lines as lists: `--api-key VALUE` and `--api-key=VALUE` forms."""
    out: list[Any] = []
    hide_next = False
    for item in items:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if isinstance(item, str) and item.startswith("-"):
            flag, eq, _value = item.partition("=")
            if is_secret_key(flag):
                if eq:
                    out.append(f"{flag}={REDACTED}")
                else:
                    out.append(item)
                    hide_next = True
                continue
        out.append(redact_value(item))
    return out


def redact_text(text: str) -> str:
    """``text`` with ``Bearer …`` / ``Basic …`` tokens and URL credentials masked."""
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    return _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``(url without credentials, user, password)``: a URL's userinfo becomes HTTP basic
    auth, so that the URL itself can be shown and recorded as it is."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return clean, unquote(parts.username or ""), None if parts.password is None else unquote(parts.password)


def redact_value(value: Any) -> Any:
    if isinstance(value, dict):
        return redact_options(value)
    if isinstance(value, (list, tuple)):
        return _redact_argv(list(value))
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_options(options: dict) -> dict:
    """A copy of ``options`` (nested dicts/lists too) with every secret value replaced.

    Keys such as ``api_key``, ``Authorization``, ``hf_token``, ``password`` lose their
    value; ``Bearer …`` strings and ``--api-key X`` inside argument lists are masked.
    """
    out: dict = {}
    for key, value in options.items():
        if is_secret_key(str(key)) and value is not None and value != "" and value is not False:
            out[key] = REDACTED
        else:
            out[key] = redact_value(value)
    return out


def secret_values(options: Any) -> set[str]:
    """The literal secret strings found in ``options``, to scrub from anything else recorded."""
    found: set[str] = set()

    def walk(value: Any, secret: bool) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, secret or is_secret_key(str(k)))
        elif isinstance(value, (list, tuple)):
            hide_next = False
            for item in value:
                if hide_next and isinstance(item, str):
                    found.add(item)
                    hide_next = False
                    continue
                hide_next = False
                if isinstance(item, str) and item.startswith("-"):
                    flag, eq, v = item.partition("=")
                    if is_secret_key(flag):
                        if eq and v:
                            found.add(v)
                        elif not eq:
                            hide_next = True
                        continue
                walk(item, secret)
        elif isinstance(value, str):
            if secret and value:
                found.add(value)
            for m in _BEARER.finditer(value):
                found.add(m.group(0).split(None, 1)[1])
            for m in _URL_USERINFO.finditer(value):
                userinfo = m.group(2)
                found.add(userinfo)
                _user, colon, password = userinfo.partition(":")
                if colon and password:
                    found.update({password, unquote(password)})

    walk(options, False)
    # Very short values would scrub unrelated text; keys are long in practice.
    return {s for s in found if len(s) >= 6 and s != REDACTED}


def scrub(value: Any, secrets: set[str]) -> Any:
    """Replace every occurrence of the given secret strings inside nested data."""
    if not secrets:
        return value
    if isinstance(value, str):
        for s in secrets:
            if s in value:
                value = value.replace(s, REDACTED)
        return value
    if isinstance(value, dict):
        return {k: scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, secrets) for v in value]
    if isinstance(value, tuple):
        return tuple(scrub(v, secrets) for v in value)
    return value
