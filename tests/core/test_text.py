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
