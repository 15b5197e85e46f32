"""Source tables as MySQL/MariaDB describes them: columns, types, primary key.

The binlog (``binlog_row_image=FULL``) carries every UPDATE's and DELETE's
whole old row, so every base table can be followed, as a PostgreSQL table with
REPLICA IDENTITY FULL is: a table with a primary key is keyed by it; a table
without one gets an empty key (``TableSchema.primary_key == ()``), which the
engine treats as keyed by all columns with duplicate rows allowed.  Views
are refused; so are columns of types freshview does not maintain
(``types.column_type`` names the table and column).

Names are ``database.table``; either part may be quoted with backticks
(``\\`My Db\\`.\\`Orders\\```), and a bare ``table`` is looked up in the
connection's current database.  Table names are matched exactly (MySQL on
Linux compares them case-sensitively with ``lower_case_table_names=0``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from freshview.connectors.mysql.types import MySqlColumn, column_type
from freshview.errors import CatalogError
from freshview.schema import Column, TableSchema

_COLUMNS = """
SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE,
       CHARACTER_SET_NAME, COLLATION_NAME, IS_NULLABLE
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s
ORDER BY ORDINAL_POSITION
"""
COLUMNS_QUERY = _COLUMNS  # a table's columns, in order (database, table)
_TABLE = "SELECT TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
_PRIMARY_KEY = """
SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE
WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY'
ORDER BY ORDINAL_POSITION
"""


@dataclass(frozen=True)
class TableName:
    """A table's database and name, exactly as the server spells them."""

    database: str
    table: str

    def __str__(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def quoted(self) -> str:
        return f"{quote(self.database)}.{quote(self.table)}"


def quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


_PART = r"(`(?:[^`]|``)+`|[^.`\s]+)"
_NAME = re.compile(rf"^\s*(?:{_PART}\s*\.\s*)?{_PART}\s*$")


def parse_table_name(name: str, default_database: str | None = None) -> TableName:
    """``db.table``, ``\\`db\\`.\\`table\\``` or ``table`` (in ``default_database``) as a ``TableName``."""
    m = _NAME.match(name)
    if not m:
        raise CatalogError(f"cannot read table name {name!r}; expected database.table")

    def unquote(part: str) -> str:
        return part[1:-1].replace("``", "`") if part.startswith("`") else part

    database = unquote(m.group(1)) if m.group(1) else default_database
    if not database:
        raise CatalogError(f"table name {name!r} names no database; write database.table")
    return TableName(database, unquote(m.group(2)))


@dataclass(frozen=True)
class SourceTable:
    name: TableName
    schema: TableSchema
    columns: tuple[MySqlColumn, ...]  # in table order, with what converting their values needs

    @property
    def has_full_old_rows(self) -> bool:
        return True  # binlog_row_image=FULL: every UPDATE and DELETE carries the whole old row


def describe_table(conn, name: str | TableName) -> SourceTable:
    """Read a table's definition with a PyMySQL connection; refuse what freshview cannot maintain."""
    if isinstance(name, str):
        with conn.cursor() as cur:
            cur.execute("SELECT DATABASE()")
            default = cur.fetchone()[0]
        name = parse_table_name(name, default)
    with conn.cursor() as cur:
        cur.execute(_TABLE, (name.database, name.table))
        kind = cur.fetchone()
        if kind is None:
            raise CatalogError(f"table {name} does not exist (or this user may not see it)")
        if kind[0] != "BASE TABLE":
            raise CatalogError(f"{name} is a {kind[0].lower()}, not a base table; only base tables have "
                               "changes in the binlog")
        cur.execute(_COLUMNS, (name.database, name.table))
        rows = cur.fetchall()
        cur.execute(_PRIMARY_KEY, (name.database, name.table))
        key = tuple(r[0] for r in cur.fetchall())
    return source_table(name, rows, key)


def source_table(name: TableName, rows, key: tuple[str, ...]) -> SourceTable:
    """The ``SourceTable`` of ``information_schema`` rows (``_COLUMNS``' columns) and a primary key."""
    columns = tuple(
        column_type(str(name), col, _text(data), _text(full), precision, scale, _text(charset),
                    _text(collation), nullable == "YES")
        for col, data, full, precision, scale, charset, collation, nullable in rows)
    schema = TableSchema(tuple(Column(c.name, c.type, c.nullable) for c in columns), key)
    return SourceTable(name, schema, columns)


def _text(v):
    return v.decode() if isinstance(v, (bytes, bytearray)) else v
