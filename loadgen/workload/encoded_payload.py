"""A request's payload already encoded as JSON, so that the run's loop never decodes nor
re-encodes it.

A request with images is megabytes of base64 (``loadgen.workload.images``). Built in the
builder process (``requests_ahead``) and sent as a dict, it cost the run's loop an
unpickle of every string, then ``orjson.dumps`` of the whole body: ~24 ms for four
1280 × 720 images (orjson's time grows faster than the size above ~4 MB), during which no
chunk of any stream is read (``bench/bench_image_requests.py``). Encoded once in the
builder instead, the payload crosses as bytes; the client (``StreamingClient.body_bytes``)
splices them between the fields it adds (``model``, ``stream``, ``stream_options``) into
exactly the bytes ``orjson.dumps`` of the whole body gives: copies only.

Only a payload of plain JSON values is encoded (dicts with string keys, lists, strings,
ints, finite floats, booleans, None): decoded back (``EncodedPayload`` reads as the
mapping it was, for whoever asks) it is an equal mapping, so every encoder gives the same
bytes for it as for the original. A payload holding a field the client sets, or anything
else (a NaN, a lone surrogate, a date from YAML), stays a dict and takes the client's
usual path.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

# The fields of the body the client sets itself (``StreamingClient.build_body``): a
# payload holding one is left as it is (the client's value would replace it in place).
CLIENT_FIELDS = frozenset({"model", "stream", "stream_options"})


class EncodedPayload(Mapping[str, Any]):
    """A payload as its JSON bytes (``json``: ``orjson.dumps`` of the mapping); reading it
    as a mapping decodes it once. Pickled as the bytes alone: with pickle's protocol 5 as
    a buffer, which a ``buffer_callback`` can carry out of band (``requests_ahead``: the
    request then reads its bytes where the frame was received, never copied)."""

    __slots__ = ("json", "_fields")

    def __init__(self, json: bytes | bytearray | memoryview) -> None:
        self.json = json
        self._fields: dict[str, Any] | None = None

    def _decoded(self) -> dict[str, Any]:
        if self._fields is None:
            self._fields = orjson.loads(self.json)
        return self._fields

    def __getitem__(self, key: str) -> Any:
        return self._decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        if protocol >= 5:
            return (EncodedPayload, (pickle.PickleBuffer(self.json),))
        return (EncodedPayload, (bytes(self.json),))

    def __repr__(self) -> str:
        return f"EncodedPayload({len(self.json):,} bytes)"

    def within(self, head: bytes, tail: bytes) -> bytes:
        """One JSON object: ``head`` (``{`` and the fields before, each followed by its
        comma), these fields, ``tail`` (the fields after, each after its comma, and ``}``)."""
        if len(self.json) == 2:  # {}: the comma between head and tail goes too
            if head.endswith(b","):
                return head[:-1] + tail
            return head + tail[1:] if tail.startswith(b",") else head + tail
        return b"".join((head, memoryview(self.json)[1:-1], tail))


def encode_payload(payload: Mapping[str, Any]) -> EncodedPayload | None:
    """``payload`` encoded, or None where it must stay as it is (see the module's doc)."""
    if isinstance(payload, EncodedPayload):
        return payload
    if type(payload) is not dict or not CLIENT_FIELDS.isdisjoint(payload) or not _plain_json(payload):
        return None
    try:
        return EncodedPayload(orjson.dumps(payload))
    except TypeError:  # a lone surrogate, an int beyond 64 bits, nesting past orjson's limit
        return None


def _plain_json(value: Any) -> bool:
    """Whether ``value`` holds plain JSON values only: it then decodes back to itself."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True  # a lone surrogate in a string: orjson refuses it (encode_payload)
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(type(key) is str and _plain_json(item) for key, item in value.items())
    if kind is list:  # not a tuple: it would decode as a list, a mapping no longer equal
        return all(map(_plain_json, value))
    return False
