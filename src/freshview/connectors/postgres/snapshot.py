"""Reading base tables under a replication slot's exported snapshot, in chunks, as Arrow.

Snapshot plus stream must be exactly the database's history: every session
here imports the slot's snapshot (``SET TRANSACTION SNAPSHOT``) in a
REPEATABLE READ transaction, so it sees the tables as of the slot's
consistent point, no matter what commits meanwhile.  Rows travel as
``COPY ... TO STDOUT`` text and are converted per column by ``types``;
``progress(rows_done)`` is called after every chunk so a caller can show a
progress bar on large tables.
"""

from __future__ import annotations

from typing import Callable, Iterator

import psycopg
import pyarrow as pa
from psycopg import sql

from freshview.connectors.postgres.types import to_arrow
from freshview.schema import TableSchema

CHUNK_ROWS = 100_000


def read_table(dsn: str, snapshot_name: str, table: str, schema: TableSchema,
               chunk_rows: int = CHUNK_ROWS, progress: Callable[[int], None] | None = None
               ) -> Iterator[pa.Table]:
    """Yield the table's rows under the snapshot as inserts (+1) in chunks of ``chunk_rows``."""
    schema_name, _, table_name = table.rpartition(".")
    target = sql.Identifier(schema_name or "public", table_name)
    columns = sql.SQL(", ").join(sql.Identifier(n) for n in schema.names)
    query = sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT").format(columns, target)
    done = 0
    with psycopg.connect(dsn) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_name)))
        with conn.cursor() as cur, cur.copy(query) as copy:
            buffer: list[tuple] = []
            for row in copy.rows():  # text format: values arrive as str, NULL as None
                buffer.append(row)
                if len(buffer) >= chunk_rows:
                    done += len(buffer)
                    yield _to_delta(buffer, schema)
                    buffer = []
                    if progress:
                        progress(done)
            if buffer:
                done += len(buffer)
                yield _to_delta(buffer, schema)
                if progress:
                    progress(done)
        conn.rollback()


def _to_delta(rows: list[tuple], schema: TableSchema) -> pa.Table:
    columns = list(zip(*rows))
    arrays = [to_arrow(list(col), c.type) for col, c in zip(columns, schema.columns)]
    arrays.append(pa.array([1] * len(rows), pa.int64()))
    return pa.Table.from_arrays(arrays, schema=schema.arrow(with_weight=True))

