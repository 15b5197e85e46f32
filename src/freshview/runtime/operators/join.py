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
"""

from __future__ import annotations

import pyarrow as pa

from freshview.circuit import JoinState
from freshview.plan import nodes as pn
from freshview.runtime.kernels import Kernels, Rel
from freshview.runtime.relation import arrow_schema
from freshview.runtime.state.layout import Layout, NullKeys
from freshview.schema import WEIGHT


def key_name(i: int) -> str:
    return f"k{i}"


def side_schema(columns: pn.Columns, keys) -> pa.Schema:
    return arrow_schema(columns, [pa.field(key_name(i), k.type.arrow) for i, k in enumerate(keys)])


def side_layout(columns: pn.Columns, keys) -> Layout:
    schema = side_schema(columns, keys)
    return Layout(pa.schema([f for f in schema if f.name != WEIGHT]),
                  tuple(key_name(i) for i in range(len(keys))), NullKeys.DISTINCT)


def ensure_state(store, state: JoinState, node: pn.Join) -> None:
    store.ensure_arrangement(state.left, side_layout(node.left.columns, node.left_keys))
    store.ensure_arrangement(state.right, side_layout(node.right.columns, node.right_keys))


def keyed(k: Kernels, d: Rel, columns: pn.Columns, keys, memo: dict, side: str) -> pa.Table:
    """A side's change as Arrow with its join key columns appended (not consolidated: the rule is
    bilinear, the store adds weights, and the join's output is consolidated once at the end)."""
    from freshview.plan.expr import ColumnRef

    exprs = [ColumnRef(t, i, n) for i, (n, t) in enumerate(columns)] + list(keys)
    return k.evaluate(d, exprs, side_schema(columns, keys), memo.setdefault(side, {}))


def join_delta(k: Kernels, node: pn.Join, state: JoinState, store, left: Rel | None, right: Rel | None,
               memo: dict) -> Rel | None:
    ensure_state(store, state, node)
    nkeys = len(node.left_keys)
    knames = [key_name(i) for i in range(nkeys)]
    dl = keyed(k, left, node.left.columns, node.left_keys, memo, "left") if left is not None else None
    dr = keyed(k, right, node.right.columns, node.right_keys, memo, "right") if right is not None else None
    dl = dl if dl is not None and dl.num_rows else None
    dr = dr if dr is not None and dr.num_rows else None
    if dl is None and dr is None:
        return None
    schema = arrow_schema(node.columns)
    parts = []
    if dl is not None:
        r_old = store.lookup(state.right, dl.select(knames))
        r_side = pa.concat_tables([r_old.cast(dr.schema) if dr is not None else r_old]
                                  + ([dr] if dr is not None else []))
        if r_side.num_rows:
            parts.append(k.join(dl, r_side, nkeys, schema, memo))
    if dr is not None:
        l_old = store.lookup(state.left, dr.select(knames))
        if l_old.num_rows:
            parts.append(k.join(l_old, dr, nkeys, schema, memo))
    if dl is not None:
        store.apply(state.left, dl)
    if dr is not None:
        store.apply(state.right, dr)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else k.union(parts, schema)


__all__ = ["join_delta", "ensure_state", "side_schema", "side_layout", "key_name"]
