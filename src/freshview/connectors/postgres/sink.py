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
delta with one statement (a counted view: two) inside the caller's
transaction (the one that also records the source LSN reached), so a view is
never left half-updated: the delta is netted per key, each column travels as
one text array parameter rendered a column at a time by Arrow (by Python for a
few rows, where Arrow's cost per call dominates), and ``unnest`` feeds a
delete-and-upsert.  No staging table, no COPY, and the statement text is the
same every step, so psycopg prepares it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Callable

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from freshview.connectors.postgres.identifiers import identifier
from freshview.connectors.postgres.types import UnsupportedTypeError, to_pg_text
from freshview.connectors.result_changes import net_changes, net_changes_small
from freshview.plan import nodes as pn
from freshview.plan.shape import result_key

COUNT_COLUMN = "_fv_count"


@dataclass(frozen=True)
class ResultShape:
    columns: tuple[tuple[str, str], ...]  # (name, PostgreSQL type)
    key: tuple[str, ...]  # empty: the single row of an aggregate without GROUP BY
    counted: bool  # rows may repeat: a _fv_count column holds the multiplicity
    nullable_key: bool


def result_shape(plan: pn.Node) -> ResultShape:
    """The result table's columns (PostgreSQL types) and key (``plan.shape``'s analysis of the view)."""
    columns = tuple((name, t.pg) for name, t in plan.columns)
    rk = result_key(plan)
    return ResultShape(columns, tuple(columns[i][0] for i in rk.key), rk.counted, rk.nullable)


class ResultTable:
    """One view's result table: DDL, and the statements that apply a step's consolidated changes."""

    def __init__(self, qualified_name: str, shape: ResultShape) -> None:
        self.name = identifier(qualified_name)
        self.shape = shape
        self._queries = _Queries(self.name, shape)

    def create_sql(self) -> list[sql.Composed]:
        """DDL of the result table (and, for counted views, the index that finds emptied rows)."""
        cols = [sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in self.shape.columns]
        if self.shape.counted:
            cols.append(sql.SQL("{} bigint NOT NULL").format(sql.Identifier(COUNT_COLUMN)))
        by_text = self.shape.key and any(_textual_key(t) for n, t in self.shape.columns if n in self.shape.key)
        if self.shape.key and not by_text:
            keys = sql.SQL(", ").join(sql.Identifier(k) for k in self.shape.key)
            kind = "UNIQUE NULLS NOT DISTINCT" if self.shape.nullable_key else "PRIMARY KEY"
            cols.append(sql.SQL(kind + " ({})").format(keys))
        out = [sql.SQL("CREATE TABLE {} ({})").format(self.name, sql.SQL(", ").join(cols))]
        if by_text:  # a json key column has no equality: the key is its text (a unique index on expressions)
            out.append(sql.SQL("CREATE UNIQUE INDEX ON {} ({}){}").format(
                self.name, _key_list(self.shape), sql.SQL(" NULLS NOT DISTINCT" if self.shape.nullable_key else "")))
        if self.shape.counted:
            out.append(sql.SQL("CREATE INDEX ON {} ((1)) WHERE {} <= 0").format(
                self.name, sql.Identifier(COUNT_COLUMN)))
        return out

    def statements(self, delta: pa.Table) -> list[tuple[sql.Composed, tuple[str, ...]]]:
        """The statements (with their parameters) that write a consolidated view delta.

        The delta (view columns + ``_weight``) is netted first
        (``connectors.result_changes``): a keyed view gets per key its new row
        (op 1) if it has one, else a delete (op 0); a counted view gets each
        distinct row with its weight as op.  The rows
        then travel as one text array parameter per column (rendered by Arrow,
        a column at a time) and are unpacked by ``unnest`` in the statement: no
        staging table, no COPY, the same statement text every step (so psycopg
        prepares it), at most ``CHUNK_ROWS`` rows per statement.
        """
        return self._plan(delta)[0]

    def apply(self, conn: psycopg.Connection, delta: pa.Table) -> int:
        """Write a consolidated view delta (columns + ``_weight``) in the caller's transaction; returns rows sent.

        One statement (a counted view: two), so one round trip, whatever the delta's size.
        """
        statements, rows = self._plan(delta)
        for query, params in statements:
            conn.execute(query, params)
        return rows

    def _plan(self, delta: pa.Table) -> tuple[list[tuple[sql.Composed, tuple[str, ...]]], int]:
        if delta.num_rows == 0:
            return [], 0
        names = [n for n, _ in self.shape.columns]
        out = []
        if delta.num_rows <= SMALL_ROWS:
            columns, ops = net_changes_small(delta, names, self.shape.key, self.shape.counted)
            out.append((self._queries.write, (_small_literal(ops, str),) + tuple(
                _small_literal(c, _text_of(delta.schema.field(n).type)) for c, n in zip(columns, names))))
            sent = len(ops)
        else:
            rows, ops = net_changes(delta, names, self.shape.key, self.shape.counted)
            for start in range(0, rows.num_rows, CHUNK_ROWS):
                part = rows.slice(start, CHUNK_ROWS)
                out.append((self._queries.write, (_array_literal(ops.slice(start, CHUNK_ROWS)),) + tuple(
                    _array_literal(part.column(n)) for n in names)))
            sent = rows.num_rows
        if self._queries.purge is not None:
            out.append((self._queries.purge, ()))
        return out, sent


SMALL_ROWS = 256  # deltas up to this size are netted and rendered in Python; larger ones by Arrow
CHUNK_ROWS = 50_000  # rows per statement: bounds the size of one parameter (and of the server's arrays)
_OP = "_fv_op"


class _Queries:
    """The statement texts of one result table (built once)."""

    def __init__(self, table: sql.Identifier, shape: ResultShape) -> None:
        names = [n for n, _ in shape.columns]
        cols = sql.SQL(", ").join(sql.Identifier(n) for n in names)
        # An array column travels as a text[] of array literals (PostgreSQL has no arrays of arrays:
        # integer[][] would be one two-dimensional array) and is cast back after unnest.
        arrays = sql.SQL(", ").join([sql.SQL("%t::bigint[]")] + [
            sql.SQL("%t::{}[]").format(sql.SQL("text" if t.endswith("[]") else t)) for _, t in shape.columns])
        typed = sql.SQL(", ").join(
            sql.SQL("{0}::{1} AS {0}").format(sql.Identifier(n), sql.SQL(t)) if t.endswith("[]") else sql.Identifier(n)
            for n, t in shape.columns)
        source = sql.SQL("(SELECT {op}, {typed} FROM unnest({a}) AS u({op}, {cols})) AS s").format(
            a=arrays, op=sql.Identifier(_OP), cols=cols, typed=typed)
        op = sql.Identifier(_OP)
        count = sql.Identifier(COUNT_COLUMN)
        keys = shape.key
        conflict = _key_list(shape)
        self.purge: sql.Composed | None = None
        if shape.counted:
            # One upsert per distinct row: an existing row's count changes in place; rows whose
            # count reached zero go next (the partial index finds them without a scan).
            self.write = sql.SQL(
                "INSERT INTO {t} AS t ({cols}, {c}) SELECT {cols}, {op} FROM {src} "
                "ON CONFLICT ({k}) DO UPDATE SET {c} = t.{c} + EXCLUDED.{c}").format(
                t=table, cols=cols, c=count, op=op, src=source, k=conflict)
            self.purge = sql.SQL("DELETE FROM {t} WHERE {c} <= 0").format(t=table, c=count)
        elif not keys:  # the single row of an aggregate without GROUP BY: replaced
            self.write = sql.SQL(
                "WITH s AS (SELECT * FROM {src}), d AS (DELETE FROM {t}) "
                "INSERT INTO {t} ({cols}) SELECT {cols} FROM s WHERE {op} = 1").format(
                src=source, t=table, cols=cols, op=op)
        else:
            # Deletes (op 0) and upserts (op 1) touch different keys (netted per key), so one
            # statement does both.  A NULL key matches a NULL key (UNIQUE NULLS NOT DISTINCT).
            types = dict(shape.columns)
            match = sql.SQL(" AND ").join(
                (sql.SQL("(t.{0}{1} = s.{0}{1} OR (t.{0} IS NULL AND s.{0} IS NULL))") if shape.nullable_key
                 else sql.SQL("t.{0}{1} = s.{0}{1}")).format(
                    sql.Identifier(k), sql.SQL("::text" if _textual_key(types[k]) else "")) for k in keys)
            others = [n for n in names if n not in keys]
            action = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n)) for n in others)) if others \
                else sql.SQL("DO NOTHING")
            self.write = sql.SQL(
                "WITH s AS (SELECT * FROM {src}), d AS (DELETE FROM {t} AS t USING s WHERE s.{op} = 0 AND {m}) "
                "INSERT INTO {t} AS t ({cols}) SELECT {cols} FROM s WHERE s.{op} = 1 ON CONFLICT ({k}) {a}").format(
                src=source, t=table, op=op, m=match, cols=cols, k=conflict, a=action)


def _textual_key(pg_type: str) -> bool:
    """Whether a key column of this type is compared (and indexed) as its text: json has no equality."""
    return pg_type in ("json", "json[]")


def _key_list(shape: ResultShape) -> sql.Composable:
    """The key columns as an index (and ON CONFLICT) names them: a json column as ``(c::text)``."""
    types = dict(shape.columns)
    return sql.SQL(", ").join(sql.SQL("({}::text)").format(sql.Identifier(k)) if _textual_key(types[k])
                              else sql.Identifier(k) for k in shape.key)


def _array_literal(values: pa.Array | pa.ChunkedArray) -> str:
    """A PostgreSQL array literal (``{"a",NULL,"b"}``) of a column, built by Arrow.

    Elements are quoted (backslash and double quote escaped) unless they are
    numbers or booleans, whose text needs no quotes; NULL is the bare word.
    """
    text = to_pg_text(values)
    t = values.type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) or pa.types.is_boolean(t)):
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_list(t):
            text = pc.replace_substring(pc.replace_substring(text, "\\", "\\\\"), '"', '\\"')
        text = pc.binary_join_element_wise('"', text, '"', "")
    text = pc.fill_null(text, "NULL")
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(text)], pa.int32()), text), ",")
    return "{" + joined[0].as_py() + "}"


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _interval_text(v: dt.timedelta) -> str:
    return f"{v.days:+d} day {v.seconds * 1_000_000 + v.microseconds:+d} microsecond"


def _month_day_nano_text(v: Any) -> str:
    return f"{v.months} mon {v.days} day {v.nanoseconds // 1000} microsecond"


_TEXT_OF: dict[pa.DataType, Callable[[Any], str]] = {
    pa.bool_(): lambda v: "true" if v else "false",
    pa.float32(): repr, pa.float64(): repr,
    pa.date32(): dt.date.isoformat, pa.date64(): dt.date.isoformat,
}


def _text_of(t: pa.DataType) -> Callable[[Any], str]:
    """How ``_small_literal`` renders a Python value of Arrow type ``t`` (the text ``to_pg_text`` means)."""
    if t in _TEXT_OF:
        return _TEXT_OF[t]
    if pa.types.is_timestamp(t):
        return lambda v: v.isoformat(" ")
    if pa.types.is_duration(t):
        return _interval_text
    if t == pa.month_day_nano_interval():
        return _month_day_nano_text
    if pa.types.is_list(t):
        element = _text_of(t.value_type)
        return lambda v: _small_literal(v, element)
    if (pa.types.is_integer(t) or pa.types.is_decimal(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_null(t)):
        return str
    raise UnsupportedTypeError(f"no PostgreSQL text form for Arrow type {t}")


def _small_literal(values: list, text: Callable[[Any], str]) -> str:
    """``_array_literal`` of a Python list (every element quoted)."""
    return "{" + ",".join("NULL" if v is None else _quoted(text(v)) for v in values) + "}"

