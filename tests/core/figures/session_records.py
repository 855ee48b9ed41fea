"""A multi-turn session workload's records, made up: each session's turns one after the
other, the history (prompt) growing by turn, the server's cached tokens covering the
previous turns' history, so TTFT falls and the prefix-cache hit rate rises from turn 2."""

from __future__ import annotations

from rampwatch.core.timeline import RequestRecord, Tick

HISTORY_PER_TURN = 200  # prompt tokens each turn adds to the conversation


def session_records(
    sessions: int = 6,
    turns: int = 4,
    *,
    start_every_s: float = 1.0,
    think_s: float = 0.5,
    cached: bool = True,
    fail: dict[int, int] | None = None,
) -> list[RequestRecord]:
    """Records in the order they end. ``fail``: session → the turn that fails (and ends it)."""
    fail = fail or {}
    records = []
    rid = 0
    for session in range(sessions):
        t = session * start_every_s
        for turn in range(1, turns + 1):
            prompt = HISTORY_PER_TURN * turn
            reused = HISTORY_PER_TURN * (turn - 1)  # the history the server saw last turn
            ttft = 0.2 if turn == 1 else 0.05 + 0.002 * turn + 0.01 * session / sessions
            first = t + ttft
            failed = fail.get(session) == turn
            records.append(
                RequestRecord(
                    id=rid,
                    scheduled_at=t,
                    sent_at=t,
                    end_at=first + 0.3,
                    first_token_at=None if failed else first,
                    chunk_times=[] if failed else [first + 0.1, first + 0.2, first + 0.3],
                    prompt_tokens=prompt,
                    completion_tokens=0 if failed else 4,
                    error_class="http_500" if failed else None,
                    session=session,
                    turn=turn,
                    cached_tokens=(reused if cached else None) if not failed else None,
                )
            )
            rid += 1
            t = first + 0.3 + think_s
            if failed:
                break
    return sorted(records, key=lambda r: r.end_at)


def session_stream(records: list[RequestRecord]) -> list[tuple[str, object]]:
    """A timeline stream: a tick each second and each record when it ends."""
    end = max(r.end_at for r in records)
    ticks = [("tick", Tick(t=float(s), target_rps=1.0, state="ramping")) for s in range(int(end) + 2)]
    items = ticks + [("request", r) for r in records]
    return sorted(items, key=lambda item: item[1].t if item[0] == "tick" else item[1].end_at)
