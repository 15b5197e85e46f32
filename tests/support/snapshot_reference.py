"""The snapshot reader as it was before CSV: COPY text rows converted value by value in Python.

Kept as the reference the vectorised readers (``connectors.postgres.snapshot``:
CSV and binary COPY) must match -- same Arrow types, same values, same
refusals (tests/connectors/test_snapshot_values.py).  Serial, one connection, the
session's own spellings (no ``SET``): exactly the old ``_read_ranges`` over
one open range and its ``_to_delta``, ``to_arrow`` given Python lists.
"""

from __future__ import annotations

from typing import Iterator

import psycopg
import pyarrow as pa
from psycopg import sql

from freshview.connectors.postgres.types import to_arrow
from freshview.schema import TableSchema


def read_table_per_row(dsn: str, snapshot_name: str, table: str, schema: TableSchema,
                       chunk_rows: int = 100_000) -> Iterator[pa.Table]:
    """Yield the table's rows under the snapshot as inserts (+1), converted row by row."""
    schema_name, _, table_name = table.rpartition(".")
    select = sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(sql.Identifier(n) for n in schema.names),
                                                 sql.Identifier(schema_name or "public", table_name))
    with psycopg.connect(dsn) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_name)))
        with conn.cursor() as cur, cur.copy(sql.SQL("COPY ({}) TO STDOUT").format(select)) as copy:
            buffer: list[tuple] = []
            for row in copy.rows():  # text format: values arrive as str, NULL as None
                buffer.append(row)
                if len(buffer) >= chunk_rows:
                    yield _to_delta(buffer, schema)
                    buffer = []
            if buffer:
                yield _to_delta(buffer, schema)
        conn.rollback()


def _to_delta(rows: list[tuple], schema: TableSchema) -> pa.Table:
    columns = list(zip(*rows))
    arrays = [to_arrow(list(col), c.type) for col, c in zip(columns, schema.columns)]
    arrays.append(pa.array([1] * len(rows), pa.int64()))
    return pa.Table.from_arrays(arrays, schema=schema.arrow(with_weight=True))
