"""vLLM's per-request ``cache_salt``: requests with different salts never share
prefix-cache blocks (vLLM hashes the salt into a request's first block).

One definition of what a valid salt is, for the run's ``--cache-salt`` flag and for the
simulator, which answers a bad one with vLLM's 400.
"""

from __future__ import annotations

import secrets

from rampwatch.core.errors import UserError
from rampwatch.core.text import printable

# vLLM 0.32's limits (entrypoints/generate/base/protocol.py, validate_cache_salt).
MAX_CACHE_SALT_LENGTH = 128
FORBIDDEN_CACHE_SALT_CHARS = frozenset("@/\\\x00")
# What a run sends when its salt is drawn for it: short, and easy to find in a server's log.
AUTO_SALT_PREFIX = "rampwatch-"


def cache_salt_problem(value: object) -> str | None:
    """Why vLLM would refuse ``value`` as a ``cache_salt`` (None: it would accept it)."""
    if not isinstance(value, str) or not value:
        return "Parameter 'cache_salt' must be a non-empty string if provided."
    if len(value) > MAX_CACHE_SALT_LENGTH or FORBIDDEN_CACHE_SALT_CHARS.intersection(value):
        return (
            f"Parameter 'cache_salt' must be at most {MAX_CACHE_SALT_LENGTH} characters and must "
            "not contain '@', '/', '\\\\', or NUL."
        )
    return None


def fresh_cache_salt() -> str:
    """A salt no other run has: 64 random bits."""
    return AUTO_SALT_PREFIX + secrets.token_hex(8)


# A run's cache policy (``--cache-salt``), recorded in its header.
AUTO = "auto"  # a fresh salt drawn for the run: it never reads another run's cached prefixes
NONE = "none"  # no salt sent: runs of the same prompts share the server's prefix cache
FIXED = "fixed"  # the salt given: runs with the same salt share the cache, others do not
UNKNOWN = "unknown"  # a recording made before the policy was recorded


def cache_salt_choice(value: str) -> tuple[str, str | None]:
    """``--cache-salt VALUE`` as (policy, the salt every request of the run carries):
    ``auto`` draws a fresh one, ``none`` sends none, any other text is the salt itself."""
    if value == AUTO:
        return AUTO, fresh_cache_salt()
    if value == NONE:
        return NONE, None
    # Control characters vLLM would take, but the salt is shown in banners and reports.
    if cache_salt_problem(value) is not None or not value.isprintable():
        shown = printable(value[:40], one_line=True) + ("…" if len(value) > 40 else "")
        raise UserError(
            f"--cache-salt {shown!r}: expected auto, none or a salt of 1 to {MAX_CACHE_SALT_LENGTH} printable "
            "characters without '@', '/' or '\\' (vLLM refuses those)"
        )
    return FIXED, value


def describe_cache_policy(policy: str | None, salt: str | None) -> str:
    """How a run's cache policy reads in a banner, a report or a comparison."""
    if policy == AUTO:
        return f"cache salt {salt} (fresh for this run)"
    if policy == FIXED:
        return f"cache salt {salt} (given)"
    if policy == NONE:
        return "no cache salt (shares the server's prefix cache)"
    return "cache salt unknown (recorded before rampwatch recorded it)"
