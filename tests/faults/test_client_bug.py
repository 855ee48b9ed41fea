"""An unexpected exception inside the client (a bug, or a server that trips one) costs that
request as a failure with a classified error; it is never lost and the run goes on."""

from __future__ import annotations

import pytest

from rampwatch.loadgen.transport import client as client_module
from rampwatch.sim.server import serve
from tests.loadgen.run.test_runner import INSTANT, ListSink, make_run, scenario

pytestmark = pytest.mark.slow  # a second or more each


async def test_an_exception_in_the_client_is_one_failed_request(monkeypatch):
    real_send = client_module.StreamingClient.send

    async def send(self, request, request_id, scheduled_at):
        if request_id == 3:
            raise RuntimeError("boom in the parser for http://user:pw-secret-1@host")
        return await real_send(self, request, request_id, scheduled_at)

    monkeypatch.setattr(client_module.StreamingClient, "send", send)
    sink = ListSink()
    async with serve(INSTANT) as url:
        run = make_run(url, scenario({"kind": "constant", "rate": 20, "duration_s": 0.5}), sink)
        result = await run.execute()
    records = sink.of("request")
    assert sorted(r.id for r in records) == list(range(len(records))) and len(records) >= 8
    failed = [r for r in records if not r.ok]
    assert [r.id for r in failed] == [3]
    assert failed[0].error_class == "client_error"
    assert failed[0].error == "RuntimeError: boom in the parser for http://<redacted>@host"
    # It carries what the client's own record of a failed request carries: the prompt's
    # expected size (as every other request of this workload) and the tag.
    assert failed[0].prompt_tokens == records[2].prompt_tokens > 0
    assert failed[0].scenario_tag == records[2].scenario_tag
    assert len(result.requests) == len(records)
