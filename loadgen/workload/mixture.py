"""Traffic mixtures: ``workload: {mix: [{name, weight, …workload…}, …]}``.

Each class is a whole workload (the keys and checks of ``workload`` itself) with a
``name``, a ``weight`` and an optional ``slo``; the endpoint and the schedule stay the
scenario's. Every send picks one class, with a probability proportional to its weight,
from a generator seeded by the scenario's seed alone — the same seed gives the same
sequence of classes whatever the classes' own draws — and the class builds the request
with its own ``RequestFactory`` seeded from the scenario's seed and its position. The
request carries the class's name (``PreparedRequest.request_class``), and so does its
record: the per-class figures (``core.figures.classes``) group by it.

This module does not import ``workload_spec`` or ``request_factory`` (which call into it):
the checks of a class's workload and SLO and the factory type are passed in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rampwatch.core.figures.classes import MIX_KEY
from rampwatch.loadgen.workload.requests import PreparedRequest
from rampwatch.loadgen.workload.spec_checks import KeyPath, Problems, describe, dotted, number_check

# A class's own keys beside its workload's.
CLASS_KEYS = ("name", "weight", "slo")
# Workload kinds a class cannot hold (yet): each would need its own arrival process.
REFUSED_IN_CLASS = {
    MIX_KEY: "a class cannot itself be a mixture",
    "sessions": "sessions cannot be a mixture class (run them as a scenario of their own)",
}
# Streams of the scenario's seed: the class picks, and each class's own factory.
CLASS_PICK_STREAM = 103
CLASS_SEED_STREAM = 104


def check_mix(
    p: Problems,
    w: dict[str, Any],
    path: KeyPath,
    check_workload: Callable[[KeyPath, dict[str, Any]], dict[str, Any]],
    check_slo: Callable[[KeyPath, Any], dict[str, float] | None],
) -> dict[str, Any]:
    """The validated ``{"mix": [class, …]}``; problems go to ``p`` (``spec_checks.Problems``)
    at their key path, e.g. ``workload.mix[1].weight``. A class is its checked workload
    plus ``name``, ``weight`` (a float) and ``slo`` (None when it sets none)."""
    mix_path = path + (MIX_KEY,)
    for key in w:
        if key != MIX_KEY:
            p.add(path + (key,), f"cannot be combined with {dotted(mix_path)} (each class has its own workload)", True)
    mix = w[MIX_KEY]
    if not isinstance(mix, list) or not mix:
        p.add(mix_path, f"expected a list of classes ({{name, weight, …workload…}}), got {describe(mix)}")
        return {MIX_KEY: []}
    classes: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(mix):
        class_path = mix_path + (i,)
        if not p.mapping(class_path, item, "name, weight and a workload"):
            continue
        name = item.get("name")
        if "name" not in item:
            p.add(class_path + ("name",), "required key is missing", True)
        elif not isinstance(name, str) or not name.strip() or not name.isprintable():
            p.add(class_path + ("name",), f"expected a non-empty name on one line, got {describe(name)}")
        elif name in seen:
            p.add(class_path + ("name",), f"duplicate class name {name!r} (also {dotted(mix_path + (seen[name],))})")
        else:
            seen[name] = i
        weight = item.get("weight")
        if "weight" not in item:
            p.add(class_path + ("weight",), "required key is missing", True)
        else:
            p.check(class_path + ("weight",), weight, number_check(0, strict=True))
        for key, message in REFUSED_IN_CLASS.items():
            if key in item:
                p.add(class_path + (key,), message, True)
        workload = check_workload(class_path, {k: v for k, v in item.items() if k not in REFUSED_IN_CLASS})
        classes.append(
            {
                "name": name,
                "weight": float(weight) if isinstance(weight, (int, float)) else weight,
                "slo": check_slo(class_path + ("slo",), item.get("slo")),
                **workload,
            }
        )
    return {MIX_KEY: classes}


def class_workload(spec: dict[str, Any]) -> dict[str, Any]:
    """A validated class without its own keys: the workload its factory builds."""
    return {k: v for k, v in spec.items() if k not in CLASS_KEYS}


def class_seed(seed: int, index: int) -> int:
    """The seed of the ``index``-th class's factory, derived from the scenario's."""
    return int(np.random.SeedSequence([seed, CLASS_SEED_STREAM, index]).generate_state(1)[0])


def cumulative_weights(weights: Sequence[float]) -> np.ndarray:
    """Weights as the upper bounds of each class's share of [0, 1)."""
    total = np.cumsum(np.asarray(weights, dtype=np.float64))
    return total / total[-1]


def pick_class(cumulative: np.ndarray, u: float) -> int:
    """The class a uniform draw ``u`` in [0, 1) falls in."""
    return min(int(np.searchsorted(cumulative, u, side="right")), len(cumulative) - 1)


class MixtureFactory:
    """A mixture's requests: a seeded class pick per send, then that class's factory.
    ``factory_type`` is ``request_factory.RequestFactory`` (passed in: see the module docstring)."""

    def __init__(self, scenario: Any, tokenizer: Any, factory_type: Callable[[Any, Any], Any]) -> None:
        classes = scenario.workload[MIX_KEY]
        self.names: list[str] = [c["name"] for c in classes]
        self._cumulative = cumulative_weights([c["weight"] for c in classes])
        self._rng = np.random.default_rng([scenario.seed, CLASS_PICK_STREAM])
        self.factories = [
            factory_type(
                dataclasses.replace(scenario, workload=class_workload(spec), seed=class_seed(scenario.seed, i)),
                tokenizer,
            )
            for i, spec in enumerate(classes)
        ]

    def next_class(self) -> int:
        return pick_class(self._cumulative, float(self._rng.random()))

    def next_request(self) -> PreparedRequest:
        index = self.next_class()
        request: PreparedRequest = self.factories[index].next_request()
        request.request_class = self.names[index]
        return request
