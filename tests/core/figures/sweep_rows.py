"""Rows and records the sweep's figure tests build: a completed configuration's figures
as the best rule reads them, the issue's sweep, and a request record with given times."""

from rampwatch.core.timeline import RequestRecord


def config(goodput, out, per_user, reached=True, status="done", gpus=1, **more):
    """A completed configuration's figures as the best rule reads them."""
    return dict(
        status=status,
        reached=reached,
        max_goodput_rps=goodput,
        output_tps=out,
        tps_per_user=per_user,
        gpus=gpus,
        **more,
    )


# The issue's sweep (rampwatch sweep sweep-sim before its ramp was lengthened): #3 was
# never loaded (its 8 s ramp ended first) and #4 beat it on both axes of the front.
ISSUE_SWEEP = [
    config(1.9, 554.4, 50.6),
    config(2.6, 935.7, 80.6),
    config(15.0, 965.9, 84.7, reached=False),
    config(5.5, 1195.5, 96.2),
]


def req(i, sent, ttft, end, tokens=11, ok=True, cancelled=False):
    return RequestRecord(
        id=i,
        scheduled_at=sent,
        sent_at=sent,
        end_at=end,
        tokens_from_usage=True,
        first_token_at=None if ttft is None else sent + ttft,
        chunk_times=[]
        if ttft is None
        else [sent + ttft + (end - sent - ttft) * k / (tokens - 1) for k in range(1, tokens)],
        completion_tokens=tokens if ok else 0,
        error_class=None if ok else ("cancelled" if cancelled else "http"),
    )
