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
