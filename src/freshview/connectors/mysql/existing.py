"""``create_view_use_existing_table``: whether a table the user made in MySQL/MariaDB can hold a view's result.

The service fills the user's table instead of creating one (its indexes,
partitioning, triggers and grants kept): its rows are replaced by the view's
result in the transaction that makes the view active, and every step writes it
as it writes its own result tables (``sink.ResultTable``: ``INSERT ... ON
DUPLICATE KEY UPDATE`` by ``_fv_key``).  So the table must have (``refusal``,
pure, naming every difference; the columns' checks and the message are shared
with PostgreSQL's, ``connectors/existing.py``):

* each of the view's columns, by name, of a type the view's converts to
  without loss (``lossless``: the same type; a wider integer, a decimal wide
  enough, ``double`` for ``float``, a long enough ``varchar``/``char`` or a
  text type for a short text; text columns in ``utf8mb4``);
* no other column that the service's INSERT would leave NULL against a NOT
  NULL constraint without a default;
* the key freshview writes by: a ``_fv_key binary(16)`` column (the digest of
  the view's key columns, ``sink.key_digest``), under a primary key or unique
  index of ``_fv_key`` alone or with columns of the view's key (a partitioned
  table's unique keys must hold its partitioning columns), and no unique index
  without ``_fv_key`` (``ON DUPLICATE KEY UPDATE`` would write over another row
  by it); a ``_fv_count bigint`` column for a view whose rows repeat; none of
  this for an aggregate without GROUP BY (one row);
* the service's SELECT, INSERT, UPDATE and DELETE on it (``describe`` tries
  each in a transaction it rolls back: roles and every grant level count).
"""

from __future__ import annotations

import re
from typing import Any

import pymysql

from freshview.connectors import existing as shared
from freshview.connectors.existing import Column, Table, Unique
from freshview.connectors.mysql import faults
from freshview.connectors.mysql.catalog import quote, split_table_name
from freshview.connectors.mysql.sink import COUNT_COLUMN, KEY_BYTES, KEY_COLUMN, ResultShape

__all__ = ["Column", "Table", "Unique", "describe", "lossless", "normalized", "refusal", "wanted"]

PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")
_INTEGERS = {"tinyint": (1, 3), "smallint": (2, 5), "mediumint": (3, 7), "int": (4, 10), "bigint": (5, 19)}
_WIDTH = re.compile(r"^(tinyint|smallint|mediumint|int|bigint)\(\d+\)")
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
_SIZED = re.compile(r"(char|varchar)\((\d+)\)")
_TEXTS = ("tinytext", "text", "mediumtext", "longtext")
_BYTES = {"tinytext": 255, "text": 65_535, "mediumtext": 16_777_215}  # (longtext: 4 GiB)
_DENIED = (1142, 1143, 1044)  # command denied for table / column, access denied to database


def normalized(column_type: str, charset: str | None = None) -> str:
    """A column type as ``information_schema.COLUMNS.COLUMN_TYPE`` spells it, in ``sink.mysql_type``'s spelling:
    integer display widths dropped (``bigint(20)`` is ``bigint``; ``tinyint(1)``, a boolean, stays), MariaDB's
    ``json`` (a ``longtext``) as ``longtext``; a text column in another character set than utf8mb4 says so."""
    t = " ".join(column_type.strip().lower().split()).replace(", ", ",")
    if not t.startswith("tinyint(1)") or "unsigned" in t:
        t = _WIDTH.sub(r"\1", t)
    if t in ("json", "integer") or t.startswith("bool"):
        t = {"json": "longtext", "integer": "int"}.get(t, "tinyint(1)")
    if charset and charset != "utf8mb4" and (t in _TEXTS or _SIZED.fullmatch(t)):
        t += f" character set {charset}"
    return t


def lossless(source: str, target: str) -> bool:
    """Whether a value of the view's type ``source`` converts to the table's ``target`` without loss (both as
    ``normalized`` spells them)."""
    source, target = normalized(source), normalized(target)
    if source == target:
        return True
    if target.endswith(("unsigned", "zerofill")) or " character set " in target:
        return False
    wide = _DECIMAL.fullmatch(target)
    if source == "tinyint(1)" or source in _INTEGERS:
        digits = 1 if source == "tinyint(1)" else _INTEGERS[source][1]
        if target in _INTEGERS:
            return source == "tinyint(1)" or _INTEGERS[target][0] >= _INTEGERS[source][0]
        return wide is not None and int(wide[1]) - int(wide[2]) >= digits
    narrow = _DECIMAL.fullmatch(source)
    if narrow is not None:
        return wide is not None and int(wide[2]) >= int(narrow[2]) and \
            int(wide[1]) - int(wide[2]) >= int(narrow[1]) - int(narrow[2])
    if source == "float":
        return target == "double"
    short = _SIZED.fullmatch(source)
    if short is not None:  # (uuid: char(36), inet: varchar(43))
        sized = _SIZED.fullmatch(target)
        return target in _TEXTS or sized is not None and int(sized[2]) >= int(short[2])
    return False


def wanted(shape: ResultShape) -> dict[str, str]:
    """The columns the service writes into a table of ``shape`` and their types."""
    out = {KEY_COLUMN: f"binary({KEY_BYTES})"} if shape.hashed else {}
    out.update((name, normalized(t)) for name, t in shape.columns)
    if shape.counted:
        out[COUNT_COLUMN] = "bigint"
    return out


def refusal(name: str, shape: ResultShape, table: Table) -> str | None:
    """Why the table ``name`` cannot hold the view's result (every difference), or None."""
    problems = shared.column_problems(wanted(shape), table, lossless)
    if shape.hashed:
        allowed = {KEY_COLUMN, *shape.key}
        if not any(KEY_COLUMN in u.columns and u.columns <= allowed for u in table.uniques):
            problems.append(f"it has no primary key or unique index on {KEY_COLUMN} (alone, or with columns of the "
                            f"view's key: {', '.join(shape.key)}), the key freshview writes by")
        for unique in table.uniques:
            if KEY_COLUMN not in unique.columns:
                what = "primary key" if unique.primary else f"unique index {unique.name}"
                problems.append(f"its {what} on ({', '.join(sorted(unique.columns))}) lacks {KEY_COLUMN}: freshview "
                                f"writes rows by {KEY_COLUMN}, and a row equal on it would be written over")
    if table.missing_privileges:
        problems.append(f"the service may not {', '.join(table.missing_privileges)} it (GRANT "
                        f"{', '.join(PRIVILEGES)} ON {name} TO the service's account)")
    return shared.refusal(name, problems)


def describe(conn: Any, name: str, privileges: bool = True) -> Table | None:
    """The table ``name`` (``db.table``) as ``refusal`` needs it; None when there is no such base table.  The
    service's ``privileges`` are tried, each by a statement that touches no row, in a transaction rolled back."""
    database, table = split_table_name(name)
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
                    "AND TABLE_TYPE = 'BASE TABLE'", (database, table))
        if cur.fetchone() is None:
            return None
        cur.execute("SELECT COLUMN_NAME, COLUMN_TYPE, CHARACTER_SET_NAME, IS_NULLABLE = 'NO', "
                    "COLUMN_DEFAULT IS NOT NULL OR EXTRA LIKE '%%auto_increment%%' OR GENERATION_EXPRESSION "
                    "IS NOT NULL AND GENERATION_EXPRESSION <> '' FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (database, table))
        columns = {str(n).lower(): Column(normalized(t, c), bool(nn), bool(d)) for n, t, c, nn, d in cur.fetchall()}
        cur.execute("SELECT INDEX_NAME, GROUP_CONCAT(COLUMN_NAME SEPARATOR '\\n') FROM information_schema.STATISTICS "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 GROUP BY INDEX_NAME",
                    (database, table))
        uniques = [Unique(frozenset(c.lower() for c in str(cols).split("\n")), primary=index == "PRIMARY",
                          name=str(index)) for index, cols in cur.fetchall()]
    target = f"{quote(database or '')}.{quote(table)}"
    return Table(columns, uniques, _missing_privileges(conn, target, next(iter(columns), None)) if privileges else ())


def _missing_privileges(conn: Any, target: str, column: str | None) -> list[str]:
    """Of ``PRIVILEGES``, those the service lacks on ``target`` (each tried, no row touched, rolled back)."""
    col = quote(column or "")
    tries = {"SELECT": f"SELECT 1 FROM {target} LIMIT 0",
             "INSERT": f"INSERT INTO {target} ({col}) SELECT {col} FROM {target} WHERE FALSE",
             "UPDATE": f"UPDATE {target} SET {col} = {col} WHERE FALSE",
             "DELETE": f"DELETE FROM {target} WHERE FALSE"}
    missing = []
    conn.begin()
    try:
        with conn.cursor() as cur:
            for privilege, statement in tries.items():
                try:
                    cur.execute(statement)
                except pymysql.err.MySQLError as exc:
                    if exc.args and exc.args[0] in _DENIED:
                        missing.append(privilege)
                    elif faults.classify(exc) is not None:
                        raise  # (another error says nothing of the privilege: the fill will say what it is)
    finally:
        faults.rollback_quietly(conn)
    return missing
