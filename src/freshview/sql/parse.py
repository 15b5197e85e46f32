"""Parsing view SQL (PostgreSQL or MySQL dialect, ``sql.dialect``) with sqlglot, keeping source positions.

Every error raised by the front end points into the user's text: ``locate``
turns a sqlglot node into a line/column, using the token offsets sqlglot
records, or the first descendant that has them.

Identifiers are compared as the database compares them.  PostgreSQL:
``parse_query`` folds unquoted ones to lower case (sqlglot's
``normalize_identifiers``) and keeps quoted ones as written, so
``"Sales"."Orders"`` and ``Region`` mean what they mean to PostgreSQL.
MySQL/MariaDB (``lower_case_table_names=0``, the Linux default): names of
tables, databases and table aliases keep their case, quoted or not
(``Orders`` and ``orders`` are two tables); every other identifier (columns,
column aliases) is case-insensitive and folded to lower case, quoted or not.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from freshview.errors import SqlError, SqlLocation

DIALECT = "postgres"


def parse_query(sql: str, dialect: str = DIALECT) -> exp.Expression:
    """Parse one query (``dialect``: sqlglot's name); anything but a single SELECT/UNION statement is refused."""
    try:
        statements = [s for s in sqlglot.parse(sql, dialect=dialect) if s is not None]
    except ParseError as err:
        info = err.errors[0] if err.errors else {}
        line, col = info.get("line"), info.get("col")
        desc = info.get("description") or str(err).splitlines()[0]
        loc = SqlLocation(line, col) if line and col else None
        raise SqlError(f"syntax error: {desc}", loc, sql) from None
    except TokenError as err:
        raise SqlError(f"syntax error: {err}", None, sql) from None
    if len(statements) != 1:
        raise SqlError(f"a view is one query; found {len(statements)} statements", None, sql)
    stmt = statements[0]
    if not isinstance(stmt, (exp.Select, exp.SetOperation, exp.Subquery, exp.Values)):
        raise SqlError(
            f"a view must be a SELECT query, not {stmt.key.upper()}", locate(stmt, sql), sql
        )
    for node in list(stmt.find_all(exp.In)):  # x IN (VALUES (1), (2)) is x IN (1, 2) (sql.constants)
        found = node.expressions
        if len(found) == 1 and isinstance(found[0], exp.Values) and all(
                not isinstance(t, exp.Tuple) or len(t.expressions) == 1 for t in found[0].expressions):
            node.set("expressions", [t.expressions[0] if isinstance(t, exp.Tuple) else t for t in found[0].expressions])
    if dialect == "mysql":
        return _fold_mysql(stmt)
    return normalize_identifiers(stmt, dialect=DIALECT)


#: Where an identifier names a table, database or table alias (MySQL keeps their case).
_TABLE_PARTS = {exp.Table: ("this", "db", "catalog"), exp.TableAlias: ("this",),
                exp.Column: ("table", "db", "catalog")}


def _fold_mysql(stmt: exp.Expression) -> exp.Expression:
    for ident in stmt.find_all(exp.Identifier):
        if ident.arg_key not in _TABLE_PARTS.get(type(ident.parent), ()):
            ident.set("this", ident.this.lower())
    return stmt


def _offset_to_location(sql: str, offset: int) -> SqlLocation:
    line = sql.count("\n", 0, offset) + 1
    line_start = sql.rfind("\n", 0, offset) + 1
    text = sql.splitlines()[line - 1] if sql.splitlines() else sql
    return SqlLocation(line, offset - line_start + 1, text)


def locate(node: exp.Expression | None, sql: str, keyword: str | None = None) -> SqlLocation | None:
    """Best position of ``node`` in ``sql``: its own token, a keyword search, or a descendant's."""
    if node is None:
        return None
    meta = getattr(node, "meta", None) or {}
    if "start" in meta:
        return _offset_to_location(sql, meta["start"])
    if keyword:
        before = _first_offset(node)
        search_to = before if before is not None else len(sql)
        idx = sql.upper().rfind(keyword.upper(), 0, search_to + len(keyword))
        if idx < 0:
            idx = sql.upper().find(keyword.upper())
        if idx >= 0:
            return _offset_to_location(sql, idx)
    offset = _first_offset(node)
    if offset is not None:
        return _offset_to_location(sql, offset)
    return None


def _first_offset(node: exp.Expression) -> int | None:
    best = None
    for child in node.walk():
        meta = getattr(child, "meta", None) or {}
        if "start" in meta and (best is None or meta["start"] < best):
            best = meta["start"]
    return best
