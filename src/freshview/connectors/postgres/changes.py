"""From decoded pgoutput messages to whole source transactions, then to deltas. No I/O.

``TransactionAssembler`` buffers the changes of each transaction and hands
out a ``SourceTransaction`` only when it commits, so a source transaction is
never split.  Large transactions arrive streamed (protocol ≥ 2): their
changes come in Stream Start … Stop blocks tagged with the (sub)transaction
id, may be aborted whole or per subtransaction, and are released on Stream
Commit.

``to_changes`` turns a micro-batch of transactions into one change per table
(``TableChange``: weighted rows, ``_weight`` +1 insert, −1 delete, an UPDATE
both).  Under REPLICA IDENTITY DEFAULT an UPDATE carries no old row and a
DELETE only the key: such a key's net effect goes by key (an upsert of its
row after the batch, or a delete), and the engine retracts the old row it
holds (one lookup per step, in the engine).  Only TOASTed values an UPDATE
did not change, sent without their old row, need the old row here: they
are asked of ``lookup_old`` (the engine's own copy, by primary key).
``to_deltas`` is ``to_changes`` resolved into weighted rows with
``lookup_old``.
Keys are compared as typed values, never as text, because PostgreSQL's text
form of a value (``1.50``, ``10:00:00.5``) is not Python's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.connectors.postgres import columnar
from freshview.connectors.postgres import protocol as p
from freshview.connectors.base import ChangeError, LookupOld, TableChange
from freshview.connectors.postgres.types import to_arrow
from freshview.schema import WEIGHT, TableSchema

_U32 = p._U32

RawRow = list  # text values as sent, None for NULL, p.UNCHANGED_TOAST for unsent TOAST


@dataclass
class Change:
    kind: str  # insert | update | delete
    new: RawRow | None = None
    old: RawRow | None = None
    old_is_key_only: bool = False


class RawChanges:
    """One table's row changes in one transaction, kept as the payloads that carried them (in order).

    ``TransactionAssembler.feed_payload`` stores them so; ``to_deltas`` decodes
    them a column at a time (``columnar``), or one by one into ``Change``
    (iterating) when a batch needs the row-by-row path.
    """

    def __init__(self) -> None:
        self.payloads: list[bytes] = []  # each a whole I/U/D message
        self.starts: list[int] = []  # where the relation OID begins in each (after the kind byte, and the xid)
        self.runs: list[tuple[int, p.Relation]] = []  # (first index, relation) each time the relation changes

    def append(self, payload, start: int, relation: p.Relation) -> None:
        if not self.runs or self.runs[-1][1] is not relation:
            self.runs.append((len(self.payloads), relation))
        self.payloads.append(payload)
        self.starts.append(start)

    def extend(self, other: "RawChanges") -> None:
        for first, rel in other.runs:
            if not self.runs or self.runs[-1][1] is not rel:
                self.runs.append((len(self.payloads) + first, rel))
        self.payloads.extend(other.payloads)
        self.starts.extend(other.starts)

    def __len__(self) -> int:
        return len(self.payloads)

    def with_relations(self) -> Iterator[tuple["Change", p.Relation]]:
        bounds = [i for i, _ in self.runs[1:]] + [len(self.payloads)]
        for (first, rel), end in zip(self.runs, bounds):
            for i in range(first, end):
                yield _change(p.row_change(self.payloads[i], self.starts[i] + 4, rel)), rel

    def __iter__(self) -> Iterator["Change"]:
        return (change for change, _ in self.with_relations())


def _change(msg: "p.Insert | p.Update | p.Delete") -> "Change":
    if isinstance(msg, p.Insert):
        return Change("insert", new=msg.new)
    if isinstance(msg, p.Update):
        return Change("update", new=msg.new, old=msg.old, old_is_key_only=msg.old_is_key_only)
    return Change("delete", old=msg.old, old_is_key_only=msg.old_is_key_only)


@dataclass
class SourceTransaction:
    xid: int
    commit_lsn: int
    end_lsn: int
    commit_time: int
    changes: dict[str, "list[Change] | RawChanges"] = field(default_factory=dict)  # table -> changes in order
    truncated: list[str] = field(default_factory=list)
    relations: dict[str, p.Relation] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(len(c) for c in self.changes.values())


@dataclass
class _Pending:
    xid: int
    entries: list[tuple[int | None, object]] = field(default_factory=list)  # (sub)xid, message
    # Outside streamed blocks, consecutive raw row changes of a relation share one entry: relation OID ->
    # the RawChanges entry still open (a TRUNCATE or a decoded change closes them, keeping the order).
    open: dict[int, "RawChanges"] = field(default_factory=dict)


class TransactionAssembler:
    def __init__(self) -> None:
        self._current: _Pending | None = None  # the non-streamed transaction being read
        self._streamed: dict[int, _Pending] = {}  # top-level xid -> buffered streamed changes
        self._stream_xid: int | None = None
        self._begin: p.Begin | None = None

    def feed_payload(self, payload, decoder: p.Decoder) -> SourceTransaction | None:
        """Consume one pgoutput payload; returns a transaction when one commits.

        Row changes are kept as sent (``RawChanges``), decoded later a column at
        a time; every other message goes through ``decoder`` and ``feed``.
        """
        kind = payload[0]
        if kind != 0x49 and kind != 0x55 and kind != 0x44:  # not I / U / D
            return self.feed(decoder.decode(payload))
        if not decoder.in_stream:
            pending = self._current
            if pending is None:
                raise ChangeError(f"a row change ({chr(kind)}) arrived outside any transaction")
            oid = _U32(payload, 1)[0]
            relation = decoder.relations.get(oid)
            if relation is None:
                raise p.ProtocolError(f"a row change ({chr(kind)}) for a relation never described")
            bucket = pending.open.get(oid)
            if bucket is None or bucket.runs[0][1] is not relation:  # one entry per relation version
                bucket = pending.open[oid] = RawChanges()
                pending.entries.append((None, bucket))
            bucket.payloads.append(bytes(payload))  # compact: a view would keep libpq's buffer alive
            bucket.starts.append(1)
            if not bucket.runs:
                bucket.runs.append((0, relation))
            return None
        # Inside a streamed block every change carries its (sub)transaction id: one entry each, so that
        # an aborted subtransaction's changes can be dropped.
        xid = _U32(payload, 1)[0]
        target = self._streamed.get(self._stream_xid)  # type: ignore[arg-type]
        if target is None:
            raise ChangeError(f"a row change ({chr(kind)}) arrived outside any transaction")
        relation = decoder.relations.get(_U32(payload, 5)[0])
        if relation is None:
            raise p.ProtocolError(f"a row change ({chr(kind)}) for a relation never described")
        target.entries.append((xid, (relation, bytes(payload), 5)))
        return None

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
            target.open.clear()  # raw changes after this one start new entries: the order is kept
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
    changes, relations = txn.changes, txn.relations
    for _, msg in pending.entries:
        if type(msg) is RawChanges:  # a run of row changes as sent (feed_payload), one relation
            rel = msg.runs[0][1]
            name = rel.qualified_name
            relations[name] = rel
            bucket = changes.get(name)
            if bucket is None:
                changes[name] = msg
            else:  # RawChanges.extend, or list.extend decoding them
                bucket.extend(msg)
            continue
        if type(msg) is tuple:  # a row change as sent (feed_payload), in a streamed block
            rel, payload, start = msg
            name = rel.qualified_name
            relations[name] = rel
            bucket = changes.get(name)
            if bucket is None:
                bucket = changes[name] = RawChanges()
            if isinstance(bucket, RawChanges):
                bucket.append(payload, start, rel)
            else:
                bucket.append(_change(p.row_change(payload, start + 4, rel)))
            continue
        if isinstance(msg, p.Truncate):
            for rel in msg.relations:
                name = rel.qualified_name
                relations[name] = rel
                # Changes before a TRUNCATE are wiped by it: the delta is "delete everything,
                # then what follows", so earlier changes of this table are dropped here.
                changes.pop(name, None)
                if name not in txn.truncated:
                    txn.truncated.append(name)
            continue
        rel = msg.relation  # type: ignore[attr-defined]
        name = rel.qualified_name
        relations[name] = rel
        bucket = changes.setdefault(name, [])
        if isinstance(bucket, RawChanges):
            bucket = changes[name] = list(bucket)
        bucket.append(_change(msg))
    return txn


def to_deltas(txns: "SourceTransaction | Sequence[SourceTransaction]", schemas: dict[str, TableSchema],
              lookup_old: LookupOld) -> dict[str, pa.Table]:
    """One Arrow delta per changed table (``to_changes``), its keyed part resolved with one ``lookup_old``
    call per table."""
    return {name: resolve(name, change, schemas[name], lookup_old)
            for name, change in to_changes(txns, schemas, lookup_old).items()}


def resolve(name: str, change: TableChange, schema: TableSchema, lookup_old: LookupOld) -> pa.Table:
    """``change`` as weighted rows: −(the old row of each key it upserts or deletes, from ``lookup_old``)
    +(the upserts); a key without an old row raises ``ChangeError``."""
    parts = [] if change.rows is None else [change.rows]
    keyed = [t.select(list(schema.primary_key)) for t in (change.upserts, change.deletes) if t is not None]
    if keyed:
        keys = pa.concat_tables(keyed)
        found = lookup_old(name, keys).select(schema.names).cast(schema.arrow())
        if found.num_rows != keys.num_rows:
            held = set(zip(*(found.column(k).to_pylist() for k in schema.primary_key)))
            missing = next(k for k in zip(*(keys.column(c).to_pylist() for c in schema.primary_key)) if k not in held)
            raise ChangeError(f"{name}: no old row for key {missing}; set REPLICA IDENTITY FULL "
                              "or make sure freshview saw the row's insert", name)
        parts.append(_weighted(found, -1, schema))
        if change.upserts is not None:
            parts.append(_weighted(change.upserts.select(schema.names), 1, schema))
    return pa.concat_tables(parts) if parts else schema.arrow(with_weight=True).empty_table()


def to_changes(txns: "SourceTransaction | Sequence[SourceTransaction]", schemas: dict[str, TableSchema],
               lookup_old: LookupOld) -> dict[str, TableChange]:
    """One change per changed table for a micro-batch of transactions, in commit order.

    Rows a batch wrote are seen by its later changes (an UPDATE of a row
    inserted two transactions earlier finds it here); a key whose old row is
    missing from the stream goes by key (``TableChange.upserts``,
    ``deletes``, ``present``), except under unchanged TOAST values: then the
    old rows are fetched with one ``lookup_old`` call per table.  TRUNCATE
    is the caller's to expand.
    """
    batch = [txns] if isinstance(txns, SourceTransaction) else list(txns)
    per_table: dict[str, list[tuple["list[Change] | RawChanges", p.Relation]]] = {}
    for txn in batch:
        for name, changes in txn.changes.items():
            if name not in schemas:
                raise ChangeError(f"changes for table {name} that no view reads", name)
            per_table.setdefault(name, []).append((changes, txn.relations[name]))
    out = {}
    for name, parts in per_table.items():
        schema = schemas[name]
        delta = None
        if all(isinstance(changes, RawChanges) for changes, _ in parts) and \
                sum(len(changes) for changes, _ in parts) >= COLUMNAR_MIN_CHANGES:
            delta = _raw_delta([changes for changes, _ in parts], schema)  # type: ignore[misc]
        if delta is None:  # the row-by-row path, in commit order
            entries: list[tuple[Change, list[int]]] = []
            known: dict[int, list[int]] = {}
            for changes, rel in parts:
                if isinstance(changes, RawChanges):
                    for c, r in changes.with_relations():
                        if id(r) not in known:
                            known[id(r)] = _positions(r, schema)
                        entries.append((c, known[id(r)]))
                else:
                    positions = _positions(rel, schema)
                    entries.extend((c, positions) for c in changes)
            delta = _table_delta(name, entries, schema, lookup_old)
        out[name] = delta
    return out


COLUMNAR_MIN_CHANGES = 128  # fewer changes of a table in a batch: the row path is cheaper (no per-call costs)


def _raw_delta(parts: list[RawChanges], schema: TableSchema) -> TableChange | None:
    """A table's delta from payloads, a column at a time; None when only the row path can say.

    Three cases need no Python per row: only inserts (+1 each); every update
    and delete sent its full old row (REPLICA IDENTITY FULL: −old, +new as
    sent); or the table has a primary key, and then per key the batch's net
    effect is −(its row before the batch) +(its row after): the row before
    is the first change's full old row, or none if the first change created
    the key, else the engine's (one ``lookup``); the row after is the last
    change's new row, or none if the last change removed the key (a key
    whose row before is the engine's goes by key: an upsert or a delete).
    Unchanged TOAST values or several versions of a table's definition in
    one batch go to the row path.
    """
    runs = {id(rel): rel for part in parts for _, rel in part.runs}
    if len(runs) != 1:
        return None
    rel = next(iter(runs.values()))
    payloads = [x for part in parts for x in part.payloads]
    starts = [x for part in parts for x in part.starts]
    positions = _positions(rel, schema)
    parsed = columnar.parse(payloads, starts, len(rel.columns))
    if parsed.new.toast[:, positions].any() or parsed.old.toast[:, positions].any():
        return None
    new = _typed_table(parsed.new.columns, positions, schema)
    kind = parsed.kind
    if (kind == columnar.INSERT).all():
        return TableChange(_weighted(new, 1, schema))
    old = _typed_table(parsed.old.columns, positions, schema)
    if (parsed.old_kind[kind != columnar.INSERT] == ord("O")).all():
        return TableChange(pa.concat_tables([_weighted(new, 1, schema), _weighted(old, -1, schema)]))
    if not schema.primary_key:
        return None
    return _net_by_key(parsed, new, old, schema)


def _net_by_key(parsed: columnar.Parsed, new: pa.Table, old: pa.Table, schema: TableSchema) -> TableChange:
    """Per primary key: −(row before the batch) +(row after), see ``_raw_delta``."""
    keys = list(schema.primary_key)
    n = len(parsed.kind)
    change = np.arange(n, dtype=np.int64)
    new_of = np.full(n, -1, np.int64)  # change -> row of ``new``
    new_of[parsed.has_new] = np.arange(int(parsed.has_new.sum()), dtype=np.int64)
    old_of = np.full(n, -1, np.int64)  # change -> row of ``old``
    old_of[parsed.has_old] = np.arange(int(parsed.has_old.sum()), dtype=np.int64)
    full_old = parsed.old_kind == ord("O")
    # An update with an old tuple may move its row to another key.
    moved = np.zeros(n, bool)
    both = parsed.has_new & parsed.has_old
    if both.any():
        a = new.select(keys).take(new_of[both])
        b = old.select(keys).take(old_of[both])
        same = np.ones(int(both.sum()), bool)
        for k in keys:
            same &= pc.fill_null(pc.equal(a.column(k), b.column(k)), False).to_numpy(zero_copy_only=False)
        moved[both] = ~same
    # Events: each change touches its new key (order 2i+1) and, if it removes a key, that key (order 2i).
    ins = parsed.kind == columnar.INSERT
    side_new = parsed.has_new
    side_old = parsed.has_old & ((parsed.kind == columnar.DELETE) | moved)
    ev_order = np.concatenate([2 * change[side_new] + 1, 2 * change[side_old]])
    ev_after = np.concatenate([new_of[side_new], np.full(int(side_old.sum()), -1, np.int64)])  # row of new
    # whether the key existed before this change, and a full old row of it if one was sent
    existed = np.concatenate([~ins[side_new] & ~moved[side_new], np.ones(int(side_old.sum()), bool)])
    ev_old = np.concatenate([np.where(full_old & ~moved, old_of, -1)[side_new],
                             np.where(full_old, old_of, -1)[side_old]])
    ev_keys = pa.concat_tables([new.select(keys).take(new_of[side_new]), old.select(keys).take(old_of[side_old])])
    events = ev_keys.append_column("_fv_order", pa.array(ev_order))
    per_key = events.group_by(keys, use_threads=False).aggregate([("_fv_order", "min"), ("_fv_order", "max")])
    at_order = np.full(2 * n + 1, -1, np.int64)
    at_order[ev_order] = np.arange(len(ev_order), dtype=np.int64)
    first = at_order[per_key.column("_fv_order_min").to_numpy()]
    last = at_order[per_key.column("_fv_order_max").to_numpy()]
    before = existed[first]
    sent = ev_old[first]
    after = ev_after[last]
    by_key = before & (sent < 0)  # the row before is the engine's: the key goes by key
    parts = []
    if (~by_key & (after >= 0)).any():
        parts.append(_weighted(new.take(after[~by_key & (after >= 0)]), 1, schema))
    if (before & (sent >= 0)).any():
        parts.append(_weighted(old.take(sent[before & (sent >= 0)]), -1, schema))
    rows = pa.concat_tables(parts) if parts else _weighted(new.slice(0, 0), 1, schema)
    if not by_key.any():
        return TableChange(rows)
    key_table = per_key.select(keys)
    return TableChange(rows, upserts=new.take(after[by_key & (after >= 0)]),
                       deletes=key_table.filter(pa.array(by_key & (after < 0))),
                       present=key_table.filter(pa.array(by_key)))


def _typed_table(columns: list[pa.Array], positions: list[int], schema: TableSchema) -> pa.Table:
    return pa.Table.from_arrays([to_arrow(columns[i], c.type) for i, c in zip(positions, schema.columns)],
                                schema=schema.arrow())


def _weighted(table: pa.Table, weight: int, schema: TableSchema) -> pa.Table:
    return table.append_column(WEIGHT, pa.array(np.full(table.num_rows, weight, np.int64))).cast(
        schema.arrow(with_weight=True))


def _table_delta(name: str, entries: list[tuple[Change, list[int]]], schema: TableSchema,
                 lookup_old: LookupOld) -> TableChange:
    """The row path: change by change, in order.  A key whose old row the stream did not send goes by
    key (``TableChange.upserts``/``deletes``), unless an unchanged TOAST value needs that row's values:
    then the old rows come from ``lookup_old``."""
    news = [_reorder(c.new, pos) if c.new is not None else None for c, pos in entries]
    toast = any(v is p.UNCHANGED_TOAST for row in news if row is not None for v in row)
    if all(c.kind == "insert" for c, _ in entries) and not toast:  # the common case: no Python per row
        return TableChange(_arrow_rows(news, [1] * len(news), schema, typed=False))
    olds = [_reorder(c.old, pos) if c.old is not None else None for c, pos in entries]
    if not toast and schema.primary_key:
        fast = _independent_changes(entries, news, olds, schema)
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
    by_key = bool(wanted) and bool(schema.primary_key) and not toast  # old rows: the engine's, by key
    engine_rows = _lookup(name, list(wanted), schema, lookup_old) if wanted and not by_key else {}

    # Second pass: the delta, with old rows resolved and unchanged TOAST values carried over.
    live: dict[tuple, list | None] = {}
    rows: list[list] = []
    weights: list[int] = []
    for (change, _), new, old in zip(entries, typed_new, typed_old):
        if change.kind != "insert" and (old is None or change.old_is_key_only):
            key = key_of(new if old is None else old)
            if by_key and key not in live:  # the engine's row: retracted by key (``upserts``/``deletes``)
                live[key] = old = None
            else:
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
    if not by_key:
        return TableChange(_arrow_rows(rows, weights, schema, typed=True))
    kept = [i for i, row in enumerate(rows) if key_of(row) not in wanted]
    upserts = [live[k] for k in wanted if live[k] is not None]
    return TableChange(_arrow_rows([rows[i] for i in kept], [weights[i] for i in kept], schema, typed=True),
                       upserts=_arrow_rows(upserts, [1] * len(upserts), schema, typed=True).drop([WEIGHT]),
                       deletes=_key_rows([k for k in wanted if live[k] is None], schema),
                       present=_key_rows(list(wanted), schema))


def _key_rows(keys: list[tuple], schema: TableSchema) -> pa.Table:
    """Typed key tuples as a table of the primary key columns."""
    types = {c.name: c.type.arrow for c in schema.columns}
    return pa.table({k: pa.array([key[n] for key in keys], types[k]) for n, k in enumerate(schema.primary_key)})


def _independent_changes(entries: list[tuple[Change, list[int]]], news: list, olds: list,
                         schema: TableSchema) -> TableChange | None:
    """Column-at-a-time change when no two changes of the batch touch the same key (bulk UPDATEs).

    Then no change depends on another: new rows are +1 as sent, old rows are
    −1 as sent (REPLICA IDENTITY FULL); a change without its old row goes by
    key (an upsert of its new row when it keeps its key, else a delete).
    Returns None when the batch does not qualify (the row-by-row path then
    handles it).
    """
    key_idx = [schema.names.index(k) for k in schema.primary_key]
    key_types = [schema.columns[i].type for i in key_idx]
    fetch: list[list] = []  # key values (text) whose old row is the engine's
    sent_old: list[list] = []
    plus: list[list] = []
    upserts: list[list] = []
    deletes: list[list] = []
    touched: list[list] = []  # the keys each change touches (an UPDATE keeping its key: once)
    for (change, _), new, old in zip(entries, news, olds):
        keys = []
        new_key = None if new is None else [new[i] for i in key_idx]
        if new_key is not None:
            keys.append(new_key)
        by_key = False
        if change.kind != "insert":
            old_key = [(new if old is None else old)[i] for i in key_idx]
            if old_key not in keys:
                keys.append(old_key)
            if old is None or change.old_is_key_only:
                fetch.append(old_key)
                by_key = new_key == old_key
                if not by_key:
                    deletes.append(old_key)
            else:
                sent_old.append(old)
        if new is not None:
            (upserts if by_key else plus).append(new)
        touched.extend(keys)
    if _has_duplicates(touched, key_types):
        return None
    parts = []
    if plus:
        parts.append(_arrow_rows(plus, [1] * len(plus), schema, typed=False))
    if sent_old:
        parts.append(_arrow_rows(sent_old, [-1] * len(sent_old), schema, typed=False))
    rows = pa.concat_tables([t.cast(schema.arrow(with_weight=True)) for t in parts]) if parts else \
        _arrow_rows([], [], schema, typed=False)
    if not fetch:
        return TableChange(rows)

    def key_table(values: list[list]) -> pa.Table:
        return pa.table({k: to_arrow([row[n] for row in values], t)
                         for n, (k, t) in enumerate(zip(schema.primary_key, key_types))})
    return TableChange(rows, upserts=_arrow_rows(upserts, [1] * len(upserts), schema, typed=False).drop([WEIGHT]),
                       deletes=key_table(deletes), present=key_table(fetch))


def _has_duplicates(touched: list[list], key_types: list) -> bool:
    """Whether two changes touch equal keys (compared as typed values: '1.0' and '1.00' are equal)."""
    if not touched:
        return False
    columns = [to_arrow([k[n] for k in touched], t) for n, t in enumerate(key_types)]
    if len(touched) < 4096:  # a set of typed values: Arrow's group_by costs milliseconds per call
        return len(set(zip(*(c.to_pylist() for c in columns)))) != len(touched)
    names = [f"k{n}" for n in range(len(key_types))]
    return pa.table(dict(zip(names, columns))).group_by(names).aggregate([]).num_rows != len(touched)


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
