"""``verify_view`` in MySQL/MariaDB: a view's SQL against its result table, in the consistent snapshot.

As on PostgreSQL (``connectors/postgres/verify.py``), in the snapshot's own
REPEATABLE READ transaction (``START TRANSACTION WITH CONSISTENT SNAPSHOT``,
whose binlog position is the snapshot's): the stored position
(``freshview.progress``), the view's change since it (``service.verify``),
then one query.  MariaDB has no FULL JOIN, so the multisets are compared by
one grouping of signed counts:

    SELECT sum(n), <each column's text> FROM (
        the view's SQL, n = +1 per row            (sources at the snapshot)
        UNION ALL the result table, n = -_fv_count (or -1)
        UNION ALL the change, n = -weight
    ) GROUP BY <each column, matched> HAVING sum(n) <> 0

Columns are matched by value with their own collation (a view grouping a
case-insensitive column is compared as the view groups it), NULL with NULL;
float and decimal columns rounded to 12 significant digits (``verify.settle``
pairs what is left within a tolerance).
"""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa

from freshview.connectors.base import Comparison, ResultSpec
from freshview.connectors.mysql.sink import COUNT_COLUMN, _literal, quote_name, quote_table

SIGNIFICANT = 12


def _canonical(column: str, kind: str, is_float: bool) -> str:
    if kind == "numeric" or is_float:
        return (f"IF({column} IS NULL OR {column} = 0, {column}, "
                f"ROUND({column}, {SIGNIFICANT} - CEIL(LOG10(ABS({column})))))")
    return column


def compare_query(spec: ResultSpec, view_sql: str, change: pa.Table | None, escape: Callable[[Any], str],
                  limit: int) -> str:
    """The comparison (module docstring), values of the change inlined as literals (``sink``'s)."""
    n = len(spec.columns)
    cols = [f"c{i}" for i in range(n)]
    keys = [_canonical(f"x.{c}", t.kind, t.is_float) for c, (_, t) in zip(cols, spec.columns)]
    names = ", ".join(f"{quote_name(name)} AS {c}" for c, (name, _) in zip(cols, spec.columns))
    count = quote_name(COUNT_COLUMN) if spec.key.counted else "1"
    text = view_sql.strip().rstrip(";").strip()
    parts = [f"SELECT {', '.join(cols)}, 1 AS n FROM q",
             f"SELECT {names}, -{count} AS n FROM {quote_table(spec.name)}"]
    if change is not None and change.num_rows:
        fields = [(change.column(name).to_pylist(), change.schema.field(name).type) for name, _ in spec.columns]
        weights = change.column("_weight").to_pylist()
        for i, w in enumerate(weights):
            values = ", ".join(f"{_literal(v[i], t, escape)} AS {c}" for (v, t), c in zip(fields, cols))
            parts.append(f"SELECT {values}, {-int(w)} AS n")
    shown = ", ".join(f"MIN(CAST(x.{c} AS CHAR)) AS {c}" for c in cols)
    return (f"WITH q ({', '.join(cols)}) AS ({text}\n) "
            f"SELECT SUM(x.n) AS d, {shown} FROM ({' UNION ALL '.join(parts)}) AS x "
            f"GROUP BY {', '.join(keys)} HAVING SUM(x.n) <> 0 LIMIT {int(limit)}")


def compare(conn: Any, source: str, spec: ResultSpec, view_sql: str, change: Callable[[Any], pa.Table | None],
            position_from_text: Callable[[str], Any], limit: int) -> Comparison:
    """``base.Snapshot.compare`` on the snapshot's connection, inside its transaction (left open)."""
    with conn.cursor() as cur:
        cur.execute("SELECT position FROM freshview.progress WHERE source = %s", (source,))
        row = cur.fetchone()
        text = row[0].decode() if row and isinstance(row[0], bytes) else (row[0] if row else None)
        results_at = position_from_text(text) if text else None
        cur.execute(compare_query(spec, view_sql, change(results_at), conn.escape, limit))
        rows = cur.fetchall()
    return Comparison(results_at, tuple((int(r[0]), tuple(_text(v) for v in r[1:])) for r in rows))


def _text(value: Any) -> Any:
    return value.decode(errors="replace") if isinstance(value, (bytes, bytearray)) else value
