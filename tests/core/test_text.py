import pytest

from rampwatch.core.text import printable


@pytest.mark.parametrize(
    "text, expected",
    [
        ("tiny", "tiny"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("a\x07b\x9bc", "a\\x07b\\x9bc"),
        ("two\nlines\tok", "two\nlines\tok"),
        ("modèle-日本", "modèle-日本"),
    ],
)
def test_printable(text, expected):
    assert printable(text) == expected


def test_printable_on_one_line():
    assert printable("two\nlines\tand\x1b", one_line=True) == "two\\x0alines\\x09and\\x1b"


@pytest.mark.parametrize(
    ("text", "width", "expected"),
    [
        ("short line", 80, "short line"),
        ("any width", None, "any width"),
        (
            "  why: KV cache full (KV 100 % for 21 s, 96 preemptions) → try --gpu-memory-utilization 0.95",
            40,
            "  why: KV cache full (KV 100 % for 21 s,\n    96 preemptions) → try\n    --gpu-memory-utilization 0.95",
        ),
        ("a\n" + "word " * 5, 12, "a\nword word\n  word word\n  word"),
        ("--a-flag-longer-than-the-width", 10, "--a-flag-longer-than-the-width"),
    ],
)
def test_fit_lines_wraps_long_lines_at_words_with_a_hanging_indent(text, width, expected):
    from rampwatch.core.text import fit_lines

    assert fit_lines(text, width) == expected


@pytest.mark.parametrize(
    ("widths", "room", "groups"),
    [([5, 5, 5], 80, [[0, 1, 2]]), ([5, 5, 5], 12, [[0, 1], [2]]), ([30, 5], 10, [[0], [1]]), ([], 10, [[]])],
)
def test_column_groups_fit_the_room(widths, room, groups):
    from rampwatch.core.text import column_groups

    assert column_groups(widths, room) == groups


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("X\u202eevil", "X\\u202eevil"),  # right-to-left override: the rest would read backwards
        ("a\u2066b\u2069c", "a\\u2066b\\u2069c"),  # an isolate
        ("line\u2028sep", "line\\u2028sep"),  # a line separator some terminals break on
        ("中文 é ✓", "中文 é ✓"),  # text of other scripts is text
    ],
)
def test_printable_shows_the_characters_that_reorder_or_break_a_line(text, shown):
    assert printable(text, one_line=True) == shown
    assert printable(text) == shown


def test_a_recorded_string_with_a_raw_override_reads_back_shown():
    """A recording written before (or by anything else) that holds U+202E raw (orjson
    writes UTF-8) or escaped (json.dumps writes \\u202e) reads back shown."""
    from rampwatch.record.format import _loads_printable

    assert _loads_printable('{"m": "X\u202eevil"}'.encode()) == {"m": "X\\u202eevil"}
    assert _loads_printable(b'{"m": "X\\u202eevil"}') == {"m": "X\\u202eevil"}
    assert _loads_printable('{"m": "plain é"}'.encode()) == {"m": "plain é"}
