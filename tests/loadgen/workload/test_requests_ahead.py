"""Requests built ahead in a process of their own: the factory's own sequence, built
there and not on the run's loop, its failures raised where they would have been."""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path

import pytest

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.encoded_payload import EncodedPayload
from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.requests import PreparedRequest
from rampwatch.loadgen.workload.requests_ahead import (
    _LENGTH,
    ENCODE_FROM_BYTES,
    PROBE_REQUESTS,
    READ_BUFFER,
    BuilderLost,
    BuildFailed,
    RequestsAhead,
    _BuiltRequests,
    _request_frame,
    _unframed,
    encode_in_place,
)
from rampwatch.loadgen.workload.scenario import load_scenario

REPO = str(Path(__file__).resolve().parents[3])
RANDOM = [("workload.input_tokens", "64"), ("workload.output_tokens", "8")]


def factory(name: str = "random", sets=RANDOM) -> RequestFactory:
    return RequestFactory(load_scenario(name, overrides=sets))


def fields(request: PreparedRequest) -> tuple:
    return (request.payload, request.expected_prompt_tokens, request.max_tokens, request.tag, request.extra)


async def take(ahead: RequestsAhead, n: int) -> list[PreparedRequest]:
    out = []
    for _ in range(n):
        await ahead.wait_ready()
        out.append(ahead.take())
    return out


class FailingFactory:
    """Picklable (by reference to this module); raises at its ``fail_at``-th request."""

    def __init__(self, fail_at: int) -> None:
        self.count = 0
        self.fail_at = fail_at

    def next_request(self) -> PreparedRequest:
        self.count += 1
        if self.count == self.fail_at:
            raise ValueError(f"no request {self.count}")
        return PreparedRequest("completions", {"prompt": str(self.count), "max_tokens": 1}, 1, 1)


@pytest.mark.slow
async def test_requests_built_in_their_own_process_are_the_factorys_sequence_and_not_built_here():
    built_here = factory()
    ahead = RequestsAhead(built_here, ahead_above_s=0.0)  # whatever they cost
    await ahead.start()
    try:
        assert ahead.in_process_of_its_own
        got = await take(ahead, 300)  # several times what waits unpickled: the flow control resumes
    finally:
        await ahead.close()
    reference = factory()
    assert [fields(r) for r in got] == [fields(reference.next_request()) for _ in range(300)]
    assert built_here._count == PROBE_REQUESTS  # the probe only: the rest came from the process
    assert all(type(r.payload) is dict for r in got)  # short prompts: not worth encoding


@pytest.mark.slow
async def test_requests_with_images_come_from_their_own_process_encoded():
    sets = [("workload.input_tokens", "16"), ("workload.output_tokens", "4")]
    sets += [("workload.images", "{count: 2, width: 64, height: 48}")]
    ahead = RequestsAhead(factory("chat", sets))  # images: whatever the probe measured
    await ahead.start()
    try:
        assert ahead.in_process_of_its_own
        got = await take(ahead, 20)
    finally:
        await ahead.close()
    reference = factory("chat", sets)
    assert [fields(r) for r in got] == [fields(reference.next_request()) for _ in range(20)]
    # all encoded, the probe's too: the loop neither decodes nor encodes their payloads
    assert all(isinstance(r.payload, EncodedPayload) for r in got)


async def test_cheap_requests_are_built_here_at_their_take():
    built_here = factory("chat", [])
    ahead = RequestsAhead(built_here, ahead_above_s=1.0)
    await ahead.start()
    assert not ahead.in_process_of_its_own
    got = await take(ahead, 10)
    await ahead.close()
    assert built_here._count == 10
    reference = factory("chat", [])
    assert [fields(r) for r in got] == [fields(reference.next_request()) for _ in range(10)]
    assert all(type(r.payload) is dict for r in got)  # built at their take: nothing to gain


async def test_a_factory_that_cannot_be_pickled_builds_here():
    built_here = factory()
    built_here.unpicklable = lambda: None  # type: ignore[attr-defined]
    ahead = RequestsAhead(built_here, ahead_above_s=0.0)
    await ahead.start()
    assert not ahead.in_process_of_its_own
    got = await take(ahead, 8)
    await ahead.close()
    reference = factory()
    assert [fields(r) for r in got] == [fields(reference.next_request()) for _ in range(8)]


@pytest.mark.slow
async def test_the_factorys_error_is_raised_after_the_requests_built_before_it(monkeypatch):
    # The builder unpickles FailingFactory from this module: it starts with -P (nothing
    # from the current directory), so the repository is named on its path.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    ahead = RequestsAhead(FailingFactory(fail_at=PROBE_REQUESTS + 3), ahead_above_s=0.0)
    await ahead.start()
    try:
        assert ahead.in_process_of_its_own
        got = await take(ahead, PROBE_REQUESTS + 2)
        await ahead.wait_ready()  # a schedule that ends here never sees the error
        with pytest.raises(
            BuildFailed,
            match=f"^building request {PROBE_REQUESTS + 3} failed: ValueError: no request {PROBE_REQUESTS + 3}$",
        ):
            ahead.take()
    finally:
        await ahead.close()
    assert [r.payload["prompt"] for r in got] == [str(i) for i in range(1, PROBE_REQUESTS + 3)]


@pytest.mark.slow
async def test_a_builder_process_that_dies_is_an_error_once_its_requests_are_taken():
    ahead = RequestsAhead(factory(), ahead_above_s=0.0)
    await ahead.start()
    try:
        assert ahead._process is not None
        ahead._process.kill()
        with pytest.raises(BuilderLost, match="exited"):
            for _ in range(100_000):  # what it built before it died is handed out first
                await ahead.wait_ready()
                ahead.take()
    finally:
        await ahead.close()


async def test_a_factory_that_fails_within_the_probe_fails_at_that_take_only():
    ahead = RequestsAhead(FailingFactory(fail_at=2), ahead_above_s=0.0)
    await ahead.start()
    assert not ahead.in_process_of_its_own
    await ahead.wait_ready()
    assert ahead.take().payload["prompt"] == "1"
    with pytest.raises(BuildFailed, match="^building request 2 failed: ValueError: no request 2$"):
        ahead.take()
    await ahead.close()


class FailingHere:
    """Cheap requests built at their take (never probed costly) until its ``fail_at``-th."""

    def __init__(self, fail_at: int, error: BaseException) -> None:
        self.count = 0
        self.fail_at, self.error = fail_at, error

    def next_request(self) -> PreparedRequest:
        self.count += 1
        if self.count == self.fail_at:
            raise self.error
        return PreparedRequest("completions", {"prompt": str(self.count), "max_tokens": 1}, 1, 1)


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (MemoryError(), "building request 7 failed: MemoryError"),
        (KeyError("prompt"), "building request 7 failed: KeyError: 'prompt'"),
        (UserError("dataset.jsonl: line 7: no prompt"), "building request 7 failed: dataset.jsonl: line 7: no prompt"),
        (ValueError("bad\x1b[31m\nrow"), "building request 7 failed: ValueError: bad\\x1b[31m\\x0arow"),
    ],
)
async def test_a_factory_failing_at_a_take_built_here_is_one_line_naming_the_request(error, line):
    ahead = RequestsAhead(FailingHere(fail_at=7, error=error), ahead_above_s=float("inf"))
    await ahead.start()
    assert not ahead.in_process_of_its_own
    for _ in range(6):
        ahead.take()
    with pytest.raises(BuildFailed) as raised:
        ahead.take()
    assert str(raised.value) == line and raised.value.__cause__ is error
    await ahead.close()


class UnrebuildableError(Exception):
    def __init__(self, row: int, why: str) -> None:
        super().__init__(f"row {row}: {why}")


def test_an_error_from_the_builder_that_cannot_be_unpickled_is_still_a_failure():
    ahead = RequestsAhead(FailingHere(fail_at=1, error=MemoryError()))
    ahead._received(b"E", pickle.dumps(UnrebuildableError(3, "no prompt")))
    with pytest.raises(
        BuildFailed, match="^building request 1 failed: RuntimeError: an error that could not be read back"
    ):
        ahead.take()


class FakeTransport:
    def __init__(self) -> None:
        self.reading = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def test_reading_pauses_at_a_byte_bound_too(monkeypatch):
    # Requests with images are megabytes: far fewer than AHEAD of them fill the bound.
    import rampwatch.loadgen.workload.requests_ahead as ahead_module

    request = pickle.dumps(PreparedRequest("chat", {"messages": [], "pad": "x" * 300}, 1, 1))
    monkeypatch.setattr(ahead_module, "AHEAD_BYTES", int(2.5 * len(request)))
    ahead = RequestsAhead(FailingFactory(fail_at=0))
    transport = FakeTransport()
    ahead._transport = transport  # type: ignore[assignment]
    ahead._received(b"R", request)
    ahead._received(b"R", request)
    assert transport.reading
    ahead._received(b"R", request)  # 3 of 64 requests, over the bound in bytes
    assert not transport.reading
    ahead.take()
    assert not transport.reading  # 2 still waiting: above half the bound
    ahead.take()
    assert transport.reading and ahead._ready_bytes == len(request)


class Frames:
    """What ``_BuiltRequests`` hands its owner."""

    def __init__(self) -> None:
        self.got: list[tuple[bytes, bytes]] = []

    def _received(self, tag: bytes, body: bytes | memoryview) -> None:
        self.got.append((tag, bytes(body)))


@pytest.mark.parametrize("read", [7, 4096, READ_BUFFER // 3, READ_BUFFER, 10 * READ_BUFFER])
def test_frames_come_whole_and_in_order_however_the_socket_splits_them(read):
    # Requests of a few bytes and of megabytes (images: larger than the read buffer,
    # read into a buffer of their own), one frame's end in the same read as the next's start.
    rng = random.Random(read)
    bodies = [(b"R", bytes(rng.getrandbits(8) for _ in range(n))) for n in (0, 5, 300, 70_000)]
    sizes = (READ_BUFFER - 5, READ_BUFFER - 4, READ_BUFFER + 1, 3 * READ_BUFFER) if read > 7 else (READ_BUFFER + 1,)
    bodies += [(b"R", os.urandom(n)) for n in sizes]
    bodies += [(b"R", b"x" * 10)] * 50 + [(b"E", b"the end")]
    rng.shuffle(bodies)
    stream = b"".join(_LENGTH.pack(len(body) + 1) + tag + body for tag, body in bodies)
    owner = Frames()
    protocol = _BuiltRequests(owner)  # type: ignore[arg-type]
    at = 0
    while at < len(stream):
        space = protocol.get_buffer(-1)
        assert len(space) > 0  # asyncio fails a read into an empty buffer
        n = min(len(space), rng.randint(1, read), len(stream) - at)  # reads of any size up to read
        space[:n] = stream[at : at + n]
        del space  # the transport lets go of it before the next read
        protocol.buffer_updated(n)
        at += n
    assert owner.got == bodies
    assert protocol.large is None and protocol.end == 0


def test_an_encoded_payload_crosses_out_of_band_and_is_read_where_it_was_received():
    payload = {"messages": [{"role": "user", "content": "x" * ENCODE_FROM_BYTES}], "max_completion_tokens": 4}
    request = encode_in_place(PreparedRequest("chat", dict(payload), 10, 4, images=1))
    assert isinstance(request.payload, EncodedPayload)
    tag, parts = _request_frame(request)
    frame = bytearray(b"".join(parts))
    assert tag == b"B" and len(frame) < len(request.payload.json) + 500  # the bytes once, beside a small pickle
    got = _unframed(memoryview(frame))
    assert got.payload == payload and got.images == 1 and got.expected_prompt_tokens == 10
    assert isinstance(got.payload, EncodedPayload) and got.payload.json.obj is frame  # a view: no copy
    # sent on (a load worker's pickle, in band), it is the same request
    again = pickle.loads(pickle.dumps(got, protocol=pickle.HIGHEST_PROTOCOL))
    assert again.payload == payload and bytes(again.payload.json) == bytes(request.payload.json)


def test_a_small_payload_stays_a_dict_in_a_plain_pickle():
    # a short prompt's payload decodes and encodes faster than it splices: as before
    request = encode_in_place(PreparedRequest("completions", {"prompt": "x" * 2000, "max_tokens": 4}, 10, 4))
    assert type(request.payload) is dict
    tag, parts = _request_frame(request)
    assert tag == b"R" and parts == [pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)]
