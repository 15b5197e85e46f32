"""From decoded pgoutput messages to whole source transactions, then to deltas. No I/O.

``TransactionAssembler`` buffers the changes of each transaction and hands
out a ``SourceTransaction`` only when it commits, so a source transaction is
never split.  Large transactions arrive streamed (protocol ≥ 2): their
changes come in Stream Start … Stop blocks tagged with the (sub)transaction
id, may be aborted whole or per subtransaction, and are released on Stream
Commit.

``to_deltas`` turns a micro-batch of transactions into one Arrow delta per
table (``_weight`` +1 insert, −1 delete, an UPDATE both).  Under REPLICA
IDENTITY DEFAULT an UPDATE carries no old row and a DELETE only the key, so
the old row is asked of ``lookup_old`` (the engine's own copy, by primary
key); TOASTed values an UPDATE did not change are taken from the old row.
Keys are compared as typed values, never as text, because PostgreSQL's text
form of a value (``1.50``, ``10:00:00.5``) is not Python's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import pyarrow as pa

from freshview.connectors.postgres import protocol as p
from freshview.connectors.postgres.types import to_arrow
from freshview.schema import WEIGHT, TableSchema

RawRow = list  # text values as sent, None for NULL, p.UNCHANGED_TOAST for unsent TOAST
# (table, Arrow table of primary keys) -> the engine's current rows with those keys (absent keys: no row)
LookupOld = Callable[[str, pa.Table], pa.Table]


class ChangeError(Exception):
    """A change freshview cannot turn into a correct delta (missing old row, unknown table ...)."""

    def __init__(self, message: str, table: str | None = None) -> None:
        super().__init__(message)
        self.table = table  # the source table whose changes are unusable, when one is to blame


@dataclass
class Change:
    kind: str  # insert | update | delete
    new: RawRow | None = None
    old: RawRow | None = None
    old_is_key_only: bool = False


@dataclass
class SourceTransaction:
    xid: int
    commit_lsn: int
    end_lsn: int
    commit_time: int
    changes: dict[str, list[Change]] = field(default_factory=dict)  # table -> changes in order
    truncated: list[str] = field(default_factory=list)
    relations: dict[str, p.Relation] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(len(c) for c in self.changes.values())


@dataclass
class _Pending:
    xid: int
    entries: list[tuple[int | None, object]] = field(default_factory=list)  # (sub)xid, message


class TransactionAssembler:
    def __init__(self) -> None:
        self._current: _Pending | None = None  # the non-streamed transaction being read
        self._streamed: dict[int, _Pending] = {}  # top-level xid -> buffered streamed changes
        self._stream_xid: int | None = None
        self._begin: p.Begin | None = None

    def feed(self, msg) -> SourceTransaction | None:
        """Consume one decoded message; returns a transaction when one commits."""
        if isinstance(msg, p.Begin):
            self._begin = msg
            self._current = _Pending(msg.xid)
        elif isinstance(msg, p.StreamStart):
            self._stream_xid = msg.xid
            self._streamed.setdefault(msg.xid, _Pending(msg.xid))
        elif isinstance(msg, p.StreamStop):
            self._stream_xid = None
        elif isinstance(msg, (p.Insert, p.Update, p.Delete, p.Truncate)):
            target = self._streamed[self._stream_xid] if self._stream_xid is not None else self._current
            if target is None:
                raise ChangeError(f"a {type(msg).__name__} arrived outside any transaction")
            target.entries.append((msg.xid, msg))
        elif isinstance(msg, p.StreamAbort):
            pending = self._streamed.get(msg.xid)
            if pending is not None:
                if msg.subxid == msg.xid:
                    del self._streamed[msg.xid]
                else:
                    pending.entries = [(x, m) for x, m in pending.entries if x != msg.subxid]
        elif isinstance(msg, p.Commit):
            if self._current is None or self._begin is None:
                raise ChangeError("a Commit arrived without its Begin")
            done = _assemble(self._current, msg.commit_lsn, msg.end_lsn, msg.commit_time)
            self._current, self._begin = None, None
            return done
        elif isinstance(msg, p.StreamCommit):
            pending = self._streamed.pop(msg.xid, _Pending(msg.xid))
            return _assemble(pending, msg.commit_lsn, msg.end_lsn, msg.commit_time)
        return None


def _assemble(pending: _Pending, commit_lsn: int, end_lsn: int, commit_time: int) -> SourceTransaction:
    txn = SourceTransaction(pending.xid, commit_lsn, end_lsn, commit_time)
    for _, msg in pending.entries:
        if isinstance(msg, p.Truncate):
            for rel in msg.relations:
                name = rel.qualified_name
                txn.relations[name] = rel
                # Changes before a TRUNCATE are wiped by it: the delta is "delete everything,
                # then what follows", so earlier changes of this table are dropped here.
                txn.changes.pop(name, None)
                if name not in txn.truncated:
                    txn.truncated.append(name)
            continue
        rel = msg.relation  # type: ignore[attr-defined]
        name = rel.qualified_name
        txn.relations[name] = rel
        bucket = txn.changes.setdefault(name, [])
        if isinstance(msg, p.Insert):
            bucket.append(Change("insert", new=msg.new))
        elif isinstance(msg, p.Update):
            bucket.append(Change("update", new=msg.new, old=msg.old, old_is_key_only=msg.old_is_key_only))
        else:
            bucket.append(Change("delete", old=msg.old, old_is_key_only=msg.old_is_key_only))
    return txn


def to_deltas(txns: "SourceTransaction | Sequence[SourceTransaction]", schemas: dict[str, TableSchema],
              lookup_old: LookupOld) -> dict[str, pa.Table]:
    """One Arrow delta per changed table for a micro-batch of transactions, in commit order.

    Rows a batch wrote are seen by its later changes (an UPDATE of a row
    inserted two transactions earlier finds it here); old rows missing from
    the stream are fetched with one ``lookup_old`` call per table.  TRUNCATE
    is the caller's to expand.
    """
    batch = [txns] if isinstance(txns, SourceTransaction) else list(txns)
    per_table: dict[str, list[tuple[Change, list[int]]]] = {}
    for txn in batch:
        for name, changes in txn.changes.items():
            schema = schemas.get(name)
            if schema is None:
                raise ChangeError(f"changes for table {name} that no view reads", name)
            positions = _positions(txn.relations[name], schema)
            per_table.setdefault(name, []).extend((c, positions) for c in changes)
    return {name: _table_delta(name, entries, schemas[name], lookup_old) for name, entries in per_table.items()}


def _table_delta(name: str, entries: list[tuple[Change, list[int]]], schema: TableSchema,
                 lookup_old: LookupOld) -> pa.Table:
    news = [_reorder(c.new, pos) if c.new is not None else None for c, pos in entries]
    toast = any(v is p.UNCHANGED_TOAST for row in news if row is not None for v in row)
    if all(c.kind == "insert" for c, _ in entries) and not toast:  # the common case: no Python per row
        return _arrow_rows(news, [1] * len(news), schema, typed=False)
    olds = [_reorder(c.old, pos) if c.old is not None else None for c, pos in entries]
    if not toast and schema.primary_key:
        fast = _independent_changes(entries, news, olds, schema, lambda keys: lookup_old(name, keys))
        if fast is not None:
            return fast
    typed_new, typed_old = _typed(news, schema), _typed(olds, schema)
    key_of = _key_function(schema)

    # First pass: which rows must come from the engine (not in the stream, not written earlier here).
    known: set[tuple] = set()
    wanted: dict[tuple, None] = {}
    for (change, _), new, old in zip(entries, typed_new, typed_old):
        if change.kind != "insert" and (old is None or change.old_is_key_only):
            key = key_of(new if old is None else old)
            if key not in known:
                wanted[key] = None
        if old is not None:
            known.add(key_of(old))
        if new is not None:
            known.add(key_of(new))
    engine_rows = _lookup(name, list(wanted), schema, lookup_old) if wanted else {}

    # Second pass: the delta, with old rows resolved and unchanged TOAST values carried over.
    live: dict[tuple, list | None] = {}
    rows: list[list] = []
    weights: list[int] = []
    for (change, _), new, old in zip(entries, typed_new, typed_old):
        if change.kind != "insert" and (old is None or change.old_is_key_only):
            key = key_of(new if old is None else old)
            old = live[key] if key in live else engine_rows.get(key)
            if old is None:
                raise ChangeError(f"{name}: no old row for key {key}; set REPLICA IDENTITY FULL "
                                  "or make sure freshview saw the row's insert", name)
        if new is not None and old is not None:
            new = [o if v is p.UNCHANGED_TOAST else v for v, o in zip(new, old)]
        if new is not None and any(v is p.UNCHANGED_TOAST for v in new):
            raise ChangeError(f"{name}: an unchanged TOASTed value without its old row", name)
        if old is not None:
            rows.append(old)
            weights.append(-1)
            live[key_of(old)] = None
        if new is not None:
            rows.append(new)
            weights.append(1)
            live[key_of(new)] = new
    return _arrow_rows(rows, weights, schema, typed=True)


def _independent_changes(entries: list[tuple[Change, list[int]]], news: list, olds: list, schema: TableSchema,
                         lookup: Callable[[pa.Table], pa.Table]) -> pa.Table | None:
    """Column-at-a-time delta when no two changes of the batch touch the same key (bulk UPDATEs).

    Then no change depends on another: new rows are +1 as sent, old rows are
    −1 as sent (REPLICA IDENTITY FULL) or fetched in one lookup by key.
    Returns None when the batch does not qualify; the row-by-row path then
    handles it (and reports a missing old row precisely).
    """
    key_idx = [schema.names.index(k) for k in schema.primary_key]
    key_types = [schema.columns[i].type for i in key_idx]
    fetch: list[list] = []  # key values (text) of old rows to fetch
    sent_old: list[list] = []
    touched: list[list] = []  # the keys each change touches (an UPDATE keeping its key: once)
    for (change, _), new, old in zip(entries, news, olds):
        keys = []
        if new is not None:
            keys.append([new[i] for i in key_idx])
        if change.kind != "insert":
            old_key = [(new if old is None else old)[i] for i in key_idx]
            if old_key not in keys:
                keys.append(old_key)
            if old is None or change.old_is_key_only:
                fetch.append(old_key)
            else:
                sent_old.append(old)
        touched.extend(keys)
    if _has_duplicates(touched, key_types):
        return None
    parts = []
    plus = [n for n in news if n is not None]
    if plus:
        parts.append(_arrow_rows(plus, [1] * len(plus), schema, typed=False))
    if sent_old:
        parts.append(_arrow_rows(sent_old, [-1] * len(sent_old), schema, typed=False))
    if fetch:
        keys = pa.table({k: to_arrow([row[n] for row in fetch], t)
                         for n, (k, t) in enumerate(zip(schema.primary_key, key_types))})
        found = lookup(keys)
        if found.num_rows != len(fetch):
            return None
        found = found.select(schema.names).cast(schema.arrow())
        parts.append(found.append_column(WEIGHT, pa.array([-1] * found.num_rows, pa.int64())))
    return pa.concat_tables([t.cast(schema.arrow(with_weight=True)) for t in parts]) if parts else \
        _arrow_rows([], [], schema, typed=False)


def _has_duplicates(touched: list[list], key_types: list) -> bool:
    """Whether two changes touch equal keys (compared as typed values: '1.0' and '1.00' are equal)."""
    if not touched:
        return False
    names = [f"k{n}" for n in range(len(key_types))]
    table = pa.table({name: to_arrow([k[n] for k in touched], t) for n, (name, t) in enumerate(zip(names, key_types))})
    return table.group_by(names).aggregate([]).num_rows != len(touched)


def _typed(rows: list, schema: TableSchema) -> list:
    """Text rows to Python values of the column types, column at a time (None rows stay None)."""
    present = [r for r in rows if r is not None]
    if not present:
        return rows
    columns = []
    for j, col in enumerate(schema.columns):
        texts = [r[j] for r in present]
        values = to_arrow([None if v is p.UNCHANGED_TOAST else v for v in texts], col.type).to_pylist()
        columns.append([p.UNCHANGED_TOAST if t is p.UNCHANGED_TOAST else v for t, v in zip(texts, values)])
    converted = iter(list(row) for row in zip(*columns))
    return [None if r is None else next(converted) for r in rows]


def _key_function(schema: TableSchema) -> Callable[[list], tuple]:
    if not schema.primary_key:  # REPLICA IDENTITY FULL: the whole row identifies it
        return tuple
    idx = [schema.names.index(k) for k in schema.primary_key]
    return lambda row: tuple(row[i] for i in idx)


def _lookup(name: str, keys: list[tuple], schema: TableSchema, lookup_old: LookupOld) -> dict[tuple, list]:
    if not schema.primary_key:
        return {}
    idx = [schema.names.index(k) for k in schema.primary_key]
    key_table = pa.table({k: pa.array([key[n] for key in keys], schema.columns[i].type.arrow)
                          for n, (k, i) in enumerate(zip(schema.primary_key, idx))})
    found = lookup_old(name, key_table)
    out: dict[tuple, list] = {}
    for row in found.select(schema.names).to_pylist():
        values = [row[n] for n in schema.names]
        out[tuple(values[i] for i in idx)] = values
    return out


def _arrow_rows(rows: list, weights: list[int], schema: TableSchema, typed: bool) -> pa.Table:
    columns = list(zip(*rows)) if rows else [()] * len(schema.columns)
    if typed:
        arrays = [pa.array(list(col), c.type.arrow) for col, c in zip(columns, schema.columns)]
    else:
        arrays = [to_arrow(list(col), c.type) for col, c in zip(columns, schema.columns)]
    arrays.append(pa.array(weights, pa.int64()))
    return pa.Table.from_arrays(arrays, schema=schema.arrow(with_weight=True))


def _positions(rel: p.Relation, schema: TableSchema) -> list[int]:
    names = [c.name for c in rel.columns]
    missing = [c.name for c in schema.columns if c.name not in names]
    if missing:
        raise ChangeError(f"{rel.qualified_name} no longer has column(s) {', '.join(missing)} (DDL change)",
                          rel.qualified_name)
    return [names.index(c.name) for c in schema.columns]


def _reorder(values: RawRow, positions: list[int]) -> RawRow:
    return [values[i] for i in positions]


def _key(values: RawRow, schema: TableSchema) -> tuple:
    if not schema.primary_key:
        return tuple(values)
    return tuple(values[schema.names.index(k)] for k in schema.primary_key)
