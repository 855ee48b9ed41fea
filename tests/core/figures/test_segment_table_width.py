"""A side-by-side table (a mixture's classes, configurations) printed in a terminal of a
given width: no line wider than it, no cell broken mid-word."""

from __future__ import annotations

import pytest

from rampwatch.core.figures.segments import SegmentTable

# The classes of a `rampwatch run mixed` as its summary printed them: the SLO row made
# the table 85 columns wide, and an 80-column terminal broke its cells mid-word.
MIXED = SegmentTable(
    columns=["chat", "classification", "code-generation"],
    commands=["", "", ""],
    rows=[
        ("requests sent", ["63", "19", "7"]),
        ("TTFT p50 ms", ["3037.53", "3566.51", "4651.19"]),
        ("E2EL p99 ms", ["51135.28", "18897.62", "17993.59"]),
        ("SLO ms", ["ttft<500 tpot<100", "ttft<3000 tpot<100", "ttft<2000 tpot<100 e2el<10000"]),
        ("SLO met %", ["15.9", "15.8", "0.0"]),
    ],
    argument_count=0,
)
MANY = SegmentTable(
    columns=[f"C{i}" for i in range(1, 9)],
    commands=[""] * 8,
    rows=[("--max-num-seqs", [str(2**i) for i in range(4, 12)]), ("TTFT p99 ms", ["12345.67"] * 8)],
    argument_count=1,
)


def words(table: SegmentTable) -> set[str]:
    return {word for _, cells in table.rows for cell in cells for word in cell.split()} | set(table.columns)


@pytest.mark.parametrize("table", [MIXED, MANY], ids=["mixed classes", "8 configurations"])
@pytest.mark.parametrize("width", [80, 60, 40])
def test_the_table_fits_the_terminal_and_keeps_every_word_whole(table, width):
    text = table.text(width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width, text
    shown = {word for line in lines for word in line.split()}
    assert words(table) <= shown  # every word of every cell, whole
    for label, _ in table.rows:
        assert any(line.startswith(label) for line in lines)


def test_a_wrapped_cell_continues_under_its_column():
    lines = MIXED.text(80).splitlines()
    slo = next(i for i, line in enumerate(lines) if line.startswith("SLO ms"))
    assert "ttft<2000 tpot<100" in lines[slo] and lines[slo + 1].strip() == "e2el<10000"
    assert lines[slo + 1].endswith("e2el<10000") and len(lines[slo + 1]) == len(lines[slo])


def test_without_a_width_the_table_is_as_before():
    """A file or a pipe gets the table unwrapped: one line per row, whatever its width."""
    lines = MIXED.text().splitlines()
    assert len(lines) == 1 + len(MIXED.rows) and max(len(line) for line in lines) > 80
    assert lines[0].split() == MIXED.columns
    assert lines[4].endswith("ttft<2000 tpot<100 e2el<10000")


def test_a_terminal_gets_the_tables_note_wrapped_whole_words_and_a_file_as_it_is():
    import io

    from rampwatch.core.text import fill_to, terminal_width

    assert terminal_width(io.StringIO()) is None
    note = "Classes (one column per class of the mixture; each one's figures are the run summary of its requests)"
    assert fill_to(note, None) == note
    lines = fill_to(note, 40).splitlines()
    assert max(map(len, lines)) <= 40 and " ".join(lines) == note
