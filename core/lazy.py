"""A package's public names, loaded when first used.

A package's ``__init__`` names its public surface in ``__all__``, imports those names under
``TYPE_CHECKING`` (for the type checker and the reader) and maps each module to the names
it defines; ``lazy_attributes`` gives the module ``__getattr__`` that imports a module on
its name's first use (as Textual's ``textual/widgets/__init__.py`` does), so importing a
package stays cheap. tests/test_import_hygiene.py checks that the three agree.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module


def lazy_attributes(package: str, modules: Mapping[str, tuple[str, ...]]) -> Callable[[str], object]:
    """The ``__getattr__`` of ``package``, whose ``modules`` maps each module (relative to
    the package) to the public names it defines. An unknown name raises AttributeError,
    so ``from package import submodule`` still imports the submodule."""
    module_of = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> object:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)  # later uses find it without this call
        return value

    return __getattr__
