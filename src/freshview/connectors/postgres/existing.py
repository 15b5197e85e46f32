"""``create_view(..., use_existing_table => true)``: whether a table the user made can hold a view's result.

The service fills the user's table instead of creating one (its indexes,
partitioning, grants, comments and identity kept): the rows it holds are
replaced by the view's result in the transaction that makes the view active,
and every step writes it as it writes its own result tables
(``sink.ResultTable``: ``INSERT ... ON CONFLICT (key)``).  So the table must
have (``refusal``, pure, naming every difference):

* each of the view's columns, by name, of a type the view's type converts to
  without loss (the same type; a wider integer, numeric wide enough, double
  precision for real, text or unbounded varchar for text);
* no other column that the service's INSERT would leave NULL against a NOT
  NULL constraint without a default;
* the key freshview writes by (``plan.shape.result_key``): a unique index or
  primary key on exactly the view's key columns (all its columns for a view
  whose rows repeat, which also needs a ``_fv_count bigint`` column), NULLS NOT
  DISTINCT when a key column can be NULL; none for an aggregate without GROUP BY;
* the service's SELECT, INSERT, UPDATE and DELETE on it.

What is not PostgreSQL's (the columns' checks, the message) is shared with MySQL's
(``connectors/existing.py``).
"""

from __future__ import annotations

import re

import psycopg

from freshview.connectors import existing as shared
from freshview.connectors.existing import Column, Table, Unique
from freshview.connectors.postgres.sink import COUNT_COLUMN, ResultShape

__all__ = ["Column", "Table", "Unique", "describe", "lossless", "refusal", "spelled"]

_INTEGERS = {"smallint": (1, 5), "integer": (2, 10), "bigint": (3, 19)}  # rank, decimal digits
_SPELLING = {"timestamp": "timestamp without time zone", "timestamptz": "timestamp with time zone"}
_NUMERIC = re.compile(r"numeric\((\d+),(\d+)\)")
PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")


def spelled(pg_type: str) -> str:
    """An engine type (``SqlType.pg``) in ``format_type``'s spelling."""
    array = pg_type.endswith("[]")
    base = pg_type[:-2] if array else pg_type
    return _SPELLING.get(base, base).replace(", ", ",") + ("[]" if array else "")


def lossless(source: str, target: str) -> bool:
    """Whether a value of type ``source`` (``format_type`` spelling) converts to ``target`` without loss."""
    source, target = source.replace(", ", ","), target.replace(", ", ",")
    if source == target:
        return True
    if source.endswith("[]") or target.endswith("[]"):
        return source.endswith("[]") and target.endswith("[]") and lossless(source[:-2], target[:-2])
    wide = _NUMERIC.fullmatch(target)
    if source in _INTEGERS:
        if target in _INTEGERS:
            return _INTEGERS[target][0] >= _INTEGERS[source][0]
        return target == "numeric" or (wide is not None and int(wide[1]) - int(wide[2]) >= _INTEGERS[source][1])
    narrow = _NUMERIC.fullmatch(source)
    if narrow is not None:
        return target == "numeric" or (wide is not None and int(wide[2]) >= int(narrow[2])
                                       and int(wide[1]) - int(wide[2]) >= int(narrow[1]) - int(narrow[2]))
    if source == "real":
        return target == "double precision"
    if source == "text":
        return target == "character varying"
    return False


def refusal(name: str, shape: ResultShape, table: Table) -> str | None:
    """Why the table ``name`` cannot hold the view's result (every difference), or None."""
    wanted = {column: spelled(pg_type) for column, pg_type in shape.columns}
    if shape.counted:
        wanted[COUNT_COLUMN] = "bigint"
    problems = shared.column_problems(wanted, table, lossless)
    key = frozenset(shape.key if not shape.counted else (n for n, _ in shape.columns))
    if key and any(wanted[k] in ("json", "json[]") for k in key):
        problems.append("the view's key has a json column, which a unique index cannot hold: use jsonb in the view")
    elif key:
        matching = [u for u in table.uniques if u.columns == key]
        keys = ", ".join(sorted(key))
        if not matching:
            problems.append(f"it has no primary key or unique index on exactly ({keys}), the view's key")
        elif shape.nullable_key and not any(u.nulls_not_distinct for u in matching):
            problems.append(f"the view's key ({keys}) can be NULL: its unique index needs NULLS NOT DISTINCT")
    if table.missing_privileges:
        problems.append(f"the service may not {', '.join(table.missing_privileges)} it (GRANT "
                        f"{', '.join(PRIVILEGES)} ON {name} TO the service's role)")
    return shared.refusal(name, problems)


def describe(conn: psycopg.Connection, name: str) -> Table | None:
    """The table as ``refusal`` needs it; None when there is no such table."""
    oid = conn.execute("SELECT c.oid FROM pg_class c WHERE c.oid = to_regclass(%s) AND c.relkind IN ('r', 'p')",
                       (name,)).fetchone()
    if oid is None:
        return None
    columns = {n: Column(t, nn, d) for n, t, nn, d in conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod), attnotnull, atthasdef OR attidentity <> '' "
        "OR attgenerated <> '' FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped "
        "ORDER BY attnum",
        (oid[0],)).fetchall()}
    nulls = "i.indnullsnotdistinct" if conn.info.server_version >= 150000 else "false"
    uniques = [Unique(frozenset(cols), bool(nnd), bool(primary)) for cols, nnd, primary in conn.execute(
        f"SELECT array_agg(a.attname), {nulls}, i.indisprimary FROM pg_index i "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = %s AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL "
        f"GROUP BY i.indexrelid, {nulls}, i.indisprimary", (oid[0],)).fetchall()]
    missing = [p for p in PRIVILEGES
               if not conn.execute("SELECT has_table_privilege(%s, %s)", (oid[0], p)).fetchone()[0]]
    return Table(columns, uniques, missing)
