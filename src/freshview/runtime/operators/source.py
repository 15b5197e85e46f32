"""The source operator: one source's change applied to its copy (``source/<name>``), checked, and handed on.

A source's change in one step (``SourceChange``) comes in up to three forms at once:

* **weighted rows** (``rows``): ``+1`` an insert, ``−1`` a delete, an update both (equal rows may come
  more than once: the operator consolidates them, with the hashes it computes once for the step);
* **keyed operations** (a source with a primary key): ``upserts``, the row each key has after the
  step, and ``deletes``, keys that have no row after it; the caller need not know the rows before;
* **truncate**: every row the copy holds before the step goes (then the other forms apply to nothing).

Delta rule.  With ``S`` the copy before the step and ``old(k)`` its rows of key ``k``:

    ΔS = rows + Σ_{k ∈ upserts ∪ deletes} −old(k) + Σ_{k ∈ upserts} +new(k)        (truncate: −S + rows + upserts)

``old`` is read with **one** lookup per step of every key the change touches (the weighted rows'
keys, the keyed operations', the checks'), the same lookup that validates the result, so a change
given by key costs what a change given as rows costs, and the caller never reads the copy.  A
source without a primary key is keyed by its whole row: its ``deletes`` are rows with ``_weight``
copies to remove (fewer if fewer are present).

``checks`` are conditions on ``S`` the caller wants refused otherwise: per key, at least and at most
how many rows it has (``_fv_at_least``, ``_fv_at_most``, e.g. 1 and NULL: "present", 0 and 0:
"absent"), and an ``_fv_order`` that says which failure to report first (``ChangeRefused.order``; a
Debezium batch passes its messages' offsets).  Then ``S + ΔS`` is checked as for rows: a delete of
a row that is not present, a duplicate or NULL primary key, and a fixed-size array of another
length are refused (``DeltaError``) and the step rolls back.

Under a state TTL (``tick``) a row the copy no longer holds was evicted: a delete of it is a *late
delete* (the copy drops it, the views get it, since their state may still hold the row: a join key
or group kept alive by other rows); ``late`` gives, per key of a keyed operation, the row to retract
from the views when the copy proves not to hold the key (a Debezium update's sent old row).  The
change's keys are touched.

The engine (``runtime.engine``) renames every table of a ``SourceChange`` to the copy's columns
(``c0 .. cn``) before this operator sees it; the operator's errors name the source's own columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra import hashing
from freshview.algebra.batch import consolidate, equal_pairs, negate
from freshview.circuit import arrangements
from freshview.errors import DeltaError
from freshview.runtime import ttl
from freshview.runtime.operators.group_keys import match_keys
from freshview.runtime.relation import col_name
from freshview.runtime.state.layout import Layout
from freshview.runtime.state.protocol import KEY_HASH, ROW_HASH
from freshview.schema import WEIGHT, TableSchema, array_length_mismatch

if TYPE_CHECKING:
    from freshview.runtime.state.protocol import StateStore

AT_LEAST = "_fv_at_least"
AT_MOST = "_fv_at_most"
ORDER = "_fv_order"

__all__ = ["AT_LEAST", "AT_MOST", "ORDER", "ChangeRefused", "Source", "SourceChange", "checks"]


@dataclass(frozen=True)
class SourceChange:
    """One source's change in one step (the module docstring): tables named by the source's columns.

    ``rows``: the source's columns + ``_weight`` (consolidated by ``Source.apply``).  ``upserts``: whole rows, one per key.
    ``deletes``: the primary key columns (other columns are ignored); without a primary key, whole rows
    + ``_weight`` (copies to remove).  A key appears at most once in ``upserts`` and ``deletes``
    together.  ``checks``: key columns (whole rows without a primary key) + ``_fv_at_least`` (int64),
    ``_fv_at_most`` (int64, NULL: no bound), ``_fv_order`` (int64), see ``checks(...)``.  ``late``:
    whole rows, at most one per key.
    """

    rows: pa.Table | None = None
    upserts: pa.Table | None = None
    deletes: pa.Table | None = None
    truncate: bool = False
    checks: pa.Table | None = None
    late: pa.Table | None = None

    @property
    def keyed(self) -> bool:
        return any(t is not None and t.num_rows for t in (self.upserts, self.deletes, self.checks, self.late))

    @property
    def empty(self) -> bool:
        return not self.truncate and not self.keyed and (self.rows is None or not self.rows.num_rows)


def checks(keys: pa.Table, at_least: int | np.ndarray, at_most: int | np.ndarray | pa.Array | None = None,
           order: int | np.ndarray = 0) -> pa.Table:
    """A ``checks`` table: ``keys`` (key columns) with the bounds and orders (scalars or one per row;
    ``at_most`` None, or an Arrow array with NULLs: no upper bound)."""
    n = keys.num_rows

    def column(v) -> pa.Array:
        if v is None:
            return pa.nulls(n, pa.int64())
        if isinstance(v, pa.Array):
            return v.cast(pa.int64())
        return pa.array(np.broadcast_to(np.asarray(v, dtype=np.int64), (n,)), pa.int64())
    return keys.append_column(AT_LEAST, column(at_least)).append_column(AT_MOST, column(at_most)).append_column(
        ORDER, column(order))


class ChangeRefused(DeltaError):
    """A check of a ``SourceChange`` failed: the key (``key``: column -> value) had ``found`` rows before
    the step, outside [``at_least``, ``at_most``]; ``order`` is the check's ``_fv_order`` (the least
    among the failures)."""

    def __init__(self, source: str, key: dict, found: int, at_least: int, at_most: int | None, order: int) -> None:
        text = ", ".join(f"{k}={v!r}" for k, v in key.items())
        want = "present" if at_least == 1 and at_most is None else "absent" if at_most == 0 else \
            f"held at least {at_least} times" if at_most is None else f"held {at_least} to {at_most} times"
        super().__init__(f"source {source!r}: ({text}) is not {want} (found {found})")
        self.source, self.key, self.found = source, key, found
        self.at_least, self.at_most, self.order = at_least, at_most, order


@dataclass
class Source:
    """A source as the engine keeps it: its schema, its copy and the copy's key columns (``c<i>``)."""

    name: str
    schema: TableSchema

    @cached_property
    def arrangement(self) -> arrangements.Arrangement:
        return arrangements.source(self.name)

    @cached_property
    def key(self) -> list[str]:
        """The copy's key: the primary key's columns, or every column."""
        names = self.schema.names
        return [col_name(names.index(k)) for k in self.schema.primary_key] or [col_name(i) for i in range(len(names))]

    @cached_property
    def layout(self) -> Layout:
        return Layout(pa.schema([pa.field(col_name(i), c.type.arrow) for i, c in enumerate(self.schema.columns)]),
                      tuple(self.key))

    @cached_property
    def row_schema(self) -> pa.Schema:
        """The copy's rows with ``_weight``."""
        return self.layout.weighted_schema

    # ------------------------------------------------------------------ the engine's edge
    def to_engine(self, change: SourceChange) -> SourceChange:
        """``change`` with every table in the copy's columns (``c<i>``, the schema's types)."""
        names = self.schema.names
        key_names = list(self.schema.primary_key) or names
        fields = {n: pa.field(col_name(i), c.type.arrow) for i, (n, c) in enumerate(zip(names, self.schema.columns))}

        def conform(table: pa.Table | None, columns: list[str], extra: tuple[str, ...] = ()) -> pa.Table | None:
            if table is None:
                return None
            missing = [c for c in columns + list(extra) if c not in table.column_names]
            if missing:
                raise DeltaError(f"source {self.name!r}: a change lacks column(s) {', '.join(missing)}")
            target = pa.schema([fields[c] for c in columns] + [pa.field(e, pa.int64()) for e in extra])
            out = table.select(columns + list(extra)).rename_columns(target.names)
            return out if out.schema.equals(target) else out.cast(target)

        weighted = (WEIGHT,)
        return SourceChange(
            rows=conform(change.rows, names, weighted),
            upserts=conform(change.upserts, names),
            deletes=conform(change.deletes, key_names, () if self.schema.primary_key else weighted),
            truncate=change.truncate,
            checks=conform(change.checks, key_names, (AT_LEAST, AT_MOST, ORDER)),
            late=conform(change.late, names))

    def named(self, table: pa.Table) -> pa.Table:
        """Rows of the copy (``c<i>`` + ``_weight``) in the source's columns."""
        return table.rename_columns(self.schema.names + [WEIGHT]).cast(self.schema.arrow(with_weight=True))

    # ------------------------------------------------------------------ the step
    def apply(self, store: StateStore, change: SourceChange, tick: ttl.Tick | None,
              touch: ttl.TouchIndex | None) -> tuple[pa.Table, int]:
        """Apply ``change`` (in the copy's columns) to the copy: the change the views get (consolidated
        rows + ``_weight``, late deletes included) and the number of late deletes (module docstring).

        The rows are put in the store's form once (``prepare_rows``: cast and hashed): the read of the
        copy probes with their key hashes, the checks consolidate by their row hashes, and the write
        does not hash them again."""
        state, keys = self.arrangement, self.key
        rows = change.rows if change.rows is not None else self.row_schema.empty_table()
        self._check_keys(change, rows)
        _check_array_lengths(self.name, self.schema, rows, change.upserts)
        rows = _consolidated(store.prepare_rows(state, rows))
        current = self._current(store, change, rows)  # the one read of the copy (run columns)
        if change.checks is not None and change.checks.num_rows:
            self._check(change.checks, current)
        if change.truncate or change.keyed:
            table = _consolidated(store.prepare_rows(state, self._resolve(change, rows, current)))
        else:
            table = rows
        delta = table
        late = 0
        if not _plainly_valid(current, table, bool(self.schema.primary_key), self.layout.schema.names):
            table, late = self._check_after(current, table, tick)
        if table.num_rows:
            store.apply(state, table)  # the run's columns: not hashed again
            if touch is not None and tick is not None:
                touch.touch(store, tick, table.select(keys))
        # (late deletes included: the views may hold those rows)
        return delta.select(self.row_schema.names), late

    def _check_after(self, current: pa.Table, table: pa.Table, tick: ttl.Tick | None) -> tuple[pa.Table, int]:
        """``S + ΔS`` checked exactly (``current``: the copy's rows of the touched keys, ``table``: ΔS, both in
        the run's columns): a row below zero is refused, or under a TTL is a late delete (dropped from
        ``table``, counted); a primary key held twice is refused.  Returns ``table`` and the late deletes."""
        keys = self.key
        after = _consolidated(pa.concat_tables([current.cast(table.schema), table]))
        negative = after.filter(pc.less(after.column(WEIGHT), 0))
        late = 0
        if negative.num_rows:
            if tick is None:
                raise DeltaError(f"source {self.name!r}: delete of a row that is not present: "
                                 f"{_row_text(negative, self.schema)}")
            table, late = ttl.clamp(table, current.cast(table.schema))
            after = after.filter(pc.greater(after.column(WEIGHT), 0))
        if self.schema.primary_key and _maybe_repeated_keys(after):
            counts = after.group_by(keys).aggregate([(WEIGHT, "sum")])
            dup = counts.filter(pc.greater(counts.column(f"{WEIGHT}_sum"), 1))
            if dup.num_rows:
                key = ", ".join(f"{k}={dup.column(c)[0].as_py()!r}" for k, c in zip(self.schema.primary_key, keys))
                raise DeltaError(f"source {self.name!r}: duplicate primary key ({key}); "
                                 "an update is the old row at -1 and the new row at +1")
        return table, late

    def _current(self, store: StateStore, change: SourceChange, rows: pa.Table) -> pa.Table:
        """The copy's rows of every key ``change`` touches (all of them for a truncate), in the run's
        columns: one read.  ``rows``: the change's weighted rows as the store prepared them."""
        if change.truncate:
            return store.prepare_rows(self.arrangement, store.scan(self.arrangement))
        keys = self.key
        others = [t.select(keys) for t in (change.upserts, change.deletes, change.checks, change.late)
                  if t is not None and t.num_rows]
        if not others:  # the rows' keys only: probe with the key hashes they carry
            return store.lookup_prepared(self.arrangement, rows.select(keys + [KEY_HASH]))
        parts = ([rows.select(keys)] if rows.num_rows else []) + others
        return store.lookup_prepared(self.arrangement, parts[0] if len(parts) == 1 else pa.concat_tables(parts))

    def _check_keys(self, change: SourceChange, rows: pa.Table) -> None:
        """NULL primary keys anywhere; a key twice among the keyed operations."""
        if not self.schema.primary_key:
            return
        keys = self.key
        for table in (rows, change.upserts, change.deletes, change.checks, change.late):
            if table is None or not table.num_rows:
                continue
            nulls = [k for k, c in zip(self.schema.primary_key, keys) if table.column(c).null_count]
            if nulls:
                raise DeltaError(f"source {self.name!r}: primary key column {nulls[0]!r} is NULL")
        ops = [t.select(keys) for t in (change.upserts, change.deletes) if t is not None and t.num_rows]
        if ops:
            table = pa.concat_tables(ops)
            hashes = np.sort(hashing.hash_rows(table.columns))
            if (hashes[1:] == hashes[:-1]).any():  # two equal key hashes: count exactly
                counts = table.group_by(keys).aggregate([([], "count_all")])
                dup = counts.filter(pc.greater(counts.column("count_all"), 1))
                if dup.num_rows:
                    key = ", ".join(f"{k}={dup.column(c)[0].as_py()!r}" for k, c in zip(self.schema.primary_key, keys))
                    raise DeltaError(f"source {self.name!r}: key ({key}) is upserted or deleted twice in one change")

    def _check(self, wanted: pa.Table, current: pa.Table) -> None:
        """Refuse the change when a check's key has too few or too many rows in ``current``."""
        keys = self.key
        counts = current.group_by(keys, use_threads=False).aggregate([(WEIGHT, "sum")]) if current.num_rows \
            else current.select(keys).append_column(f"{WEIGHT}_sum", pa.array([], pa.int64()))
        at = match_keys([wanted.column(k) for k in keys], [counts.column(k) for k in keys],
                        wanted.num_rows, counts.num_rows)
        found_all = np.asarray(counts.column(f"{WEIGHT}_sum"), dtype=np.int64) if counts.num_rows \
            else np.zeros(0, np.int64)
        found = np.where(at >= 0, found_all[np.maximum(at, 0)] if counts.num_rows else 0, 0)
        least = np.asarray(wanted.column(AT_LEAST), dtype=np.int64)
        most = pc.fill_null(wanted.column(AT_MOST), np.iinfo(np.int64).max).to_numpy(zero_copy_only=False)
        bad = (found < least) | (found > most)
        if not bad.any():
            return
        order = np.asarray(wanted.column(ORDER), dtype=np.int64)
        first = int(np.flatnonzero(bad)[np.argmin(order[bad])])
        row = wanted.slice(first, 1).to_pylist()[0]
        key_names = list(self.schema.primary_key) or self.schema.names
        key = {n: row[c] for n, c in zip(key_names, keys)}
        raise ChangeRefused(self.name, key, int(found[first]), int(least[first]),
                            row[AT_MOST], int(order[first]))

    def _resolve(self, change: SourceChange, rows: pa.Table, current: pa.Table) -> pa.Table:
        """The keyed operations and the truncate as weighted rows (−old +new), added to ``rows``."""
        keys, schema = self.key, self.row_schema
        rows, current = rows.select(schema.names), current.select(schema.names)
        parts = [rows] if rows.num_rows else []
        touched = [t for t in (change.upserts, change.deletes) if t is not None and t.num_rows]
        if change.truncate:
            if current.num_rows:
                parts.append(negate(current).cast(schema))
        elif touched and current.num_rows:
            if self.schema.primary_key:
                others = [t for t in (rows, change.checks, change.late) if t is not None and t.num_rows]
                if not others:  # the copy's rows found are exactly the operations' old rows
                    parts.append(negate(current).cast(schema))
                else:
                    op_keys = pa.concat_tables([t.select(keys) for t in touched])
                    hit = match_keys([current.column(k) for k in keys], [op_keys.column(k) for k in keys],
                                     current.num_rows, op_keys.num_rows) >= 0
                    if hit.any():
                        parts.append(negate(current.filter(pa.array(hit))).cast(schema))
            elif change.deletes is not None and change.deletes.num_rows:
                parts.append(self._remove_copies(change.deletes, current, schema))
        if change.late is not None and change.late.num_rows and touched:
            absent = match_keys([change.late.column(k) for k in keys], [current.column(k) for k in keys],
                                change.late.num_rows, current.num_rows) < 0
            if absent.any():  # rows the copy lost to the TTL: the views may still hold them
                gone = change.late.filter(pa.array(absent))
                parts.append(gone.append_column(WEIGHT, pa.array(np.full(gone.num_rows, -1, np.int64))))
        if change.upserts is not None and change.upserts.num_rows:
            new = change.upserts
            parts.append(new.append_column(WEIGHT, pa.array(np.ones(new.num_rows, np.int64))))
        if not parts:
            return rows
        return consolidate(pa.concat_tables([p.select(schema.names).cast(schema) for p in parts]))

    def _remove_copies(self, deletes: pa.Table, current: pa.Table, schema: pa.Schema) -> pa.Table:
        """Without a primary key: −min(present, wanted) copies of each deleted row."""
        keys = self.key
        at = match_keys([deletes.column(k) for k in keys], [current.column(k) for k in keys],
                        deletes.num_rows, current.num_rows)
        present = np.asarray(current.column(WEIGHT), dtype=np.int64)
        have = np.where(at >= 0, present[np.maximum(at, 0)], 0)
        remove = np.minimum(have, np.asarray(deletes.column(WEIGHT), dtype=np.int64))
        out = deletes.select(keys).append_column(WEIGHT, pa.array(-remove, pa.int64()))
        return out.filter(pa.array(remove > 0)).cast(schema)


def _consolidated(rows: pa.Table) -> pa.Table:
    """Rows in the run's columns (``StateStore.prepare_rows``) consolidated by their row hashes."""
    return consolidate(rows, hashes=_hashes(rows, ROW_HASH)) if rows.num_rows else rows


def _hashes(rows: pa.Table, column: str) -> np.ndarray:
    col = rows.column(column)
    return np.asarray(col.chunk(0) if col.num_chunks == 1 else col.combine_chunks(), dtype=np.uint64)


def _plainly_valid(current: pa.Table, table: pa.Table, keyed: bool, columns: list[str]) -> bool:
    """Whether ``S + ΔS`` is valid on its face, decided without building it: each row of ``table`` (ΔS,
    distinct rows) matched exactly to its equal row of ``current`` (the copy's distinct rows of the
    touched keys) by their row hashes (``batch.equal_pairs``), no row's weight after the step below 0,
    and (``keyed``, a primary key) no live row above weight 1 nor two live rows sharing a key hash.
    False sends the caller to the exact checks (``Source._check_after``), which find what is wrong, or
    that two keys only share a hash: so True is never wrong, and a valid step builds no ``S + ΔS``."""
    if not table.num_rows:
        return True
    w_new = np.asarray(table.column(WEIGHT), dtype=np.int64)
    w_old = np.asarray(current.column(WEIGHT), dtype=np.int64) if current.num_rows else np.zeros(0, np.int64)
    after = w_new.copy()
    held = np.ones(len(w_old), dtype=bool)  # copy rows no change row matched: they stay as they are
    if current.num_rows:
        at_new, at_old = equal_pairs([table.column(c) for c in columns], [current.column(c) for c in columns],
                                     table.num_rows, current.num_rows,
                                     hashes=(_hashes(table, ROW_HASH), _hashes(current, ROW_HASH)))
        after[at_new] += w_old[at_old]
        held[at_old] = False
    if (after < 0).any() or (w_old < 0).any():
        return False
    if not keyed:
        return True
    live_new, live_old = after > 0, held & (w_old > 0)
    if (after[live_new] > 1).any() or (w_old[live_old] > 1).any():
        return False
    key_hashes = np.sort(np.concatenate([_hashes(table, KEY_HASH)[live_new], _hashes(current, KEY_HASH)[live_old]
                                         if current.num_rows else np.zeros(0, np.uint64)]))
    return not (key_hashes[1:] == key_hashes[:-1]).any()


def _maybe_repeated_keys(rows: pa.Table) -> bool:
    """Whether some key may have more than one live row (``rows`` in the run's columns): a weight
    above 1, or two rows whose key hashes are equal (then the caller counts exactly)."""
    if rows.num_rows == 0:
        return False
    weights = rows.column(WEIGHT).to_numpy()
    if (weights > 1).any():
        return True
    hashes = np.sort(_hashes(rows, KEY_HASH))
    return bool((hashes[1:] == hashes[:-1]).any())


def _check_array_lengths(name: str, schema: TableSchema, rows: pa.Table, upserts: pa.Table | None) -> None:
    """Refuse an inserted row whose fixed-size array (``FLOAT4[384]``) has another length, naming its key."""
    if not any(c.type.dim is not None for c in schema.columns):
        return
    columns = [col_name(i) for i in range(len(schema.columns))]
    inserted = rows.filter(pc.greater(rows.column(WEIGHT), 0)).select(columns)
    if upserts is not None and upserts.num_rows:
        inserted = pa.concat_tables([inserted, upserts.select(columns).cast(inserted.schema)])
    bad = array_length_mismatch(inserted, schema, columns)
    if bad is not None:
        at, column, length = bad
        row = inserted.slice(at, 1).to_pylist()[0]
        key = ", ".join(f"{k}={row[col_name(schema.names.index(k))]!r}" for k in schema.primary_key) or f"row {at}"
        raise DeltaError(f"source {name!r}: {column} of ({key}) has {length} values, but the column is "
                         f"{schema.column(column).type.element}[{schema.column(column).type.dim}]")


def _row_text(table: pa.Table, schema: TableSchema) -> str:
    row = table.slice(0, 1).to_pylist()[0]
    return "(" + ", ".join(f"{c.name}={row[col_name(i)]!r}" for i, c in enumerate(schema.columns)) + ")"
