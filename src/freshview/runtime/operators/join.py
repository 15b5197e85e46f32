"""Incremental inner equi-join.

Delta rule (DBSP): with L and R the integrated inputs before this step,

    Δ(L ⋈ R) = ΔL ⋈ (R + ΔR)  +  L ⋈ ΔR

State: one arrangement per side, the side's rows with their join key
(columns ``k0..``) as the arrangement's key, NULL keys matching nothing
(``NullKeys.DISTINCT``, as SQL ``=``).  A step looks up only the keys its
change touches, so its cost follows the change, not the state; the kernels
join the change with those slices (in-process or on Spark).

    ΔL ──┬──────────────► ⋈ ◄── lookup(R, keys ΔL) + ΔR
         └─► apply(L)
    ΔR ──┬──────────────► ⋈ ◄── lookup(L, keys ΔR)
         └─► apply(R)

State TTL (``runtime.ttl``; with a ``touch``, equi-joins only): the join is one
owner keyed by the join key.  A step touches every key of ΔL and ΔR; a key
untouched for the TTL is evicted from both sides at once (``evict``), with no
output: rows already joined stay in the view.  A change to an evicted key
then meets nothing, as a new key would.  Two things keep the sides free of
rows nothing can use or remove: rows with a NULL in the join key (they never
match, SQL ``=``) are not stored, and a delete of a row the side no longer
holds is dropped (``ttl.clamp_deletes``) — it would otherwise be stored at
weight −1 and join into negative rows.  Without a TTL nothing changes.

First computation on streaming kernels (``Kernels.streams``: Spark, ``BulkKernels``),
both sides' state empty and no TTL: the rule is ΔL ⋈ ΔR, and neither change
needs to pass through the driver whole.  Each side's keyed change is staged
once (``Kernels.stage``: a Spark result written to files by Spark), loaded
into its arrangement in bounded batches (``Kernels.batches`` into
``StateStore.load_runs``), and the two staged sides are joined where they are
(``Kernels.join_staged``): the output stays a Spark result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import pyarrow as pa
import pyarrow.compute as pc

from freshview.circuit import JoinState
from freshview.plan import nodes as pn
from freshview.runtime import ttl as ttl_rules
from freshview.runtime.kernels import Kernels, Rel
from freshview.runtime.relation import arrow_schema, conform
from freshview.runtime.state.layout import Layout, NullKeys
from freshview.runtime.state.protocol import KEY_HASH
from freshview.schema import WEIGHT

if TYPE_CHECKING:
    from freshview.runtime.state.protocol import StateStore


def key_name(i: int) -> str:
    return f"k{i}"


def side_schema(columns: pn.Columns, keys) -> pa.Schema:
    return arrow_schema(columns, [pa.field(key_name(i), k.type.arrow) for i, k in enumerate(keys)])


def side_layout(columns: pn.Columns, keys) -> Layout:
    schema = side_schema(columns, keys)
    return Layout(pa.schema([f for f in schema if f.name != WEIGHT]),
                  tuple(key_name(i) for i in range(len(keys))), NullKeys.DISTINCT)


def ensure_state(store: StateStore, state: JoinState, node: pn.Join, memo: dict | None = None) -> None:
    """Both sides' arrangements (their layouts built once per ``memo``, the join's step memo)."""
    layouts = memo.get("layouts") if memo is not None else None
    if layouts is None:
        layouts = (side_layout(node.left.columns, node.left_keys), side_layout(node.right.columns, node.right_keys))
        if memo is not None:
            memo["layouts"] = layouts
    store.ensure_arrangement(state.left, layouts[0])
    store.ensure_arrangement(state.right, layouts[1])


def keyed(k: Kernels, d: Rel, columns: pn.Columns, keys, memo: dict, side: str) -> pa.Table:
    """A side's change as Arrow with its join key columns appended (not consolidated: the rule is
    bilinear, the store adds weights, and the join's output is consolidated once at the end)."""
    from freshview.plan.expr import ColumnRef

    side_memo = memo.setdefault(side, {})
    if "exprs" not in side_memo:  # built once per join and executor
        side_memo["exprs"] = [ColumnRef(t, i, n) for i, (n, t) in enumerate(columns)] + list(keys)
        side_memo["schema"] = side_schema(columns, keys)
    return k.evaluate(d, side_memo["exprs"], side_memo["schema"], side_memo)


def join_delta(k: Kernels, node: pn.Join, state: JoinState, store: StateStore, left: Rel | None, right: Rel | None,
               memo: dict, touch: Callable[[pa.Table], None] | None = None) -> Rel | None:
    """The join's output change (module docstring); ``touch(keys)``: the state TTL's record of the join
    keys this step touches (None: no TTL)."""
    ensure_state(store, state, node, memo)
    if touch is None and k.streams and store.is_empty(state.left) and store.is_empty(state.right):
        return _first(k, node, state, store, left, right, memo)
    nkeys = len(node.left_keys)
    knames = [key_name(i) for i in range(nkeys)]
    dl = keyed(k, left, node.left.columns, node.left_keys, memo, "left") if left is not None else None
    dr = keyed(k, right, node.right.columns, node.right_keys, memo, "right") if right is not None else None
    if touch is not None and nkeys:
        dl = _for_ttl(store, state.left, dl, knames)
        dr = _for_ttl(store, state.right, dr, knames)
        touched = [d.select(knames) for d in (dl, dr) if d is not None and d.num_rows]
        if touched:
            touch(pa.concat_tables([t.cast(touched[0].schema) for t in touched]))
    dl = dl if dl is not None and dl.num_rows else None
    dr = dr if dr is not None and dr.num_rows else None
    if dl is None and dr is None:
        return None
    schema = arrow_schema(node.columns)
    layouts = memo["layouts"]
    shared = layouts[0].key_schema.equals(layouts[1].key_schema)  # one key hash probes both sides
    # Each side's change in the store's form once (hashed): its key hash probes the other side, and
    # the write of the side does not hash it again.
    pl = store.prepare_rows(state.left, dl) if dl is not None else None
    pr = store.prepare_rows(state.right, dr) if dr is not None else None
    parts = []
    if dl is not None:
        r_old = _lookup(store, state.right, layouts[1], pl, knames, shared)
        r_side = pa.concat_tables([conform(r_old, dr.schema) if dr is not None else r_old]
                                  + ([dr] if dr is not None else []))
        if r_side.num_rows:
            parts.append(k.join(dl, r_side, nkeys, schema, memo))
    if dr is not None:
        l_old = _lookup(store, state.left, layouts[0], pr, knames, shared)
        if l_old.num_rows:
            parts.append(k.join(l_old, dr, nkeys, schema, memo))
    if pl is not None:
        store.apply(state.left, pl)
    if pr is not None:
        store.apply(state.right, pr)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else k.union(parts, schema)


def _first(k: Kernels, node: pn.Join, state: JoinState, store: StateStore, left: Rel | None, right: Rel | None,
           memo: dict) -> Rel | None:
    """ΔL ⋈ ΔR into empty state on streaming kernels (module docstring): each side staged, loaded into its
    arrangement batch by batch, the staged sides joined.  The two sides are staged on helper threads, and
    each is loaded as soon as it is staged: the driver writes the state of one side (a table it holds)
    while Spark computes the other (a join's output)."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    from freshview.plan.expr import ColumnRef

    sides = {}
    for d, columns, keys, side, name in ((left, node.left.columns, node.left_keys, "left", state.left),
                                         (right, node.right.columns, node.right_keys, "right", state.right)):
        if d is not None:
            side_memo = memo.setdefault(side, {})
            if "exprs" not in side_memo:  # (as ``keyed``)
                side_memo["exprs"] = [ColumnRef(t, i, n) for i, (n, t) in enumerate(columns)] + list(keys)
                side_memo["schema"] = side_schema(columns, keys)
            sides[side] = (d, side_memo, name)
    staged: dict[str, Rel | None] = {"left": None, "right": None}
    with ThreadPoolExecutor(2, thread_name_prefix="freshview-stage") as pool:
        pending = {pool.submit(k.stage, d, m["exprs"], m["schema"], m): side for side, (d, m, _) in sides.items()}
        try:
            for done in as_completed(pending):
                side = pending[done]
                rel = done.result()
                if store.load_runs(sides[side][2], k.batches(rel)):
                    staged[side] = rel
        finally:
            for f in pending:
                f.cancel()
    if staged["left"] is None or staged["right"] is None:
        return None
    return k.join_staged(staged["left"], staged["right"], len(node.left_keys), arrow_schema(node.columns), memo)


def contents(k: Kernels, node: pn.Join, state: JoinState, store: StateStore, memo: dict) -> Rel | None:
    """The join's whole output from its two stored sides, L ⋈ R: its first output when its state was taken
    from another circuit's equal join (``runtime.reuse``) instead of built from its inputs."""
    ensure_state(store, state, node, memo)
    left_layout, right_layout = memo["layouts"]
    left = store.scan(state.left).select(left_layout.weighted_schema.names)
    right = store.scan(state.right).select(right_layout.weighted_schema.names)
    if not left.num_rows or not right.num_rows:
        return None
    return k.join(left, right, len(node.left_keys), arrow_schema(node.columns), memo)


def _lookup(store: StateStore, side: str, layout: Layout, prepared: pa.Table, knames: list[str],
            shared: bool) -> pa.Table:
    """The rows of ``side`` whose join key is a key of the other side's ``prepared`` change (its rows in
    the store's form), as ``lookup`` returns them; probed with the change's key hashes when both sides'
    keys have one schema (the key hash is a function of the key values alone)."""
    if not shared:
        return store.lookup(side, prepared.select(knames))
    return store.lookup_prepared(side, prepared.select(knames + [KEY_HASH])).select(layout.weighted_schema.names)


def _for_ttl(store: StateStore, side: str, d: pa.Table | None, knames: list[str]) -> pa.Table | None:
    """A side's change under a TTL: rows with a NULL join key left out, deletes of rows the side no
    longer holds dropped."""
    if d is None or not d.num_rows:
        return d
    valid = None
    for name in knames:
        ok = pc.is_valid(d.column(name))
        valid = ok if valid is None else pc.and_(valid, ok)
    if valid is not None and not pc.all(valid).as_py():
        d = d.filter(valid)
    return ttl_rules.clamp_deletes(store, side, d)[0] if d.num_rows else d


def ttl_owner(state: JoinState, node: pn.Join, owner: str) -> ttl_rules.TtlOwner | None:
    """The join as one TTL owner keyed by the join key (None without an equi-key: nothing to key by)."""
    if not node.left_keys:
        return None
    layout = side_layout(node.left.columns, node.left_keys)
    key = list(layout.key)

    def evict(store: StateStore, keys: pa.Table) -> None:
        for side in state.names:
            ttl_rules.drop_keys(store, side, keys)

    def current_keys(store: StateStore) -> pa.Table:
        ensure_state(store, state, node)
        return ttl_rules.distinct_keys(store, state.names, key).drop_null()  # NULL keys: found by no lookup

    return ttl_rules.TtlOwner(ttl_rules.TouchIndex(owner, layout.key_schema), evict, current_keys)


__all__ = ["join_delta", "ttl_owner", "ensure_state", "side_schema", "side_layout", "key_name"]
