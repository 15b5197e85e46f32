"""Operator state in one SQLite database (WAL), one table per arrangement.

Each arrangement is a multiset of rows with weights, in a table keyed by the
row's identity and indexed by the operator's key columns, so a step reads
exactly the rows whose keys its change touches (B-tree probes, O(|Δ| log N))
and writes only the rows it changes.  One SQLite transaction per engine
step makes the step's catalog, state and outputs durable together; a crash
at any moment leaves the last committed step.  Memory is bounded by the
page cache (``cache_mb``).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa

from freshview.errors import StateError
from freshview.runtime.state.codec import decode, encode, row_ids
from freshview.schema import WEIGHT

CHUNK = 10_000  # bound parameters per IN (...) query; SQLite allows 32766


class SqliteStateStore:
    """The ``StateStore`` protocol on SQLite: arrangements, metadata, one transaction per step."""

    def __init__(self, directory: str | os.PathLike, cache_mb: int = 256) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / "state.sqlite"
        try:
            self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes (SIGKILL)
            self._db.execute(f"PRAGMA cache_size=-{int(cache_mb) * 1024}")
            self._db.execute("PRAGMA temp_store=MEMORY")
            # Checkpointing the WAL into the database fsyncs; with the default
            # (every 1000 pages) it lands inside many steps.  Every 16k pages
            # (~64 MB of WAL) amortises it over many steps.
            self._db.execute("PRAGMA wal_autocheckpoint=16384")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self._db.execute("CREATE TABLE IF NOT EXISTS arrangements (name TEXT PRIMARY KEY, tbl TEXT NOT NULL, "
                             "schema BLOB NOT NULL, key TEXT NOT NULL)")
        except sqlite3.DatabaseError as exc:
            raise StateError(f"cannot open state in {self.directory}: {exc}") from None
        self._arr: dict[str, tuple[str, pa.Schema, list[str]]] = {}
        self._load_catalog()

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if self._db is not None:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            self._db.close()
            self._db = None  # type: ignore[assignment]

    def begin(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self._db.execute("COMMIT")

    def rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")
        self._load_catalog()  # arrangements created in the failed step are gone

    @property
    def in_transaction(self) -> bool:
        return self._db.in_transaction

    def _load_catalog(self) -> None:
        self._arr = {}
        for name, tbl, schema, key in self._db.execute("SELECT name, tbl, schema, key FROM arrangements"):
            self._arr[name] = (tbl, pa.ipc.read_schema(pa.py_buffer(schema)), json.loads(key))

    # ------------------------------------------------------------------ metadata
    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def set_meta(self, key: str, value: Any) -> None:
        self._db.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                         (key, json.dumps(value)))

    def delete_meta(self, key: str) -> None:
        self._db.execute("DELETE FROM meta WHERE key = ?", (key,))

    # ------------------------------------------------------------------ arrangements
    def ensure_arrangement(self, name: str, schema: pa.Schema, key: list[str]) -> None:
        existing = self._arr.get(name)
        if existing is not None:
            if not existing[1].equals(schema) or existing[2] != list(key):
                raise StateError(f"state {name!r} exists with another layout; drop it first")
            return
        missing = [k for k in key if k not in schema.names]
        if missing:
            raise StateError(f"key column(s) {missing} are not in the arrangement")
        tbl = "a_" + re.sub(r"[^A-Za-z0-9_]", "_", name)[:40] + f"_{len(self._arr)}_{abs(hash(name)) % 10**8}"
        cols = ", ".join(f"c{i}" for i in range(len(schema)))
        self._db.execute(f'CREATE TABLE "{tbl}" (rid TEXT PRIMARY KEY, {cols + ", " if cols else ""}'
                         f'w INTEGER NOT NULL) WITHOUT ROWID')
        if key:
            idx = ", ".join(f"c{schema.names.index(k)}" for k in key)
            self._db.execute(f'CREATE INDEX "{tbl}_key" ON "{tbl}" ({idx})')
        self._db.execute("INSERT INTO arrangements(name, tbl, schema, key) VALUES (?, ?, ?, ?)",
                         (name, tbl, schema.serialize().to_pybytes(), json.dumps(list(key))))
        self._arr[name] = (tbl, schema, list(key))

    def has_arrangement(self, name: str) -> bool:
        return name in self._arr

    def drop_arrangement(self, name: str) -> None:
        tbl, _, _ = self._get(name)
        self._db.execute(f'DROP TABLE "{tbl}"')
        self._db.execute("DELETE FROM arrangements WHERE name = ?", (name,))
        del self._arr[name]

    def list_arrangements(self, prefix: str = "") -> list[str]:
        return sorted(n for n in self._arr if n.startswith(prefix))

    def _get(self, name: str) -> tuple[str, pa.Schema, list[str]]:
        try:
            return self._arr[name]
        except KeyError:
            raise StateError(f"no state named {name!r}") from None

    # ------------------------------------------------------------------ writes
    def apply(self, name: str, delta: pa.Table) -> pa.Table:
        tbl, schema, _ = self._get(name)
        from freshview.algebra.batch import consolidate

        delta = consolidate(delta.select(schema.names + [WEIGHT]).cast(
            pa.schema(list(schema) + [pa.field(WEIGHT, pa.int64())])))
        n = delta.num_rows
        out_schema = pa.schema(list(schema) + [pa.field("_old_weight", pa.int64()), pa.field(WEIGHT, pa.int64())])
        if n == 0:
            return out_schema.empty_table()
        rids = row_ids(delta, schema.names)
        weights = delta.column(WEIGHT).to_pylist()
        old: dict[str, int] = {}
        for start in range(0, n, CHUNK):
            chunk = rids[start:start + CHUNK]
            marks = ",".join("?" * len(chunk))
            old.update(self._db.execute(f'SELECT rid, w FROM "{tbl}" WHERE rid IN ({marks})', chunk))
        columns = [encode(delta.column(i)) for i in range(len(schema))]
        cols = "".join(f", c{i}" for i in range(len(schema)))
        marks = ", ".join("?" * (len(schema) + 2))
        self._db.executemany(
            f'INSERT INTO "{tbl}" (rid{cols}, w) VALUES ({marks}) '
            "ON CONFLICT(rid) DO UPDATE SET w = w + excluded.w",
            zip(rids, *columns, weights),
        )
        old_w = [old.get(r, 0) for r in rids]
        new_w = [o + w for o, w in zip(old_w, weights)]
        gone = [r for r, w in zip(rids, new_w) if w == 0]
        for start in range(0, len(gone), CHUNK):
            chunk = gone[start:start + CHUNK]
            self._db.execute(f'DELETE FROM "{tbl}" WHERE rid IN ({",".join("?" * len(chunk))})', chunk)
        return delta.drop([WEIGHT]).append_column(
            "_old_weight", pa.array(old_w, pa.int64())).append_column(WEIGHT, pa.array(new_w, pa.int64()))

    # ------------------------------------------------------------------ reads
    def _rows_to_table(self, schema: pa.Schema, rows: list[tuple]) -> pa.Table:
        n = len(schema)
        columns = list(zip(*rows)) if rows else [()] * (n + 1)
        arrays = [decode(list(columns[i]), schema.field(i).type) for i in range(n)]
        arrays.append(pa.array(list(columns[n]), pa.int64()))
        return pa.Table.from_arrays(arrays, schema=pa.schema(list(schema) + [pa.field(WEIGHT, pa.int64())]))

    def scan(self, name: str) -> pa.Table:
        tbl, schema, _ = self._get(name)
        cols = "".join(f"c{i}, " for i in range(len(schema)))
        return self._rows_to_table(schema, self._db.execute(f'SELECT {cols}w FROM "{tbl}"').fetchall())

    def count(self, name: str) -> int:
        tbl, _, _ = self._get(name)
        return self._db.execute(f'SELECT COUNT(*) FROM "{tbl}"').fetchone()[0]

    def lookup(self, name: str, keys: pa.Table) -> pa.Table:
        """Stored rows whose key equals a key row; a NULL key never matches (SQL ``=``)."""
        tbl, schema, key = self._get(name)
        if not key:
            return self.scan(name)
        cols = "".join(f"a.c{i}, " for i in range(len(schema)))
        key_types = [schema.field(k).type for k in key]
        encoded = [encode(keys.column(k).cast(t)) for k, t in zip(key, key_types)]
        wanted = {row for row in zip(*encoded) if None not in row}
        if not wanted:
            return self._rows_to_table(schema, [])
        rows: list[tuple] = []
        if len(key) == 1:
            values = [r[0] for r in wanted]
            kc = f"a.c{schema.names.index(key[0])}"
            for start in range(0, len(values), CHUNK):
                chunk = values[start:start + CHUNK]
                rows += self._db.execute(
                    f'SELECT {cols}a.w FROM "{tbl}" a WHERE {kc} IN ({",".join("?" * len(chunk))})', chunk).fetchall()
        else:
            self._db.execute("CREATE TEMP TABLE IF NOT EXISTS _probe_%d (%s)" % (
                len(key), ", ".join(f"k{i}" for i in range(len(key)))))
            self._db.execute(f"DELETE FROM _probe_{len(key)}")
            self._db.executemany(f"INSERT INTO _probe_{len(key)} VALUES ({','.join('?' * len(key))})", wanted)
            on = " AND ".join(f"a.c{schema.names.index(k)} = p.k{i}" for i, k in enumerate(key))
            rows = self._db.execute(
                f'SELECT {cols}a.w FROM _probe_{len(key)} p JOIN "{tbl}" a ON {on}').fetchall()
        return self._rows_to_table(schema, rows)

    def extreme(self, name: str, keys: pa.Table, value: str, kind: str) -> pa.Table:
        """Per key (NULL matches NULL): the min/max of ``value`` over rows with weight > 0."""
        if kind not in ("min", "max"):
            raise StateError(f"extreme kind must be 'min' or 'max', not {kind!r}")
        tbl, schema, key = self._get(name)
        vi = schema.names.index(value)
        kcols = [f"c{schema.names.index(k)}" for k in key]
        self._db.execute(f'CREATE INDEX IF NOT EXISTS "{tbl}_ext{vi}" ON "{tbl}" ({", ".join(kcols + [f"c{vi}"])})')
        where = " AND ".join([f"{c} IS ?" for c in kcols] + [f"c{vi} IS NOT NULL", "w > 0"])
        order = "ASC" if kind == "min" else "DESC"
        sql = f'SELECT c{vi} FROM "{tbl}" WHERE {where} ORDER BY c{vi} {order} LIMIT 1'
        key_types = [schema.field(k).type for k in key]
        if key:
            encoded = [encode(keys.column(k).cast(t)) for k, t in zip(key, key_types)]
            probes = list(dict.fromkeys(zip(*encoded)))
        else:
            probes = [()]
        found_keys, found_values = [], []
        for probe in probes:
            row = self._db.execute(sql, probe).fetchone()
            if row is not None:
                found_keys.append(probe)
                found_values.append(row[0])
        key_cols = list(zip(*found_keys)) if found_keys else [()] * len(key)
        arrays = [decode(list(key_cols[i]), t) for i, t in enumerate(key_types)]
        arrays.append(decode(found_values, schema.field(vi).type))
        return pa.Table.from_arrays(arrays, schema=pa.schema([schema.field(k) for k in key] + [schema.field(vi)]))
