"""`rampwatch export REC --format parquet`: the CSV export's two tables as Parquet files.

``<stem>-requests.parquet`` and ``<stem>-series.parquet`` have the CSV files' columns,
in their order, with the CSV's values (``cli_export`` hands over the very cells it writes
to the CSV), typed: times and durations float64 (rounded to the µs as in the CSV),
counts int64, the 0/1 flags int8, texts strings; an empty CSV cell is a null. pyarrow is
an optional extra (``rampwatch[parquet]``), imported only here and only when this
export runs.

The requests are written as they are read, ``ROWS_PER_GROUP`` rows at a time, one row
group each: a recording of millions of requests never becomes one table in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rampwatch.core.errors import UserError
from rampwatch.core.figures import phases
from rampwatch.core.files import private_file

EXTRA = "parquet"
MISSING = f"--format parquet: pyarrow is not installed: pip install 'rampwatch[{EXTRA}]'"

# A row group's requests: about 1 MB a column compressed, a few tens of MB of Python
# cells while one is gathered (it is what bounds the export's memory).
ROWS_PER_GROUP = 32_768

FLOAT_COLUMNS = frozenset(
    {
        "scheduled_at",
        "sent_at",
        "first_token_at",
        "end_at",
        "ttft_s",
        "e2e_s",
        "tpot_s",
        "client_queue_s",
        "first_answer_at",
        "ttfa_s",
        # where TTFT went (core.figures.phases): the marks and each phase's length
        *phases.MARK_FIELDS,
        *(f"{name}_phase_s" for name in phases.PHASE_NAMES),
    }
)
INT_COLUMNS = frozenset(
    {"id", "n_chunks", "prompt_tokens", "completion_tokens", "status", "reasoning_tokens", "answer_tokens", "images"}
)
FLAG_COLUMNS = frozenset({"tokens_from_usage", "reasoning_from_usage"})  # 1/0 as in the CSV
# Any other request column (finish_reason, error_class, error, scenario_tag,
# request_class, adapter, and one the CSV gains later) is text.


def require_pyarrow() -> None:
    """One line naming the extra, before anything is read or written, when pyarrow is absent."""
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise UserError(MISSING) from None


def _float(cell: Any) -> float | None:
    """A CSV cell of a float column: empty is a null, a float's text (the shortest repr
    of the rounded value) its float again."""
    return None if cell == "" else float(cell)


def _int(cell: Any) -> int | None:
    return None if cell == "" else int(cell)


def _text(cell: Any) -> str | None:
    return None if cell == "" else str(cell)


def request_column_kind(name: str) -> str:
    if name in FLOAT_COLUMNS:
        return "float"
    if name in INT_COLUMNS:
        return "int"
    if name in FLAG_COLUMNS:
        return "flag"
    return "text"


_CONVERT: dict[str, Callable[[Any], Any]] = {"float": _float, "int": _int, "flag": _int, "text": _text}


def _arrow_type(pa: Any, kind: str) -> Any:
    return {"float": pa.float64(), "int": pa.int64(), "flag": pa.int8(), "text": pa.string()}[kind]


def write_rows(
    path: Path, header: list[str], kinds: list[str], rows: Iterable[list], rows_per_group: int = ROWS_PER_GROUP
) -> None:
    """CSV cells (``rows``) as a Parquet file of typed columns, ``rows_per_group`` rows a
    row group, each written before the next is gathered."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([pa.field(name, _arrow_type(pa, kind)) for name, kind in zip(header, kinds)])
    convert = [_CONVERT[kind] for kind in kinds]
    with private_file(path, "wb") as f, pq.ParquetWriter(f, schema) as writer:
        columns: list[list] = [[] for _ in header]
        groups = 0

        def flush() -> None:
            nonlocal groups
            writer.write_batch(pa.record_batch(columns, schema=schema), row_group_size=rows_per_group)
            groups += 1
            for column in columns:
                column.clear()

        for row in rows:
            for column, to_value, cell in zip(columns, convert, row):
                column.append(to_value(cell))
            if len(columns[0]) >= rows_per_group:
                flush()
        if columns[0] or not groups:  # a table without rows still has its columns
            flush()


def write_requests(path: Path, header: list[str], rows: Iterable[list], rows_per_group: int = ROWS_PER_GROUP) -> None:
    """The requests table: ``cli_export.request_header`` and ``request_cells``."""
    write_rows(path, header, [request_column_kind(name) for name in header], rows, rows_per_group)


def write_series(path: Path, header: list[str], rows: Iterable[list]) -> None:
    """The one-second series (``cli_export.series_header``, ``series_rows``): every column a float."""
    write_rows(path, header, ["float"] * len(header), rows)
