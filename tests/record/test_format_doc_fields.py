"""docs/recording-format.md names every optional per-request list a requests frame may
carry (a reader of the format should not have to find them in record/format.py)."""

from __future__ import annotations

from pathlib import Path

from rampwatch.record.format import OPTIONAL_REQUEST_FIELDS

DOC = Path(__file__).resolve().parents[2] / "docs" / "recording-format.md"


def test_every_optional_request_field_is_in_the_format_doc():
    text = DOC.read_text(encoding="utf-8")
    start = text.index("### Requests frame")
    section = text[start : text.index("\n### ", start + 1)]
    missing = [name for name in OPTIONAL_REQUEST_FIELDS if f"`{name}`" not in section]
    assert not missing, f"docs/recording-format.md, Requests frame, does not name {missing}"
