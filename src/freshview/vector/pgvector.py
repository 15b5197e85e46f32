"""``PgVectorSink``: a PostgreSQL table with pgvector, kept equal to a view or source.

The table is created if missing: the columns with their PostgreSQL types, a float array of
declared dimension d as ``vector(d)`` (without one: ``vector``), the key as the primary key; the
extension with ``CREATE EXTENSION IF NOT EXISTS vector``.  ``index="hnsw"`` also creates pgvector's
HNSW index on the (only) vector column for ``metric``.  Attaching fills it (TRUNCATE, then COPY, in
one transaction); each committed step is one transaction of ``INSERT … ON CONFLICT (key) DO UPDATE``
and ``DELETE``.  A NULL vector is stored as NULL.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from freshview.errors import FreshviewError
from freshview.schema import SqlType
from freshview.vector.base import Columns, KeyedVectorSink, vector_columns

_OPS = {"cosine": "vector_cosine_ops", "l2": "vector_l2_ops", "inner_product": "vector_ip_ops"}


class PgVectorSink(KeyedVectorSink):
    def __init__(self, dsn: str, table: str, *, index: str | None = None, metric: str = "cosine") -> None:
        if index not in (None, "hnsw"):
            raise FreshviewError(f"PgVectorSink index is 'hnsw' or None, not {index!r}")
        if metric not in _OPS:
            raise FreshviewError(f"PgVectorSink metric is one of {', '.join(_OPS)}, not {metric!r}")
        self.dsn, self.table, self.index, self.metric = dsn, table, index, metric
        self._conn: Any = None
        self._vectors: dict[str, SqlType] = {}

    # ------------------------------------------------------------------ sql
    def _ident(self, name: str):
        from psycopg import sql

        return sql.Identifier(name)

    def _table(self):
        from psycopg import sql

        return sql.SQL(".").join(sql.Identifier(p) for p in self.table.split("."))

    def _type(self, name: str, t: SqlType) -> str:
        if name in self._vectors:
            return f"vector({t.dim})" if t.dim is not None else "vector"
        return t.pg

    # ------------------------------------------------------------------ protocol
    def open(self, name: str, columns: Columns, key: Sequence[str]) -> None:
        import psycopg
        from psycopg import sql

        super().open(name, columns, key)
        self._vectors = vector_columns(columns)
        self._conn = psycopg.connect(self.dsn)
        defs = [sql.SQL("{} {}").format(self._ident(n), sql.SQL(self._type(n, t))) for n, t in self.columns]
        defs.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(self._ident, self.key))))
        with self._conn.transaction():
            self._conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            self._conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                self._table(), sql.SQL(", ").join(defs)))
            if self.index == "hnsw":
                if len(self._vectors) != 1:
                    raise FreshviewError(f"an HNSW index needs exactly one vector column in {name!r}, "
                                         f"not {len(self._vectors)}")
                (column,) = self._vectors
                self._conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw ({} {})").format(
                    self._ident(f"{self.table.split('.')[-1]}_{column}_hnsw"), self._table(), self._ident(column),
                    sql.SQL(_OPS[self.metric])))

    def replace(self, rows: pa.Table) -> None:
        from psycopg import sql

        cols = sql.SQL(", ").join(map(self._ident, self.names))
        with self._conn.transaction():
            self._conn.execute(sql.SQL("TRUNCATE {}").format(self._table()))
            with self._conn.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN").format(self._table(), cols)) as copy:
                for row in self._values(rows):
                    copy.write_row(row)

    def write(self, upserts: pa.Table, deletes: pa.Table) -> None:
        from psycopg import sql

        names = self.names
        with self._conn.transaction(), self._conn.cursor() as cur:
            if deletes.num_rows:
                where = sql.SQL(" AND ").join(sql.SQL("{} = %s").format(self._ident(k)) for k in self.key)
                cur.executemany(sql.SQL("DELETE FROM {} WHERE {}").format(self._table(), where),
                                list(zip(*(deletes.column(k).to_pylist() for k in self.key))))
            if upserts.num_rows:
                values = sql.SQL(", ").join(
                    sql.SQL("%s::vector") if n in self._vectors else sql.SQL("%s") for n in names)
                rest = [n for n in names if n not in self.key]
                action = (sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
                    sql.SQL("{0} = EXCLUDED.{0}").format(self._ident(n)) for n in rest)) if rest else sql.SQL("DO NOTHING")
                stmt = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) ").format(
                    self._table(), sql.SQL(", ").join(map(self._ident, names)), values,
                    sql.SQL(", ").join(map(self._ident, self.key))) + action
                cur.executemany(stmt, list(self._values(upserts)))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # ------------------------------------------------------------------ values
    def _values(self, rows: pa.Table):
        """Rows as tuples; a vector as pgvector's text form ``[1,2,3]`` (or None)."""
        columns = []
        for n in self.names:
            col = rows.column(n)
            columns.append([_vector_text(v) for v in col.to_pylist()] if n in self._vectors else col.to_pylist())
        return zip(*columns)


def _vector_text(value: list[float] | None) -> str | None:
    if value is None:
        return None
    arr = np.asarray([np.nan if x is None else x for x in value], dtype=np.float32)
    return "[" + ",".join(repr(float(x)) for x in arr) + "]"
