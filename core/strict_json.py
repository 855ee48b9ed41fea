"""JSON that strict parsers read: every non-finite number (NaN, ±Infinity) written as
``null``. Python's ``json`` writes them as the bare words ``NaN`` and ``Infinity``, which
are not JSON (jq, JavaScript, Go and Rust reject the file); orjson already writes null."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every non-finite float in it (in dicts, lists, tuples; numpy floats
    too) replaced by None."""
    if isinstance(value, float):  # numpy's float64 is a float
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    if hasattr(value, "dtype") and getattr(value, "ndim", None) == 0 and value.dtype.kind == "f":
        return finite(float(value))  # a numpy float32 scalar
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` of ``value`` with non-finite numbers as null; never writes NaN."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)
