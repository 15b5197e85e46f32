"""``verify_view`` in PostgreSQL: a view's SQL against its result table, under a slot's exported snapshot.

``compare`` opens a REPEATABLE READ READ ONLY transaction importing the
snapshot, reads the stored position (``freshview.progress``), asks for the
view's change since it (``service.verify``: the changes the service
stepped between that position and the snapshot's), and runs one query:

    expected = the view's SQL, rows counted                (sources at the snapshot)
    actual   = the result table (counted by _fv_count) + the change, weights summed
    rows whose counts differ, expected FULL JOIN actual on every column

Columns are matched by their value, NULL matching NULL (IS NOT DISTINCT FROM);
floating point and numeric columns rounded to 12 significant digits (the
engine may sum or divide in another order; ``verify.settle`` pairs what is
left within a tolerance), json as its text (json has no equality).  Each
differing row comes back as text, with how many more times the SQL gives it.
"""

from __future__ import annotations

from typing import Any, Callable

import psycopg
import pyarrow as pa
from psycopg import sql

from freshview.connectors.base import Comparison, ResultSpec
from freshview.connectors.postgres.identifiers import identifier
from freshview.connectors.postgres.sink import COUNT_COLUMN, _array_literal

SIGNIFICANT = 12
_APPROXIMATE = ("real", "double precision", "numeric")


def _canonical(column: sql.Composable, pg_type: str) -> sql.Composable:
    """What a column is matched by (see the module docstring)."""
    base = pg_type.split("(")[0].strip()
    if base in _APPROXIMATE:
        value = sql.SQL("({})::numeric").format(column)
        return sql.SQL("CASE WHEN {v} IN (0, 'NaN', 'Infinity', '-Infinity') THEN {v} "
                       "ELSE round({v}, {s} - ceil(log(abs({v})))::int) END").format(
            v=value, s=sql.Literal(SIGNIFICANT))
    if base in ("json", "json[]"):
        return sql.SQL("({})::text").format(column)
    return column


def compare_query(spec: ResultSpec, view_sql: str, change: pa.Table | None, limit: int
                  ) -> tuple[sql.Composed, tuple[Any, ...]]:
    """The comparison (module docstring) and its parameters (the change's columns as array literals)."""
    n = len(spec.columns)
    cols = [sql.Identifier(f"c{i}") for i in range(n)]
    keys = [sql.Identifier(f"k{i}") for i in range(n)]
    types = [t.pg for _, t in spec.columns]
    select_keyed = sql.SQL(", ").join(
        [sql.SQL("{} AS {}").format(_canonical(c, t), k) for c, t, k in zip(cols, types, keys)]
        + [sql.SQL("({})::text AS {}").format(c, c) for c in cols])
    keyed = sql.SQL(", ").join(keys)
    shown = sql.SQL(", ").join(sql.SQL("(array_agg({0}))[1] AS {0}").format(c) for c in cols)
    names = sql.SQL(", ").join(sql.Identifier(name) for name, _ in spec.columns)
    text = view_sql.strip().rstrip(";").strip()
    expected = sql.SQL("SELECT {keyed}, {shown}, count(*) AS n FROM (SELECT {sk} FROM ({q}\n) AS q({cols})) e "
                       "GROUP BY {keyed}").format(keyed=keyed, shown=shown, sk=select_keyed, q=sql.SQL(text),
                                                  cols=sql.SQL(", ").join(cols))
    count = sql.Identifier(COUNT_COLUMN) if spec.key.counted else sql.SQL("1")
    parts = [sql.SQL("SELECT {names}, ({count})::bigint FROM {table}").format(
        names=names, count=count, table=identifier(spec.name))]
    params: list[Any] = []
    if change is not None and change.num_rows:
        arrays = sql.SQL(", ").join([sql.SQL("%s::bigint[]")] + [
            sql.SQL("%s::{}[]").format(sql.SQL("text" if t.endswith("[]") else t)) for t in types])
        typed = sql.SQL(", ").join(sql.SQL("{0}::{1}").format(c, sql.SQL(t)) if t.endswith("[]") else c
                                   for c, t in zip(cols, types))
        parts.append(sql.SQL("SELECT {typed}, w FROM unnest({arrays}) AS d(w, {cols})").format(
            typed=typed, arrays=arrays, cols=sql.SQL(", ").join(cols)))
        params.append(_array_literal(change.column("_weight")))
        params.extend(_array_literal(change.column(name)) for name, _ in spec.columns)
    actual = sql.SQL("SELECT {keyed}, {shown}, sum(n) AS n FROM (SELECT {sk}, n FROM ({union}) AS a({cols}, n)) a "
                     "GROUP BY {keyed}").format(keyed=keyed, shown=shown, sk=select_keyed,
                                                union=sql.SQL(" UNION ALL ").join(parts),
                                                cols=sql.SQL(", ").join(cols))
    on = sql.SQL(" AND ").join(sql.SQL("e.{0} IS NOT DISTINCT FROM a.{0}").format(k) for k in keys) if n \
        else sql.SQL("true")
    row = sql.SQL(", ").join(sql.SQL("CASE WHEN e.n IS NOT NULL THEN e.{0} ELSE a.{0} END").format(c) for c in cols)
    query = sql.SQL("WITH e AS ({e}), a AS ({a}) SELECT coalesce(e.n, 0) - coalesce(a.n, 0) AS d, {row} "
                    "FROM e FULL JOIN a ON {on} WHERE coalesce(e.n, 0) <> coalesce(a.n, 0) LIMIT {limit}").format(
        e=expected, a=actual, row=row, on=on, limit=sql.Literal(limit))
    return query, tuple(params)


def compare(dsn: str, snapshot_name: str, slot: str, spec: ResultSpec, view_sql: str,
            change: Callable[[Any], pa.Table | None], position_from_text: Callable[[str], Any],
            limit: int) -> Comparison:
    """``base.Snapshot.compare`` under the exported snapshot ``snapshot_name`` (module docstring)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_name)))
        conn.execute("SET LOCAL DateStyle = 'ISO'; SET LOCAL TimeZone = 'UTC'; SET LOCAL row_security = off")
        row = conn.execute("SELECT lsn::text FROM freshview.progress WHERE slot = %s", (slot,)).fetchone()
        results_at = position_from_text(row[0]) if row and row[0] not in (None, "0/0") else None
        query, params = compare_query(spec, view_sql, change(results_at), limit)
        rows = conn.execute(query, params).fetchall()
        conn.rollback()
    return Comparison(results_at, tuple((int(r[0]), tuple(r[1:])) for r in rows))
