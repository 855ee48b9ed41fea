"""Latency and error objectives written as one line: ``ttft_p99<500ms,itl_p99<50ms``.

The same text is accepted by ``rampwatch sweep --slo`` and a SWEEP.yaml's ``slo:`` key.
Each item is ``METRIC_pNN<LIMIT`` (``<=`` reads the same: a value equal to the limit
passes, as vLLM's ``--goodput``) with METRIC one of ttft, itl, tpot, e2el, ttfa (a
reasoning model's time to its first answer token: the TTFT of a request that did not
reason; a request cut short while thinking never meets it) and a limit in ms (the
default unit), s or us, or ``error_rate<LIMIT`` with a fraction or a percentage.

An ``Slo`` answers two questions:

- does a set of requests meet it (``violations``): its percentiles against the limits,
  the early-stop rule of a sweep;
- which single requests are *good* (``per_request_ms``): every latency bound read as a
  per-request limit, as ``vllm bench serve --goodput ttft:500 tpot:50`` does. An
  ``itl`` bound applies to the request's TPOT (its mean inter-token latency), which is
  what vLLM's good-put judges a request by.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from rampwatch.core.errors import UserError

LATENCY_METRICS = ("ttft", "itl", "tpot", "e2el", "ttfa")
UNITS_MS = {"ms": 1.0, "s": 1000.0, "us": 0.001, "": 1.0}
# What an infinite value (a figure a request never gave) counts as in a percentile.
NEVER_S = 1e12
# The error-rate bound of an SLO that names none: rampwatch run's --max-error-rate default.
DEFAULT_MAX_ERROR_RATE = 0.05

_ITEM = re.compile(
    r"^(?P<metric>[a-z0-9_]+?)(?:_p(?P<pct>\d+(?:\.\d+)?))?\s*(?P<op><=|<)\s*(?P<value>[0-9.eE+-]+)\s*(?P<unit>ms|s|us|%)?$"
)


@dataclass(frozen=True)
class Bound:
    metric: str  # one of LATENCY_METRICS
    percentile: float  # 0-100
    limit_ms: float

    @property
    def label(self) -> str:
        return f"{self.metric}_p{self.percentile:g}"

    def __str__(self) -> str:
        return f"{self.label}<{self.limit_ms:g}ms"


@dataclass(frozen=True)
class Slo:
    bounds: tuple[Bound, ...]
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    error_rate_given: bool = False

    @property
    def text(self) -> str:
        items = [str(b) for b in self.bounds]
        if self.error_rate_given:
            items.append(f"error_rate<{self.max_error_rate * 100:g}%")
        return ",".join(items)

    def per_request_ms(self) -> dict[str, float]:
        """The per-request limits of the good-put (``stats.meets_slo`` keys): the
        tightest bound of each metric, an ``itl`` bound judged on the request's TPOT."""
        out: dict[str, float] = {}
        for b in self.bounds:
            key = "tpot" if b.metric == "itl" else b.metric
            out[key] = min(out.get(key, math.inf), b.limit_ms)
        return out

    def violations(self, values_s: dict[str, np.ndarray], error_rate: float | None) -> list[str]:
        """What of this SLO a set of requests breaks, one text each ("TTFT p99 812 ms >
        500 ms"). ``values_s`` maps a metric to its values in seconds; a metric without
        values breaks nothing (nothing to judge)."""
        out = []
        for b in self.bounds:
            values = values_s.get(b.metric)
            if values is None or len(values) == 0:
                continue
            # inf: a request that never gave the figure (cut short while thinking: no answer);
            # a huge finite stand-in keeps numpy's interpolation from giving inf - inf = NaN
            value_ms = float(np.percentile(np.minimum(values, NEVER_S), b.percentile)) * 1000
            if value_ms > b.limit_ms:
                shown = "never (no answer)" if value_ms > NEVER_S else f"{value_ms:.0f} ms"
                out.append(f"{b.metric.upper()} p{b.percentile:g} {shown} > {b.limit_ms:g} ms")
        if error_rate is not None and error_rate > self.max_error_rate:
            out.append(f"error rate {error_rate:.1%} > {self.max_error_rate:.1%}")
        return out


def parse_slo(text: str, source: str = "--slo") -> Slo:
    """``ttft_p99<500ms,itl_p99<50ms[,error_rate<1%]`` → ``Slo``; a bad item raises one
    ``UserError`` line naming ``source`` (the flag, or ``FILE: slo``) and the item."""
    example = "e.g. ttft_p99<500ms,itl_p99<50ms"
    items = [item.strip() for item in str(text).split(",")]
    if not text or not str(text).strip() or any(not item for item in items):
        raise UserError(f"{source} {text!r}: expected comma-separated bounds, {example}")
    bounds: list[Bound] = []
    max_error_rate, error_given = DEFAULT_MAX_ERROR_RATE, False
    for item in items:
        m = _ITEM.match(item.lower())
        if m is None:
            raise UserError(f"{source} {text!r}: cannot read {item!r}; expected METRIC_pNN<LIMIT, {example}")
        metric, pct, unit = m["metric"], m["pct"], m["unit"] or ""
        try:
            value = float(m["value"])
        except ValueError:
            raise UserError(f"{source} {text!r}: {item!r}: {m['value']!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise UserError(f"{source} {text!r}: {item!r}: the limit must be a number >= 0")
        if metric == "error_rate" and pct is None:
            rate = value / 100 if unit == "%" else value
            if unit not in ("", "%") or rate > 1:
                raise UserError(f"{source} {text!r}: {item!r}: an error rate is a fraction (0.01) or a percentage (1%)")
            max_error_rate, error_given = rate, True
            continue
        if metric not in LATENCY_METRICS:
            raise UserError(
                f"{source} {text!r}: {item!r}: unknown metric {metric!r} (one of {', '.join(LATENCY_METRICS)}, error_rate)"
            )
        if pct is None:
            raise UserError(f"{source} {text!r}: {item!r}: name a percentile, e.g. {metric}_p99")
        percentile = float(pct)
        if not 0 < percentile <= 100:
            raise UserError(f"{source} {text!r}: {item!r}: the percentile must be above 0 and at most 100")
        if unit == "%":
            raise UserError(f"{source} {text!r}: {item!r}: a latency limit is in ms, s or us")
        bounds.append(Bound(metric, percentile, value * UNITS_MS[unit]))
    return Slo(tuple(bounds), max_error_rate, error_given)
