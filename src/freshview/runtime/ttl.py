"""State TTL: when each key of a piece of state was last touched, and which keys went untouched too long.

An *owner* is a piece of keyed state that evicts as one: a source's copy
(keyed by its primary key, or the whole row), a join (both sides, by the
join key) or a view's top aggregate (its groups, every arrangement it keeps
for them).  A key is *touched* when a step's change carries it; a key not
touched for longer than the TTL is *evicted*: the owner drops every row it
keeps for the key (``TtlOwner.evict``) and says nothing downstream.

Time is cut into buckets of ``ttl / BUCKETS`` seconds (``bucket_width``);
per owner two arrangements record the bucket of each key's last touch, one
keyed by the key and one by the bucket (the same rows):

    <owner>/ttl/last      key columns + ttl_bucket, keyed by the key
    <owner>/ttl/bucket    the same rows, keyed by ttl_bucket

and the flow's metadata (``META``) lists, per owner, the buckets that may
hold keys.  A touch looks the touched keys up in ``last`` and moves those in
an older bucket to the current one (−old, +new in both arrangements); a key
already touched in the current bucket costs that lookup only.  Eviction
takes whole buckets whose every key is past the TTL (``expired_buckets``, a
pure rule on the short bucket list; no state is read while none is due),
looks their keys up in ``bucket`` and removes them from both.  So a key goes
between ``ttl`` and ``ttl + ttl/BUCKETS`` after its last touch, at the first
step past that, and a step's TTL work follows its change and what expires,
never the state's size.  Everything is state-store writes inside the step's
transaction: atomic, and a reopened flow goes on from the committed buckets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from freshview.algebra.batch import consolidate, negate
from freshview.circuit import arrangements
from freshview.runtime.state.layout import Layout
from freshview.schema import WEIGHT

if TYPE_CHECKING:
    from freshview.runtime.state.protocol import StateStore

META = "ttl"  # {"width": seconds, "stale": bool, "owners": {owner: [bucket, ...]}}
BUCKETS = 10  # buckets per TTL: a key is evicted at most ttl/BUCKETS late
BUCKET = "ttl_bucket"

__all__ = ["BUCKETS", "META", "Tick", "TouchIndex", "TtlOwner", "bucket_of", "bucket_width", "clamp",
           "clamp_deletes", "distinct_keys", "drop_all", "drop_keys", "expired_buckets", "forget", "mark_stale",
           "read_meta", "start"]


# ---------------------------------------------------------------------- pure rules
def bucket_width(ttl: float) -> float:
    """Seconds per bucket of a TTL of ``ttl`` seconds."""
    return ttl / BUCKETS


def bucket_of(t: float, width: float) -> int:
    """The bucket of time ``t`` (buckets ``b`` cover ``[b·width, (b+1)·width)``)."""
    return math.floor(t / width)


def expired_buckets(now: float, ttl: float, width: float, buckets: Iterable[int]) -> list[int]:
    """The buckets every key of which was last touched more than ``ttl`` before ``now``: those that end
    (``(b+1)·width``) at least ``ttl`` before ``now``, oldest first."""
    return sorted(b for b in buckets if (b + 1) * width + ttl <= now)


def clamp(delta: pa.Table, current: pa.Table) -> tuple[pa.Table, int]:
    """``delta`` (consolidated) with deletes of rows ``current`` does not hold taken out, and how many.

    ``current``: the stored rows (same columns) ``delta``'s rows could meet, with their weights.  Where
    ``current + delta`` would leave a row below 0, the row's weight in ``delta`` is raised so it ends at
    0: a delete of a row the state no longer holds (evicted) is dropped, never stored as a negative row.
    """
    w = np.asarray(delta.column(WEIGHT), dtype=np.int64) if delta.num_rows else np.zeros(0, np.int64)
    if not (w < 0).any():
        return delta, 0
    after = consolidate(pa.concat_tables([current.select(delta.column_names).cast(delta.schema), delta]))
    below = after.filter(pc.less(after.column(WEIGHT), 0))
    if not below.num_rows:
        return delta, 0
    dropped = -int(pc.sum(below.column(WEIGHT)).as_py())
    return consolidate(pa.concat_tables([delta, negate(below).cast(delta.schema)])), dropped


def clamp_deletes(store: StateStore, name: str, delta: pa.Table) -> tuple[pa.Table, int]:
    """``clamp`` against arrangement ``name``: ``delta`` (its layout's columns + ``_weight``) with deletes of
    rows it does not hold dropped (one lookup of the deleted rows' keys; consolidated if it has deletes);
    and how many."""
    w = np.asarray(delta.column(WEIGHT), dtype=np.int64) if delta.num_rows else np.zeros(0, np.int64)
    if not (w < 0).any():
        return delta, 0  # inserts only: nothing to check (the store adds equal rows up)
    delta = consolidate(delta)
    w = np.asarray(delta.column(WEIGHT), dtype=np.int64)
    if not (w < 0).any():
        return delta, 0
    key = list(store.layout(name).key)
    deletes = delta.filter(pa.array(w < 0))
    current = store.lookup(name, deletes.select(key)) if key else store.scan(name)
    return clamp(delta, current)


# ---------------------------------------------------------------------- bookkeeping
@dataclass(frozen=True)
class Tick:
    """The TTL of one step and its time (wall clock, seconds)."""

    ttl: float
    now: float

    @property
    def width(self) -> float:
        return bucket_width(self.ttl)


def read_meta(store: StateStore) -> dict | None:
    return store.get_meta(META)


def start(store: StateStore, width: float) -> None:
    """Fresh bookkeeping of bucket width ``width`` (no owner indexed yet)."""
    store.set_meta(META, {"width": width, "stale": False, "owners": {}})


def mark_stale(store: StateStore) -> None:
    """Steps ran without a TTL: touches went unrecorded, so the next flow with a TTL rebuilds the index."""
    meta = read_meta(store)
    if meta is not None and not meta.get("stale"):
        store.set_meta(META, dict(meta, stale=True))


def drop_all(store: StateStore) -> None:
    """Every owner's TTL arrangements and the bookkeeping metadata."""
    for name in store.list_arrangements():
        if arrangements.is_ttl_index(name):
            store.drop_arrangement(name)
    store.delete_meta(META)


def forget(store: StateStore, owners: Iterable[str]) -> None:
    """Drop ``owners`` (of a dropped view or source) from the bookkeeping metadata."""
    meta = read_meta(store)
    gone = set(owners)
    if meta is None or not gone & meta["owners"].keys():
        return
    store.set_meta(META, dict(meta, owners={o: b for o, b in meta["owners"].items() if o not in gone}))


class TouchIndex:
    """The last-touch buckets of one owner's keys (see the module docstring)."""

    def __init__(self, owner: str, key_schema: pa.Schema) -> None:
        self.owner = owner
        self.key_schema = pa.schema([pa.field(f.name, f.type) for f in key_schema])
        self.key = tuple(self.key_schema.names)
        fields = list(self.key_schema) + [pa.field(BUCKET, pa.int64())]
        self.last = arrangements.ttl_last(owner)
        self.bucket = arrangements.ttl_bucket(owner)
        self._last_layout = Layout(pa.schema(fields), self.key)
        self._bucket_layout = Layout(pa.schema(fields), (BUCKET,))

    def ensure(self, store: StateStore) -> None:
        """Create the arrangements and register the owner (no buckets) if it is not indexed yet."""
        store.ensure_arrangement(self.last, self._last_layout)
        store.ensure_arrangement(self.bucket, self._bucket_layout)
        meta = read_meta(store)
        if meta is not None and self.owner not in meta["owners"]:
            store.set_meta(META, dict(meta, owners={**meta["owners"], self.owner: []}))

    def indexed(self, store: StateStore) -> bool:
        meta = read_meta(store)
        return meta is not None and self.owner in meta["owners"] and store.has_arrangement(self.last)

    def touch(self, store: StateStore, tick: Tick, keys: pa.Table, distinct: bool = False) -> None:
        """Record ``keys`` (the key columns; repeats allowed unless ``distinct``) as touched at ``tick.now``."""
        if keys.num_rows == 0:
            return
        meta = read_meta(store)
        if self.owner not in meta["owners"]:
            self.ensure(store)
            meta = read_meta(store)
        live = meta["owners"][self.owner]
        # The bucket never moves back for this owner (a wall clock set back): keys stay at least as long.
        b = max([bucket_of(tick.now, meta["width"])] + live)
        keys = keys.select(list(self.key)).cast(self.key_schema)
        if not distinct:
            keys = consolidate(keys.append_column(WEIGHT, pa.array(np.ones(keys.num_rows, np.int64))))
            keys = keys.drop_columns([WEIGHT])
        old = store.lookup(self.last, keys)
        new = keys.append_column(BUCKET, pa.array(np.full(keys.num_rows, b, np.int64)))
        new = new.append_column(WEIGHT, pa.array(np.ones(keys.num_rows, np.int64)))
        moves = consolidate(pa.concat_tables([negate(old).select(new.column_names).cast(new.schema), new]))
        if not moves.num_rows:
            return  # every key was touched in this bucket already
        store.apply(self.last, moves)
        store.apply(self.bucket, moves)
        if b not in live:
            store.set_meta(META, dict(meta, owners={**meta["owners"], self.owner: sorted(live + [b])}))

    def expire(self, store: StateStore, tick: Tick) -> pa.Table | None:
        """Take the keys of the buckets past the TTL out of the index; they are returned (key columns),
        or None when no bucket is due (then nothing is read)."""
        meta = read_meta(store)
        if meta is None or self.owner not in meta["owners"]:
            return None
        live = meta["owners"][self.owner]
        due = expired_buckets(tick.now, tick.ttl, meta["width"], live)
        if not due:
            return None
        rows = store.lookup(self.bucket, pa.table({BUCKET: pa.array(due, pa.int64())}))
        if rows.num_rows:
            gone = negate(rows)
            store.apply(self.bucket, gone)
            store.apply(self.last, gone)
        store.set_meta(META, dict(meta, owners={**meta["owners"], self.owner: [b for b in live if b not in due]}))
        return rows.select(list(self.key))

    def tracked(self, store: StateStore) -> int:
        """How many keys the index holds."""
        return store.count(self.last) if store.has_arrangement(self.last) else 0


@dataclass
class TtlOwner:
    """Keyed state that evicts as one: its index, how to drop a key's rows, and its current keys."""

    index: TouchIndex
    evict: Callable[[object, pa.Table], None]  # (store, keys): drop every row kept for these keys
    current_keys: Callable[[object], pa.Table]  # store -> the keys it holds now (a rebuild of the index)

    def expire(self, store: StateStore, tick: Tick) -> int:
        """Evict the keys past the TTL; how many."""
        keys = self.index.expire(store, tick)
        if keys is None or not keys.num_rows:
            return 0
        self.evict(store, keys)
        return keys.num_rows

    def seed(self, store: StateStore, tick: Tick) -> None:
        """Index every key the owner holds as touched now (its state was kept without a TTL)."""
        self.index.ensure(store)
        self.index.touch(store, tick, self.current_keys(store))


def drop_keys(store: StateStore, name: str, keys: pa.Table) -> None:
    """Remove every row of arrangement ``name`` whose key is a row of ``keys`` (named as its key)."""
    rows = store.lookup(name, keys)
    if rows.num_rows:
        store.apply(name, negate(rows))


def distinct_keys(store: StateStore, names: Iterable[str], key: list[str]) -> pa.Table:
    """The distinct values of the ``key`` columns over arrangements ``names`` (a scan: rebuilds only)."""
    parts = [store.scan(n).select(key) for n in names]
    parts = [p.cast(parts[0].schema) for p in parts]
    table = pa.concat_tables(parts)
    ones = table.append_column(WEIGHT, pa.array(np.ones(table.num_rows, np.int64)))
    return consolidate(ones).drop_columns([WEIGHT])
