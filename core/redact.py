"""Keeping secrets out of run headers, recordings, logs and screens: API keys, tokens,
Authorization headers and the credentials of URLs (``http://user:password@host``).

This is the one place that knows what a secret looks like; every output goes through it."""

from __future__ import annotations

import functools
import re
from typing import Any
from urllib.parse import unquote

REDACTED = "<redacted>"
# A value given (a key, a header's value) shorter than this is not searched for in text:
# "vllm", "EMPTY" or a header "X-Tenant: i" would mask parts of model names, error text and
# numbers ("t<redacted>ny"). Where it is sent (a flag, a header) it is masked by its name.
MIN_SCRUBBED_LENGTH = 6

# A name (an option's key, a flag, an environment variable, a header) is split into words
# at "-", "_", "." and lower-to-upper case changes, and compared lower-case. It names a
# secret when a word holds "secret", "password", "passwd" or "credential", or is "cookie"
# or "authorization" (AWS_SECRET_ACCESS_KEY, DB_PASSWORD, Proxy-Authorization), or when
# its last word ends in "token" or is "key", "apikey", "auth", "pat" or "passphrase"
# (HF_TOKEN, HUGGING_FACE_HUB_TOKEN, AWS_SESSION_TOKEN, OPENAI_API_KEY, AZURE_OPENAI_KEY,
# x-api-key, apiKey, hftoken). "token" elsewhere is not enough: "max_tokens",
# "--return-tokens-as-token-ids" are not secrets. A name whose last word says it holds a
# path (GOOGLE_APPLICATION_CREDENTIALS, *_FILE, *_PATH, --ssl-keyfile) names a file, not
# a secret: rampwatch never reads the file, and its path is worth showing.
_SECRET_PARTS = ("secret", "password", "passwd", "credential")
_SECRET_WORDS = frozenset({"cookie", "authorization"})
_SECRET_LAST_WORDS = frozenset({"key", "apikey", "auth", "pat", "passphrase"})
_PATH_LAST_WORDS = frozenset({"file", "path", "dir", "keyfile", "certfile"})
_PATH_NAMES = frozenset({"googleapplicationcredentials"})
_WORD_BREAK = re.compile(r"[-_.\s]+|(?<=[a-z0-9])(?=[A-Z])")
# NAME=VALUE, as a shell reads an environment assignment before a command (HF_TOKEN=… vllm serve)
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_BEARER = re.compile(r"\b(Bearer|Basic)\s+\S+", re.IGNORECASE)
# scheme://userinfo@ — userinfo is everything up to the last "@" before the host
_URL_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)([^\s/?#]*)@")


def is_secret_key(key: str) -> bool:
    """Whether a value under this name is a secret (see the rule above)."""
    words = [w.lower() for w in _WORD_BREAK.split(str(key).lstrip("-")) if w]
    if not words or "".join(words) in _PATH_NAMES or words[-1] in _PATH_LAST_WORDS:
        return False
    last = words[-1]
    return (
        last.endswith("token")
        or last in _SECRET_LAST_WORDS
        or any(w in _SECRET_WORDS or any(part in w for part in _SECRET_PARTS) for w in words)
    )


def _is_flag(item: Any) -> bool:
    """Whether a command line's word is a flag rather than a value (``-1`` is a value): a
    secret-named flag followed by another flag takes no value (``--enable-auth --port 1``)."""
    if not isinstance(item, str) or not item.startswith("-") or item == "-":
        return False
    try:
        float(item)
    except ValueError:
        return True
    return False


def _redact_argv(items: list[Any]) -> list[Any]:
    """Command lines as lists: `--api-key VALUE`, `--api-key=VALUE` and `HF_TOKEN=VALUE` forms."""
    out: list[Any] = []
    hide_next = False
    for item in items:
        if hide_next and not _is_flag(item):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        if _is_flag(item):
            flag, eq, _value = item.partition("=")
            if is_secret_key(flag):
                if eq:
                    out.append(f"{flag}={REDACTED}")
                else:
                    out.append(item)
                    hide_next = True
                continue
        assignment = _ASSIGNMENT.match(item) if isinstance(item, str) else None
        if assignment is not None and is_secret_key(assignment.group(1)):
            out.append(f"{assignment.group(1)}={REDACTED}")
            continue
        out.append(redact_value(item))
    return out


def redact_text(text: str) -> str:
    """``text`` with ``Bearer …`` / ``Basic …`` tokens and URL credentials masked."""
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    return _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


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
                if hide_next and isinstance(item, str) and not _is_flag(item):
                    found.add(item)
                    hide_next = False
                    continue
                hide_next = False
                if _is_flag(item):
                    flag, eq, v = item.partition("=")
                    if is_secret_key(flag):
                        if eq and v:
                            found.add(v)
                        elif not eq:
                            hide_next = True
                        continue
                assignment = _ASSIGNMENT.match(item) if isinstance(item, str) else None
                if assignment is not None and is_secret_key(assignment.group(1)):
                    found.add(assignment.group(2))
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
    return {s for s in found if len(s) >= MIN_SCRUBBED_LENGTH and s != REDACTED}


def scrub(value: Any, secrets: set[str]) -> Any:
    """Replace every occurrence of the given secret strings (those of at least
    ``MIN_SCRUBBED_LENGTH`` characters) inside nested data, in one pass: the longest
    first where two overlap, never inside a mask already put in."""
    pattern = _secrets_pattern(frozenset(s for s in secrets if len(s) >= MIN_SCRUBBED_LENGTH))
    return value if pattern is None else _scrub(value, pattern)


@functools.lru_cache(maxsize=64)
def _secrets_pattern(secrets: frozenset[str]) -> re.Pattern[str] | None:
    if not secrets:
        return None
    return re.compile("|".join(re.escape(s) for s in sorted(secrets, key=len, reverse=True)))


def _scrub(value: Any, pattern: re.Pattern[str]) -> Any:
    if isinstance(value, str):
        return pattern.sub(REDACTED, value)
    if isinstance(value, dict):
        return {k: _scrub(v, pattern) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, pattern) for v in value]
    if isinstance(value, tuple):
        return tuple(_scrub(v, pattern) for v in value)
    return value
