"""The core packages must never pull in the UI stack: they run headless, in CI and in
the load process where UI imports would cost start-up time and memory."""

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

CORE_PACKAGES = ("rampwatch.core", "rampwatch.loadgen", "rampwatch.record", "rampwatch.sim")
FORBIDDEN = ("textual", "rich")


def core_modules() -> list[str]:
    names = []
    for package in CORE_PACKAGES:
        names.append(package)
        path = importlib.import_module(package).__path__
        names.extend(info.name for info in pkgutil.walk_packages(path, prefix=f"{package}."))
    return sorted(names)


def test_core_modules_are_found():
    modules = core_modules()
    assert {
        "rampwatch.core.timeline",
        "rampwatch.loadgen.run.runner",
        "rampwatch.record.writer",
        "rampwatch.sim.engine",
    } <= set(modules)
    assert {"rampwatch.core.figures.series", "rampwatch.loadgen.transport.client"} <= set(modules)  # subpackages too
    assert all(m in CORE_PACKAGES or m.startswith(tuple(f"{p}." for p in CORE_PACKAGES)) for m in modules)


@pytest.mark.slow
@pytest.mark.parametrize("module", core_modules())
def test_core_module_does_not_import_ui(module):
    code = (
        "import importlib, sys\n"
        f"importlib.import_module({module!r})\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"{module} imports {out.stdout.strip()}"


@pytest.mark.slow
def test_checker_detects_a_ui_import(tmp_path):
    """The check itself must be able to fail: a module importing textual is caught."""
    (tmp_path / "leaky.py").write_text("import textual\n")
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "import leaky\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('textual','rich'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "textual" in out.stdout


# Each names its public surface in __all__, loaded lazily (rampwatch.core.lazy).
SURFACE_PACKAGES = (
    "rampwatch.core",
    "rampwatch.core.figures",
    "rampwatch.loadgen.workload",
    "rampwatch.loadgen.transport",
    "rampwatch.loadgen.server",
    "rampwatch.loadgen.run",
    "rampwatch.sim",
    "rampwatch.record",
    "rampwatch.tui",
)


def type_checking_imports(package: str) -> dict[str, set[str]]:
    """module (relative to ``package``) -> the names its ``__init__`` imports from it under
    ``if TYPE_CHECKING:``."""
    init = importlib.import_module(package).__file__
    assert init is not None
    tree = ast.parse(Path(init).read_text(encoding="utf-8"))
    found: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module, ast.dump(statement)
                module = statement.module.removeprefix(f"{package}.")
                found.setdefault(module, set()).update(alias.name for alias in statement.names)
    return found


@pytest.mark.parametrize("package", SURFACE_PACKAGES)
def test_a_package_names_its_surface_and_each_name_resolves(package):
    module = importlib.import_module(package)
    lazy = {name: set(names) for name, names in module._MODULES.items()}
    assert module.__all__ and sorted(module.__all__) == module.__all__
    assert set(module.__all__) == {name for names in lazy.values() for name in names}
    assert type_checking_imports(package) == lazy  # what the type checker sees is what loads
    for name in module.__all__:
        assert getattr(module, name) is getattr(importlib.import_module(f"{package}.{lazy_module(lazy, name)}"), name)


def lazy_module(lazy: dict[str, set[str]], name: str) -> str:
    return next(module for module, names in lazy.items() if name in names)


@pytest.mark.slow
@pytest.mark.parametrize("package", SURFACE_PACKAGES)
def test_importing_a_package_loads_none_of_its_modules(package):
    code = (
        "import importlib, sys\n"
        f"importlib.import_module({package!r})\n"
        f"print(' '.join(sorted(m for m in sys.modules if m.startswith({package + '.'!r}))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = set(out.stdout.split()) - {"rampwatch.core.lazy"}
    assert loaded == set()


def test_an_unknown_name_is_an_attribute_error_so_a_submodule_still_imports():
    import rampwatch.core

    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        rampwatch.core.no_such_name  # noqa: B018
    from rampwatch.core import strict_json  # a submodule, not a public name

    assert strict_json.__name__ == "rampwatch.core.strict_json"
