"""The `.rwrec` file layout (format version 1) and its block codecs.

A file is a 16-byte preamble followed by self-delimiting frames, appended in order::

    preamble: b"RWREC\\0\\r\\n" | u16 format_version | u16 reserved | u32 reserved
    frame:    u32 payload_len | u8 kind | u32 item_count | u32 crc32(payload)
              | f64 t_first | f64 t_last | payload

``t_first``/``t_last`` bound the item times in the frame (requests use ``end_at``), so
a reader builds its time index from frame headers alone, without decompressing.
See docs/recording-format.md for the reasons behind each choice.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rampwatch.core.text import printable_value
from rampwatch.core.timeline import Event, RequestRecord, RunHeader, ServerSample, Tick

MAGIC = b"RWREC\x00\r\n"
FORMAT_VERSION = 1
PREAMBLE = struct.Struct("<8sHHI")
FRAME = struct.Struct("<IBIIdd")

KIND_HEADER = 1
KIND_REQUESTS = 2
KIND_META = 3  # scrapes, ticks and events of one flush
KIND_FINISH = 4
KIND_CHECKPOINT = 5  # the replay's series-builder state at one run time (optional)
KINDS = {
    KIND_HEADER: "header",
    KIND_REQUESTS: "requests",
    KIND_META: "meta",
    KIND_FINISH: "finish",
    KIND_CHECKPOINT: "checkpoint",
}

# Request-level times are kept to 1 µs; chunk arrival times to CHUNK_QUANTUM_US (the
# quantum is stored in every block, so a reader never assumes it).
TIME_QUANTUM_US = 1
CHUNK_QUANTUM_US = 10
_NONE_I64 = np.iinfo(np.int64).min
ZLIB_LEVEL = 6

# What a block may inflate to. A writer flushes every half second, so its blocks are small:
# a meta block holds half a second of scrapes, ticks and events, a checkpoint the series
# state. A requests block's size follows from its request count and chunk count (see
# _scalars_limit, _chunks_limit). Past these, a block is damaged or hostile (a zlib bomb:
# 1 MB can inflate to 1 GB), and reading it stops at the limit.
MAX_BLOCK_BYTES = 64 * 1024 * 1024
MAX_STRINGS_PER_REQUEST = 16 * 1024  # JSON of a request's finish reason, error class and message, tag


def inflate(data: bytes, limit: int = MAX_BLOCK_BYTES) -> bytes:
    """``zlib.decompress`` that never produces more than ``limit`` bytes: ValueError past it."""
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, limit)
    if not inflater.eof:
        if inflater.unconsumed_tail:
            raise ValueError(f"inflates past {limit:,} bytes, more than the format allows")
        raise ValueError("truncated compressed data")
    return out


def _scalars_limit(n: int) -> int:
    return 4 + n * (MAX_STRINGS_PER_REQUEST + 40 + 12 + 2 + 1) + 1024


def _chunks_limit(total: int) -> int:
    return _CHUNK_HEAD.size + 16 * total  # a burst clock delta and (burst, offset) per chunk at most


def preamble(version: int = FORMAT_VERSION) -> bytes:
    return PREAMBLE.pack(MAGIC, version, 0, 0)


def frame(kind: int, payload: bytes, count: int, t_first: float, t_last: float) -> bytes:
    return FRAME.pack(len(payload), kind, count, zlib.crc32(payload), t_first, t_last) + payload


@dataclass(slots=True)
class FrameInfo:
    offset: int  # of the payload
    kind: int
    count: int
    length: int
    crc: int
    t_first: float
    t_last: float


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), allow_nan=True).encode()


def _shuffle(a: np.ndarray) -> bytes:
    """Byte planes of a fixed-width array: high bytes (mostly equal) compress far better apart."""
    width = a.dtype.itemsize
    return np.ascontiguousarray(a.view(np.uint8).reshape(-1, width).T).tobytes()


def _unshuffle(data: bytes, dtype_like: npt.DTypeLike, n: int) -> np.ndarray:
    dtype = np.dtype(dtype_like)
    planes = np.frombuffer(data, dtype=np.uint8, count=n * dtype.itemsize).reshape(dtype.itemsize, n)
    return np.ascontiguousarray(planes.T).view(dtype).reshape(n)


# ---- header / finish -------------------------------------------------------------------


def encode_header(header: RunHeader) -> bytes:
    return zlib.compress(_json_bytes(header.to_dict()), ZLIB_LEVEL)


# A JSON-escaped control character other than tab and newline (json.dumps writes every
# one as \u00XX), or one written raw by another encoder.
_JSON_CONTROL = re.compile(
    rb"\\u00(?:0[0-8bcef]|1[0-9a-f]|7f|[89][0-9a-f])|[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]"
    # the bidirectional overrides and line separators core.text.printable shows too, escaped or raw
    rb"|\\u(?:061c|200[ef]|202[89a-e]|206[6-9])|\xd8\x9c|\xe2\x80[\x8e\x8f\xa8-\xae]|\xe2\x81[\xa6-\xa9]",
    re.I,
)


def _loads_printable(text: bytes) -> Any:
    """``json.loads`` with every control character in its strings shown as ``\\xNN``:
    recordings made before rampwatch made a server's text safe as it came in (or
    written by anything else) cannot put an escape sequence on a screen. Only a block
    that holds one is walked."""
    value = json.loads(text)
    return printable_value(value) if _JSON_CONTROL.search(text) else value


# What each header field must hold, by its declared type: a damaged or hostile file whose
# `options` is a string would otherwise end every reader in a traceback far from here.
_HEADER_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "str | None": (str, type(None)),
    "float": (int, float),
    "float | None": (int, float, type(None)),
    "bool": (bool,),
    "dict[str, Any]": (dict,),
    "list[str]": (list,),
}


def header_problem(d: Any) -> str | None:
    """Why a decoded header is not a ``RunHeader``'s fields (None: it is)."""
    if not isinstance(d, dict):
        return f"expected a JSON object, got {type(d).__name__}"
    for name, spec in RunHeader.__dataclass_fields__.items():
        if name not in d:
            continue
        value, allowed = d[name], _HEADER_TYPES[str(spec.type)]
        if isinstance(value, bool) and bool not in allowed:  # a bool is an int to Python, not a number here
            return f"field {name}: expected {spec.type}, got bool"
        if not isinstance(value, allowed):
            return f"field {name}: expected {spec.type}, got {type(value).__name__}"
    return None


def decode_header(payload: bytes) -> RunHeader:
    d = _loads_printable(inflate(payload))
    problem = header_problem(d)
    if problem is not None:
        raise ValueError(problem)
    known = set(RunHeader.__dataclass_fields__)
    return RunHeader(**{k: v for k, v in d.items() if k in known})


def encode_finish(t: float) -> bytes:
    return _json_bytes({"t": t})


def decode_finish(payload: bytes) -> float:
    return float(json.loads(payload)["t"])


# ---- checkpoints ------------------------------------------------------------------------
#
# payload = zlib( u32 len(json) | json{"t", "base_t", "state", "arrays": [[name, dtype, shape, offset, xor]]}
#                 | array bytes )
# Plain JSON and raw numbers (never pickle), so opening a file cannot run code. A
# checkpoint with a ``base_t`` stores its arrays XOR-ed with those of the (full) checkpoint
# at ``base_t``: the per-second arrays only change near the present, so the difference is
# mostly zero bytes and costs almost nothing compressed.

_ARRAY_DTYPES = {"<f8", "<i8"}


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.int64)


def encode_checkpoint(
    t: float,
    state: dict[str, Any],
    arrays: dict[str, np.ndarray],
    base: tuple[float, dict[str, np.ndarray]] | None = None,
) -> bytes:
    specs, blobs, offset = [], [], 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a, dtype=np.dtype(a.dtype).newbyteorder("<"))
        ref = base[1].get(name) if base is not None else None
        xor = ref is not None and ref.dtype == a.dtype and ref.ndim == 1 == a.ndim and ref.size <= a.size
        if xor:
            assert ref is not None
            bits = _bits(a).copy()
            bits[: ref.size] ^= _bits(ref)
            a = bits.view(a.dtype)
        specs.append([name, a.dtype.str, list(a.shape), offset, xor])
        blobs.append(a.tobytes())
        offset += a.nbytes
    head = _json_bytes({"t": t, "base_t": base[0] if base is not None else None, "state": state, "arrays": specs})
    return zlib.compress(struct.pack("<I", len(head)) + head + b"".join(blobs), 1)


def decode_checkpoint(
    payload: bytes, base_arrays: dict[str, np.ndarray] | None = None
) -> tuple[float, dict[str, Any], dict[str, np.ndarray]]:
    """``(t, state, arrays)``; a checkpoint stored against a base needs the base's arrays
    (``checkpoint_base`` tells which)."""
    raw = inflate(payload)
    (jl,) = struct.unpack_from("<I", raw, 0)
    head = _loads_printable(raw[4 : 4 + jl])
    base = 4 + jl
    arrays = {}
    for name, dtype, shape, offset, *rest in head["arrays"]:
        if dtype not in _ARRAY_DTYPES:
            raise ValueError(f"unexpected array type {dtype!r} in a checkpoint")
        count = int(np.prod(shape)) if shape else 1
        a = np.frombuffer(raw, dtype=dtype, count=count, offset=base + offset).reshape(shape)
        if rest and rest[0]:
            if base_arrays is None or name not in base_arrays:
                raise ValueError(f"checkpoint at {head['t']} needs its base checkpoint")
            ref = base_arrays[name]
            bits = _bits(a).copy()
            bits[: ref.size] ^= _bits(ref)
            a = bits.view(a.dtype)
        arrays[name] = a
    return float(head["t"]), head["state"], arrays


def checkpoint_base(payload: bytes) -> float | None:
    """The time of the checkpoint this one is stored against, if any."""
    raw = zlib.decompressobj().decompress(payload, 4096)
    (jl,) = struct.unpack_from("<I", raw, 0)
    if len(raw) < 4 + jl:
        raw = inflate(payload)
    head = json.loads(raw[4 : 4 + jl])
    return head.get("base_t")


# ---- scrapes, ticks, events ------------------------------------------------------------


def encode_meta(samples: list[ServerSample], ticks: list[Tick], events: list[Event]) -> bytes:
    body = {
        "samples": [s.to_dict() for s in samples],
        "ticks": [t.to_dict() for t in ticks],
        "events": [e.to_dict() for e in events],
    }
    return zlib.compress(_json_bytes(body), ZLIB_LEVEL)


def _build(cls, d: dict) -> Any:
    known = cls.__dataclass_fields__
    return cls(**{k: v for k, v in d.items() if k in known})


def decode_meta(payload: bytes, with_raw: bool = True) -> tuple[list[ServerSample], list[Tick], list[Event]]:
    """A meta block's items; ``with_raw=False`` leaves each scrape's ``raw`` series empty
    (no figure reads them, and a vLLM page's ~140 of them, as a dict a second, are most
    of the memory an hour of decoded scrapes takes)."""
    body = _loads_printable(inflate(payload))
    samples = body.get("samples", [])
    if not with_raw:
        for d in samples:
            d.pop("raw", None)
    return (
        [_build(ServerSample, d) for d in samples],
        [_build(Tick, d) for d in body.get("ticks", [])],
        [_build(Event, d) for d in body.get("events", [])],
    )


# ---- requests --------------------------------------------------------------------------
#
# payload = u32 n | u32 len(scalars_z) | u32 len(chunks_z) | scalars_z | chunks_z
# scalars (zlib): u32 len(json) | json{strings, quanta} | shuffled int64[6n] | int32[3n] | int16[n] | u8[n]
# chunks  (zlib): shuffled int32 deltas in chunk quanta, request after request; the first
#                 delta of a request is from first_token_at (or sent_at when absent).

_REQ_HEAD = struct.Struct("<III")


def _us(values: list[float | None], quantum_us: int) -> np.ndarray:
    out = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        out[i] = _NONE_I64 if v is None else round(v * 1e6 / quantum_us)
    return out


# Chunk times, coded across requests. A serving engine produces one token per running
# request per step, so the chunks of all requests in a block arrive in bursts, one per
# engine step. The sorted union of the block's chunk times is cut into bursts at gaps
# wider than _BURST_GAP_US; a chunk is then (burst index, offset from the burst's start):
# within a request the burst index mostly advances by exactly 1 and the offset is the
# client's small jitter, both far cheaper than raw inter-chunk gaps. The coding is
# lossless for any input; bursts only decide how well it compresses.
_BURST_GAP_US = 2000
_CHUNK_HEAD = struct.Struct("<I")


def _encode_chunks(q: np.ndarray, n_chunks: np.ndarray, quantum_us: int) -> bytes:
    quantum_gap = max(1, _BURST_GAP_US // max(1, quantum_us))
    union = np.sort(q)
    starts = np.concatenate([[True], np.diff(union) > quantum_gap])
    clock = union[starts]
    burst = np.searchsorted(clock, q, side="right") - 1
    offsets = q - clock[burst]
    counts = n_chunks[n_chunks > 0].astype(np.int64)
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    burst_delta = np.diff(burst, prepend=0)
    burst_delta[firsts] = burst[firsts]
    clock_delta = np.diff(clock, prepend=0)
    return b"".join(
        [
            _CHUNK_HEAD.pack(len(clock)),
            _shuffle(clock_delta.astype(np.int64)),
            _shuffle(burst_delta.astype(np.int32)),
            _shuffle(offsets.astype(np.int32)),
        ]
    )


def _decode_chunks(data: bytes, n_chunks: np.ndarray, total: int) -> np.ndarray:
    (m,) = _CHUNK_HEAD.unpack_from(data, 0)
    p = _CHUNK_HEAD.size
    clock = np.cumsum(_unshuffle(data[p : p + 8 * m], np.int64, m))
    p += 8 * m
    burst_delta = _unshuffle(data[p : p + 4 * total], np.int32, total).astype(np.int64)
    p += 4 * total
    offsets = _unshuffle(data[p : p + 4 * total], np.int32, total).astype(np.int64)
    counts = n_chunks[n_chunks > 0].astype(np.int64)
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    # Per-request cumulative sums: undo, at each request's start, what earlier requests added.
    running = np.cumsum(burst_delta)
    before = np.concatenate([[0], running[firsts[1:] - 1]]) if len(firsts) else np.zeros(0, np.int64)
    burst = running - np.repeat(before, counts)
    return clock[burst] + offsets


# RequestRecord fields kept as JSON lists beside the strings, when a block has any; a
# recording without them (older, or a plain run) reads them as None.
OPTIONAL_REQUEST_FIELDS = (
    "request_class",
    "session",
    "turn",
    "cached_tokens",
    "first_answer_at",
    "reasoning_tokens",
    "reasoning_from_usage",
    "adapter",
    "images",
    "slot_at",
    "dns_at",
    "connected_at",
    "request_sent_at",
    "headers_at",
)
# Of those, the times: written as whole time quanta (``time_quantum_us``), as the others.
_OPTIONAL_TIMES = ("first_answer_at", "slot_at", "dns_at", "connected_at", "request_sent_at", "headers_at")


def encode_requests(records: list[RequestRecord], chunk_quantum_us: int = CHUNK_QUANTUM_US) -> bytes:
    n = len(records)
    q_t = TIME_QUANTUM_US
    ids = np.fromiter((r.id for r in records), dtype=np.int64, count=n)
    scheduled = _us([r.scheduled_at for r in records], q_t)
    sent = _us([r.sent_at for r in records], q_t)
    end = _us([r.end_at for r in records], q_t)
    first = _us([r.first_token_at for r in records], q_t)
    n_chunks = np.fromiter((len(r.chunk_times) for r in records), dtype=np.int32, count=n)
    prompt = np.fromiter((r.prompt_tokens for r in records), dtype=np.int32, count=n)
    completion = np.fromiter((r.completion_tokens for r in records), dtype=np.int32, count=n)
    status = np.fromiter((-1 if r.status is None else r.status for r in records), dtype=np.int16, count=n)
    flags = np.fromiter((1 if r.tokens_from_usage else 0 for r in records), dtype=np.uint8, count=n)

    # Times relative to the request's own scheduled time are small and compress well.
    has_first = first != _NONE_I64
    rel = np.empty((5, n), dtype=np.int64)
    rel[0] = scheduled
    rel[1] = ids
    rel[2] = sent - scheduled
    rel[3] = end - scheduled
    rel[4] = np.where(has_first, first - scheduled, _NONE_I64)
    strings = {
        "finish_reason": [r.finish_reason for r in records],
        "error_class": [r.error_class for r in records],
        "error": [r.error for r in records],
        "scenario_tag": [r.scenario_tag for r in records],
        "time_quantum_us": q_t,
        "chunk_quantum_us": chunk_quantum_us,
    }
    # Written only when some record has them: recordings of plain runs stay as they were.
    for key in OPTIONAL_REQUEST_FIELDS:
        column = [getattr(r, key) for r in records]
        if any(value is not None for value in column):
            if key in _OPTIONAL_TIMES:
                column = [None if v is None else round(v * 1e6 / q_t) for v in column]
            strings[key] = column
    js = _json_bytes(strings)
    scalars = b"".join(
        [
            struct.pack("<I", len(js)),
            js,
            _shuffle(rel.reshape(-1)),
            _shuffle(np.concatenate([n_chunks, prompt, completion])),
            _shuffle(status),
            flags.tobytes(),
        ]
    )

    total = int(n_chunks.sum())
    if total:
        times = np.fromiter((t for r in records for t in r.chunk_times), dtype=np.float64, count=total)
        chunks = _encode_chunks(np.rint(times * (1e6 / chunk_quantum_us)).astype(np.int64), n_chunks, chunk_quantum_us)
    else:
        chunks = b""
    scalars_z = zlib.compress(scalars, ZLIB_LEVEL)
    chunks_z = zlib.compress(chunks, ZLIB_LEVEL)
    return _REQ_HEAD.pack(n, len(scalars_z), len(chunks_z)) + scalars_z + chunks_z


@dataclass(slots=True)
class RequestColumns:
    """One requests block as arrays (the values ``decode_requests`` would give, without
    building a ``RequestRecord`` and a Python float per chunk)."""

    n: int
    ids: np.ndarray  # int64
    scheduled_at: np.ndarray  # float64 s
    sent_at: np.ndarray
    end_at: np.ndarray
    first_token_at: np.ndarray  # NaN = none
    has_first: np.ndarray  # bool
    n_chunks: np.ndarray  # int32
    prompt_tokens: np.ndarray  # int32
    completion_tokens: np.ndarray  # int32
    status: np.ndarray  # int16, -1 = none
    flags: np.ndarray  # uint8, bit 0 = tokens_from_usage
    strings: dict[str, Any]
    chunk_times: np.ndarray | None  # float64, request after request (None if not decoded)


# The reasoning columns' types (``first_answer_at`` in time quanta), checked as a block is
# decoded: a column of another type or length (a damaged or crafted file whose checksum
# holds) makes the block undecodable, so it is lost with a warning, never a traceback.
_REASONING_TYPES: dict[str, type] = {
    "first_answer_at": int,
    "reasoning_tokens": int,
    "reasoning_from_usage": bool,
    **{key: int for key in _OPTIONAL_TIMES},
}


def _check_reasoning_columns(strings: dict[str, Any], n: int) -> None:
    for key, kind in _REASONING_TYPES.items():
        column = strings.get(key)
        if column is None:
            continue
        ok = isinstance(column, list) and len(column) == n
        if ok and any(v is not None and (type(v) is not kind) for v in column):
            ok = False
        if not ok:
            raise ValueError(f"its {key} column is not {n} values of type {kind.__name__} or null")


def decode_request_columns(payload: bytes, with_chunks: bool = True) -> RequestColumns:
    n, ls, lc = _REQ_HEAD.unpack_from(payload, 0)
    pos = _REQ_HEAD.size
    scalars = inflate(payload[pos : pos + ls], _scalars_limit(n))
    (jl,) = struct.unpack_from("<I", scalars, 0)
    strings = _loads_printable(scalars[4 : 4 + jl])
    _check_reasoning_columns(strings, n)
    p = 4 + jl
    rel = _unshuffle(scalars[p : p + 40 * n], np.int64, 5 * n).reshape(5, n)
    p += 40 * n
    ints = _unshuffle(scalars[p : p + 12 * n], np.int32, 3 * n).reshape(3, n)
    p += 12 * n
    status = _unshuffle(scalars[p : p + 2 * n], np.int16, n)
    p += 2 * n
    flags = np.frombuffer(scalars, dtype=np.uint8, count=n, offset=p)

    time_q_us = strings.get("time_quantum_us", 1)
    chunk_q_us = strings.get("chunk_quantum_us", 1)
    q_t = time_q_us / 1e6
    scheduled_q = rel[0]
    sent_q = scheduled_q + rel[2]
    has_first = rel[4] != _NONE_I64
    first_q = np.where(has_first, scheduled_q + np.where(has_first, rel[4], 0), _NONE_I64)
    n_chunks = ints[0]
    chunk_times = None
    if with_chunks:
        total = int(n_chunks.sum())
        if total:
            chunks = inflate(payload[pos + ls : pos + ls + lc], _chunks_limit(total))
            chunk_times = _decode_chunks(chunks, n_chunks, total) * (chunk_q_us / 1e6)
        else:
            chunk_times = np.zeros(0)
    return RequestColumns(
        n=n,
        ids=rel[1],
        scheduled_at=scheduled_q * q_t,
        sent_at=sent_q * q_t,
        end_at=(scheduled_q + rel[3]) * q_t,
        first_token_at=np.where(has_first, first_q * q_t, np.nan),
        has_first=has_first,
        n_chunks=n_chunks,
        prompt_tokens=ints[1],
        completion_tokens=ints[2],
        status=status,
        flags=flags,
        strings=strings,
        chunk_times=chunk_times,
    )


def decode_requests(payload: bytes) -> list[RequestRecord]:
    c = decode_request_columns(payload)
    n = c.n
    scheduled = c.scheduled_at.tolist()
    sent = c.sent_at.tolist()
    end = c.end_at.tolist()
    first = c.first_token_at.tolist()
    has_first = c.has_first.tolist()
    ids = c.ids.tolist()
    chunk_lists: list[list[float]] = [[] for _ in range(n)]
    if c.chunk_times is not None and c.chunk_times.size:
        values = c.chunk_times.tolist()
        pos = 0
        for idx, k in enumerate(c.n_chunks.tolist()):
            if k:
                chunk_lists[idx] = values[pos : pos + k]
                pos += k
    prompt = c.prompt_tokens.tolist()
    completion = c.completion_tokens.tolist()
    status_l = c.status.tolist()
    flags_l = c.flags.tolist()
    fr, ec, er, tag = (c.strings[k] for k in ("finish_reason", "error_class", "error", "scenario_tag"))
    none = [None] * n
    optional = {k: c.strings.get(k) or none for k in OPTIONAL_REQUEST_FIELDS}
    q_t = c.strings.get("time_quantum_us", 1) / 1e6
    for key in _OPTIONAL_TIMES:
        if key in c.strings:
            optional[key] = [None if v is None else v * q_t for v in optional[key]]
    return [
        RequestRecord(
            id=ids[i],
            scheduled_at=scheduled[i],
            sent_at=sent[i],
            end_at=end[i],
            first_token_at=first[i] if has_first[i] else None,
            chunk_times=chunk_lists[i],
            prompt_tokens=prompt[i],
            completion_tokens=completion[i],
            tokens_from_usage=bool(flags_l[i] & 1),
            finish_reason=fr[i],
            status=None if status_l[i] < 0 else status_l[i],
            error_class=ec[i],
            error=er[i],
            scenario_tag=tag[i],
            **{k: column[i] for k, column in optional.items()},
        )
        for i in range(n)
    ]
