"""Every subpackage ships: pyproject.toml lists the packages by name (the folders map onto
rampwatch.* through package-dir), so a new subpackage missing from the list would import
from a checkout and be absent from the wheel."""

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_listed_in_pyproject():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for name, folder in setuptools["package-dir"].items():
        for init in (REPO / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPO / folder)
            found.add(".".join([name, *relative.parts]))
    assert found - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - found == set(), "listed but not a package"
