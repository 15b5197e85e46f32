"""MariaDB as the independent reference for views in the MySQL dialect.

Like ``PgOracle``: tables in a database of their own (the ``mysql_database``
fixture), loaded with the integrated source contents, and the view's SQL
run by MariaDB itself; ``query`` returns Arrow for ``assert_same_rows``.
Booleans come back from MariaDB as 1/0, which compare equal to freshview's
true/false.  ``collation_keys`` turns a result's text into
``utf8mb4_general_ci`` keys, for views whose spelling of a group is MariaDB's
arbitrary choice.
"""

from __future__ import annotations

import decimal
from typing import Any

import pyarrow as pa
import pymysql

from freshview.collation import key as collation_key
from freshview.schema import WEIGHT, SqlType, TableSchema
from tests.support.oracle import _decimal_array, table_rows


def mysql_type(t: SqlType) -> str:
    """The MariaDB column type for a freshview source column type."""
    if t.kind == "numeric":
        p, s = t.decimal_precision_scale
        return f"DECIMAL({p},{s})"
    if t.kind == "text":
        return "VARCHAR(255)" + (f" COLLATE {t.collation}" if t.collation else "")
    return {"int2": "SMALLINT", "int4": "INT", "int8": "BIGINT", "float4": "FLOAT", "float8": "DOUBLE",
            "bool": "BOOLEAN", "date": "DATE", "timestamp": "DATETIME(6)", "json": "JSON"}[t.kind]


class MariaDBOracle:
    def __init__(self, connect_args: dict) -> None:
        self.conn = pymysql.connect(autocommit=True, charset="utf8mb4", **connect_args)
        self.tables: dict[str, TableSchema] = {}

    def close(self) -> None:
        self.conn.close()

    def _run(self, sql: str, args: Any = None) -> Any:
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.description, cur.fetchall()

    def create_table(self, name: str, schema: TableSchema) -> None:
        cols = [f"`{c.name}` {mysql_type(c.type)}{'' if c.nullable else ' NOT NULL'}" for c in schema.columns]
        if schema.primary_key:
            cols.append("PRIMARY KEY (" + ", ".join(f"`{k}`" for k in schema.primary_key) + ")")
        self._run(f"CREATE TABLE `{name}` ({', '.join(cols)})")
        self.tables[name] = schema

    def load(self, name: str, rows: pa.Table) -> None:
        if WEIGHT in rows.column_names:
            raise ValueError(f"load() takes integrated rows, not a delta with {WEIGHT!r}")
        names = self.tables[name].names
        self._run(f"DELETE FROM `{name}`")
        data = table_rows(rows.select(names))
        if data:
            with self.conn.cursor() as cur:
                cur.executemany(f"INSERT INTO `{name}` ({', '.join(f'`{n}`' for n in names)}) "
                                f"VALUES ({', '.join(['%s'] * len(names))})", data)

    def create_view(self, name: str, sql: str) -> None:
        self._run(f"CREATE VIEW `{name}` AS {sql}")

    def query(self, sql_or_view: str) -> pa.Table:
        text = sql_or_view.strip()
        stmt = f"SELECT * FROM `{text}`" if text.isidentifier() else text
        description, rows = self._run(stmt)
        names = [d[0] for d in description]
        columns = list(zip(*rows)) if rows else [() for _ in names]
        return pa.Table.from_arrays([_to_arrow(list(c)) for c in columns], names=names)


def _to_arrow(values: list[Any]) -> pa.Array:
    if any(isinstance(v, decimal.Decimal) for v in values):
        return _decimal_array(values)
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values], type=pa.string())


def collation_keys(table: pa.Table) -> pa.Table:
    """``table`` with every text value replaced by its utf8mb4_general_ci key."""
    cols = []
    for col in table.columns:
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            col = pa.array([None if v is None else collation_key(v) for v in col.to_pylist()], type=pa.string())
        cols.append(col)
    return pa.Table.from_arrays(cols, names=table.column_names)
