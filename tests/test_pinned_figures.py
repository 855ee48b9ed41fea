"""No figure moves unless someone means it to: the summaries, result JSON, CSV and HTML
of three recordings (a small fixture, and a short simulator run of a mixture and of a
session workload, seed 7) are pinned byte for byte in ``tests/data/pinned/``.

A change that is meant to move a figure regenerates them, and the diff shows what moved:

    python -m tests.test_pinned_figures
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest

from rampwatch.app.cli import main

DATA = Path(__file__).resolve().parent / "data"
PINNED = DATA / "pinned"
# relative to DATA, the working directory of the commands: the report names the file as given
RECORDINGS = {
    "small": "small.rwrec",
    "mixed-sim": "pinned/mixed-sim.rwrec",
    "turns-sim": "pinned/turns-sim.rwrec",
}
# output name -> the command that prints it, or writes it to {out}
COMMANDS = {
    "report.txt": ["report", "{rec}"],
    "report.json": ["report", "--json", "{rec}"],
    "result.json": ["export", "{rec}", "-o", "{out}"],
    "detailed.json": ["export", "{rec}", "--save-detailed", "-o", "{out}"],
    "requests.csv": ["export", "{rec}", "--format", "csv", "-o", "{stem}.csv"],
    "series.csv": ["export", "{rec}", "--format", "csv", "-o", "{stem}.csv"],
    "report.html": ["export", "{rec}", "--format", "html", "-o", "{out}"],
}
COMPARE = ("mixed-sim", "turns-sim")


def produce(name: str, output: str, workdir: Path) -> bytes:
    """What ``output`` of recording ``name`` is today (run in-process, written under ``workdir``)."""
    stem = workdir / f"{name}-{output.replace('.', '-')}"
    out = workdir / f"{name}-{output}"
    if output == "compare.txt":
        argv = ["compare", str(RECORDINGS[COMPARE[0]]), str(RECORDINGS[COMPARE[1]])]
    else:
        argv = [w.format(rec=RECORDINGS[name], out=out, stem=stem) for w in COMMANDS[output]]
    printed = io.StringIO()
    with contextlib.chdir(DATA), contextlib.redirect_stdout(printed):
        code = main([*argv, "--force"] if argv[0] == "export" else argv)
    assert code == 0, printed.getvalue()
    if output.endswith(".csv"):
        return Path(f"{stem}-{output.split('.')[0]}.csv").read_bytes()
    if argv[0] == "export":
        return out.read_bytes()
    return printed.getvalue().encode()


CASES = [(name, output) for name in RECORDINGS for output in COMMANDS] + [("-".join(COMPARE), "compare.txt")]


@pytest.mark.parametrize(("name", "output"), CASES, ids=[f"{n}:{o}" for n, o in CASES])
def test_figures_are_byte_identical_to_the_pinned_ones(name, output, tmp_path):
    expected = (PINNED / f"{name}.{output}").read_bytes()
    assert produce(name, output, tmp_path) == expected


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        for name, output in CASES:
            (PINNED / f"{name}.{output}").write_bytes(produce(name, output, Path(work)))
    print(f"regenerated {len(CASES)} files in {PINNED}", file=sys.stderr)
