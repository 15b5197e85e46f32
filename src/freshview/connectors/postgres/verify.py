"""``verify_view`` in PostgreSQL: a view's SQL against its result table, under a slot's exported snapshot.

``compare`` opens a REPEATABLE READ READ ONLY transaction importing the
snapshot, reads the stored position (``freshview.progress``), asks for the
view's change since it (``service.verify``: the changes the service
stepped between that position and the snapshot's), and runs one query:

    SELECT sum(n), <each column's text> FROM (
        the view's SQL, n = +1 per row            (sources at the snapshot)
        UNION ALL the result table, n = -_fv_count (or -1)
        UNION ALL the change, n = -weight
    ) GROUP BY <each column, matched> HAVING sum(n) <> 0

(one grouping of signed counts: a FULL JOIN on IS NOT DISTINCT FROM, NULL
matching NULL, is neither hash- nor merge-joinable, which PostgreSQL refuses)

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
from freshview.schema import WEIGHT

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
    types = [t.pg for _, t in spec.columns]
    keyed = sql.SQL(", ").join(
        [sql.SQL("{} AS {}").format(_canonical(c, t), sql.Identifier(f"k{i}")) for i, (c, t) in
         enumerate(zip(cols, types))] + [sql.SQL("({})::text AS {}").format(c, c) for c in cols])
    listed = sql.SQL(", ").join(cols)
    text = view_sql.strip().rstrip(";").strip()
    names = sql.SQL(", ").join(sql.Identifier(name) for name, _ in spec.columns)
    count = sql.Identifier(COUNT_COLUMN) if spec.key.counted else sql.SQL("1")
    parts = [
        sql.SQL("SELECT {keyed}, 1::bigint AS n FROM ({q}\n) AS q({cols})").format(keyed=keyed, q=sql.SQL(text),
                                                                                 cols=listed),
        sql.SQL("SELECT {keyed}, -n FROM (SELECT {names}, ({count})::bigint FROM {table}) AS t({cols}, n)").format(
            keyed=keyed, names=names, count=count, table=identifier(spec.name), cols=listed)]
    params: list[Any] = []
    if change is not None and change.num_rows:
        arrays = sql.SQL(", ").join([sql.SQL("%s::bigint[]")] + [
            sql.SQL("%s::{}[]").format(sql.SQL("text" if t.endswith("[]") else t)) for t in types])
        typed = sql.SQL(", ").join(sql.SQL("{0}::{1}").format(c, sql.SQL(t)) if t.endswith("[]") else c
                                   for c, t in zip(cols, types))
        parts.append(sql.SQL("SELECT {keyed}, -w FROM (SELECT {typed}, w FROM unnest({arrays}) AS d(w, {cols})) "
                             "AS d({cols}, w)").format(keyed=keyed, typed=typed, arrays=arrays, cols=listed))
        params.append(_array_literal(change.column(WEIGHT)))
        params.extend(_array_literal(change.column(name)) for name, _ in spec.columns)
    keys = sql.SQL(", ").join(sql.Identifier(f"k{i}") for i in range(n))
    shown = sql.SQL(", ").join(sql.SQL("min({})").format(c) for c in cols)
    query = sql.SQL("SELECT sum(n) AS d, {shown} FROM ({union}) AS x GROUP BY {keys} HAVING sum(n) <> 0 "
                    "LIMIT {limit}").format(shown=shown, union=sql.SQL(" UNION ALL ").join(parts), keys=keys,
                                            limit=sql.Literal(limit))
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
