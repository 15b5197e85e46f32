"""Result tables in PostgreSQL: their shape, and writing a step's view changes into them.

A view's result is an ordinary table with the view's columns and PostgreSQL
types, plus a key so that each step is a set of keyed upserts and deletes:

* an aggregate view is keyed by its GROUP BY columns (one row per group);
* a DISTINCT view by all its columns;
* any other view can hold equal rows more than once, so it is keyed by all
  its columns and gets a ``_fv_count`` column (how many times the row occurs).

Key columns that can be NULL (a NULL group is a group) cannot form a
PRIMARY KEY, so they get a ``UNIQUE NULLS NOT DISTINCT`` constraint
(PostgreSQL ≥ 15) instead.  ``ResultTable.apply`` writes a consolidated view
delta with COPY into a temporary staging table, then one upsert and one
delete, inside the caller's transaction (the one that also records the source
LSN reached), so a view is never left half-updated.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from freshview.plan import nodes as pn
from freshview.plan.expr import AggCall, Call, ColumnRef, Expr, Literal
from freshview.schema import WEIGHT

COUNT_COLUMN = "_fv_count"


@dataclass(frozen=True)
class ResultShape:
    columns: tuple[tuple[str, str], ...]  # (name, PostgreSQL type)
    key: tuple[str, ...]  # empty: the single row of an aggregate without GROUP BY
    counted: bool  # rows may repeat: a _fv_count column holds the multiplicity
    nullable_key: bool


def result_shape(plan: pn.Node) -> ResultShape:
    """The result table's columns and key, derived from the view's plan."""
    columns = tuple((name, t.pg) for name, t in plan.columns)
    names = [n for n, _ in columns]
    group = _group_columns(plan)
    if group is not None:
        key, counted = tuple(names[i] for i in group), False
    elif isinstance(plan, pn.Distinct):
        key, counted = tuple(names), False
    else:
        key, counted = tuple(names), True
    nullable = any(nullable_columns(plan)[names.index(k)] for k in key)
    return ResultShape(columns, key, counted, nullable)


def _group_columns(plan: pn.Node) -> tuple[int, ...] | None:
    """Output positions of the GROUP BY columns, if every one of them is an output column."""
    node, mapping = plan, None  # mapping: aggregate output index -> view output index
    while True:
        if isinstance(node, pn.Filter):
            node = node.input
        elif isinstance(node, pn.Project):
            inner = {e.index: i for i, e in enumerate(node.exprs) if isinstance(e, ColumnRef)}
            mapping = inner if mapping is None else {k: mapping[v] for k, v in inner.items() if v in mapping}
            node = node.input
        else:
            break
    if not isinstance(node, pn.Aggregate):
        return None
    positions = []
    for g in range(len(node.group)):
        pos = g if mapping is None else mapping.get(g)
        if pos is None:
            return None
        positions.append(pos)
    return tuple(positions)


def nullable_columns(node: pn.Node) -> list[bool]:
    """Which output columns can hold NULL (conservative: True when unsure)."""
    if isinstance(node, pn.Scan):
        return [True] * len(node.columns)  # sources declare nullability loosely; be safe
    if isinstance(node, (pn.Filter, pn.Distinct)):
        return nullable_columns(node.input)
    if isinstance(node, pn.Project):
        inner = nullable_columns(node.input)
        return [_nullable(e, inner) for e in node.exprs]
    if isinstance(node, pn.Join):
        return nullable_columns(node.left) + nullable_columns(node.right)
    if isinstance(node, pn.Aggregate):
        inner = nullable_columns(node.input)
        return [_nullable(g, inner) for g in node.group] + [_agg_nullable(a) for a in node.aggs]
    if isinstance(node, pn.UnionAll):
        parts = [nullable_columns(p) for p in node.parts]
        return [any(col) for col in zip(*parts)]
    return [True] * len(node.columns)


def _nullable(e: Expr, inputs: list[bool]) -> bool:
    if isinstance(e, ColumnRef):
        return inputs[e.index]
    if isinstance(e, Literal):
        return e.value is None
    if isinstance(e, Call) and e.op == "coalesce":
        return all(_nullable(a, inputs) for a in e.args)
    if isinstance(e, Call) and e.op in ("is_null", "concat"):
        return False
    return True


def _agg_nullable(a: AggCall) -> bool:
    return a.func not in ("count", "count_star")


class ResultTable:
    """One view's result table: DDL, and applying a step's consolidated changes."""

    def __init__(self, qualified_name: str, shape: ResultShape) -> None:
        schema, _, table = qualified_name.rpartition(".")
        self.name = sql.Identifier(schema or "public", table)
        self.stage = sql.Identifier(f"_fv_stage_{abs(hash(qualified_name)) % 10**10}")
        self.shape = shape

    def create_sql(self) -> list[sql.Composed]:
        """DDL of the result table (and, for counted views, the index that finds emptied rows)."""
        cols = [sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in self.shape.columns]
        if self.shape.counted:
            cols.append(sql.SQL("{} bigint NOT NULL").format(sql.Identifier(COUNT_COLUMN)))
        if self.shape.key:
            keys = sql.SQL(", ").join(sql.Identifier(k) for k in self.shape.key)
            kind = "UNIQUE NULLS NOT DISTINCT" if self.shape.nullable_key else "PRIMARY KEY"
            cols.append(sql.SQL(kind + " ({})").format(keys))
        out = [sql.SQL("CREATE TABLE {} ({})").format(self.name, sql.SQL(", ").join(cols))]
        if self.shape.counted:
            out.append(sql.SQL("CREATE INDEX ON {} ((1)) WHERE {} <= 0").format(
                self.name, sql.Identifier(COUNT_COLUMN)))
        return out

    def apply(self, conn: psycopg.Connection, delta: pa.Table) -> int:
        """Write a consolidated view delta (columns + ``_weight``); returns rows written."""
        if delta.num_rows == 0:
            return 0
        names = [n for n, _ in self.shape.columns]
        if self.shape.counted:
            ops = [(r, r[WEIGHT]) for r in delta.to_pylist()]
        else:
            ops = self._keyed_ops(delta, names)
        col_defs = [sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in self.shape.columns]
        conn.execute(sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} (_op bigint, {}) ON COMMIT DELETE ROWS").format(
            self.stage, sql.SQL(", ").join(col_defs)))
        targets = sql.SQL(", ").join(sql.Identifier(n) for n in names)
        with conn.cursor() as cur:
            with cur.copy(sql.SQL("COPY {} (_op, {}) FROM STDIN").format(self.stage, targets)) as copy:
                for row, op in ops:
                    copy.write_row([op] + [row[n] for n in names])
            self._merge(cur, names)
        conn.execute(sql.SQL("TRUNCATE {}").format(self.stage))
        return len(ops)

    def _keyed_ops(self, delta: pa.Table, names: list[str]) -> list[tuple[dict, int]]:
        """Per key: the new row (+1) if there is one, else a delete (0)."""
        by_key: dict[tuple, tuple[dict, int]] = {}
        positive = delta.filter(pc.greater(delta.column(WEIGHT), 0)).to_pylist()
        negative = delta.filter(pc.less(delta.column(WEIGHT), 0)).to_pylist()
        for row in negative:
            by_key.setdefault(tuple(row[k] for k in self.shape.key), (row, 0))
        for row in positive:
            by_key[tuple(row[k] for k in self.shape.key)] = (row, 1)
        return list(by_key.values())

    def _merge(self, cur: psycopg.Cursor, names: list[str]) -> None:
        cols = sql.SQL(", ").join(sql.Identifier(n) for n in names)
        keys = self.shape.key
        conflict = sql.SQL(", ").join(sql.Identifier(k) for k in keys)
        if self.shape.counted:
            # One upsert per distinct row: an existing row's count changes in place.
            cur.execute(sql.SQL(
                "INSERT INTO {t} AS t ({cols}, {c}) SELECT {cols}, _op FROM {s} "
                "ON CONFLICT ({k}) DO UPDATE SET {c} = t.{c} + EXCLUDED.{c}").format(
                t=self.name, cols=cols, c=sql.Identifier(COUNT_COLUMN), s=self.stage, k=conflict))
            cur.execute(sql.SQL("DELETE FROM {t} WHERE {c} <= 0").format(  # partial index: no scan
                t=self.name, c=sql.Identifier(COUNT_COLUMN)))
            return
        if not keys:  # the single row of an aggregate without GROUP BY
            cur.execute(sql.SQL("DELETE FROM {t}").format(t=self.name))
            cur.execute(sql.SQL("INSERT INTO {t} ({cols}) SELECT {cols} FROM {s} WHERE _op = 1").format(
                t=self.name, cols=cols, s=self.stage))
            return
        nullable = self.shape.nullable_key
        match = sql.SQL(" AND ").join(
            (sql.SQL("(t.{0} = s.{0} OR (t.{0} IS NULL AND s.{0} IS NULL))") if nullable
             else sql.SQL("t.{0} = s.{0}")).format(sql.Identifier(k)) for k in keys)
        cur.execute(sql.SQL("DELETE FROM {t} t USING {s} s WHERE s._op = 0 AND {m}").format(
            t=self.name, s=self.stage, m=match))
        others = [n for n in names if n not in keys]
        action = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
            sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n)) for n in others)) if others \
            else sql.SQL("DO NOTHING")
        cur.execute(sql.SQL(
            "INSERT INTO {t} AS t ({cols}) SELECT {cols} FROM {s} WHERE _op = 1 ON CONFLICT ({k}) {a}").format(
            t=self.name, cols=cols, s=self.stage, k=conflict, a=action))
