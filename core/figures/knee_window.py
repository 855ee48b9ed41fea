"""The figures the knee's rules read (``KneeWindow``): the one-second series before the
knee and, once known, those after it in the same overload, with the recent part, the
baseline and their growth; and the numbers as the evidence says them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

RECENT_S = 10  # seconds at the end of the window that describe the knee; as many at its start are the baseline


def _padded(values: Sequence[float] | None, n: int) -> np.ndarray:
    """``values`` as ``n`` seconds, NaN for the missing oldest ones (or all)."""
    a = np.asarray(values if values is not None else [], dtype=float)[-n:] if n else np.zeros(0)
    return np.concatenate([np.full(n - a.size, math.nan), a])


class KneeWindow:
    """The seconds before the knee and, once known, those after it in the same overload.
    "Recent" is the overload: the last ``RECENT_S`` seconds before the knee and every
    second after it; the baseline (``early``) is the window's first ``RECENT_S``."""

    def __init__(
        self, window: Mapping[str, Sequence[float]], after: Mapping[str, Sequence[float]] | None = None
    ) -> None:
        before = {name: np.asarray(values, dtype=float) for name, values in window.items()}
        self.knee_at = max((a.size for a in before.values()), default=0)
        self.after_n = max((len(v) for v in (after or {}).values()), default=0)
        if self.after_n:
            names = set(before) | set(after or {})
            self.arrays = {
                name: np.concatenate(
                    [_padded(window.get(name), self.knee_at), _padded((after or {}).get(name), self.after_n)]
                )
                for name in names
            }
        else:
            self.arrays = before
        self.n = self.knee_at + self.after_n
        self.recent_start = max(0, self.knee_at - RECENT_S)

    def get(self, name: str) -> np.ndarray:
        return self.arrays.get(name, np.full(self.n, math.nan))

    def recent(self, name: str) -> np.ndarray:
        return self.overload(self.get(name))

    def overload(self, a: np.ndarray) -> np.ndarray:
        """The recent part of any of the window's arrays."""
        return a[self.recent_start :] if self.after_n else a[-RECENT_S:]

    def before(self, a: np.ndarray) -> np.ndarray:
        """The seconds up to the knee of any of the window's arrays."""
        return a[: self.knee_at]

    def text(self) -> str:
        """The seconds the rules read, said: ``45 s before the knee, 30 s after``."""
        return f"{self.knee_at} s before the knee" + (f", {self.after_n} s after" if self.after_n else "")

    def early(self, name: str) -> np.ndarray:
        return self.get(name)[:RECENT_S]

    @staticmethod
    def mean(a: np.ndarray) -> float | None:
        finite = a[np.isfinite(a)]
        return float(finite.mean()) if finite.size else None

    @staticmethod
    def peak(a: np.ndarray) -> float | None:
        finite = a[np.isfinite(a)]
        return float(finite.max()) if finite.size else None

    @staticmethod
    def ends(a: np.ndarray) -> tuple[float, float] | None:
        finite = a[np.isfinite(a)]
        return (float(finite[0]), float(finite[-1])) if finite.size else None

    def growth(self, name: str) -> tuple[float, float] | None:
        """(baseline mean, recent mean) of a series, when both are known and positive."""
        before, after = self.mean(self.early(name)), self.mean(self.recent(name))
        if before is None or after is None or before <= 0:
            return None
        return before, after


def number_text(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 10 else f"{x:.1f}".rstrip("0").rstrip(".")


def ms_text(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def from_to_text(w: KneeWindow, name: str, unit: str = "") -> str | None:
    ends = w.ends(w.get(name))
    return None if ends is None else f"{number_text(ends[0])}→{number_text(ends[1])}{unit}"


def longest_run(mask: np.ndarray) -> int:
    return longest_stretch(mask)[1]


def longest_stretch(mask: np.ndarray) -> tuple[int, int]:
    """(start, length) of the longest stretch of True."""
    best = (0, 0)
    run = 0
    for i, held in enumerate(mask):
        run = run + 1 if held else 0
        if run > best[1]:
            best = (i - run + 1, run)
    return best


def kv_text(w: KneeWindow) -> str | None:
    kv = w.peak(w.recent("kv_usage_pct"))
    return None if kv is None else f"KV {kv:.0f} %"


def waiting_text(w: KneeWindow) -> str:
    span = from_to_text(w, "waiting")
    return f"waiting {span}" if span else "waiting unknown"
