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
Linux compares them case-sensitively with ``lower_case_table_names=0``), so
``Orders`` and ``orders`` are two tables.  A name is spelled (``str``) with
backticks only around a part that needs them: ``app.Orders``,
``app.\\`Big Totals\\```; the spelling parses back to the same name.
Column names are case-insensitive in MySQL: the engine knows them in lower
case (``engine_schema``), and the binlog's and snapshot's columns are matched
to them case-insensitively.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Sequence

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
        return f"{spell(self.database)}.{spell(self.table)}"

    @property
    def quoted(self) -> str:
        return f"{quote(self.database)}.{quote(self.table)}"


def quote(identifier: str) -> str:
    return "`" + identifier.replace("`", "``") + "`"


_PLAIN = r"[0-9A-Za-z_$\u0080-\uffff]+"  # MySQL's unquoted identifier characters


@functools.lru_cache(maxsize=4096)  # every transaction spells its tables' names
def spell(part: str) -> str:
    """A name part as MySQL needs it written: bare when its characters allow (case is kept), else in backticks."""
    return part if re.fullmatch(_PLAIN, part) and not part.isdigit() else quote(part)


_PART = rf"(`(?:[^`]|``)+`|{_PLAIN})"
_NAME = re.compile(rf"^\s*(?:{_PART}\s*\.\s*)?{_PART}\s*$")


def split_table_name(name: str) -> tuple[str | None, str]:
    """``db.table`` or ``\\`db\\`.\\`table\\``` -> (database, table); a bare ``table`` -> (None, table)."""
    m = _NAME.match(name)
    if not m:
        raise CatalogError(f"freshview: invalid table name {name!r}: write database.table as in MySQL, e.g. "
                           "app.orders or `My Db`.`Big Totals` (backticks around a part with other characters "
                           "than letters, digits, _ and $)")

    def unquote(part: str) -> str:
        return part[1:-1].replace("``", "`") if part.startswith("`") else part

    return (unquote(m.group(1)) if m.group(1) else None), unquote(m.group(2))


def parse_table_name(name: str, default_database: str | None = None) -> TableName:
    """``db.table``, ``\\`db\\`.\\`table\\``` or ``table`` (in ``default_database``) as a ``TableName``."""
    database, table = split_table_name(name)
    database = database or default_database
    if not database:
        raise CatalogError(f"table name {name!r} names no database; write database.table")
    return TableName(database, table)


class MySqlNames:
    """``connectors.base.NameRules`` for MySQL/MariaDB: backticks, case kept."""

    def split(self, text: str) -> tuple[str | None, str]:
        return split_table_name(text)

    def spell(self, schema: str, table: str) -> str:
        return str(TableName(schema, table))


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
    return SourceTable(name, engine_schema(columns, key), columns)


def engine_schema(columns: Sequence[MySqlColumn], key: Sequence[str]) -> TableSchema:
    """The engine's schema of a table: its columns with their names in lower case (MySQL compares column
    names case-insensitively; the SQL front end reads them folded), in table order."""
    return TableSchema(tuple(Column(c.name.lower(), c.type, c.nullable) for c in columns),
                       tuple(k.lower() for k in key))


def _text(v):
    return v.decode() if isinstance(v, (bytes, bytearray)) else v
