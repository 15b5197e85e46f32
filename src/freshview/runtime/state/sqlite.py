"""Operator state in one SQLite database (WAL), one table per arrangement.

This module owns the on-disk layout of operator state.  An arrangement is a
table ``(c0 .. cn, w)`` of stored values (see ``codec``) with a UNIQUE index
on (key columns, other columns): the index is both the row identity used to
add weights and the B-tree that answers key lookups, so a step touches
O(|change| log N) pages, never the whole state.  ``extreme`` adds, on first
use, a partial index (key columns, value column) WHERE w > 0, so a group's
min/max is one index seek however large the group.

Data moves in and out as Arrow through ADBC: a change is bulk-ingested into
a temporary staging table and merged with set-based SQL; results come back
with ``fetch_arrow_table`` and are decoded by vectorised kernels.  All of it
runs on one connection, so one SQLite transaction per engine step makes the
step's catalog, state and metadata durable together (WAL, synchronous=NORMAL:
a SIGKILL at any moment leaves exactly the last committed step).  Memory is
bounded by the page cache (``cache_mb``).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import adbc_driver_sqlite.dbapi as adbc
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.errors import StateError
from freshview.runtime.state.codec import Codec, codec_for, normalize_float
from freshview.schema import WEIGHT

OLD_WEIGHT = "_old_weight"
_STAGE = "_fv_stage"  # temporary staging table (connection-local, never persisted)
_CHECKPOINT_PAGES = 16384  # WAL auto-checkpoint every ~64 MB: amortises the checkpoint fsync over many steps


@dataclass(frozen=True)
class _Arrangement:
    """Catalog entry: where an arrangement lives and how its columns are stored."""

    name: str
    table: str
    schema: pa.Schema
    key: tuple[str, ...]

    @property
    def codecs(self) -> list[Codec]:
        return [codec_for(f.type) for f in self.schema]

    def col(self, column: str) -> str:
        return f"c{self.schema.get_field_index(column)}"

    @property
    def identity(self) -> list[str]:
        """Stored columns of the UNIQUE index: key columns first, so it also serves lookups."""
        cols = [self.col(k) for k in self.key]
        cols += [f"c{i}" for i, n in enumerate(self.schema.names) if n not in self.key]
        return cols or ["u"]  # a zero-column arrangement holds one row, keyed by a constant

    @property
    def quoted(self) -> str:
        return f'"{self.table}"'


class SqliteStateStore:
    """The ``StateStore`` protocol on SQLite: arrangements, metadata, one transaction per step."""

    def __init__(self, directory: str | os.PathLike, cache_mb: int = 256) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._in_tx = False
        self._extreme_indexes: set[str] = set()
        try:
            self._conn = adbc.connect(str(self.directory / "state.sqlite"), autocommit=True)
            self._cur = self._conn.cursor()
            for pragma in ("journal_mode=WAL", "synchronous=NORMAL", f"cache_size=-{int(cache_mb) * 1024}",
                           "temp_store=MEMORY", f"wal_autocheckpoint={_CHECKPOINT_PAGES}"):
                self._exec(f"PRAGMA {pragma}")
            self._check_format()
            self._exec("CREATE TABLE IF NOT EXISTS fv_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._exec("CREATE TABLE IF NOT EXISTS fv_arrangements (name TEXT PRIMARY KEY, tbl TEXT NOT NULL, "
                       "schema TEXT NOT NULL, key TEXT NOT NULL)")
        except adbc.Error as exc:
            raise StateError(f"cannot open state in {self.directory}: {exc}") from None
        _OPEN_STORES.add(self)
        self._arr: dict[str, _Arrangement] = {}
        self._load_catalog()

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if getattr(self, "_conn", None) is None:
            return
        if self._in_tx:
            self.rollback()
        self._cur.close()
        self._conn.close()
        self._conn = None  # type: ignore[assignment]

    def __del__(self) -> None:
        # An unclosed store must not leave ADBC handles to a finaliser that complains.
        # No module globals here: during interpreter teardown they may already be None.
        try:
            self.close()
        except Exception:
            pass


    def begin(self) -> None:
        if self._in_tx:
            raise StateError("a state transaction is already open")
        self._exec("BEGIN IMMEDIATE")  # take the write lock now: a second writer fails at begin, not mid-step
        self._in_tx = True

    def commit(self) -> None:
        if not self._in_tx:
            raise StateError("no state transaction to commit")
        self._exec("COMMIT")
        self._in_tx = False

    def rollback(self) -> None:
        if self._in_tx:
            self._exec("ROLLBACK")
            self._in_tx = False
        # Arrangements and indexes created in the discarded step are gone.
        self._extreme_indexes.clear()
        self._load_catalog()

    @property
    def in_transaction(self) -> bool:
        return self._in_tx

    @contextlib.contextmanager
    def _atomic(self) -> Iterator[None]:
        """Run a multi-statement operation atomically, inside the caller's transaction or its own."""
        if self._in_tx:
            yield
            return
        self.begin()
        try:
            yield
        except BaseException:
            self.rollback()
            raise
        self.commit()

    # ------------------------------------------------------------------ SQL helpers
    def _exec(self, sql: str, params: tuple | None = None) -> None:
        if self._conn is None:
            raise StateError("the state store is closed")
        self._cur.execute(sql, params)

    def _rows(self, sql: str, params: tuple | None = None) -> list[tuple]:
        self._exec(sql, params)
        return self._cur.fetchall()

    def _arrow(self, sql: str) -> pa.Table:
        self._exec(sql)
        return self._cur.fetch_arrow_table()

    def _stage(self, table: pa.Table) -> None:
        """Bulk-load ``table`` into the temporary staging table (replacing its previous content)."""
        self._cur.adbc_ingest(_STAGE, table, mode="replace", temporary=True)

    def _unstage(self) -> None:
        self._exec(f"DROP TABLE IF EXISTS temp.{_STAGE}")

    def _check_format(self) -> None:
        old = self._rows("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'arrangements'")
        if old:
            raise StateError(f"{self.directory} holds state of an older storage format; delete it to start afresh")

    # ------------------------------------------------------------------ metadata
    def get_meta(self, key: str, default: Any = None) -> Any:
        rows = self._rows("SELECT value FROM fv_meta WHERE key = ?", (key,))
        return json.loads(rows[0][0]) if rows else default

    def set_meta(self, key: str, value: Any) -> None:
        self._exec("INSERT INTO fv_meta (key, value) VALUES (?, ?) "
                   "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, json.dumps(value)))

    def delete_meta(self, key: str) -> None:
        self._exec("DELETE FROM fv_meta WHERE key = ?", (key,))

    # ------------------------------------------------------------------ catalog
    def _load_catalog(self) -> None:
        self._arr = {}
        for name, tbl, schema_hex, key in self._rows("SELECT name, tbl, schema, key FROM fv_arrangements"):
            schema = pa.ipc.read_schema(pa.py_buffer(bytes.fromhex(schema_hex)))
            self._arr[name] = _Arrangement(name, tbl, schema, tuple(json.loads(key)))

    def _get(self, name: str) -> _Arrangement:
        try:
            return self._arr[name]
        except KeyError:
            raise StateError(f"no state named {name!r}") from None

    def ensure_arrangement(self, name: str, schema: pa.Schema, key: list[str]) -> None:
        existing = self._arr.get(name)
        if existing is not None:
            if not _same_layout(existing.schema, schema) or existing.key != tuple(key):
                raise StateError(f"state {name!r} exists with another layout "
                                 f"({existing.schema}, key {list(existing.key)}); drop it first")
            return
        _validate_layout(name, schema, key)
        # Field metadata is not part of the layout; dropping it keeps comparisons simple.
        schema = pa.schema([pa.field(f.name, f.type) for f in schema])
        arr = _Arrangement(name, _table_name(name), schema, tuple(key))
        cols = [f"c{i}" for i in range(len(schema))] or ["u INTEGER NOT NULL DEFAULT 0"]
        with self._atomic():
            # No declared column types: no affinity, so SQLite keeps each value's storage class.
            self._exec(f"CREATE TABLE {arr.quoted} ({', '.join(cols)}, w INTEGER NOT NULL)")
            self._exec(f'CREATE UNIQUE INDEX "{arr.table}_row" ON {arr.quoted} ({", ".join(arr.identity)})')
            self._exec("INSERT INTO fv_arrangements (name, tbl, schema, key) VALUES (?, ?, ?, ?)",
                       (name, arr.table, schema.serialize().to_pybytes().hex(), json.dumps(list(key))))
        self._arr[name] = arr

    def has_arrangement(self, name: str) -> bool:
        return name in self._arr

    def drop_arrangement(self, name: str) -> None:
        arr = self._get(name)
        with self._atomic():
            self._exec(f"DROP TABLE IF EXISTS {arr.quoted}")  # drops its indexes too
            self._exec("DELETE FROM fv_arrangements WHERE name = ?", (name,))
        self._extreme_indexes = {i for i in self._extreme_indexes if not i.startswith(arr.table + "_")}
        del self._arr[name]

    def list_arrangements(self, prefix: str = "") -> list[str]:
        return sorted(n for n in self._arr if n.startswith(prefix))

    # ------------------------------------------------------------------ writes
    def apply(self, name: str, delta: pa.Table) -> pa.Table:
        """Add ``delta``'s weights into the stored multiset; report old and new weight per distinct row."""
        arr = self._get(name)
        rows = _consolidate(_conform(delta, arr.schema, with_weight=True), arr)
        m = rows.num_rows
        if m == 0:
            return _apply_result(rows, np.zeros(0, np.int64), np.zeros(0, np.int64))
        weights = np.asarray(rows.column(WEIGHT), dtype=np.int64)
        staged = _staged(rows, arr).append_column(WEIGHT, rows.column(WEIGHT))
        with self._atomic():
            self._stage(staged)
            # 1. current weights of the touched rows (one index probe per distinct row)
            found = self._arrow(f"SELECT 0 AS rid, 0 AS r, 0 AS w, 1 AS dummy UNION ALL "
                                f"SELECT s.rid, a.rowid, a.w, 0 FROM temp.{_STAGE} s CROSS JOIN {arr.quoted} a "
                                f"ON {_match(arr, arr.identity, 's')}")
            found = found.filter(pc.equal(found.column("dummy"), 0))
            rid = np.asarray(found.column("rid"), dtype=np.int64)
            old = np.zeros(m, np.int64)
            old[rid] = np.asarray(found.column("w"), dtype=np.int64)
            new = old + weights
            # 2. add the weights: insert new rows, update existing ones in place (rowid unchanged)
            cols = [f"c{i}" for i in range(len(arr.schema))] or ["u"]
            values = [c.store_sql(f"s.s{i}") for i, c in enumerate(arr.codecs)] or ["0"]
            self._exec(f"INSERT INTO {arr.quoted} ({', '.join(cols)}, w) "
                       f"SELECT {', '.join(values)}, s.{WEIGHT} FROM temp.{_STAGE} s WHERE s.{WEIGHT} != 0 "
                       f"ON CONFLICT ({', '.join(arr.identity)}) DO UPDATE SET w = {arr.quoted}.w + excluded.w")
            # 3. remove rows whose weight reached 0, by the rowids found in 1.
            gone = np.flatnonzero(new[rid] == 0)
            if len(gone):
                rowids = pa.table({"r": pa.array(np.asarray(found.column("r"), dtype=np.int64)[gone])})
                self._cur.executemany(f"DELETE FROM {arr.quoted} WHERE rowid = ?", rowids)
            self._unstage()
        return _apply_result(rows, old, new)

    # ------------------------------------------------------------------ reads
    def scan(self, name: str) -> pa.Table:
        arr = self._get(name)
        return self._select_rows(arr, f"FROM {arr.quoted} a")

    def count(self, name: str) -> int:
        arr = self._get(name)
        return int(self._rows(f"SELECT COUNT(*) FROM {arr.quoted}")[0][0])

    def lookup(self, name: str, keys: pa.Table) -> pa.Table:
        """Stored rows (+ weight) whose key equals some key row, each at most once.

        A NULL in a key never matches (SQL ``=``).  An arrangement with a
        zero-column key matches every stored row whatever ``keys`` holds.
        """
        arr = self._get(name)
        if not arr.key:
            return self.scan(name)  # a zero-column key matches every row
        keys = _conform(keys, pa.schema([arr.schema.field(k) for k in arr.key]), with_weight=False)
        keys = _distinct(keys.drop_null())
        if keys.num_rows == 0:
            return _empty_rows(arr.schema)
        with self._atomic():
            self._stage(_staged(keys, _Arrangement(arr.name, arr.table, keys.schema, arr.key)))
            # CROSS JOIN fixes the loop order: keys outside, one index seek into the arrangement per key.
            key_cols = [arr.col(k) for k in arr.key]
            result = self._select_rows(arr, f"FROM temp.{_STAGE} s CROSS JOIN {arr.quoted} a "
                                            f"ON {_match(arr, key_cols, 's', stage_order=list(arr.key))}")
            self._unstage()
        return result

    def extreme(self, name: str, keys: pa.Table, value: str, kind: str) -> pa.Table:
        """Per distinct key (NULL is a group): min/max of non-NULL ``value`` over rows with weight > 0.

        Keys without such a row are absent.  With a zero-column key the whole
        arrangement is one group and ``keys`` is not consulted.
        """
        if kind not in ("min", "max"):
            raise StateError(f"extreme kind must be 'min' or 'max', not {kind!r}")
        arr = self._get(name)
        if value not in arr.schema.names:
            raise StateError(f"state {name!r} has no column {value!r}")
        key_schema = pa.schema([arr.schema.field(k) for k in arr.key])
        out_schema = pa.schema(list(key_schema) + [arr.schema.field(value)])
        codec = codec_for(arr.schema.field(value).type)
        vcol = arr.col(value)
        keys = _distinct(_conform(keys, key_schema, with_weight=False)) if arr.key else pa.table({"k": [0]}).drop(["k"])
        if arr.key and keys.num_rows == 0:
            return out_schema.empty_table()
        with self._atomic():
            self._ensure_extreme_index(arr, vcol)
            order = "ASC" if kind == "min" else "DESC"
            # Key equality on stored values: NULL keys are sentinels, so a NULL group matches itself.
            terms = [_match(arr, [arr.col(k) for k in arr.key], "s", list(arr.key))] if arr.key else []
            # w > 0 selects the partial index; valid_sql skips NULL values by a range, so the seek stays O(log N).
            where = " AND ".join(terms + ["a.w > 0", codec.valid_sql(f"a.{vcol}")])
            best = f"(SELECT a.{vcol} FROM {arr.quoted} a WHERE {where} ORDER BY a.{vcol} {order} LIMIT 1)"
            if arr.key:
                self._stage(_staged(keys, _Arrangement(arr.name, arr.table, keys.schema, arr.key)))
                inner = f"SELECT s.rid AS rid, {best} AS v FROM temp.{_STAGE} s"
            else:
                inner = f"SELECT 0 AS rid, {best} AS v"
            # MATERIALIZED: the seek runs once per key, not once per reference to ``v``.
            found = self._arrow(f"WITH best AS MATERIALIZED ({inner}) "
                                f"SELECT 0 AS rid, {', '.join(codec.dummy_sql('v'))}, 1 AS dummy UNION ALL "
                                f"SELECT rid, {', '.join(codec.load_sql('v', 'v'))}, 0 FROM best "
                                f"WHERE v IS NOT NULL")
            if arr.key:
                self._unstage()
        found = found.filter(pc.equal(found.column("dummy"), 0))
        columns = list(keys.take(found.column("rid")).columns) + [codec.decode(found, "v")]
        return pa.Table.from_arrays(columns, schema=out_schema)

    def _ensure_extreme_index(self, arr: _Arrangement, vcol: str) -> None:
        """Ordered index (key columns, value) over live rows, built once on first use."""
        index = f"{arr.table}_x{vcol}"
        if index in self._extreme_indexes:
            return
        cols = [arr.col(k) for k in arr.key] + [vcol]
        self._exec(f'CREATE INDEX IF NOT EXISTS "{index}" ON {arr.quoted} ({", ".join(cols)}) WHERE w > 0')
        self._extreme_indexes.add(index)

    def _select_rows(self, arr: _Arrangement, from_clause: str) -> pa.Table:
        """Decode ``SELECT <all columns>, w <from_clause>`` into the arrangement's Arrow schema."""
        loads, dummies = [], []
        for i, codec in enumerate(arr.codecs):
            loads += codec.load_sql(f"a.c{i}", f"v{i}")
            dummies += codec.dummy_sql(f"v{i}")
        head = ", ".join(dummies + ["0 AS w", "1 AS dummy"])
        body = ", ".join(loads + ["a.w", "0"])
        raw = self._arrow(f"SELECT {head} UNION ALL SELECT {body} {from_clause}")
        raw = raw.filter(pc.equal(raw.column("dummy"), 0))
        columns = [codec.decode(raw, f"v{i}") for i, codec in enumerate(arr.codecs)]
        columns.append(raw.column("w").cast(pa.int64()))
        return pa.Table.from_arrays(columns, schema=_with_weight(arr.schema))


# ---------------------------------------------------------------------- helpers
def _table_name(name: str) -> str:
    """A safe, unique SQL table name for any arrangement name."""
    digest = hashlib.sha1(name.encode()).hexdigest()[:12]
    return "a_" + re.sub(r"[^A-Za-z0-9_]", "_", name)[:40] + "_" + digest


def _same_layout(a: pa.Schema, b: pa.Schema) -> bool:
    return a.names == b.names and all(x.type == y.type for x, y in zip(a, b))


def _validate_layout(name: str, schema: pa.Schema, key: list[str]) -> None:
    if len(set(schema.names)) != len(schema.names) or WEIGHT in schema.names:
        raise StateError(f"state {name!r}: column names must be distinct and not {WEIGHT!r}")
    missing = [k for k in key if k not in schema.names]
    if missing or len(set(key)) != len(key):
        raise StateError(f"state {name!r}: key {key} must be distinct columns of {schema.names}")
    for f in schema:
        try:
            codec_for(f.type)
        except TypeError as exc:
            raise StateError(f"state {name!r}, column {f.name!r}: {exc}") from None


def _with_weight(schema: pa.Schema) -> pa.Schema:
    return pa.schema(list(schema) + [pa.field(WEIGHT, pa.int64())])


def _empty_rows(schema: pa.Schema) -> pa.Table:
    return _with_weight(schema).empty_table()


def _conform(table: pa.Table, schema: pa.Schema, with_weight: bool) -> pa.Table:
    """``table``'s columns of ``schema`` (+ weight), cast to the stored types."""
    target = _with_weight(schema) if with_weight else schema
    missing = [n for n in target.names if n not in table.column_names]
    if missing:
        raise StateError(f"change lacks column(s) {missing}")
    return table.select(target.names).cast(target)


def _distinct(table: pa.Table) -> pa.Table:
    """Distinct rows (NULL equal to NULL), floats normalised so -0.0 and 0.0 are one value."""
    table = _normalize_floats(table)
    if table.num_columns == 0:
        return table.slice(0, min(table.num_rows, 1))
    names = table.column_names
    return table.group_by(names, use_threads=False).aggregate([]).select(names).cast(table.schema)


def _normalize_floats(table: pa.Table) -> pa.Table:
    for i, f in enumerate(table.schema):
        if pa.types.is_floating(f.type):
            table = table.set_column(i, f, normalize_float(table.column(i).combine_chunks()))
    return table


def _consolidate(delta: pa.Table, arr: _Arrangement) -> pa.Table:
    """One row per distinct row of ``delta`` with its summed weight (zero sums kept: they are reported).

    Rows are sorted by the unique index's column order so index inserts are
    sequential, which keeps a large initial load cache-friendly.
    """
    delta = _normalize_floats(delta)
    names = arr.schema.names
    if not names:
        total = pc.sum(delta.column(WEIGHT)).as_py() if delta.num_rows else None
        return delta.slice(0, 0) if total is None else pa.table({WEIGHT: pa.array([total], pa.int64())})
    if delta.num_rows == 0:
        return delta
    grouped = delta.group_by(names, use_threads=False).aggregate([(WEIGHT, "sum")])
    grouped = grouped.rename_columns(names + [WEIGHT]).cast(delta.schema)
    order = list(arr.key) + [n for n in names if n not in arr.key]
    return grouped.take(pc.sort_indices(grouped, [(n, "ascending") for n in order]))


def _staged(rows: pa.Table, arr: _Arrangement) -> pa.Table:
    """The staging table of ``rows``: ``rid`` (row number) and the encoded columns ``s<i>``."""
    arrays: dict[str, pa.Array] = {"rid": pa.array(np.arange(rows.num_rows, dtype=np.int64))}
    for i, (field, codec) in enumerate(zip(rows.schema, [codec_for(f.type) for f in rows.schema])):
        if field.name == WEIGHT:
            continue
        arrays.update(codec.stage(rows.column(i), f"s{i}"))
    return pa.table(arrays)


def _match(arr: _Arrangement, stored_cols: list[str], stage: str, stage_order: list[str] | None = None) -> str:
    """``a.<stored> = <stored form of the staged value>`` for each column (all columns when no order given)."""
    terms = []
    if stage_order is None:
        # Staged columns are numbered by position in the arrangement's schema.
        for col in stored_cols:
            if col == "u":
                continue
            i = int(col[1:])
            terms.append(f"a.{col} = {arr.codecs[i].store_sql(f'{stage}.s{i}')}")
        return " AND ".join(terms) or "1"
    # Staged key tables are numbered by position in the key.
    for j, (col, k) in enumerate(zip(stored_cols, stage_order)):
        codec = codec_for(arr.schema.field(k).type)
        terms.append(f"a.{col} = {codec.store_sql(f'{stage}.s{j}')}")
    return " AND ".join(terms)


def _apply_result(rows: pa.Table, old: np.ndarray, new: np.ndarray) -> pa.Table:
    out = rows.drop_columns([WEIGHT])
    out = out.append_column(pa.field(OLD_WEIGHT, pa.int64()), pa.array(old, pa.int64()))
    return out.append_column(pa.field(WEIGHT, pa.int64()), pa.array(new, pa.int64()))


# ADBC's own finalisers fail noisily if they run during interpreter teardown,
# so stores a program forgot to close are closed while modules still exist.
_OPEN_STORES: "weakref.WeakSet[SqliteStateStore]" = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:
    for store in list(_OPEN_STORES):
        with contextlib.suppress(Exception):
            store.close()
