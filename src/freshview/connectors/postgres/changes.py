"""From decoded pgoutput messages to whole source transactions, then to deltas. No I/O.

``TransactionAssembler`` buffers the changes of each transaction and hands
out a ``SourceTransaction`` only when it commits, so a source transaction is
never split.  Large transactions arrive streamed (protocol ≥ 2): their
changes come in Stream Start … Stop blocks tagged with the (sub)transaction
id, may be aborted whole or per subtransaction, and are released on Stream
Commit.

``to_deltas`` turns a transaction into one Arrow delta per table
(``_weight`` +1 insert, −1 delete, an UPDATE both).  Under REPLICA IDENTITY
DEFAULT an UPDATE carries no old row and a DELETE only the key, so the old
row is asked of ``resolve_old`` (the engine's own copy, by primary key);
TOASTed values an UPDATE did not change are taken from the old row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from freshview.connectors.postgres import protocol as p
from freshview.connectors.postgres.types import to_arrow
from freshview.schema import TableSchema

RawRow = list  # text values as sent, None for NULL, p.UNCHANGED_TOAST for unsent TOAST
# (table, primary-key values) -> the current row as text values, or None if unknown
ResolveOld = Callable[[str, tuple], "RawRow | None"]


class ChangeError(Exception):
    """A change freshview cannot turn into a correct delta (missing old row, unknown table ...)."""


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


def to_deltas(txn: SourceTransaction, schemas: dict[str, TableSchema], resolve_old: ResolveOld
              ) -> dict[str, pa.Table]:
    """One consolidatable Arrow delta per changed table (TRUNCATE is the caller's to expand)."""
    out: dict[str, pa.Table] = {}
    for name, changes in txn.changes.items():
        schema = schemas.get(name)
        if schema is None:
            raise ChangeError(f"changes for table {name} that no view reads")
        rel = txn.relations[name]
        positions = _positions(rel, schema)
        live: dict[tuple, RawRow] = {}  # rows this transaction wrote, by key: later changes see them
        rows: list[RawRow] = []
        weights: list[int] = []
        for change in changes:
            new = _reorder(change.new, positions) if change.new is not None else None
            old = _reorder(change.old, positions) if change.old is not None else None
            if change.kind in ("update", "delete") and (old is None or change.old_is_key_only):
                key = _key(new if old is None else old, schema)
                old = live.get(key) or resolve_old(name, key)
                if old is None:
                    raise ChangeError(f"{name}: no old row for key {key}; set REPLICA IDENTITY FULL "
                                      "or make sure freshview saw the row's insert")
            if new is not None and old is not None:
                new = [o if v is p.UNCHANGED_TOAST else v for v, o in zip(new, old)]
            if new is not None and any(v is p.UNCHANGED_TOAST for v in new):
                raise ChangeError(f"{name}: an unchanged TOASTed value without its old row")
            if old is not None:
                rows.append(old)
                weights.append(-1)
                live.pop(_key(old, schema), None)
            if new is not None:
                rows.append(new)
                weights.append(1)
                live[_key(new, schema)] = new
        columns = list(zip(*rows)) if rows else [()] * len(schema.columns)
        arrays = [to_arrow(list(col), c.type) for col, c in zip(columns, schema.columns)]
        arrays.append(pa.array(weights, pa.int64()))
        out[name] = pa.Table.from_arrays(arrays, schema=schema.arrow(with_weight=True))
    return out


def _positions(rel: p.Relation, schema: TableSchema) -> list[int]:
    names = [c.name for c in rel.columns]
    missing = [c.name for c in schema.columns if c.name not in names]
    if missing:
        raise ChangeError(f"{rel.qualified_name} no longer has column(s) {', '.join(missing)} (DDL change)")
    return [names.index(c.name) for c in schema.columns]


def _reorder(values: RawRow, positions: list[int]) -> RawRow:
    return [values[i] for i in positions]


def _key(values: RawRow, schema: TableSchema) -> tuple:
    if not schema.primary_key:
        return tuple(values)
    return tuple(values[schema.names.index(k)] for k in schema.primary_key)
