"""The core packages must never pull in the UI stack: they run headless, in CI and in
the load process where UI imports would cost start-up time and memory."""

import importlib
import pkgutil
import subprocess
import sys

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
