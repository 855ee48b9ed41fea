"""The import contract: rampwatch's layers depend on each other one way only,

    app → tui → record → core.figures → core,    tui → loadgen → core.figures,
    app → sim → core,

(a layer may use any layer below it on its arrows, never one above or beside it: reading a
recording never reaches into the sender, `record` ↛ `loadgen`) and no two modules import
each other, directly or round a loop. A layer is a top-level package with every module of
its subpackages, except where the table names a subpackage as a layer of its own
(`core.figures`): then the rest of `core` may not import it. Every module of every
subpackage is read, and every import counts, including those inside functions: a lazy
import is still a dependency.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Collection
from pathlib import Path

import pytest

# The top-level packages; each folder is read recursively.
PACKAGES = ("core", "loadgen", "sim", "record", "tui", "app")
# layer -> the layers it may import (besides itself). A layer is a package, or a subpackage
# named here; a module belongs to the most specific layer its name starts with.
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "core.figures": frozenset({"core"}),
    "loadgen": frozenset({"core.figures", "core"}),
    "sim": frozenset({"core"}),
    "record": frozenset({"core.figures", "core"}),
    "tui": frozenset({"record", "loadgen", "core.figures", "core"}),
    "app": frozenset({"tui", "record", "loadgen", "sim", "core.figures", "core"}),
}
# What every layer may import besides the standard library and its dependencies.
FORBIDDEN_EVERYWHERE = PACKAGES  # the un-namespaced names


def package_sources() -> dict[str, Path]:
    return {name: Path(importlib.import_module(f"rampwatch.{name}").__path__[0]) for name in PACKAGES}


def layer_of(module: str) -> str | None:
    """The layer of a ``rampwatch.…`` module or package (None for ``rampwatch`` itself)."""
    parts = module.split(".")[1:]
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in ALLOWED:
            return name
    return None


def module_name(package: str, folder: Path, path: Path) -> str:
    """``rampwatch.<package>.<subpackage…>.<module>`` of a file under the package's folder."""
    parts = [package, *path.relative_to(folder).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["rampwatch", *parts])


def type_only_nodes(tree: ast.AST) -> set[int]:
    """The ids of the statements under ``if TYPE_CHECKING:`` (read by the type checker only)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            found.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return found


def module_imports(
    source: str, module: str, modules: Collection[str] = frozenset(), runtime_only: bool = False
) -> set[str]:
    """Every module named by an import statement anywhere in ``source`` (relative imports
    resolved against ``module``). ``from package import submodule`` names the submodule
    alone when it is one of ``modules``: the package's ``__init__``, whose public names
    are imported only for the type checker and loaded lazily, is not a dependency.
    ``runtime_only``: leave out the imports under ``if TYPE_CHECKING:`` (no import-time loop)."""
    found: set[str] = set()
    package = module.rsplit(".", 1)[0]
    tree = ast.parse(source)
    skipped = type_only_nodes(tree) if runtime_only else set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            # `from rampwatch.record import format` names a module, not only a package
            named = {f"{base}.{alias.name}" for alias in node.names}
            found.update(named)
            if not named <= set(modules):
                found.add(base)
    return found


def import_graph(sources: dict[str, Path], runtime_only: bool = False) -> dict[str, set[str]]:
    """rampwatch module -> the rampwatch modules it imports (``runtime_only``: as it runs,
    the type checker's imports left out)."""
    modules: dict[str, str] = {}
    for package, folder in sources.items():
        for path in sorted(folder.rglob("*.py")):
            modules[module_name(package, folder, path)] = path.read_text(encoding="utf-8")
    graph: dict[str, set[str]] = {}
    for name, source in modules.items():
        graph[name] = {
            target
            for target in module_imports(source, name, modules, runtime_only)
            if target.startswith("rampwatch.") or target.split(".")[0] in FORBIDDEN_EVERYWHERE
        }
    return graph


def layer_violations(graph: dict[str, set[str]], allowed: dict[str, frozenset[str]]) -> list[str]:
    problems = []
    for module, targets in sorted(graph.items()):
        layer = layer_of(module)
        for target in sorted(targets):
            if target.split(".")[0] != "rampwatch":
                problems.append(f"{module} imports {target}: use the rampwatch.{target} namespace")
                continue
            target_layer = layer_of(target)
            if target_layer is None or target_layer == layer:
                continue
            if layer is None or target_layer not in allowed.get(layer, frozenset()):
                problems.append(f"{module} imports {target}: {layer} may not depend on {target_layer}")
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


def test_every_package_and_subpackage_is_read(graph):
    assert {module.split(".")[1] for module in graph} == set(PACKAGES)
    assert {layer_of(module) for module in graph} == set(ALLOWED)
    # two levels down: loadgen's subpackages and their imports
    assert "rampwatch.core.figures.series" in graph["rampwatch.loadgen.run.run_state"]


def test_layers_are_one_way(graph):
    assert layer_violations(graph, ALLOWED) == []


def test_no_module_imports_itself_round_a_loop():
    """As the modules run: a type annotation's import (under ``if TYPE_CHECKING:``) makes no
    import-time loop, and the layer rule above still counts it."""
    assert import_cycles(import_graph(package_sources(), runtime_only=True)) == []


def test_a_type_only_import_is_left_out_of_the_loops_only(tmp_path):
    files = clean_tree() | {
        "record/reader.py": "from rampwatch.record import replay\n",
        "record/replay.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rampwatch.record.reader import R\n",
    }
    sources = write_tree(tmp_path, files)
    assert import_cycles(import_graph(sources, runtime_only=True)) == []
    assert import_cycles(import_graph(sources)) != []


def write_tree(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return {name: root / name for name in PACKAGES}


def clean_tree() -> dict[str, str]:
    return {f"{name}/__init__.py": "" for name in PACKAGES} | {
        "core/figures/__init__.py": "",
        "core/timeline.py": "import dataclasses\n",
        "core/figures/series.py": "from rampwatch.core.timeline import Snapshot\n",
        "loadgen/run/__init__.py": "",
        "loadgen/run/runner.py": "from rampwatch.core.figures.series import SeriesBuilder\n",
        "loadgen/workload/__init__.py": "",
        "loadgen/workload/scenario.py": "from rampwatch.core import timeline\n",
        "record/writer.py": "from rampwatch.core.figures import series\n",
        "record/reader.py": "from rampwatch.core.timeline import Snapshot\n",
        "tui/app.py": "from rampwatch.loadgen.run import runner\nfrom rampwatch.record import reader\n",
        "app/cli.py": "def main():\n    from rampwatch.sim import engine\n",
    }


def test_the_contract_passes_a_clean_tree(tmp_path):
    graph = import_graph(write_tree(tmp_path, clean_tree()))
    assert layer_violations(graph, ALLOWED) == [] and import_cycles(graph) == []


@pytest.mark.parametrize(
    "rel, text, expected",
    [
        # back-edges inside subpackages: the figures reaching up into the sender
        (
            "core/figures/series.py",
            "from rampwatch.loadgen.run.runner import Run\n",
            "rampwatch.core.figures.series imports rampwatch.loadgen.run.runner: core.figures may not depend on loadgen",
        ),
        # core's own modules sit below the figures
        (
            "core/timeline.py",
            "def f():\n    from rampwatch.core.figures.summary import Summary\n",
            "rampwatch.core.timeline imports rampwatch.core.figures.summary: core may not depend on core.figures",
        ),
        # reading a recording never reaches into the sender
        (
            "record/reader.py",
            "from rampwatch.loadgen.workload.scenario import Scenario\n",
            "rampwatch.record.reader imports rampwatch.loadgen.workload.scenario: record may not depend on loadgen",
        ),
        # a module two levels deep is read
        (
            "loadgen/run/deep/worker.py",
            "import rampwatch.tui.app\n",
            "rampwatch.loadgen.run.deep.worker imports rampwatch.tui.app: loadgen may not depend on tui",
        ),
        (
            "sim/engine.py",
            "from rampwatch.core.figures import stats\n",
            "rampwatch.sim.engine imports rampwatch.core.figures: sim may not depend on core.figures",
        ),
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
