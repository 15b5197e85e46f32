"""Source tables as PostgreSQL describes them: columns, types, primary key, replica identity.

A view's base table must let freshview see every change's old row: either it
has a primary key (freshview then keeps its own copy and looks old rows up by
key, since under REPLICA IDENTITY DEFAULT an UPDATE sends only the new row),
or REPLICA IDENTITY FULL (the stream carries whole old rows).  A table with
neither is refused with the statement that fixes it.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from freshview.connectors.postgres.types import UnsupportedTypeError, sql_type
from freshview.errors import CatalogError
from freshview.schema import Column, TableSchema

_COLUMNS = """
SELECT a.attname, a.atttypid, a.atttypmod, a.attnotnull, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute a
WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""
_PRIMARY_KEY = """
SELECT a.attname
FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
WHERE i.indrelid = %s::regclass AND i.indisprimary
ORDER BY array_position(i.indkey, a.attnum)
"""
_IDENTITY = "SELECT relreplident FROM pg_class WHERE oid = %s::regclass"


@dataclass(frozen=True)
class SourceTable:
    name: str  # schema.table
    schema: TableSchema
    replica_identity: str  # d(efault) f(ull) i(ndex) n(othing)

    @property
    def has_full_old_rows(self) -> bool:
        return self.replica_identity == "f"


def describe_table(conn: psycopg.Connection, name: str) -> SourceTable:
    """Read a table's definition; refuse what freshview cannot maintain, saying how to fix it."""
    qualified = name if "." in name else f"public.{name}"
    try:
        rows = conn.execute(_COLUMNS, (qualified,)).fetchall()
    except psycopg.errors.UndefinedTable:
        conn.rollback()
        raise CatalogError(f"table {qualified} does not exist") from None
    columns = []
    for col_name, oid, typmod, not_null, type_name in rows:
        try:
            columns.append(Column(col_name, sql_type(oid, typmod, type_name), not not_null))
        except UnsupportedTypeError:
            raise CatalogError(f"{qualified}.{col_name} has type {type_name}, which freshview does not "
                               "maintain yet") from None
    key = tuple(r[0] for r in conn.execute(_PRIMARY_KEY, (qualified,)).fetchall())
    identity = conn.execute(_IDENTITY, (qualified,)).fetchone()[0]
    identity = identity.decode() if isinstance(identity, bytes) else str(identity)
    if not key and identity != "f":
        raise CatalogError(
            f"{qualified} has no primary key and REPLICA IDENTITY is not FULL, so the change stream "
            f"cannot say which row an UPDATE or DELETE touched. Fix it with: "
            f"ALTER TABLE {qualified} REPLICA IDENTITY FULL; (or add a primary key)")
    return SourceTable(qualified, TableSchema(tuple(columns), key), identity)
