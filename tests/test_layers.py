"""The import contract: rampwatch's packages depend on each other one way only,

    app → tui → record → loadgen → core,    app → sim → core,

(a package may use any layer below it, never one above or beside it) and no two modules
import each other, directly or round a loop. Every import counts, including those inside
functions: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

# package -> the packages it may import
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "loadgen": frozenset({"core"}),
    "sim": frozenset({"core"}),
    "record": frozenset({"loadgen", "core"}),
    "tui": frozenset({"record", "loadgen", "core"}),
    "app": frozenset({"tui", "record", "loadgen", "sim", "core"}),
}
# What every layer may import besides the standard library and its dependencies.
FORBIDDEN_EVERYWHERE = ("loadgen", "record", "sim", "tui", "core", "app")  # the un-namespaced names


def package_sources() -> dict[str, Path]:
    return {name: Path(importlib.import_module(f"rampwatch.{name}").__path__[0]) for name in ALLOWED}


def module_imports(source: str, module: str) -> set[str]:
    """Every module named by an import statement anywhere in ``source`` (relative imports
    resolved against ``module``)."""
    found: set[str] = set()
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            # `from rampwatch.record import format` names a module, not only a package
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def import_graph(sources: dict[str, Path]) -> dict[str, set[str]]:
    """rampwatch module -> the rampwatch modules it imports."""
    modules: dict[str, str] = {}
    for package, folder in sources.items():
        for path in sorted(folder.glob("*.py")):
            name = f"rampwatch.{package}" if path.stem == "__init__" else f"rampwatch.{package}.{path.stem}"
            modules[name] = path.read_text(encoding="utf-8")
    graph: dict[str, set[str]] = {}
    for name, source in modules.items():
        graph[name] = {
            target
            for target in module_imports(source, name)
            if target.startswith("rampwatch.") or target.split(".")[0] in FORBIDDEN_EVERYWHERE
        }
    return graph


def layer_violations(graph: dict[str, set[str]], allowed: dict[str, frozenset[str]]) -> list[str]:
    problems = []
    for module, targets in sorted(graph.items()):
        package = module.split(".")[1]
        for target in sorted(targets):
            parts = target.split(".")
            if parts[0] != "rampwatch":
                problems.append(f"{module} imports {target}: use the rampwatch.{target} namespace")
                continue
            if len(parts) < 2 or parts[1] == package:
                continue
            if parts[1] not in allowed.get(package, frozenset()):
                problems.append(f"{module} imports {target}: {package} may not depend on {parts[1]}")
    return problems


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Loops of modules importing each other (each loop reported once)."""
    edges = {m: {t for t in targets if t in graph and t != m} for m, targets in graph.items()}
    cycles: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                loop = stack[stack.index(nxt) :]
                if frozenset(loop) not in seen:
                    seen.add(frozenset(loop))
                    cycles.append([*loop, nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return cycles


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(package_sources())


def test_every_package_is_read(graph):
    packages = {module.split(".")[1] for module in graph}
    assert packages == set(ALLOWED)
    assert "rampwatch.loadgen.server.managed" in graph["rampwatch.app.restart"]


def test_layers_are_one_way(graph):
    assert layer_violations(graph, ALLOWED) == []


def test_no_module_imports_itself_round_a_loop(graph):
    assert import_cycles(graph) == []


def write_tree(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return {name: root / name for name in ALLOWED}


def clean_tree() -> dict[str, str]:
    return {f"{name}/__init__.py": "" for name in ALLOWED} | {
        "core/timeline.py": "import dataclasses\n",
        "loadgen/run/runner.py": "from rampwatch.core.timeline import Snapshot\n",
        "record/writer.py": "from rampwatch.loadgen import runner\n",
        "app/cli.py": "def main():\n    from rampwatch.sim import engine\n",
    }


def test_the_contract_passes_a_clean_tree(tmp_path):
    graph = import_graph(write_tree(tmp_path, clean_tree()))
    assert layer_violations(graph, ALLOWED) == [] and import_cycles(graph) == []


@pytest.mark.parametrize(
    "rel, text, expected",
    [
        # a back-edge: the load generator reaching up into the recording layer, lazily
        (
            "loadgen/cli.py",
            "def main():\n    from rampwatch.record.writer import RecordingWriter\n",
            "rampwatch.loadgen.cli imports rampwatch.record.writer: loadgen may not depend on record",
        ),
        # sideways: the simulator and the load generator are beside each other
        (
            "sim/config.py",
            "from rampwatch.loadgen.errors import UserError\n",
            "rampwatch.sim.config imports rampwatch.loadgen.errors: sim may not depend on loadgen",
        ),
        (
            "core/errors.py",
            "import rampwatch.tui.app\n",
            "rampwatch.core.errors imports rampwatch.tui.app: core may not depend on tui",
        ),
        (
            "record/html.py",
            "from tui import app\n",
            "rampwatch.record.html imports tui: use the rampwatch.tui namespace",
        ),
    ],
)
def test_the_contract_catches_a_bad_edge(tmp_path, rel, text, expected):
    graph = import_graph(write_tree(tmp_path, clean_tree() | {rel: text}))
    assert expected in layer_violations(graph, ALLOWED)


def test_the_contract_catches_a_cycle(tmp_path):
    files = clean_tree() | {
        "record/reader.py": "from rampwatch.record import replay\n",
        "record/replay.py": "def f():\n    from rampwatch.record.reader import Recording\n",
    }
    graph = import_graph(write_tree(tmp_path, files))
    assert import_cycles(graph) == [["rampwatch.record.reader", "rampwatch.record.replay", "rampwatch.record.reader"]]
