"""Finding and reading scenario files: the shipped ones (package data, ``rampwatch.scenarios``)
by name, any other by path, as YAML with the line of each key (for messages that point
at it) and without alias bombs."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.spec_checks import KeyPath

# The shipped scenarios are package data (rampwatch.scenarios), in a checkout and a wheel alike.
BUILTIN_SCENARIOS = resources.files("rampwatch.scenarios")

# Shipped sweep files (`rampwatch sweep sweep-sim`) sit beside the scenarios under this prefix.
SWEEP_PREFIX = "sweep-"


def list_scenarios() -> list[str]:
    return sorted(
        p.name.removesuffix(".yaml")
        for p in BUILTIN_SCENARIOS.iterdir()
        if p.name.endswith(".yaml") and not p.name.startswith(SWEEP_PREFIX)
    )


def resolve_scenario_path(path_or_name: str) -> Path:
    candidate = Path(path_or_name).expanduser()
    if candidate.is_file():
        return candidate
    if "/" not in path_or_name and not path_or_name.endswith((".yaml", ".yml")):
        named = BUILTIN_SCENARIOS / f"{path_or_name}.yaml"
        if named.is_file():
            return Path(str(named))
    names = ", ".join(list_scenarios()) or "none"
    raise UserError(f"scenario {path_or_name!r}: no such file and not a built-in scenario (built-in: {names})")


def _line_map(node: yaml.Node | None, path: KeyPath = (), out: dict | None = None) -> dict[KeyPath, tuple[int, int]]:
    """Key path -> (line of the key, line of the value), 1-based."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            sub = path + (key_node.value,)
            out[sub] = (key_node.start_mark.line + 1, value_node.start_mark.line + 1)
            _line_map(value_node, sub, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = path + (i,)
            out[sub] = (item.start_mark.line + 1, item.start_mark.line + 1)
            _line_map(item, sub, out)
    return out


def read_yaml(path: Path) -> tuple[Any, dict[KeyPath, tuple[int, int]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read scenario ({exc})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        _check_aliases(node, path)  # before anything walks the node graph expanded
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{where}: not valid YAML ({problem})") from None
    return data, _line_map(node)


# A scenario is a page of keys: far below this even with anchors reused. Aliases repeat a
# node without copying it, so a few lines can expand to billions of values ("billion laughs").
MAX_EXPANDED_NODES = 100_000


def _check_aliases(root: yaml.Node | None, path: Path) -> None:
    """Reject a node graph that refers to itself or expands past ``MAX_EXPANDED_NODES``
    (counted without expanding it: each distinct node's size is computed once)."""
    sizes: dict[int, int] = {}
    visiting: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in visiting:
            raise UserError(f"{path}:{node.start_mark.line + 1}: a YAML anchor refers to itself")
        visiting.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_EXPANDED_NODES:
                raise UserError(
                    f"{path}:{node.start_mark.line + 1}: YAML aliases expand this scenario past "
                    f"{MAX_EXPANDED_NODES:,} values; write it out without them"
                )
        visiting.discard(key)
        sizes[key] = total
        return total

    if root is not None:
        size(root)


def display_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        try:
            return str(Path("scenarios") / path.resolve().relative_to(Path(str(BUILTIN_SCENARIOS))))
        except ValueError:
            return str(path)
