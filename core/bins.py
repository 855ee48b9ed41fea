"""The one-second bins of a run's series: which of them are complete, and the newest
figure in the complete ones (the bin still filling would read low)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

# A bin counts as complete this long after its end: the tick that closes it (and carries
# the offered/sent totals) arrives a few milliseconds late, and a replay paused exactly on
# a second boundary has not read it yet.
COMPLETE_AFTER_S = 0.1


def _present(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]


def complete_bins(times: Sequence[float], now: float) -> int:
    """How many of the bins starting at ``times`` (ascending) are complete at ``now``."""
    return bisect.bisect_right(times, now + 1e-9 - 1.0 - COMPLETE_AFTER_S)


def latest_complete(values: Sequence[float | None], complete: int, look_back: int | None = None) -> float | None:
    """The newest present value among the first ``complete`` bins, past missing ones but
    at most ``look_back`` bins back (None: as far as it takes); None when there is none."""
    done = values[: max(0, complete)]
    start = 0 if look_back is None else max(0, len(done) - look_back)
    present = _present(done[start:])
    return float(present[-1]) if present else None


def recent_mean(values: Sequence[float | None], complete: int, window: int) -> float | None:
    """Mean of the present values in the last ``window`` of the first ``complete`` bins
    (a rate reads steadier over a few seconds than over one); None when there is none."""
    done = values[: max(0, complete)]
    recent = _present(done[-max(1, window) :])
    return sum(recent) / len(recent) if recent else None


def recent_max(values: Sequence[float | None], complete: int, window: int) -> float | None:
    """The largest present value in the last ``window`` of the first ``complete`` bins (a
    worst case over a few seconds); None when there is none."""
    done = values[: max(0, complete)]
    return max(_present(done[-max(1, window) :]), default=None)
