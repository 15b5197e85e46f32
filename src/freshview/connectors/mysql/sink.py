"""Result tables in MySQL/MariaDB: their shape, and writing a step's view changes into them.

A view's result is an InnoDB table with the view's columns and MySQL types
(``mysql_type``) and the same keys as on PostgreSQL (``plan.shape``): an
aggregate view is keyed by its GROUP BY columns, a DISTINCT view by all its
columns, any other view by all its columns plus a ``_fv_count`` column (how
many times the row occurs).

**The key is a hash column.**  MySQL cannot put the view's key columns into
a PRIMARY KEY in general: a NULL group is a group, but PRIMARY KEY columns
are NOT NULL (and a UNIQUE index holds NULLs distinct, so it would let two
NULL groups in); a TEXT column needs a prefix length, which would make
distinct long strings collide; and InnoDB keys are limited to 3072 bytes.
So every keyed result table has a ``_fv_key BINARY(16) NOT NULL PRIMARY
KEY``: a BLAKE2b digest (128 bits) of the key columns' values as freshview
computed them (NULL-aware, typed, so ``NULL`` and ``'None'`` differ),
computed by the sink from the same values it writes.  Upserts are
``INSERT … ON DUPLICATE KEY UPDATE`` on it, deletes ``DELETE … WHERE _fv_key
IN (…)``: both primary-key lookups.  The digest compares bytes, as
freshview's engine compares keys (so ``'a'`` and ``'A'`` are two groups
whatever the column's collation).

**Types.**  ``numeric(p,s)`` is ``decimal(p,s)``; PostgreSQL's unbounded
``numeric`` (SUM and AVG of decimals) is ``decimal(65,s)`` with the scale
freshview computes it at (6 by default, at least 16 for AVG): freshview
holds such values as 38-digit decimals, which ``decimal(65,s)`` — MySQL's
widest — stores exactly, with room to spare.  ``text`` is ``longtext``
(utf8mb4), ``bool`` is ``tinyint(1)``, ``timestamp`` and ``timestamptz``
are ``datetime(6)`` (timestamptz in UTC: MySQL's ``timestamp`` ends in 2038
and converts with the session time zone), ``interval`` is ``time(6)``
(MySQL's range is ±838:59:59; a longer interval is an error, not a
truncation: the sink's session is strict).  Infinite and NaN floats, which
MySQL cannot store, are refused with the column's name.

``ResultTable.apply`` writes a step's changes inside the caller's
transaction; ``commit_step`` applies every view's changes and records the
source position in ``freshview.progress`` in one transaction, sent as few
multi-statement packets (one for a step's few rows) when the connection
allows multiple statements (``MULTI_STATEMENTS``, as ``connect`` opens it):
a step's eight round trips (BEGIN, the views' writes, the position, COMMIT,
the server's clock) cost more than writing its rows.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pymysql
import pyarrow.compute as pc

from freshview.connectors.base import sink_refused
from freshview.connectors.mysql import control, faults
from freshview.connectors.mysql.catalog import quote, split_table_name
from freshview.connectors.result_changes import net_changes
from freshview.errors import SchemaError, SinkError
from freshview.plan import nodes as pn
from freshview.plan.shape import ResultKey, result_key
from freshview.schema import WEIGHT, SqlType

COUNT_COLUMN = "_fv_count"
KEY_COLUMN = "_fv_key"
KEY_BYTES = 16
MAX_DECIMAL_PRECISION = 65  # MySQL's widest decimal
MAX_DECIMAL_SCALE = 30  # and its largest scale

DELETE_CHUNK = 5_000  # keys per DELETE … IN (…)

_TYPES = {
    "int2": "smallint", "int4": "int", "int8": "bigint", "float4": "float", "float8": "double",
    "text": "longtext", "bool": "tinyint(1)", "date": "date", "timestamp": "datetime(6)",
    "timestamptz": "datetime(6)", "interval": "time(6)", "null": "longtext",
    "json": "json", "jsonb": "json", "uuid": "char(36)", "inet": "varchar(43)", "enum": "longtext",
}


class UnsupportedValueError(SchemaError):
    """A value MySQL cannot store (an infinite or NaN float)."""


def mysql_type(t: SqlType) -> str:
    """The MySQL column type of a freshview column type (see the module docstring)."""
    if t.kind != "numeric":
        return _TYPES[t.kind]
    precision, scale = t.decimal_precision_scale
    if scale > MAX_DECIMAL_SCALE:
        raise SchemaError(f"a {t.pg} column has scale {scale}; MySQL's decimal holds at most {MAX_DECIMAL_SCALE}")
    return f"decimal({MAX_DECIMAL_PRECISION if t.precision is None else precision},{scale})"


@dataclass(frozen=True)
class ResultShape:
    columns: tuple[tuple[str, str], ...]  # (name, MySQL type)
    key: tuple[str, ...]  # empty: the single row of an aggregate without GROUP BY
    counted: bool  # rows may repeat: a _fv_count column holds the multiplicity
    floats: tuple[str, ...] = ()  # float columns (their values are checked: MySQL stores no inf/NaN)

    @property
    def hashed(self) -> bool:
        """Whether the table has the ``_fv_key`` primary key (every keyed view)."""
        return bool(self.key)


def result_shape(columns: Sequence[tuple[str, SqlType]], key: ResultKey) -> ResultShape:
    """The result table of a view with these columns and this key (``plan.shape.result_key``)."""
    names = [n for n, _ in columns]
    for reserved in (COUNT_COLUMN, KEY_COLUMN):
        if reserved in names:
            raise SchemaError(f"a view column cannot be named {reserved}: freshview's result table uses it")
    return ResultShape(tuple((n, mysql_type(t)) for n, t in columns), tuple(names[i] for i in key.key),
                       key.counted, tuple(n for n, t in columns if t.is_float))


def plan_result_shape(plan: pn.Node) -> ResultShape:
    """``result_shape`` of a view's plan."""
    return result_shape(plan.columns, result_key(plan))


quote_name = quote  # a MySQL identifier in backquotes (a backquote inside doubled)


def quote_table(qualified_name: str) -> str:
    """```db`.`table``` (or ```table``` in the connection's database when unqualified)."""
    database, table = split_table_name(qualified_name)
    return (quote_name(database) + "." if database else "") + quote_name(table)


def key_digest(values: Iterable[Any]) -> bytes:
    """The ``_fv_key`` of a row's key values: a typed, NULL-aware encoding, hashed.

    ``repr`` of the tuple tells ``None`` from ``'None'`` and ``1`` from
    ``'1'``; decimals keep their (fixed) scale.  ``-0.0`` is ``0.0``, as
    grouping holds it.
    """
    canonical = tuple(v + 0.0 if isinstance(v, float) else v for v in values)
    return hashlib.blake2b(repr(canonical).encode(), digest_size=KEY_BYTES).digest()


@dataclass(frozen=True)
class Statement:
    """One statement.  ``rows`` (an Arrow table, columns in the statement's order): a multi-row
    ``INSERT`` — ``sql`` + the rows' literals + ``suffix``, in as many statements as their size needs;
    else ``execute(sql, params)``."""

    sql: str
    params: Sequence[Any] = ()
    rows: pa.Table | None = None
    suffix: str = ""


class ResultTable:
    """One view's result table: DDL, and the statements that apply a step's consolidated changes."""

    def __init__(self, qualified_name: str, shape: ResultShape) -> None:
        self.qualified_name = qualified_name
        self.table = quote_table(qualified_name)
        self.shape = shape
        names = [n for n, _ in shape.columns]
        k, c = quote_name(KEY_COLUMN), quote_name(COUNT_COLUMN)
        written = ([KEY_COLUMN] if shape.key else []) + names + ([COUNT_COLUMN] if shape.counted else [])
        self._insert = f"INSERT INTO {self.table} ({', '.join(quote_name(n) for n in written)}) VALUES "
        if shape.counted:
            self._on_duplicate = f" ON DUPLICATE KEY UPDATE {c} = {c} + VALUES({c})"
        elif shape.key:
            others = [n for n in names if n not in shape.key]
            self._on_duplicate = " ON DUPLICATE KEY UPDATE " + (
                ", ".join(f"{quote_name(n)} = VALUES({quote_name(n)})" for n in others) or f"{k} = VALUES({k})")
        else:
            self._on_duplicate = ""

    def create_sql(self) -> list[str]:
        """DDL of the result table."""
        cols = [f"{quote_name(n)} {t}" for n, t in self.shape.columns]
        if self.shape.counted:
            cols.append(f"{quote_name(COUNT_COLUMN)} bigint NOT NULL")
        if self.shape.hashed:
            cols.insert(0, f"{quote_name(KEY_COLUMN)} binary({KEY_BYTES}) NOT NULL PRIMARY KEY")
        return [f"CREATE TABLE {self.table} ({', '.join(cols)}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"]

    def drop_sql(self) -> list[str]:
        return [f"DROP TABLE IF EXISTS {self.table}"]

    def statements(self, delta: pa.Table) -> list[Statement]:
        """The statements that write a consolidated view delta (view columns + ``_weight``).

        The delta is netted per key (``connectors.result_changes``): a keyed
        view deletes the keys without a new row and upserts the others; a
        counted view adds each row's weight to its ``_fv_count`` and then
        deletes, among the rows whose count went down, those at zero; the
        single row of a global aggregate is replaced.
        """
        if delta.num_rows == 0:
            return []
        names = [n for n, _ in self.shape.columns]
        chosen, ops = net_changes(delta, names, self.shape.key, self.shape.counted)
        for name in self.shape.floats:
            _check_finite(name, chosen.column(name))
        if not self.shape.key:
            new = chosen.filter(pc.equal(ops, 1))
            return [Statement(f"DELETE FROM {self.table}")] + (
                [Statement(self._insert, rows=new)] if new.num_rows else [])
        keys = pa.array([key_digest(v) for v in zip(*(chosen.column(k).to_pylist() for k in self.shape.key))],
                        pa.binary(KEY_BYTES))
        rows = chosen.add_column(0, KEY_COLUMN, keys)
        k, c = quote_name(KEY_COLUMN), quote_name(COUNT_COLUMN)
        if self.shape.counted:
            rows = rows.append_column(COUNT_COLUMN, ops)
            shrunk = keys.filter(pc.less(ops, 0)).to_pylist()
            return [Statement(self._insert, rows=rows, suffix=self._on_duplicate)] + self._by_keys(
                f"DELETE FROM {self.table} WHERE {c} <= 0 AND {k} IN", shrunk)
        gone = keys.filter(pc.equal(ops, 0)).to_pylist()
        upserts = rows.filter(pc.equal(ops, 1))
        out = self._by_keys(f"DELETE FROM {self.table} WHERE {k} IN", gone)
        return out + ([Statement(self._insert, rows=upserts, suffix=self._on_duplicate)] if upserts.num_rows else [])

    def _by_keys(self, prefix: str, keys: list[bytes]) -> list[Statement]:
        out = []
        for start in range(0, len(keys), DELETE_CHUNK):
            part = keys[start:start + DELETE_CHUNK]
            out.append(Statement(f"{prefix} ({', '.join(['%s'] * len(part))})", part))
        return out

    def apply(self, conn: Any, delta: pa.Table) -> int:
        """Write a consolidated view delta in the caller's transaction; returns the rows sent."""
        with conn.cursor() as cur:
            texts, sent = self.texts(delta, conn.escape, cur.mogrify)
            for text in texts:
                cur.execute(text)
        return sent

    def texts(self, delta: pa.Table, literal: Callable[[Any], str],
              mogrify: Callable[[str, Any], str]) -> tuple[list[str], int]:
        """The SQL texts of ``statements(delta)`` (values inlined) and the rows they send."""
        texts, sent = [], 0
        for statement in self.statements(delta):
            if statement.rows is None:
                texts.append(mogrify(statement.sql, statement.params))
                continue
            texts += insert_texts(statement, literal)
            sent += statement.rows.num_rows
        return texts, sent


STATEMENT_BYTES = 4 << 20  # an INSERT's VALUES list stays under this (the server's max_allowed_packet: 16 MiB)


SMALL_ROWS = 64  # up to this many rows, literals are written value by value: Arrow's per-call cost is higher


def insert_texts(statement: Statement, literal: Callable[[Any], str], small_rows: int = SMALL_ROWS) -> list[str]:
    """The multi-row INSERTs of ``statement.rows``: its rows' literals, about ``STATEMENT_BYTES`` per statement.

    A step's few rows (at most ``small_rows``) are written value by value (``_literal``), more a column
    at a time with Arrow (``_literals``): the same text either way."""
    rows = statement.rows
    assert rows is not None
    if rows.num_rows <= small_rows:
        columns = [[_literal(v, c.type, literal) for v in c.to_pylist()] for c in rows.columns]
        tuples = ["(" + ",".join(values) + ")" for values in zip(*columns)]
        lengths = np.array([len(t.encode()) for t in tuples], dtype=np.int64)
        return [statement.sql + ",".join(tuples[start:end]) + statement.suffix
                for start, end in _statement_cuts(lengths)]
    columns = [_literals(rows.column(i).combine_chunks(), literal) for i in range(rows.num_columns)]
    tuples = pc.binary_join_element_wise(_large("("), *_interleave(columns, _large(",")), _large(")"), _large(""))
    out = []
    for start, end in _statement_cuts(pc.binary_length(tuples).to_numpy(zero_copy_only=False)):
        part = tuples.slice(start, end - start)
        joined = pc.binary_join(pa.LargeListArray.from_arrays(pa.array([0, len(part)], pa.int64()), part), _large(","))
        out.append(statement.sql + joined[0].as_py() + statement.suffix)
    return out


def _statement_cuts(lengths: np.ndarray, limit: int | None = None) -> list[tuple[int, int]]:
    """Rows ``[start, end)`` of each INSERT, given each row's literal length in bytes: as many rows as fit
    in ``limit`` (``STATEMENT_BYTES``) with a one-byte separator each, at least one."""
    sizes = np.cumsum(np.asarray(lengths, dtype=np.int64) + 1)
    limit = STATEMENT_BYTES if limit is None else limit
    cuts, start = [], 0
    while start < len(sizes):
        budget = (sizes[start - 1] if start else 0) + limit
        end = max(start + 1, int(np.searchsorted(sizes, budget, side="right")))
        cuts.append((start, end))
        start = end
    return cuts


def _interleave(columns: list[pa.Array], separator: pa.Scalar) -> list[Any]:
    out: list[Any] = []
    for i, col in enumerate(columns):
        out += [separator, col] if i else [col]
    return out


def _literals(values: pa.Array, literal: Callable[[Any], str]) -> pa.Array:
    """SQL literals of a column, a column at a time where Arrow can (integers, decimals, text, binary);
    other types through the driver's escaping (``literal``: ``pymysql.Connection.escape``)."""
    t = values.type
    if pa.types.is_integer(t):
        text = pc.cast(values, pa.string())
    elif pa.types.is_decimal(t):
        text = pc.cast(values, pa.string())
        scientific = pc.fill_null(pc.match_substring(text, "E"), False)
        if pc.any(scientific).as_py():  # Arrow writes tiny values as 1E-16, which MySQL reads as a float
            plain = [None if v is None else format(v, "f") for v in values.filter(scientific).to_pylist()]
            text = pc.replace_with_mask(text, scientific, pa.array(plain, pa.string()))
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or \
            pa.types.is_fixed_size_binary(t):
        # Hex literals: no escaping, whatever the server's sql_mode (NO_BACKSLASH_ESCAPES) says.
        prefix = "X'" if pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t) else "_utf8mb4 X'"
        text = pc.binary_join_element_wise(_large(prefix), _hex(values), _large("'"), _large(""))
    else:
        return pa.array([literal(v) for v in values.to_pylist()], pa.large_string())
    return pc.fill_null(text.cast(pa.large_string()), _large("NULL"))


def _literal(value: Any, t: pa.DataType, literal: Callable[[Any], str]) -> str:
    """One value's SQL literal, as ``_literals`` writes it in its column."""
    if value is None:
        return "NULL"
    if pa.types.is_integer(t):
        return str(value)
    if pa.types.is_decimal(t):
        return format(value, "f")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "_utf8mb4 X'" + value.encode().hex() + "'"
    if pa.types.is_binary(t) or pa.types.is_fixed_size_binary(t):
        return "X'" + value.hex() + "'"
    return literal(value)


def _large(text: str) -> pa.Scalar:
    return pa.scalar(text, pa.large_string())


def _hex(values: pa.Array) -> pa.Array:
    """Each value's bytes in hexadecimal (a NULL stays NULL), built from Arrow's buffers in one pass."""
    if pa.types.is_fixed_size_binary(values.type):
        width = values.type.byte_width
        offsets = np.arange(len(values) + 1, dtype=np.int64) * width
        data = values.buffers()[1].to_pybytes()[values.offset * width:(values.offset + len(values)) * width]
    else:
        values = values.cast(pa.large_binary())
        offsets = np.frombuffer(values.buffers()[1], np.int64)[values.offset:values.offset + len(values) + 1]
        data = values.buffers()[2].to_pybytes()[offsets[0]:offsets[-1]] if values.buffers()[2] else b""
        offsets = offsets - offsets[0]
    hexed = pa.Array.from_buffers(pa.large_string(), len(values), [None, pa.py_buffer((offsets * 2).tobytes()),
                                                                    pa.py_buffer(data.hex().encode())])
    return pc.if_else(pc.is_null(values), pa.scalar(None, pa.large_string()), hexed)


def _check_finite(name: str, values: pa.ChunkedArray) -> None:
    bad = pc.and_(pc.is_valid(values), pc.invert(pc.is_finite(values)))
    if pc.any(bad).as_py():
        v = values.filter(bad)[0].as_py()
        raise UnsupportedValueError(f"view column {name} holds {v!r}, which MySQL cannot store in a float column")


#: The sink's session: strict (an out-of-range value is an error, never a silent truncation or
#: clipping), UTC (datetime(6) columns hold timestamptz values in UTC), utf8mb4.
SESSION_SQL = (
    "SET SESSION sql_mode = CONCAT_WS(',', NULLIF(@@sql_mode, ''), 'STRICT_ALL_TABLES')",
    "SET SESSION time_zone = '+00:00'",
    "SET NAMES utf8mb4",
)


def prepare_session(conn: Any) -> None:
    """Put a connection into the sink's session settings (``SESSION_SQL``); idempotent."""
    if getattr(conn, "_freshview_sink_session", False):
        return
    with conn.cursor() as cur:
        for statement in SESSION_SQL:
            cur.execute(statement)
    conn._freshview_sink_session = True


def commit_step(conn: Any, writes: Iterable[tuple[ResultTable, pa.Table]], source: str, position: str, *,
                changes: int = 0, lag_ms: float | None = None,
                ran: Mapping[str, tuple[int, float, str | None]] | None = None) -> tuple[int, float]:
    """Apply a step's view changes and record ``position`` for ``source`` in ONE transaction: the rows
    sent, and the server's clock (Unix seconds) after the commit.

    ``freshview.progress`` and the changed views' rows in ``freshview.views``
    (row counts, lag, position) move in the same transaction.  On any error
    it is rolled back: neither the results nor the position move, so the step
    can be redone from the stored position.
    """
    prepare_session(conn)
    with conn.cursor() as cur:
        texts, sent, added, written = ["START TRANSACTION"], 0, {}, {}
        tables: list[tuple[str, list[str]]] = []
        for table, delta in writes:
            more, rows = table.texts(delta, conn.escape, cur.mogrify)
            texts += more
            tables.append((table.qualified_name, more))
            sent += rows
            grown = pc.sum(delta.column(WEIGHT)).as_py() or 0
            added[table.qualified_name] = added.get(table.qualified_name, 0) + grown
            written[table.qualified_name] = written.get(table.qualified_name, 0) + delta.num_rows
        steps = control.step_statements(source, position, added=added, changes=changes, lag_ms=lag_ms,
                                        written=written, ran=ran)
        texts += [cur.mogrify(sql, params) for sql, params in steps] + ["COMMIT", SERVER_CLOCK]
        try:
            for packet in statement_packets(texts, multi=multi_statements(conn)):
                cur.execute(packet)
                while cur.nextset():  # a multi-statement packet: each statement's result in turn
                    pass
        except BaseException as exc:
            faults.rollback_quietly(conn)  # never over the error that got us here
            if isinstance(exc, pymysql.Error) and faults.classify(exc) is None:
                refused = _refusing(conn, cur, tables)
                if refused is not None:
                    raise SinkError(sink_refused(*refused), refused[0]) from exc
            raise
        return sent, float(cur.fetchone()[0])


def _refusing(conn: Any, cur: Any, tables: Sequence[tuple[str, list[str]]]) -> tuple[str, BaseException] | None:
    """After a step's transaction failed on a statement (one packet: which one is not told): the first result
    table whose statements the database refuses alone (each tried in a transaction rolled back), with its error;
    None if none does (the step's own statements failed)."""
    for name, texts in tables:
        try:
            cur.execute("START TRANSACTION")
            for text in texts:
                cur.execute(text)
        except pymysql.Error as exc:
            if faults.classify(exc) is not None:
                raise
            return name, exc
        finally:
            faults.rollback_quietly(conn)
    return None


SERVER_CLOCK = "SELECT UNIX_TIMESTAMP(SYSDATE(6))"  # the clock binlog commit times are on


def multi_statements(conn: Any) -> bool:
    """Whether ``conn`` was opened with CLIENT.MULTI_STATEMENTS (``connect`` does)."""
    from pymysql.constants import CLIENT

    return bool(getattr(conn, "client_flag", 0) & CLIENT.MULTI_STATEMENTS)


def statement_packets(texts: Sequence[str], multi: bool, limit: int | None = None) -> list[str]:
    """``texts`` as the packets to send: one statement each, or (``multi``) as many as fit together in
    about ``limit`` bytes (``STATEMENT_BYTES``; a longer statement goes alone), joined by ``;``."""
    if not multi:
        return list(texts)
    lengths = np.array([len(text.encode()) + 1 for text in texts], dtype=np.int64)  # + 1: ";\n" is 2 bytes
    return [";\n".join(texts[start:end]) for start, end in _statement_cuts(lengths, limit)]


def read_position(conn: Any, source: str) -> str | None:
    """The position whose effects the result tables hold (``None``: no step committed yet)."""
    return control.read_position(conn, source)


__all__ = ["ResultShape", "ResultTable", "Statement", "result_shape", "plan_result_shape", "mysql_type",
           "key_digest", "commit_step", "read_position", "prepare_session", "COUNT_COLUMN", "KEY_COLUMN",
           "UnsupportedValueError"]
