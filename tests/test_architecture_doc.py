"""docs/architecture.md is the map of the code: what it names must exist, and every
package, subpackage and module must be on it.

It names code three ways, in backticks (dotted names in the diagrams too): dotted names (``app.session.finish``,
``rampwatch.loadgen.run.runner.Run``), paths (``core/timeline.py``, ``loadgen/run/``),
and, in the package map, a folder's modules by file name under a heading that names the
folder (``### `loadgen/run/` …`` then ``runner.py``). Its Layers chains
(`app → tui → …`) are the layer test's ``ALLOWED`` table.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_layers import ALLOWED

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "architecture.md"
PACKAGES = ("core", "loadgen", "sim", "record", "tui", "app")

CODE_SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(rf"(?<![\w./-])(?:rampwatch\.)?((?:{'|'.join(PACKAGES)})(?:\.\w+)+)")
PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w-]+\.py)\b")
FOLDER = re.compile(rf"(?<![\w./-])((?:{'|'.join(PACKAGES)})(?:/\w+)*/)")
MAP_HEADING = re.compile(r"^### `([\w/]+/)`", re.M)
FENCED = re.compile(r"^```\w*\n(.*?)^```", re.M | re.S)
FILE_NAME = re.compile(r"(?<![\w./-])(\w+\.py)\b")


def code_spans(text: str) -> list[str]:
    return CODE_SPAN.findall(text)


def diagrams(text: str) -> list[str]:
    """The fenced blocks (the process diagrams), whose dotted names are checked too."""
    return FENCED.findall(text)


def defines(source: str, name: str) -> bool:
    """Whether a module's source defines or imports ``name`` at some level (a function,
    class, constant, attribute or re-exported name; a lazy surface's ``__all__`` entry)."""
    patterns = (
        rf"^\s*(?:async\s+def|def|class)\s+{name}\b",
        rf"^\s*(?:self\.)?{name}\s*(?::|=)",
        rf"^\s*import\b.*\b{name}\b",
        rf"^\s*from\b.*\bimport\b.*\b{name}\b",
        rf"^\s+{name},?\s*(?:#.*)?$",
        rf"[\"']{name}[\"']",
    )
    return any(re.search(pattern, source, re.M) for pattern in patterns)


def dotted_problem(dotted: str) -> str | None:
    """Why ``pkg.sub.module.Name`` names nothing in the code, or None: every part is a
    package or module down to the first that is not, which its package or module must
    define (what follows that, e.g. a method, is not checked)."""
    parts = dotted.split(".")
    folder = REPO / parts[0]
    for index, part in enumerate(parts[1:], start=1):
        if (folder / part / "__init__.py").is_file():
            folder = folder / part
            continue
        if (folder / f"{part}.py").is_file():
            module = folder / f"{part}.py"
            if index + 1 < len(parts) and not defines(module.read_text(encoding="utf-8"), parts[index + 1]):
                return f"{module.relative_to(REPO)} defines no {parts[index + 1]!r}"
            return None
        init = folder / "__init__.py"
        if not defines(init.read_text(encoding="utf-8"), part):
            return f"{folder.relative_to(REPO)}/ has no module or name {part!r}"
        return None
    return None


def map_sections(text: str) -> dict[str, str]:
    """Package-map folder (``loadgen/run/``) -> the text under its heading."""
    headings = list(MAP_HEADING.finditer(text))
    sections = {}
    ends = [heading.start() for heading in headings[1:]] + [len(text)]
    for heading, end in zip(headings, ends, strict=False):  # no headings: no sections
        body = text[heading.end() : end].split("\n## ", 1)[0]
        sections[heading.group(1)] = body
    return sections


def package_folders() -> list[str]:
    folders = []
    for package in PACKAGES:
        for init in sorted((REPO / package).rglob("__init__.py")):
            folders.append(f"{init.parent.relative_to(REPO).as_posix()}/")
    return folders


def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_dotted_names_exist():
    found = {name for span in code_spans(doc()) + diagrams(doc()) for name in DOTTED.findall(span)}
    names = {name for name in found if not name.endswith(".py")}  # `app.py` is a file name
    assert names, "the doc names no module: the pattern is broken"
    problems = sorted(f"`{name}`: {why}" for name in names if (why := dotted_problem(name)))
    assert not problems, "docs/architecture.md names what the code lacks:\n" + "\n".join(problems)


def test_paths_exist():
    spans = code_spans(doc())
    paths = {path for span in spans for path in PATH.findall(span)}
    folders = {folder for span in spans for folder in FOLDER.findall(span)}
    assert paths and folders
    missing = sorted(path for path in paths | folders if not (REPO / path).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_package_and_subpackage_is_on_the_map():
    sections = map_sections(doc())
    missing = [folder for folder in package_folders() if folder not in sections]
    assert not missing, f"no `### `folder/`` heading in docs/architecture.md's package map for {missing}"


def test_the_map_names_each_folders_modules_and_only_those():
    problems = []
    for folder, body in map_sections(doc()).items():
        present = {path.name for path in (REPO / folder).glob("*.py")} - {"__init__.py"}
        named = set(FILE_NAME.findall(body)) - {"__init__.py"}
        problems += [f"{folder}{name}: named, no such module" for name in sorted(named - present)]
        problems += [f"{folder}{name}: a module not on the map" for name in sorted(present - named)]
    assert not problems, "docs/architecture.md's package map:\n" + "\n".join(problems)


def layer_chains_closure(text: str) -> dict[str, frozenset[str]]:
    """layer -> every layer below it, from the Layers section's chains (`a → b → c`)."""
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    below: dict[str, set[str]] = {}
    for span in (span for span in code_spans(section) if "→" in span):
        chain = [name.strip() for name in span.split("→")]
        for index, layer in enumerate(chain):
            below.setdefault(layer, set()).update(chain[index + 1 :])
    changed = True
    while changed:  # a layer may skip the ones between: the closure
        changed = False
        for targets in below.values():
            more = set().union(*(below.get(target, set()) for target in targets)) - targets
            if more:
                targets |= more
                changed = True
    return {layer: frozenset(targets) for layer, targets in below.items()}


def test_the_layers_text_is_the_layer_tests_table():
    assert layer_chains_closure(doc()) == ALLOWED


def test_the_checks_catch_a_wrong_name():
    assert dotted_problem("loadgen.run.runner") is None
    assert dotted_problem("loadgen.run.runner.Run") is None
    assert dotted_problem("core.figures.summary.Summary") is None
    assert dotted_problem("loadgen.runner") is not None
    assert dotted_problem("loadgen.run.runner.NoSuchThing") is not None
    assert map_sections("## Map\n### `a/`\nx.py\n### `b/c/`\ny.py\n## Next\nz.py") == {
        "a/": "\nx.py\n",
        "b/c/": "\ny.py",
    }
