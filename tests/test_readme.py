"""The README's two set-up commands must stay true: CI runs the test one verbatim."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.+?)\n```", setup, re.S)


def test_readme_has_exactly_two_setup_commands():
    commands = readme_commands()
    assert len(commands) == 2
    assert "rampwatch run" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    assert readme_commands()[1] in ci


def _github_slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readmes_links_into_the_docs_name_headings_that_exist():
    text = (REPO / "README.md").read_text()
    links = re.findall(r"\((docs/[\w./-]+\.md)#([\w-]+)\)", text)
    assert links
    for path, anchor in links:
        headings = re.findall(r"^#+ (.+)$", (REPO / path).read_text(), re.M)
        assert anchor in {_github_slug(h) for h in headings}, f"{path}#{anchor}"


def test_the_readme_names_the_repeats_and_where_ttft_went():
    """A new user reads the command list and the features first (review rv-user29)."""
    text = (REPO / "README.md").read_text()
    use = text.split("## Use", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.+?)\n```", use, re.S)[0]
    assert re.search(r"^rampwatch run .*--repeats \d", commands, re.M)
    assert re.search(r"^rampwatch compare \S+\.repeats\.json \S+\.repeats\.json", commands, re.M)
    assert "**Repeats with intervals.**" in use and "**Where TTFT went**" in use
    assert "rampwatch_ttft_phases" in use


def test_no_merge_conflict_markers_in_the_docs():
    """A leftover ``=======`` under a paragraph turns it into a heading (review rv-user29b:
    docs/tuning.md's "Comparing two sets" paragraph rendered as a title)."""
    marker = re.compile(r"^(<{7}|={7}|>{7})( |$)", re.M)
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        assert not marker.search(path.read_text()), path
