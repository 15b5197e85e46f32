"""``alter_view``'s swap on PostgreSQL: a view's new rows (and SQL) replace the old in one transaction.

Readers see the old rows, then the new ones (MVCC: the DELETE and the INSERTs are invisible until the
COMMIT; an ALTER TABLE's lock makes readers wait for it instead), never an empty or half-filled table.
What is kept (``how``):

- the same columns (names and types), key and multiplicity column: the table itself, emptied and
  filled (its identity, indexes, grants, comments, dependent views, triggers all stay);
- columns added, dropped or retyped, with the same key: the table altered in place (``ALTER TABLE ...
  ADD / DROP / ALTER COLUMN ... TYPE``, emptied first, so no cast runs), then filled; what the user
  made on the table stays unless it uses a dropped or retyped column (then PostgreSQL refuses, say a
  dependent view: the alter fails with its message and the old view goes on);
- another key: the table is dropped and created again (its grants as at create_view: the view's owner
  only); a dependent view makes PostgreSQL refuse that too.

A table the service does not know (the view stopped: ``failed``, ``sink error``; or a service started since)
is described from the catalog (``found``) and kept, altered or replaced alike; one that is gone is created.
"""

from __future__ import annotations

from enum import Enum

import psycopg
from psycopg import sql as psql

from freshview.connectors.postgres import existing
from freshview.connectors.postgres.sink import COUNT_COLUMN, ResultShape, ResultTable


class How(str, Enum):
    REFILL = "refill"  # the same table, emptied and filled
    ALTER = "alter"  # columns added, dropped, retyped in place, then filled
    REPLACE = "replace"  # dropped and created again


def how(old: ResultShape | None, new: ResultShape) -> How:
    """How a table of shape ``old`` (None: unknown) becomes one of shape ``new`` (module docstring)."""
    if old == new:
        return How.REFILL
    if old is None or old.key != new.key or old.counted != new.counted or old.nullable_key != new.nullable_key:
        return How.REPLACE
    textual = ("json", "json[]")  # (a json key is indexed by its text: ``sink.ResultTable.create_sql``)
    if any(t in textual for n, t in (*old.columns, *new.columns) if n in new.key):
        return How.REPLACE
    if dict(old.columns).keys() & set(new.key) != set(new.key):
        return How.REPLACE
    return How.ALTER


def found(conn: psycopg.Connection, name: str, new: ResultShape) -> ResultShape | None:
    """Result table ``name`` as the catalog describes it (its columns, ``_fv_count``, its primary key or else a
    unique index), each column's type in ``new``'s spelling where it is the type ``new`` has; None when there is
    no such table."""
    table = existing.describe(conn, name)
    if table is None:
        return None
    wanted = dict(new.columns)
    columns = tuple((n, wanted[n] if n in wanted and existing.spelled(wanted[n]) == c.type.replace(", ", ",")
                     else c.type) for n, c in table.columns.items() if n != COUNT_COLUMN)
    uniques = sorted(table.uniques, key=lambda u: (not u.primary, not u.nulls_not_distinct))
    unique = uniques[0] if uniques else None
    columns_of_key = unique.columns if unique is not None else frozenset()
    key = tuple(new.key) if columns_of_key == set(new.key) else tuple(sorted(columns_of_key))
    return ResultShape(columns, key, COUNT_COLUMN in table.columns, bool(unique and unique.nulls_not_distinct))


def alter_columns(old: ResultShape, new: ResultShape) -> list[tuple[str, str, str | None]]:
    """The column changes from ``old`` to ``new``: (``drop`` | ``add`` | ``type``, column, type)."""
    before, after = dict(old.columns), dict(new.columns)
    out: list[tuple[str, str, str | None]] = [("drop", n, None) for n in before if n not in after]
    out += [("add", n, t) for n, t in new.columns if n not in before]
    out += [("type", n, t) for n, t in new.columns if n in before and before[n] != t]
    return out


def reshape(conn: psycopg.Connection, old: ResultShape | None, table: ResultTable, keep_rows: bool = False) -> How:
    """In the caller's transaction: the result table emptied and made of ``table``'s shape (``how``);
    ``keep_rows``: a table kept as it is (``How.REFILL``) keeps its rows too (the caller writes the
    difference)."""
    chosen = how(old, table.shape)
    if chosen is How.REFILL and keep_rows:
        return chosen
    if chosen is How.REPLACE:
        conn.execute(psql.SQL("DROP TABLE IF EXISTS {}").format(table.name))  # (gone: created)
        for statement in table.create_sql():
            conn.execute(statement)
        return chosen
    conn.execute(psql.SQL("DELETE FROM {}").format(table.name))
    if chosen is How.ALTER:
        assert old is not None
        for change, column, pg_type in alter_columns(old, table.shape):
            name = psql.Identifier(column)
            if change == "drop":
                statement = psql.SQL("ALTER TABLE {} DROP COLUMN {}").format(table.name, name)
            elif change == "add":
                statement = psql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(table.name, name, psql.SQL(pg_type))
            else:  # (the table is empty: no value is cast)
                statement = psql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING NULL").format(
                    table.name, name, psql.SQL(pg_type))
            conn.execute(statement)
    return chosen
