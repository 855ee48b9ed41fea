"""LoRA adapters: ``workload: {adapters: [{name: sql, weight: 3}, {name: chat, weight: 1}]}``.

A workload (or a mixture class) that names adapters sends each request to one of them:
the request's ``model`` is the adapter's name (vLLM serves each ``--lora-modules NAME=PATH``
under its own name in ``/v1/models``), picked with a probability proportional to its
weight from a generator seeded by the scenario's seed alone, so the same seed gives the
same sequence of adapters whatever the prompts draw. A session keeps one adapter for all
its turns (picked from the seed and the session's id). The record carries the adapter
(``RequestRecord.adapter``): the per-adapter figures (``core.figures.adapters``) group by it.

An item is ``{name, weight}`` (weight defaults to 1) or a bare name (weight 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rampwatch.core.figures.adapters import ADAPTERS_KEY, MAX_ADAPTERS
from rampwatch.core.figures.classes import MIX_KEY
from rampwatch.loadgen.workload.mixture import cumulative_weights, pick_class
from rampwatch.loadgen.workload.spec_checks import KeyPath, Problems, describe, dotted, number_check

# Streams of the scenario's seed: the per-request picks, and a session's one pick.
ADAPTER_PICK_STREAM = 105
ADAPTER_SESSION_STREAM = 106
# An adapter's name is a model id: one printable line, no longer than this.
MAX_NAME_CHARS = 200


def check_adapters(p: Problems, path: KeyPath, value: Any) -> list[dict[str, Any]] | None:
    """The validated adapters ``[{"name": str, "weight": float}, …]``; problems go to ``p``
    at their key path, e.g. ``workload.adapters[1].weight``."""
    if not isinstance(value, list) or not value:
        p.add(path, f"expected a list of adapters ({{name, weight}} or a name), got {describe(value)}")
        return None
    if len(value) > MAX_ADAPTERS:
        p.add(path, f"expected at most {MAX_ADAPTERS} adapters, got {len(value)}")
        return None
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    ok = True
    for i, item in enumerate(value):
        item_path = path + (i,)
        if isinstance(item, str):
            item = {"name": item}
        if not p.mapping(item_path, item, "name, weight"):
            ok = False
            continue
        p.keys(item_path, item, ("name", "weight"))
        name = item.get("name")
        if "name" not in item:
            p.add(item_path + ("name",), "required key is missing", True)
            ok = False
        elif (
            not isinstance(name, str)
            or not name.strip()
            or not name.isprintable()
            or len(name) > MAX_NAME_CHARS
            or name != name.strip()
        ):
            p.add(
                item_path + ("name",),
                f"expected a served adapter's name (one line, <= {MAX_NAME_CHARS} characters), got {describe(name)}",
            )
            ok = False
        elif name in seen:
            p.add(item_path + ("name",), f"duplicate adapter {name!r} (also {dotted(path + (seen[name],))})")
            ok = False
        else:
            seen[name] = i
        weight = item.get("weight", 1)
        if not p.check(item_path + ("weight",), weight, number_check(0, strict=True)):
            ok = False
        out.append({"name": name, "weight": float(weight) if ok else weight})
    return out if ok else None


def adapter_names(workload: dict[str, Any]) -> list[str]:
    """Every adapter a validated workload sends to (its mixture classes' too), in order,
    once each: what ``/v1/models`` must list."""
    mix = workload.get(MIX_KEY)
    specs: list[Any] = mix if isinstance(mix, list) else [workload]
    names: dict[str, None] = {}
    for spec in specs:
        for adapter in spec.get(ADAPTERS_KEY) or []:
            names[adapter["name"]] = None
    return list(names)


class AdapterPicker:
    """A workload's adapter for each request, seeded: ``next()`` for a lone request,
    ``for_session(id)`` for every turn of one session."""

    def __init__(self, adapters: list[dict[str, Any]], seed: int) -> None:
        self.names = [a["name"] for a in adapters]
        self._cumulative = cumulative_weights([a["weight"] for a in adapters])
        self._seed = seed
        self._rng = np.random.default_rng([seed, ADAPTER_PICK_STREAM])

    def next(self) -> str:
        return self.names[pick_class(self._cumulative, float(self._rng.random()))]

    def for_session(self, session: int) -> str:
        # Drawn again at each turn from the session's own stream: the same name, no state kept.
        rng = np.random.default_rng([self._seed, ADAPTER_SESSION_STREAM, session])
        return self.names[pick_class(self._cumulative, float(rng.random()))]
