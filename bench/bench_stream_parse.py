"""The client's parse cost per streamed event alone: ``StreamExchange.on_body`` fed whole
one-event reads (the usual read of a token stream) in this process, no socket, no event
loop turn; best of ``--repeat`` timings, ns per event. Streams: a completion, a plain chat
answer, and a reasoning model's chat answers (thinking chunks in ``delta.reasoning``,
then the answer), to see what telling thinking from answer costs
(``loadgen/transport/reasoning.py``).

Run it with each checkout's own interpreter to compare two versions (the script uses
only what both have):

    .venv/bin/python bench/bench_stream_parse.py [--streams 300] [--repeat 5]
    OTHER/.venv/bin/python bench/bench_stream_parse.py
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
import time

HEAD = '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"tiny","choices":[{"index":0,"delta":{'
TAIL = '},"logprobs":null,"finish_reason":null,"token_ids":null}]}'
USAGE = 'data: {"id":"x","choices":[],"usage":{"prompt_tokens":3,"total_tokens":9,"completion_tokens":%d}}\n\n'


def chat_events(thinking: int, answer: int) -> list[bytes]:
    """vLLM 0.32's chunks: the role chunk, thinking, answer, usage, [DONE]."""
    events = [f'data: {HEAD}"role":"assistant","content":""{TAIL}\n\n']
    events += [f'data: {HEAD}"reasoning":" w{i}"{TAIL}\n\n' for i in range(thinking)]
    events += [f'data: {HEAD}"content":" a{i}"{TAIL}\n\n' for i in range(answer)]
    events += [USAGE % (thinking + answer), "data: [DONE]\n\n"]
    return [e.encode() for e in events]


def completion_events(n: int) -> list[bytes]:
    head = '{"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny","choices":[{"index":0,"text":" a%d",'
    tail = '"logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}'
    events = [f"data: {head % i}{tail}\n\n" for i in range(n)]
    events += [USAGE % n, "data: [DONE]\n\n"]
    return [e.encode() for e in events]


def ns_per_event(events: list[bytes], chat: bool, streams: int, repeat: int) -> float:
    from rampwatch.core.timeline import RequestRecord
    from rampwatch.loadgen.transport import stream_state

    # a checkout from before reasoning streams has no `chat` argument: every stream is a completion's to it
    has_chat = "chat" in inspect.signature(stream_state.StreamState).parameters
    kwargs = {"chat": chat} if has_chat else {}
    loop = asyncio.new_event_loop()
    best = float("inf")
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(streams):
                rec = RequestRecord(id=1, scheduled_at=0.0, sent_at=0.0, end_at=0.0, prompt_tokens=3)
                state = stream_state.StreamState(keep_text=False, **kwargs)
                exchange = stream_state.StreamExchange(rec, state, time.monotonic, loop.create_future())
                exchange.on_head(200, "OK", {})
                for event in events:
                    exchange.on_body([event])
            best = min(best, (time.perf_counter() - t0) / (streams * len(events)) * 1e9)
    finally:
        loop.close()
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=300, help="streams per timing")
    parser.add_argument("--repeat", type=int, default=5, help="timings per stream kind (the best is shown)")
    args = parser.parse_args()
    kinds = {
        "completions, 256 tokens": (completion_events(256), False),
        "chat, 256 answer tokens": (chat_events(0, 256), True),
        "chat, 128 thinking + 128 answer": (chat_events(128, 128), True),
        "chat, 256 thinking, no answer": (chat_events(256, 0), True),
    }
    print("| stream | ns per event |")
    print("|---|---|")
    for name, (events, chat) in kinds.items():
        print(f"| {name} | {ns_per_event(events, chat, args.streams, args.repeat):.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
