"""How a run talks to its server beyond the URL: the API key, extra headers (``--header``,
for gateways that want their own), and TLS verification (``--insecure``, ``--ca-cert``).

Every HTTP client of a run takes its headers and TLS setting from one ``Connection``:
the streaming client (both transports), the ``/v1/models`` probe, the server-info
requests and the ``/metrics`` poller. Header values are secrets (``Authorization``,
gateway tokens): ``secrets()`` lists them for scrubbing, and only their names are ever
shown or recorded.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from rampwatch.core.errors import UserError, unreadable_file
from rampwatch.core.redact import REDACTED

# The environment variable that holds ``NAME: VALUE`` header lines (``app.credentials``):
# how a run's headers reach a process it starts without its command line.
HEADERS_ENV = "RAMPWATCH_HEADERS"
# Headers the HTTP framing owns: a user's value would break the request.
FRAMING_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


@dataclass(frozen=True)
class Connection:
    api_key: str | None = None
    headers: tuple[tuple[str, str], ...] = ()  # (name, value) from --header, in order
    insecure: bool = False  # no TLS certificate verification
    ca_cert: str | None = None  # PEM file of the CA(s) to verify the server against

    def __repr__(self) -> str:
        """Never a secret (a repr reaches logs and tracebacks): the key and header values starred."""
        key = REDACTED if self.api_key else None
        headers = tuple((name, REDACTED) for name, _ in self.headers)
        return f"Connection(api_key={key!r}, headers={headers!r}, insecure={self.insecure!r}, ca_cert={self.ca_cert!r})"

    def extra_headers(self) -> dict[str, str]:
        """The ``--header`` headers (a later one of the same name wins)."""
        out: dict[str, str] = {}
        for name, value in self.headers:
            for existing in [k for k in out if k.lower() == name.lower()]:
                del out[existing]
            out[name] = value
        return out

    def request_headers(self) -> dict[str, str]:
        """Headers of a request to the API: ``Authorization: Bearer KEY`` for an API key,
        then the ``--header`` ones (an ``Authorization`` among them replaces the key's)."""
        out = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        for name, value in self.extra_headers().items():
            for existing in [k for k in out if k.lower() == name.lower()]:
                del out[existing]
            out[name] = value
        return out

    def header_names(self) -> list[str]:
        """What may be shown or recorded of the ``--header`` headers: their names."""
        return list(self.extra_headers())

    def secrets(self) -> set[str]:
        """Values no output may show: the API key and every header value."""
        found = {value for _, value in self.headers if value}
        if self.api_key:
            found.add(self.api_key)
        return found

    def ssl(self) -> ssl.SSLContext | bool:
        """aiohttp's ``ssl=``: ``False`` (no verification), a context trusting
        ``ca_cert``, or ``True`` (the system's CAs)."""
        if self.insecure:
            return False
        if self.ca_cert:
            return ca_context(self.ca_cert)
        return True


def ca_context(path: str) -> ssl.SSLContext:
    """A TLS context that trusts the CA certificate(s) in ``path`` (PEM); a missing,
    unreadable or non-certificate file is a one-line ``UserError`` naming it."""
    try:
        return ssl.create_default_context(cafile=path)
    except ssl.SSLError:  # an OSError too: first
        raise UserError(f"--ca-cert {path}: not a PEM certificate") from None
    except OSError as exc:
        raise unreadable_file("--ca-cert", path, exc) from None


def parse_header(text: str) -> tuple[str, str]:
    """``NAME: VALUE`` (or ``NAME:VALUE``) as a pair. Errors never quote the value (it may
    be a token): ``ValueError`` with what is wrong."""
    name, sep, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not sep or not name:
        raise ValueError("expected NAME:VALUE, e.g. --header 'X-Tenant: team-a'")
    if not all(c.isascii() and (c.isalnum() or c in "!#$%&'*+-.^_`|~") for c in name):
        raise ValueError("the header name may hold only letters, digits and !#$%&'*+-.^_`|~")
    if name.lower() in FRAMING_HEADERS:
        raise ValueError(f"{name} is set by rampwatch itself")
    if any(c in value for c in "\r\n\x00"):
        raise ValueError(f"the value of {name} holds a line break")
    return name, value
